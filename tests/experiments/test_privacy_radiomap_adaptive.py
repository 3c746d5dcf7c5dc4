"""The adaptive defense's runs: exact run to run and across a resume (allocator state included)."""

import dataclasses
import os
import re

import numpy as np
import pytest

from tests.experiments.conftest import small_allocator_config
from tests.experiments.run_rows import rows_of as _rows
from tff_radiomap.experiments import privacy_radiomap as experiment
from tff_radiomap.privacy import allocator


@pytest.fixture(scope="module")
def adaptive_runs(tff_runtime, config, cached_trainers, tmp_path_factory):
    """One adaptive run with the attack, uninterrupted (`first`), and again stopped after round 2,
    refused a resume without its allocator state of round 2 (`refused`, the file moved aside and
    back) and resumed (`resumed`); the small allocator of `small_allocator_config` (these tests are
    about exact resume, not about what it learns), one observed local step (the attack's noise and
    the allocator's are seeded per round either way). The groups are the front's: the twin's leakage
    basis (refreshed at each phase's first round and read back on resume) in one block, and the
    residual (the paper's partition runs end to end in test_privacy_defenses.py). Both runs train in
    the same folder, `first` renamed once finished: the basis file's path is part of the trainer's
    computation, so one trainer serves both (building it is the slow part of a run)."""
    from tff_radiomap.data import twin

    base = tmp_path_factory.mktemp("adaptive")
    twin_root = twin.ensure_twin(config.data_root, positions=4, out_root=str(base / "twin"))
    adaptive = dataclasses.replace(
        config,
        defense="adaptive",
        adaptive_partition="leakage",
        twin_root=twin_root,
        basis_positions=4,
        basis_k_per_map=2,
        attack_every=3,  # Rounds 1 and 3: before the stop and after the resume.
        attack_steps=1,
        attack_train_traces=16,
        attack_test_traces=8,
        matching_stride=4,  # The matching attacker on every 4th cell: these tests are about exact resume.
    )
    out = str(base / "run")
    runs = {"first": str(base / "first"), "resumed": out}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(allocator, "AllocatorConfig", small_allocator_config())
        patch.setattr(experiment, "build_trainer", cached_trainers)
        experiment.run(adaptive, out, progress=False)
        os.rename(out, runs["first"])
        # Rounds 1-2 of `resumed` are a second fresh run (run-to-run identity), round 3 comes after the resume.
        runs["stop"] = experiment.run(adaptive, out, progress=False, stop_after_round=2)
        runs["saved"] = sorted(os.listdir(os.path.join(out, "allocator_state")))
        state, aside = os.path.join(out, "allocator_state", "round_2.npz"), str(base / "round_2.npz")
        os.rename(state, aside)
        try:
            experiment.run(adaptive, out, progress=False)
            runs["refused"] = None
        except FileNotFoundError as exc:
            runs["refused"] = str(exc)
        os.rename(aside, state)
        experiment.run(adaptive, out, progress=False)
    return runs


def test_an_adaptive_run_with_the_attack_is_the_same_run_to_run_and_across_a_resume(adaptive_runs):
    """The attack's noise, the allocator's picks and noise, and its proxy attacker and optimizer
    state (saved beside the program state) make a resumed run equal to an uninterrupted one."""
    assert adaptive_runs["stop"] == {"stopped_after_round": 2}
    assert adaptive_runs["saved"] == ["round_1.npz", "round_2.npz"]
    rows = {name: _rows(adaptive_runs[name]) for name in ("first", "resumed")}
    checked = [k for k in rows["first"][0] if (k.startswith(("attack_", "allocator/")) and "seconds" not in k) or k in ("train_loss", "val_mse")]
    assert {"attack_rmse_m", "allocator/proxy_loss", "allocator/weight_leak0", "allocator/weight_residual"} <= set(checked)
    assert [r["basis_refreshed"] for r in rows["first"]] == ["1", "1", "0"]  # Each phase's first round.
    assert [r["round"] for r in rows["resumed"]] == ["1", "2", "3"]
    for name in ("first", "resumed"):  # Attacked before the stop and after the resume.
        assert [np.isfinite(float(r["attack_rmse_m"])) for r in rows[name]] == [True, False, True]
    for a, b in zip(rows["first"], rows["resumed"]):
        for key in checked:
            np.testing.assert_allclose(float(b[key]), float(a[key]), rtol=1e-5, err_msg=f"round {a['round']} {key}")
    assert all(float(r["allocator/skipped"]) == 0 for r in rows["first"])


def test_resuming_an_adaptive_run_without_its_allocator_state_is_refused(adaptive_runs):
    assert adaptive_runs["refused"] is not None, "the resume without round_2.npz was not refused"
    assert re.search("round_2.npz: the adaptive allocator's state saved with round 2 is missing", adaptive_runs["refused"])
