import csv
import dataclasses
import json
import os
import threading

import numpy as np
import pytest

from tff_radiomap.experiments import privacy_table as pt
from tff_radiomap.runtime import threads


def _fake_run(root, method, seed, best_db, attack):
    d = os.path.join(root, f"{method}_s{seed}")
    os.makedirs(d)
    with open(os.path.join(d, "metrics.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["round", "val_mse_db", "attack_rmse_m", "attack_constant_rmse_m"])
        w.writeheader()
        w.writerow({"round": 1, "val_mse_db": -5, "attack_rmse_m": 30, "attack_constant_rmse_m": 100})
        w.writerow({"round": 2, "val_mse_db": best_db, "attack_rmse_m": "", "attack_constant_rmse_m": ""})
        w.writerow({"round": 3, "val_mse_db": best_db + 0.5, "attack_rmse_m": attack, "attack_constant_rmse_m": 100})
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump({"best_val_mse_db": best_db}, f)


def test_table_and_figure_from_runs(tmp_path):
    root = str(tmp_path)
    for seed, (db, att) in enumerate([(-10.0, 40.0), (-12.0, 60.0)]):
        _fake_run(root, "uniform", seed, db, att)
        _fake_run(root, "none", seed, db - 3, att / 2)
    out = pt.write_results(root, ["none", "uniform"], [0, 1])
    rows = {r["method"]: r for r in out["rows"]}
    u = rows["Uniform Noise"]
    # Sample standard deviations (ddof = 1): of -10 and -12, sqrt(2); of 40 and 60, 10 sqrt(2).
    assert u["best_val_mse_db_mean"] == pytest.approx(-11.0) and u["best_val_mse_db_std"] == pytest.approx(np.std([-10.0, -12.0], ddof=1))
    assert u["final_attack_rmse_m_mean"] == pytest.approx(50.0) and u["constant_guess_rmse_m"] == pytest.approx(100.0)
    assert rows["No Defense"]["final_attack_rmse_m_mean"] == pytest.approx(25.0)
    assert os.path.getsize(out["figure"]) > 1000
    table = open(out["table_md"]).read()
    assert "| Uniform Noise | -11.00 +- 1.41 | 50.00 +- 14.14 | 100.00 |" in table
    assert "+- is the sample standard deviation (ddof = 1) over 2 seeds" in table


def test_missing_run_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="none_s0"):
        pt.write_results(str(tmp_path), ["none"], [0])


@dataclasses.dataclass(frozen=True)
class _Config:
    defense: str = ""
    seed: int = 0


def test_every_run_goes_through_run_fn_then_the_table_is_written(tmp_path):
    # run_fn (privacy_radiomap.run) returns a finished run as it is, after checking its config
    # (tests/experiments/test_privacy_radiomap.py); the table asks it for every run.
    root = str(tmp_path)
    for method in ("none", "uniform"):
        _fake_run(root, method, 0, -10.0, 20.0)
    calls = []
    out = pt.run_table(_Config(), ["none", "uniform"], [0], root, run_fn=lambda c, d: calls.append((c, d)))
    assert calls == [(_Config(m, 0), os.path.join(root, f"{m}_s0")) for m in ("none", "uniform")]
    # One seed: no std ('n/a' in table1.md, an empty cell in table1.csv).
    assert "| Uniform Noise | -10.00 +- n/a | 20.00 +- n/a | 100.00 |" in open(out["table_md"]).read()
    rows = list(csv.DictReader(open(os.path.join(root, "table1.csv"))))
    assert [(r["best_val_mse_db_mean"], r["best_val_mse_db_std"], r["final_attack_rmse_m_std"]) for r in rows] == [("-10.0", "", "")] * 2


class _Data:
    def __init__(self):
        self.val = (None, [[[0.0], [0.2]], [[0.4], [0.2]]])  # Two 2-pixel maps.

    def pooled_train(self):
        return None, [[[0.2], [0.2]], [[0.2], [0.4]]]


def test_floors_are_written_once_and_shown_with_the_runs_and_a_skipped_attack_says_so(tmp_path):
    root = str(tmp_path)
    _fake_run(root, "none", 0, -10.0, 20.0)
    _fake_run(root, "uniform", 0, 300.0, float("nan"))  # Diverged: round 3's attack was skipped.
    floors = pt.mse_floors(_Data())
    assert floors["zero_output_mse"] == pytest.approx((0.04 + 0.16 + 0.04) / 4)
    assert floors["train_mean_map_mse"] == pytest.approx((0.04 + 0.01 + 0.04 + 0.01) / 4)  # Mean map (0.2, 0.3).
    calls = []
    out = pt.run_table(_Config(), ["none", "uniform"], [0], root, run_fn=lambda c, d: None, floors_fn=lambda c: calls.append(c) or floors)
    pt.run_table(_Config(), ["none", "uniform"], [0], root, run_fn=lambda c, d: None, floors_fn=lambda c: calls.append(c) or floors)
    assert calls == [_Config()]  # Computed once, then read from floors.json.
    table = open(out["table_md"]).read()
    assert f"all-zero output {floors['zero_output_db']:.2f} dB" in table and f"training maps {floors['train_mean_map_db']:.2f} dB" in table
    assert "| Uniform Noise | 300.00 +- n/a | 30.00 +- n/a (round 1: later attacks skipped, model diverged) | 100.00 |" in table
    assert "| No Defense | -10.00 +- n/a | 20.00 +- n/a | 100.00 |" in table


def test_concurrent_runs_start_costliest_first_and_a_failed_run_is_named_after_the_others_finish(tmp_path):
    root = str(tmp_path)
    for method in ("none", "adaptive"):
        for seed in (0, 1):
            _fake_run(root, method, seed, -10.0, 20.0)
    both_running = threading.Barrier(2, timeout=60)  # Broken (an error below) unless 2 runs overlap.
    started, lock = [], threading.Lock()

    def run_fn(config, run_dir):
        with lock:
            started.append((config.defense, config.seed))
        if len(started) <= 2:
            both_running.wait()
        if (config.defense, config.seed) == ("none", 1):
            raise RuntimeError("exit 1 (boom)")

    with pytest.raises(pt.RunsFailedError, match=r"1 of 4 runs failed .*none_s1: exit 1 \(boom\)"):
        pt.run_table(_Config(), ["none", "adaptive"], [0, 1], root, run_fn=run_fn, progress=False, jobs=2)
    assert started[:2] in ([("adaptive", 0), ("adaptive", 1)], [("adaptive", 1), ("adaptive", 0)])
    assert sorted(started) == [("adaptive", 0), ("adaptive", 1), ("none", 0), ("none", 1)]
    assert not os.path.exists(os.path.join(root, "table1.md"))
    out = pt.run_table(_Config(), ["none", "adaptive"], [0, 1], root, run_fn=lambda c, d: None, progress=False, jobs=2)
    assert os.path.exists(out["table_md"])


def test_concurrent_children_get_the_cores_shared_out():
    children = pt.ChildRuns(lambda config: ["true"], jobs=2)
    assert children.threads == threads.thread_limits(2)
