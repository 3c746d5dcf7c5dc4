"""Scoring a finished run's attacks again (experiments/rescoring.py, programs/attack_runs.py): the
run keeps its attack rounds' models, the matching attacker scores beside the ridge, and re-scoring
with the same attacker gives back the figures the run wrote."""

import csv
import dataclasses
import json
import os
import shutil

import numpy as np
import pytest

from tff_radiomap.experiments import attack_rounds, privacy_defenses, rescoring
from tff_radiomap.experiments import privacy_radiomap as experiment

SCORES = [m for m in privacy_defenses.ATTACK_METRICS if m != "attack_matching_seconds"]


def _rows(run_dir):
    with open(os.path.join(run_dir, "metrics.csv"), newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def attacked(tff_runtime, config, tmp_path_factory):
    """Subspace Noise (a basis refreshed in each phase: the re-scoring recomputes it), attacked at
    every round by the ridge and the matching attacker (every 4th cell, 4 calibration positions)."""
    cfg = dataclasses.replace(
        config,
        defense="subspace",
        noise_multiplier=0.01,
        attack_every=1,
        attack_steps=2,
        attack_train_traces=12,
        attack_test_traces=6,
        basis_positions=4,
        basis_k_per_map=2,
        matching_maps=1,
        matching_stride=4,
        matching_calibration=4,
    )
    out = str(tmp_path_factory.mktemp("attacked") / "run")
    experiment.run(cfg, out, progress=False)
    return cfg, out


def test_a_run_scores_the_matching_attacker_and_keeps_its_attack_models(attacked):
    cfg, out = attacked
    rows = _rows(out)
    assert attack_rounds.saved_rounds(out, attack_rounds.ATTACK_ROUNDS) == [1, 2, 3]
    assert attack_rounds.saved_rounds(out, attack_rounds.BASIS_ROUNDS) == [1, 2]  # The first round of each phase.
    for r in rows:
        matching = float(r["attack_matching_rmse_m"]) / float(r["attack_matching_constant_rmse_m"])
        ridge = min(float(r["attack_plain_rmse_m"]), float(r["attack_aware_rmse_m"])) / float(r["attack_constant_rmse_m"])
        strongest = float(r["attack_rmse_m"]) / float(r["attack_constant_rmse_m"])
        map_ratio = float(r["attack_matching_map_rmse_m"]) / float(r["attack_matching_constant_rmse_m"])
        assert np.isfinite(matching) and strongest == pytest.approx(min(ridge, matching, map_ratio))
    weights, extras = attack_rounds.load(out, attack_rounds.ATTACK_ROUNDS, 1)
    assert weights.stage1 and not weights.stage2  # Stage 1's round: its model only.
    weights, _ = attack_rounds.load(out, attack_rounds.ATTACK_ROUNDS, 3)
    assert weights.stage1 and weights.stage2


def test_rescoring_with_the_same_attacker_gives_back_the_run_figures(attacked, tmp_path):
    _, out = attacked
    copy = str(tmp_path / "copy")
    shutil.copytree(out, copy)
    before = _rows(copy)
    scored = rescoring.rescore(copy)
    after = _rows(copy)
    assert sorted(scored) == [1, 2, 3]
    for b, a in zip(before, after):
        assert {k: v for k, v in b.items() if k not in privacy_defenses.ATTACK_METRICS} == {
            k: v for k, v in a.items() if k not in privacy_defenses.ATTACK_METRICS
        }
        for key in SCORES:
            assert f"{float(a[key]):.6g}" == f"{float(b[key]):.6g}", (b["round"], key)


def test_rescoring_with_another_grid_rewrites_the_figures_and_the_config(attacked, tmp_path):
    _, out = attacked
    copy = str(tmp_path / "copy")
    shutil.copytree(out, copy)
    rescoring.rescore(copy, {"matching_stride": 8})  # Coarser than the run's 4: a quarter of its candidates.
    with open(os.path.join(copy, "config.json")) as f:
        assert json.load(f)["matching_stride"] == 8
    assert [r["attack_matching_rmse_m"] for r in _rows(copy)] != [r["attack_matching_rmse_m"] for r in _rows(out)]


def test_a_run_without_attack_models_is_refused_by_name(attacked, tmp_path):
    _, out = attacked
    copy = str(tmp_path / "old")
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns(attack_rounds.ATTACK_ROUNDS))
    with pytest.raises(rescoring.NotRescorableError, match="no saved attack-round models"):
        rescoring.rescore(copy)
    with pytest.raises(ValueError, match=r"matching settings \['matching_grid'\]"):
        rescoring.rescore(out, {"matching_grid": 2})
