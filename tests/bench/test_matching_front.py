"""bench/matching_front.py: the attack figures of front runs read as far as they go."""

import csv
import json
import math
import os

import pytest

from bench import matching_front

NAN = float("nan")
COLUMNS = [
    "round",
    "seconds",
    "attack_rmse_m",
    "attack_constant_rmse_m",
    "attack_plain_rmse_m",
    "attack_aware_rmse_m",
    "attack_matching_rmse_m",
    "attack_matching_map_rmse_m",
    "attack_matching_constant_rmse_m",
    "attack_matching_seconds",
]


def _run(root, name, defense, nu, seed, rows, rounds=5, attack_every=2):
    d = os.path.join(root, name)
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"defense": defense, "noise_multiplier": nu, "seed": seed, "rounds": rounds, "attack_every": attack_every}, f)
    with open(os.path.join(d, "metrics.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerows(rows)
    return d


def _attacked(round_num, seconds, matching_seconds, ridge=50.0, matching=10.0):
    # Ridge constant 100, matching constant 80: ratios 0.5 and 0.125 (MAP 0.25).
    return [round_num, seconds, min(ridge / 100, matching / 80) * 100, 100, ridge, ridge + 5, matching, 2 * matching, 80, matching_seconds]


def _plain(round_num, seconds):
    return [round_num, seconds] + [""] * (len(COLUMNS) - 2)


def test_ratios_per_attack_round_and_partial_runs_are_read(tmp_path):
    root = str(tmp_path)
    d = _run(root, "uniform_nu0.01_s0", "uniform", 0.01, 0, [_attacked(1, 30, 20), _attacked(2, 20, 10), _plain(3, 6)])
    rows = matching_front.attack_rows(d)
    assert [r["round"] for r in rows] == [1, 2]
    assert rows[0]["ridge"] == pytest.approx(0.5) and rows[0]["matching"] == pytest.approx(0.125)
    assert rows[0]["matching MAP"] == pytest.approx(0.25) and rows[0]["strongest"] == pytest.approx(0.125)
    # Of 5 rounds, 1, 2, 4 and 5 are attacked (every 2 and the last): one plain round (6 s), four
    # attack rounds of 25 s on average, 15 s of them the matching attacker's.
    total, without, projected = matching_front.run_cost(d)
    assert projected and total == pytest.approx(6 + 4 * 25) and without == pytest.approx(6 + 4 * 10)


def test_a_finished_run_is_measured_and_a_run_before_its_first_attack_is_left_out(tmp_path):
    root = str(tmp_path)
    rows = [_attacked(1, 30, 20), _attacked(2, 25, 15), _plain(3, 5), _attacked(4, 30, 20), _attacked(5, 30, 20, matching=40.0)]
    d = _run(root, "none_s1", "none", 0.0, 1, rows)
    assert matching_front.run_cost(d) == (120, 45, False)
    _run(root, "none_s2", "none", 0.0, 2, [_plain(1, 5)])
    text = matching_front.report(root)
    assert "| none_s1 | 5 | 0.500 | 0.500 | 1.000 | 0.500 | 20 |" in text
    assert "none_s2" not in text
    # One seed with attacks: round 1's strongest 0.125; late = mean over rounds 2, 4, 5 of the strongest.
    late = (0.125 + 0.125 + 0.5) / 3
    assert "| none | 0 | 1 | 0.125 |" in text and f"| 2,4,5 | {late:.3f} |" in text
    assert math.isclose(120 / 45, float(text.strip().splitlines()[-1].split("|")[5]), rel_tol=1e-2)
