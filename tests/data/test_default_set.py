import dataclasses
import json
import os

import pytest

from tff_radiomap.data import default_set, reality, synthetic
from tff_radiomap.data.propagation import PropagationConfig

SPEC = synthetic.DatasetSpec(maps=2, transmitters=2, size=32, seed=3)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TFF_RADIOMAP_DATA", str(tmp_path))
    return tmp_path


def _record(root, propagation):
    os.makedirs(root)
    with open(os.path.join(root, synthetic.SPEC_FILE), "w") as f:
        json.dump({"spec": synthetic.spec_record(SPEC), "propagation": dataclasses.asdict(propagation)}, f)


def test_the_folder_is_keyed_by_the_propagation_model_as_well_as_the_spec():
    model = PropagationConfig()
    other = dataclasses.replace(model, corner_loss_db=8.0)
    assert default_set.default_root(SPEC, model) != default_set.default_root(SPEC, other)
    assert default_set.default_root(SPEC, model) != default_set.default_root(dataclasses.replace(SPEC, seed=4), model)
    assert default_set.default_root(SPEC, model) == default_set.default_root(SPEC, PropagationConfig())


def test_a_folder_named_by_the_spec_alone_is_reused_only_if_it_recorded_the_same_model():
    legacy = default_set._name(SPEC, synthetic.spec_record(SPEC))
    _record(legacy, dataclasses.replace(PropagationConfig(), wall_loss_db=20.0))
    assert default_set.default_root(SPEC) != legacy  # Made with another model: never reused.
    os.remove(os.path.join(legacy, synthetic.SPEC_FILE))
    os.rmdir(legacy)
    _record(legacy, PropagationConfig())
    assert default_set.default_root(SPEC) == legacy


def test_named_sets_generate_into_their_folder_and_unknown_names_are_refused(monkeypatch):
    monkeypatch.setitem(default_set.SETS, "tiny", SPEC)
    root = default_set.ensure_set("tiny", workers=1, progress=False)
    assert root == default_set.default_root(SPEC) and len(os.listdir(os.path.join(root, "png", "buildings_complete"))) == 2
    with pytest.raises(ValueError, match="data set 'nope': expected one of"):
        default_set.ensure_set("nope")


def test_the_built_in_sets_keep_their_folders_and_the_shadowed_default_gets_its_own(cache):
    # The names the default and v1 sets were cached under before the reality option (v1's first
    # cache, named by its spec alone, too).
    assert default_set.default_root(default_set.DEFAULT_SPEC) == os.path.join(str(cache), "synthetic_96x32_256_s0_cc6fda3c")
    assert default_set.default_root(default_set.V1_SPEC) == os.path.join(str(cache), "synthetic_48x32_256_s0_1122c580")
    assert default_set._name(default_set.V1_SPEC, synthetic.spec_record(default_set.V1_SPEC)).endswith("synthetic_48x32_256_s0_5659307d")
    shadowed = default_set.SETS["default_shadowed"]
    assert dataclasses.replace(shadowed, reality=None) == default_set.DEFAULT_SPEC  # Same maps, transmitters, seed.
    assert shadowed.reality == reality.ShadowedReality()
    root = default_set.default_root(shadowed)
    assert os.path.basename(root).startswith("synthetic_96x32_256_s0_shadowed_") and root != default_set.default_root(default_set.DEFAULT_SPEC)


def test_a_shadowed_set_is_never_taken_for_its_twin_version_nor_the_other_way():
    shadowed = dataclasses.replace(SPEC, reality=reality.ShadowedReality())
    root = default_set.ensure_default_dataset(shadowed, workers=1, progress=False)
    assert default_set._records(root, shadowed, PropagationConfig()) and not default_set._records(root, SPEC, PropagationConfig())
    assert default_set.default_root(SPEC) != root
    assert default_set.default_root(dataclasses.replace(shadowed, reality=reality.ShadowedReality(wall_loss_spread_db=1.0))) != root
