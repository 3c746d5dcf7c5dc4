import dataclasses
import json
import os

import pytest

from tff_radiomap.data import default_set, synthetic
from tff_radiomap.data.propagation import PropagationConfig

SPEC = synthetic.DatasetSpec(maps=2, transmitters=2, size=32, seed=3)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TFF_RADIOMAP_DATA", str(tmp_path))
    return tmp_path


def _record(root, propagation):
    os.makedirs(root)
    with open(os.path.join(root, synthetic.SPEC_FILE), "w") as f:
        json.dump({"spec": dataclasses.asdict(SPEC), "propagation": dataclasses.asdict(propagation)}, f)


def test_the_folder_is_keyed_by_the_propagation_model_as_well_as_the_spec():
    model = PropagationConfig()
    other = dataclasses.replace(model, corner_loss_db=8.0)
    assert default_set.default_root(SPEC, model) != default_set.default_root(SPEC, other)
    assert default_set.default_root(SPEC, model) != default_set.default_root(dataclasses.replace(SPEC, seed=4), model)
    assert default_set.default_root(SPEC, model) == default_set.default_root(SPEC, PropagationConfig())


def test_a_folder_named_by_the_spec_alone_is_reused_only_if_it_recorded_the_same_model():
    legacy = default_set._name(SPEC, dataclasses.asdict(SPEC))
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
