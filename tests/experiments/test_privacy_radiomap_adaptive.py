"""The adaptive defense's runs: exact run to run and across a resume (allocator state included)."""

import dataclasses
import functools
import os

import numpy as np
import pytest

from tests.experiments.run_rows import rows_of as _rows
from tff_radiomap.experiments import privacy_radiomap as experiment
from tff_radiomap.privacy import allocator


@pytest.fixture(autouse=True)
def small_allocator(monkeypatch):
    """A small proxy buffer and few allocator steps: these tests are about exact resume, not about
    what the allocator learns (tests/privacy/test_allocator.py uses the same sizes)."""
    monkeypatch.setattr(allocator, "AllocatorConfig", functools.partial(allocator.AllocatorConfig, buffer_traces=32, steps=3, harm_samples=8))


def test_an_adaptive_run_with_the_attack_is_the_same_run_to_run_and_across_a_resume(tff_runtime, config, cached_trainers, tmp_path, monkeypatch):
    """The attack's noise, the allocator's picks and noise, and its proxy attacker and optimizer
    state (saved beside the program state) make a resumed run equal to an uninterrupted one."""
    monkeypatch.setattr(experiment, "build_trainer", cached_trainers)
    adaptive = dataclasses.replace(config, defense="adaptive", attack_every=1, attack_train_traces=16, attack_test_traces=8)
    # Rounds 1-2 of `resumed` are a second fresh run (run-to-run identity), round 3 comes after the resume.
    first, resumed = str(tmp_path / "first"), str(tmp_path / "resumed")
    experiment.run(adaptive, first, progress=False)
    assert experiment.run(adaptive, resumed, progress=False, stop_after_round=2) == {"stopped_after_round": 2}
    assert sorted(os.listdir(os.path.join(resumed, "allocator_state"))) == ["round_1.npz", "round_2.npz"]
    experiment.run(adaptive, resumed, progress=False)

    rows = {name: _rows(str(tmp_path / name)) for name in ("first", "resumed")}
    checked = [k for k in rows["first"][0] if k.startswith(("attack_", "allocator/")) or k in ("train_loss", "val_mse")]
    assert {"attack_rmse_m", "allocator/proxy_loss", "allocator/weight_residual"} <= set(checked)
    assert [r["round"] for r in rows["resumed"]] == ["1", "2", "3"]
    for a, b in zip(rows["first"], rows["resumed"]):
        for key in checked:
            np.testing.assert_allclose(float(b[key]), float(a[key]), rtol=1e-5, err_msg=f"round {a['round']} {key}")
    assert all(float(r["allocator/skipped"]) == 0 for r in rows["first"])


def test_resuming_an_adaptive_run_without_its_allocator_state_is_refused(tff_runtime, config, cached_trainers, tmp_path, monkeypatch):
    monkeypatch.setattr(experiment, "build_trainer", cached_trainers)
    adaptive = dataclasses.replace(config, defense="adaptive")
    out = str(tmp_path / "run")
    experiment.run(adaptive, out, progress=False, stop_after_round=1)
    os.remove(os.path.join(out, "allocator_state", "round_1.npz"))
    with pytest.raises(FileNotFoundError, match="round_1.npz: the adaptive allocator's state saved with round 1 is missing"):
        experiment.run(adaptive, out, progress=False)
