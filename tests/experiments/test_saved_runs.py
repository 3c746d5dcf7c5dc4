"""Reading a privacy_radiomap run folder back (`experiments/saved_runs.py`)."""

import csv

import numpy as np
import pytest

from tff_radiomap.data import synthetic
from tff_radiomap.experiments import privacy_radiomap as experiment
from tff_radiomap.experiments import saved_runs
from tff_radiomap.metrics import reconstruction
from tff_radiomap.models import phases
from tff_radiomap.models.phases import Phase


def test_a_runs_broadcast_model_is_read_back_by_round(tff_runtime, tmp_path):
    root = synthetic.generate_dataset(str(tmp_path / "rms"), synthetic.DatasetSpec(maps=8, transmitters=3, size=64, seed=5), progress=False)
    config = experiment.ExperimentConfig(data_root=root, resolution=32, rounds=2, stage1_rounds=2, num_clients=3, clients_per_round=2, batch_size=4)
    run_dir = str(tmp_path / "run")
    experiment.run(config, run_dir, progress=False, stop_after_round=1)
    first = saved_runs.broadcast_state(run_dir, 1)
    for got, want in zip(first.weights.stage1, phases.initial_weights(config.model_config(), 0).stage1):
        np.testing.assert_array_equal(got, want)
    # Round 2's broadcast model is the one round 1 ended with: its validation MSE is round 1's row.
    second = saved_runs.broadcast_state(run_dir, 2)
    with open(f"{run_dir}/metrics.csv") as f:
        logged = float(next(csv.DictReader(f))["val_mse"])
    evaluator = reconstruction.Evaluator(config.model_config(), *experiment.load_data(config).val)
    assert evaluator.mse(second.weights, Phase.STAGE1) == pytest.approx(logged, rel=1e-6)
    assert evaluator.mse(first.weights, Phase.STAGE1) != pytest.approx(logged, rel=1e-3)
    assert second.client_optimizer == config.client_optimizer and second.source.endswith("round 2")
    with pytest.raises(saved_runs.RoundNotSavedError, match="round 3 needs the program state saved after round 2"):
        saved_runs.broadcast_state(run_dir, 3)
