"""--preset of programs.privacy_radiomap: a named set-up whose settings apply under the flags given,
in-process (the program's `_config`, the flags parsed as on its command line)."""

import dataclasses

import pytest
from absl import flags

from programs import privacy_radiomap as program
from tff_radiomap.data import synthetic
from tff_radiomap.experiments import privacy_radiomap as experiment


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    spec = synthetic.DatasetSpec(maps=8, transmitters=2, size=32, seed=2)
    return synthetic.generate_dataset(str(tmp_path_factory.mktemp("preset") / "set"), spec, progress=False)


def _config(*argv):
    try:
        flags.FLAGS(["privacy_radiomap", *argv])
        return program._config()
    finally:
        flags.FLAGS.unparse_flags()


def test_the_default_preset_is_the_configs_defaults(root):
    config = _config(f"--data_root={root}")
    assert config == experiment.ExperimentConfig(data_root=root)


def test_cpu_v1_restores_the_first_fronts_set_up_under_the_flags_given(root):
    v1 = _config("--preset=cpu_v1", f"--data_root={root}")
    assert (v1.rounds, v1.stage1_rounds, v1.local_epochs, v1.batch_size, v1.server_lr_schedule) == (50, 25, 1, 64, "constant")
    # A flag given wins over the preset; stage 1 keeps the preset's share of the rounds.
    changed = _config("--preset=cpu_v1", f"--data_root={root}", "--rounds=10", "--batch_size=8")
    assert (changed.rounds, changed.stage1_rounds, changed.batch_size, changed.local_epochs) == (10, 5, 8, 1)
    assert _config("--preset=cpu_v1", f"--data_root={root}", "--rounds=10", "--stage1_rounds=7").stage1_rounds == 7
    # Fields the preset does not name keep the defaults.
    defaults = experiment.ExperimentConfig(data_root=root)
    assert (
        dataclasses.replace(
            v1,
            rounds=defaults.rounds,
            stage1_rounds=defaults.stage1_rounds,
            local_epochs=defaults.local_epochs,
            batch_size=defaults.batch_size,
            server_lr_schedule=defaults.server_lr_schedule,
        )
        == defaults
    )


def test_each_preset_names_a_built_in_set_and_valid_fields():
    from tff_radiomap.data import default_set

    for name, preset in experiment.PRESETS.items():
        assert preset.data_set in default_set.SETS, name
        experiment.ExperimentConfig(data_root="", **preset.fields)
