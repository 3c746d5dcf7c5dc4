"""bench/paired_front.py and bench/defense_cost.py on hand-made run folders."""

import csv
import json
import os

import pytest
from bench import defense_cost, paired_front

COLUMNS = ["round", "seconds", "basis_seconds", "attack_rmse_m", "attack_constant_rmse_m"]


def _run(root, name, defense, nu, seed, rows, best_db, wall):
    d = os.path.join(root, name)
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"defense": defense, "noise_multiplier": nu, "seed": seed, "rounds": len(rows), "attack_every": 2}, f)
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump({"best_val_mse_db": best_db, "wall_seconds_this_call": wall, "train_seconds": sum(r[1] for r in rows)}, f)
    with open(os.path.join(d, "metrics.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerows(rows)
    return d


def _rows(late_rmse, refresh=0.0):
    # Round 1 attacked (ratio 0.9, not 'late'), round 2 trained with a refresh, round 3 attacked.
    return [[1, 10.0, refresh, 90.0, 100.0], [2, 2.0, refresh, "nan", "nan"], [3, 6.0, 0.0, late_rmse, 100.0]]


@pytest.fixture
def fronts(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    _run(a, "uniform_nu0.01_s0", "uniform", 0.01, 0, _rows(10.0), -16.0, 100.0)
    _run(a, "none_s0", "none", 0.0, 0, _rows(5.0), -16.1, 90.0)
    _run(b, "aligned_nu0.01_s0", "aligned", 0.01, 0, _rows(20.0, refresh=3.0), -15.9, 150.0)
    return a, b


def test_pairs_by_seed_across_folders(fronts):
    a, b = fronts
    out = paired_front.table(paired_front.parse([f"--dirs={a},{b}", "--methods=aligned,subspace_client", "--noise_multipliers=0.01", "--seeds=0"]))
    assert "| aligned | 0.01 | 0 | 0.200 | 0.100 | 2.00 | -15.90 | +0.10 | +0.20 |" in out
    assert "| subspace_client | 0.01 | 0 | not finished |" in out


def test_cost_parts_against_the_baseline(fronts):
    a, b = fronts
    base, run = defense_cost.parts(os.path.join(a, "uniform_nu0.01_s0")), defense_cost.parts(os.path.join(b, "aligned_nu0.01_s0"))
    assert base["setup"] == pytest.approx(100.0 - 18.0) and base["attack"] == pytest.approx(16.0) and base["other"] == pytest.approx(2.0)
    assert run["refresh"] == pytest.approx(6.0) and run["other"] == pytest.approx(2.0) and run["attack"] == pytest.approx(16.0)
    assert run["setup"] == pytest.approx(150.0 - 18.0 - 6.0)
    table = defense_cost.table([os.path.join(a, "uniform_nu0.01_s0"), os.path.join(b, "aligned_nu0.01_s0")])
    assert "| aligned nu=0.01 s0 | 150 | 1.50 |" in table
    assert defense_cost.main([os.path.join(a, "uniform_nu0.01_s0"), os.path.join(a, "nothing")]) == 2
