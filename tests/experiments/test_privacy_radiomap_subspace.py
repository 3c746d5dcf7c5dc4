"""Subspace Noise's runs: basis refreshes from the twin, exact resume between refreshes; and the
finished run scored again without training (experiments/rescoring.py, programs/attack_runs.py):
the run keeps its attack rounds' models, the matching attacker scores beside the ridge, and
re-scoring with the same attacker gives back the figures the run wrote."""

import csv
import dataclasses
import json
import os
import shutil

import numpy as np
import pytest

from tff_radiomap.experiments import attack_rounds, basis_refresh, privacy_defenses, rescoring
from tff_radiomap.experiments import privacy_radiomap as experiment
from tff_radiomap.models.phases import Phase

SCORES = [m for m in privacy_defenses.ATTACK_METRICS if m != "attack_matching_seconds"]


def _rows(run_dir):
    with open(os.path.join(run_dir, "metrics.csv"), newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def subspace_runs(tff_runtime, config, cached_trainers, tmp_path_factory):
    """Subspace Noise at nu = 0.01 (the twin's basis, refreshed at each phase's first round: rounds
    1 and 2 with basis_every=2), attacked at rounds 1 and 3 (before the stop and after the resume:
    a stage-1 round and a stage-2 round whose basis is read back) by the ridge and the matching
    attacker (every 4th cell, 4 calibration positions, S = 2): an uninterrupted run (`straight`),
    and one stopped after round 2 and resumed (`resumed`). Both train in folder `resumed` (the straight
    run's renamed once finished): the basis file's path is part of the trainer's computation, so
    one trainer serves both. The re-scoring tests score copies of the straight run."""
    from tff_radiomap.data import twin

    base = tmp_path_factory.mktemp("subspace")
    twin_root = twin.ensure_twin(config.data_root, positions=4, out_root=str(base / "twin"))
    sub = dataclasses.replace(
        config,
        defense="subspace",
        noise_multiplier=0.01,
        twin_root=twin_root,
        basis_positions=4,
        basis_k_per_map=2,
        basis_every=2,
        attack_every=3,
        attack_steps=2,
        attack_train_traces=12,
        attack_test_traces=6,
        matching_maps=1,
        matching_stride=4,  # Every 4th cell: these tests are about the basis, resume and re-scoring.
        matching_calibration=4,
    )
    runs = {"config": sub, "resumed": str(base / "a"), "straight": str(base / "b")}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(experiment, "build_trainer", cached_trainers)
        runs["straight_summary"] = experiment.run(sub, runs["resumed"], progress=False)
        os.rename(runs["resumed"], runs["straight"])
        experiment.run(sub, runs["resumed"], progress=False, stop_after_round=2)
        runs["resumed_summary"] = experiment.run(sub, runs["resumed"], progress=False)  # Round 3 is not a refresh: its basis is read back.
    return runs


def test_subspace_run_refreshes_its_twin_basis_and_resumes_exactly(subspace_runs, tmp_path):
    a, b, sub = subspace_runs["resumed"], subspace_runs["straight"], subspace_runs["config"]
    rows = _rows(a)
    # Refreshed at each phase's first round (1, 2), not at 3 (basis_every=2).
    assert [r["basis_refreshed"] for r in rows] == ["1", "1", "0"]
    for ra, rb in zip(rows, _rows(b)):
        for key in ("train_loss", "val_mse", "attack_rmse_m", "attack_plain_rmse_m", "attack_aware_rmse_m"):
            np.testing.assert_allclose(float(ra[key]), float(rb[key]), rtol=1e-4, err_msg=key)
    assert subspace_runs["resumed_summary"]["final_val_mse"] == pytest.approx(subspace_runs["straight_summary"]["final_val_mse"], rel=1e-5)
    # 8 maps x 2 directions, orthonormal, per phase.
    for phase in (1, 2):
        d = basis_refresh.subspace_groups(sub, Phase(phase)).num_coordinates
        v = basis_refresh.subspace_noise.read_basis(os.path.join(a, "basis", f"phase{phase}.bin"), (d, 16)).numpy()
        np.testing.assert_allclose(v.T @ v, np.eye(16), atol=1e-4)
    # Resuming between refreshes without the basis file cannot be exact, and says so.
    refresher = basis_refresh.BasisRefresher(sub, str(tmp_path / "empty"), {})
    assert not refresher.due(3)
    with pytest.raises(FileNotFoundError, match="phase2.bin"):
        refresher.before_round(None, None, 3)


def test_a_run_scores_the_matching_attacker_and_keeps_its_attack_models(subspace_runs):
    out = subspace_runs["straight"]
    rows = _rows(out)
    assert attack_rounds.saved_rounds(out, attack_rounds.ATTACK_ROUNDS) == [1, 3]
    assert attack_rounds.saved_rounds(out, attack_rounds.BASIS_ROUNDS) == [1, 2]  # The first round of each phase.
    assert [np.isfinite(float(r["attack_matching_rmse_m"])) for r in rows] == [True, False, True]
    for r in (rows[0], rows[2]):
        matching = float(r["attack_matching_rmse_m"]) / float(r["attack_matching_constant_rmse_m"])
        ridge = min(float(r["attack_plain_rmse_m"]), float(r["attack_aware_rmse_m"])) / float(r["attack_constant_rmse_m"])
        strongest = float(r["attack_rmse_m"]) / float(r["attack_constant_rmse_m"])
        map_ratio = float(r["attack_matching_map_rmse_m"]) / float(r["attack_matching_constant_rmse_m"])
        assert np.isfinite(matching) and strongest == pytest.approx(min(ridge, matching, map_ratio))
    weights, extras = attack_rounds.load(out, attack_rounds.ATTACK_ROUNDS, 1)
    assert weights.stage1 and not weights.stage2  # Stage 1's round: its model only.
    weights, _ = attack_rounds.load(out, attack_rounds.ATTACK_ROUNDS, 3)
    assert weights.stage1 and weights.stage2


def test_rescoring_with_the_same_attacker_gives_back_the_run_figures(subspace_runs, tmp_path):
    out = subspace_runs["straight"]
    copy = str(tmp_path / "copy")
    shutil.copytree(out, copy)
    before = _rows(copy)
    scored = rescoring.rescore(copy)
    after = _rows(copy)
    assert sorted(scored) == [1, 3]
    for b, a in zip(before, after):
        assert {k: v for k, v in b.items() if k not in privacy_defenses.ATTACK_METRICS} == {
            k: v for k, v in a.items() if k not in privacy_defenses.ATTACK_METRICS
        }
        for key in SCORES:
            assert f"{float(a[key]):.6g}" == f"{float(b[key]):.6g}", (b["round"], key)


def test_rescoring_with_another_grid_rewrites_the_figures_and_the_config(subspace_runs, tmp_path):
    out = subspace_runs["straight"]
    copy = str(tmp_path / "copy")
    shutil.copytree(out, copy)
    rescoring.rescore(copy, {"matching_stride": 8})  # Coarser than the run's 4: a quarter of its candidates.
    with open(os.path.join(copy, "config.json")) as f:
        assert json.load(f)["matching_stride"] == 8
    assert [r["attack_matching_rmse_m"] for r in _rows(copy)] != [r["attack_matching_rmse_m"] for r in _rows(out)]


def test_a_run_without_attack_models_is_refused_by_name(subspace_runs, tmp_path):
    out = subspace_runs["straight"]
    copy = str(tmp_path / "old")
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns(attack_rounds.ATTACK_ROUNDS))
    with pytest.raises(rescoring.NotRescorableError, match="no saved attack-round models"):
        rescoring.rescore(copy)
    with pytest.raises(ValueError, match=r"matching settings \['matching_grid'\]"):
        rescoring.rescore(out, {"matching_grid": 2})
