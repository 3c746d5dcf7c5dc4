"""The privacy-utility front: its grid of run folders and the front computed from finished runs
(folders written by hand: no TFF here; one real run is in tests/programs/test_privacy_front_program.py)."""

from __future__ import annotations

import csv
import dataclasses
import json
import os

import numpy as np
import pytest

from tff_radiomap.experiments import front_dp, front_figures, front_report
from tff_radiomap.experiments import privacy_front as pf

NAN = ""


def _fake_run(root, name, best_db, attacks):
    """A finished run: `attacks` is [(round, attack_rmse_m or NAN, attack_constant_rmse_m or NAN)]."""
    d = os.path.join(root, name)
    os.makedirs(d)
    with open(os.path.join(d, "metrics.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["round", "val_mse_db", "attack_rmse_m", "attack_constant_rmse_m"])
        w.writeheader()
        for round_num, attack, constant in attacks:
            w.writerow({"round": round_num, "val_mse_db": best_db + 1, "attack_rmse_m": attack, "attack_constant_rmse_m": constant})
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump({"best_val_mse_db": best_db, "final_val_mse_db": best_db + 1}, f)


@pytest.fixture
def runs(tmp_path):
    """No Defense over 2 seeds, Uniform at nu = 0.01 over 2 seeds (seed 1's last attack skipped) and
    at nu = 0.1 for seed 0 only."""
    root = str(tmp_path)
    _fake_run(root, "none_s0", -20.0, [(1, 30, 100), (2, NAN, NAN), (3, 20, 100)])
    _fake_run(root, "none_s1", -22.0, [(1, 40, 100), (2, NAN, NAN), (3, 30, 100)])
    _fake_run(root, "uniform_nu0.01_s0", -15.0, [(1, 50, 100), (2, NAN, NAN), (3, 60, 100)])
    _fake_run(root, "uniform_nu0.01_s1", -13.0, [(1, 70, 110), (2, NAN, NAN), (3, NAN, NAN)])
    _fake_run(root, "uniform_nu0.1_s0", -5.0, [(1, 90, 100), (3, 95, 100)])
    return root


@dataclasses.dataclass(frozen=True)
class _Config:
    defense: str = ""
    seed: int = 0
    noise_multiplier: float = 3.0


def test_noise_free_methods_run_once_per_seed_the_others_once_per_nu_and_seed(tmp_path):
    root = str(tmp_path)
    calls = []
    pf.run_front(_Config(), ["none", "uniform", "clip"], [0.01, 0.1], [0, 1], root, run_fn=lambda c, d: calls.append((c, d)))
    expected = []
    for s in (0, 1):
        expected += [(_Config("none", s, 0.0), "none_s" + str(s))]
        expected += [(_Config("uniform", s, nu), f"uniform_nu{nu}_s{s}") for nu in (0.01, 0.1)]
        expected += [(_Config("clip", s, 0.0), "clip_s" + str(s))]
    assert calls == [(c, os.path.join(root, name)) for c, name in expected]
    assert pf.run_name("directed", 1e-5, 2) == "directed_nu1e-05_s2" and pf.run_name("fedsgd", 0.3, 2) == "fedsgd_s2"


def test_runs_the_skip_predicate_accepts_are_not_handed_to_run_fn(tmp_path):
    root = str(tmp_path)
    calls = []
    done = {os.path.join(root, "none_s0"), os.path.join(root, "uniform_nu0.1_s1")}
    pf.run_front(_Config(), ["none", "uniform"], [0.1], [0, 1], root, run_fn=lambda c, d: calls.append(d), skip=lambda c, d: d in done)
    assert calls == [os.path.join(root, n) for n in ("uniform_nu0.1_s0", "none_s1")]

    def refuse(c, d):
        raise ValueError(f"{d}: another run")

    with pytest.raises(ValueError, match="none_s0: another run"):
        pf.run_front(_Config(), ["none"], [0.1], [0], root, run_fn=lambda c, d: calls.append(d), skip=refuse)
    assert len(calls) == 2  # Refused before any run.


def test_front_csv_holds_one_row_per_method_and_nu_with_means_over_seeds(runs):
    out = front_report.write_results(runs, ["none", "uniform"], [0.01], [0, 1])
    with open(out["csv"]) as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert (
        reader.fieldnames
        == [
            "method",
            "noise_multiplier",
            "seeds",
            "best_val_mse_db_mean",
            "best_val_mse_db_std",
            "final_attack_rmse_m_mean",
            "final_attack_rmse_m_std",
            "mean_attack_rmse_m_mean",
            "constant_rmse_m",
            "max_epsilon",
            "final_val_mse_db_mean",
            "final_val_mse_db_std",
            "late_attack_rmse_m_mean",
            "late_attack_rmse_m_std",
            "first_attack_ratio_mean",
            "late_attack_ratio_mean",
            "late_attack_ratio_std",
            "late_matching_ratio_mean",
            "late_matching_ratio_std",
            "late_ridge_ratio_mean",
            "best_val_rmse_db_mean",
            "best_val_rmse_db_std",
            "final_val_rmse_db_mean",
            "final_val_rmse_db_std",
            "aggregate_epsilon",
            "aggregate_epsilon_poisson",
            "uploads_observable",
        ]
    )  # The columns of fronts written before max_epsilon, then it, the final MSE, the attacks after round 1, their ratios, the gain's RMSE, the aggregate's epsilon.
    assert [(r["method"], float(r["noise_multiplier"]), int(r["seeds"])) for r in rows] == [("none", 0.0, 2), ("uniform", 0.01, 2)]
    assert [r["max_epsilon"] for r in rows] == ["", ""]  # Not known: these runs have no config.json.
    assert [(r["aggregate_epsilon"], r["uploads_observable"]) for r in rows] == [("", "True")] * 2
    none, uniform = ({k: float(v or "nan") for k, v in r.items() if k not in ("method", "max_epsilon", "uploads_observable")} for r in rows)
    # Standard deviations over the two seeds are sample ones (ddof = 1): of two values 2 apart, sqrt(2).
    assert none["best_val_mse_db_mean"] == pytest.approx(-21.0) and none["best_val_mse_db_std"] == pytest.approx(np.sqrt(2))
    assert none["final_val_mse_db_mean"] == pytest.approx(-20.0) and none["final_val_mse_db_std"] == pytest.approx(np.sqrt(2))
    assert none["final_attack_rmse_m_mean"] == pytest.approx(25.0) and none["final_attack_rmse_m_std"] == pytest.approx(5 * np.sqrt(2))
    assert none["mean_attack_rmse_m_mean"] == pytest.approx(30.0)  # (25 + 35) / 2.
    # Seed 1's last attack was at round 1 (70 m); the constant guess is averaged run by run.
    assert uniform["final_attack_rmse_m_mean"] == pytest.approx(65.0) and uniform["final_attack_rmse_m_std"] == pytest.approx(5 * np.sqrt(2))
    assert uniform["mean_attack_rmse_m_mean"] == pytest.approx((55.0 + 70.0) / 2)
    assert uniform["constant_rmse_m"] == pytest.approx(105.0)
    assert none["late_attack_rmse_m_mean"] == pytest.approx(25.0) and none["late_attack_rmse_m_std"] == pytest.approx(5 * np.sqrt(2))
    # Seed 1 has no attack after round 1: the mean is seed 0's alone, with no spread.
    assert uniform["late_attack_rmse_m_mean"] == pytest.approx(60.0) and rows[1]["late_attack_rmse_m_std"] == ""
    # The ratios to the constant guess: round 1's (30/100, 40/100) and the later attacks' (20/100, 30/100).
    assert none["first_attack_ratio_mean"] == pytest.approx(0.35)
    assert none["late_attack_ratio_mean"] == pytest.approx(0.25) and none["late_attack_ratio_std"] == pytest.approx(0.05 * np.sqrt(2))
    assert uniform["late_attack_ratio_mean"] == pytest.approx(0.6)  # Seed 0 alone, as above.
    assert np.isnan(none["late_matching_ratio_mean"]) and np.isnan(none["late_ridge_ratio_mean"])  # Scored by no matching attacker.
    table = open(out["table_md"]).read()
    assert "| method | noise_multiplier | seeds | best_val_mse_db | final_attack_rmse_m | mean_attack_rmse_m_mean |" in table  # Mean +- std pairs.
    assert "| none | 0 | 2 | -21.00 +- 1.41 | 25.00 +- 7.07 | 30.00 | 100.00 | n/a |" in table
    assert "+- is the sample standard deviation (ddof = 1) over the seeds of each row" in table
    assert "uniform_nu0.01_s1: last attack at round 1 of 3" in table
    with open(out["figure"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n" and os.path.getsize(out["figure"]) > 10_000


def test_the_matching_and_ridge_ratios_are_each_on_their_own_constant_guess(tmp_path):
    d = tmp_path / "none_s0"
    d.mkdir()
    columns = [
        "round",
        "val_mse_db",
        "attack_rmse_m",
        "attack_constant_rmse_m",
        "attack_plain_rmse_m",
        "attack_aware_rmse_m",
        "attack_matching_rmse_m",
        "attack_matching_constant_rmse_m",
    ]
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(columns)
        w.writerow([1, -20, 10, 100, 50, "nan", 20, 200])
        w.writerow([2, -20, 20, 100, 60, 40, 40, 200])  # Ridge 0.4 (its aware view), matching 0.2: the strongest 0.2.
        w.writerow([3, -20, 30, 100, 80, "nan", 120, 200])
    with open(d / "summary.json", "w") as f:
        json.dump({"best_val_mse_db": -20.0, "final_val_mse_db": -19.0}, f)
    (row,), _, _ = front_report.front_rows(str(tmp_path), ["none"], [0.01], [0])
    assert row["first_attack_ratio_mean"] == pytest.approx(0.1)
    assert row["late_attack_ratio_mean"] == pytest.approx(0.25)
    assert row["late_matching_ratio_mean"] == pytest.approx((0.2 + 0.6) / 2)
    assert row["late_ridge_ratio_mean"] == pytest.approx((0.4 + 0.8) / 2)


def test_a_missing_run_is_named_and_skipped_only_when_asked(runs):
    with pytest.raises(FileNotFoundError, match="uniform_nu0.1_s1 has no finished run"):
        front_report.write_results(runs, ["none", "uniform"], [0.01, 0.1], [0, 1])
    os.remove(os.path.join(runs, "none_s1", "summary.json"))  # Started, not finished.
    out = front_report.write_results(runs, ["none", "uniform"], [0.01, 0.1], [0, 1], skip_missing=True)
    assert out["missing"] == ["none_s1", "uniform_nu0.1_s1"]
    assert [(r["method"], r["noise_multiplier"], r["seeds"]) for r in out["rows"]] == [("none", 0.0, 1), ("uniform", 0.01, 2), ("uniform", 0.1, 1)]
    assert "Not finished, left out: none_s1, uniform_nu0.1_s1." in open(out["table_md"]).read()
    with pytest.raises(FileNotFoundError, match="no finished run of the front"):
        front_report.write_results(runs, ["clip"], [0.01], [0], skip_missing=True)


@dataclasses.dataclass(frozen=True)
class _Settings:
    rate: float = 0.1
    count: int = 1
    name: str = ""
    flag: bool = False
    positions: tuple[int, ...] = ()
    limit: int | None = None


def test_settings_are_parsed_by_field_type_and_an_unknown_field_is_named():
    settings = pf.parse_settings(_Settings, ["rate=1e-3", "count=4", "name=a=b", "flag=true", "positions=1", "2", "3", "limit=none"])
    assert settings == {"rate": 1e-3, "count": 4, "name": "a=b", "flag": True, "positions": (1, 2, 3), "limit": None}
    assert pf.parse_settings(_Settings, ["limit=7", "positions="]) == {"limit": 7, "positions": ()}
    with pytest.raises(ValueError, match="unknown field 'bogus'"):
        pf.parse_settings(_Settings, ["bogus=1"])
    with pytest.raises(ValueError, match="count='x': expected int"):
        pf.parse_settings(_Settings, ["count=x"])
    with pytest.raises(ValueError, match="flag='maybe': expected bool"):
        pf.parse_settings(_Settings, ["flag=maybe"])
    with pytest.raises(ValueError, match="'count': expected FIELD=VALUE"):
        pf.parse_settings(_Settings, ["count"])


def test_one_seed_has_no_std_and_max_epsilon_is_the_worst_seed_or_no_guarantee(runs):
    """A row of one seed: empty std cells in front.csv, 'n/a' in front.md, no error bar in the
    figure. max_epsilon from the runs' summary.json `privacy`: the worst seed's; 'no guarantee'
    (empty in the CSV) if any run has none."""
    for name, eps in (("uniform_nu0.01_s0", 12.5), ("uniform_nu0.01_s1", 14.0), ("uniform_nu0.1_s0", 3.25), ("none_s0", None), ("none_s1", None)):
        path = os.path.join(runs, name, "summary.json")
        summary = json.load(open(path))
        summary["privacy"] = {"delta": 1e-5, "max_epsilon": eps, "clients_with_uploads": 3, "max_uploads_per_client": 2}
        json.dump(summary, open(path, "w"))
    out = front_report.write_results(runs, ["none", "uniform"], [0.01, 0.1], [0, 1], skip_missing=True)
    rows = {(r["method"], r["noise_multiplier"]): r for r in csv.DictReader(open(out["csv"]))}
    one = rows[("uniform", "0.1")]
    assert (one["seeds"], one["best_val_mse_db_mean"], one["best_val_mse_db_std"], one["final_attack_rmse_m_std"]) == ("1", "-5.0", "", "")
    assert [rows[k]["max_epsilon"] for k in (("none", "0.0"), ("uniform", "0.01"), ("uniform", "0.1"))] == ["", "14.0", "3.25"]
    table = open(out["table_md"]).read()
    assert "| uniform | 0.1 | 1 | -5.00 +- n/a | 95.00 +- n/a | 92.50 | 100.00 | 3.25 | -4.00 +- n/a |" in table
    assert "| none | 0 | 2 | -21.00 +- 1.41 | 25.00 +- 7.07 | 30.00 | 100.00 | no guarantee | -20.00 +- 1.41 |" in table
    assert "| uniform | 0.01 | 2 | -14.00 +- 1.41 | 65.00 +- 7.07 | 62.50 | 105.00 | 14 |" in table
    assert os.path.getsize(out["figure"]) > 10_000


def _with_privacy(root, name, **privacy):
    path = os.path.join(root, name, "summary.json")
    summary = json.load(open(path))
    summary["privacy"] = {"delta": 1e-5, "max_epsilon": None, **privacy}
    json.dump(summary, open(path, "w"))


def test_the_defenses_on_the_aggregate_get_a_table_and_figure_of_utility_against_epsilon(tmp_path):
    """Central DP (attacked as Clip Only), a destroyed central DP run (not attacked after round 1) and
    DDP (uploads unobservable): front.md's table of cost and epsilon, dp.png, and front.png's title
    naming the rows it cannot show."""
    root = str(tmp_path)
    _fake_run(root, "none_s0", -22.0, [(1, 10, 100), (3, 10, 100)])
    _fake_run(root, "central_dp_nu0.1_s0", -19.5, [(1, 20, 100), (3, 30, 100)])
    _fake_run(root, "central_dp_nu1_s0", 129.0, [(1, 2, 100), (3, NAN, NAN)])
    _fake_run(root, "ddp_nu0.1_s0", -19.0, [(1, NAN, NAN), (3, NAN, NAN)])
    _with_privacy(root, "central_dp_nu0.1_s0", aggregate={"epsilon": 4500.0, "epsilon_poisson": 2100.0})
    _with_privacy(root, "central_dp_nu1_s0", aggregate={"epsilon": 44.3, "epsilon_poisson": 26.5})
    _with_privacy(root, "ddp_nu0.1_s0", aggregate={"epsilon": 4700.0}, uploads_observable=False)
    grids = {"none": [0.0], "central_dp": [0.1, 1.0], "ddp": [0.1]}
    out = front_report.write_results(root, ["none", "central_dp", "ddp"], grids, [0])
    assert [(r["method"], r["noise_multiplier"]) for r in front_dp.dp_rows(out["rows"])] == [("central_dp", 0.1), ("central_dp", 1.0), ("ddp", 0.1)]
    table = open(out["table_md"]).read()
    assert "| Central DP | 0.1 | 1 | -19.50 +- n/a | +2.50 | -18.50 +- n/a | 4.5e+03 | 2.1e+03 | 0.30 +- n/a |" in table
    assert "| Central DP | 1 | 1 | 129.00 +- n/a | +151.00 | 130.00 +- n/a | 44.3 | 26.5 | not attacked after round 1 |" in table
    assert "| Distributed DP | 0.1 | 1 | -19.00 +- n/a | +3.00 | -18.00 +- n/a | 4.7e+03 |  | unobservable |" in table
    assert "- central_dp_nu1_s0: last attack at round 1 of 3" in table and "ddp_nu0.1_s0: last attack" not in table
    assert front_figures.off_panel(out["rows"], "late_attack_ratio") == [
        "Central DP z=1: not attacked after round 1",
        "Distributed DP z=0.1: uploads unobservable",
    ]
    with open(out["dp_figure"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n" and os.path.getsize(out["dp_figure"]) > 10_000
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    front_figures._draw_front(ax, out["rows"], "late_attack_ratio")  # front.png's points name central DP's z, not nu.
    assert [t.get_text() for t in ax.texts] == ["z=0.1"]
    plt.close(fig)
    assert "dp_figure" not in front_report.write_results(root, ["none"], grids, [0])  # No defense on the aggregate: no figure.


def test_a_defense_on_the_aggregate_costs_against_no_defense_of_its_own_seeds(tmp_path):
    """No Defense has seeds 0 and 1 (-22 and -24 dB), DDP seed 0 only (-19 dB): its cost is +3.00
    against seed 0's No Defense, not +4.00 against the mean of both."""
    root = str(tmp_path)
    _fake_run(root, "none_s0", -22.0, [(1, 10, 100), (3, 10, 100)])
    _fake_run(root, "none_s1", -24.0, [(1, 10, 100), (3, 10, 100)])
    _fake_run(root, "ddp_nu0.1_s0", -19.0, [(1, NAN, NAN), (3, NAN, NAN)])
    _with_privacy(root, "ddp_nu0.1_s0", aggregate={"epsilon": 4700.0}, uploads_observable=False)
    out = front_report.write_results(root, ["none", "ddp"], {"none": [0.0], "ddp": [0.1]}, [0, 1], skip_missing=True)
    assert "| Distributed DP | 0.1 | 1 | -19.00 +- n/a | +3.00 | -18.00 +- n/a | 4.7e+03 |  | unobservable |" in open(out["table_md"]).read()
    assert "best_by_seed" not in open(out["csv"]).readline()  # The seeds' values stay out of front.csv.


def test_dp_figure_draws_each_point_s_spread_over_seeds_except_on_the_top_edge(tmp_path, monkeypatch):
    """dp.png: a bar of the std over seeds at a point of several seeds, none at one seed (NaN) and
    none at a destroyed model drawn on the top edge."""
    import matplotlib.axes

    drawn = []
    monkeypatch.setattr(matplotlib.axes.Axes, "errorbar", lambda self, x, y, yerr=None, **kw: drawn.append(list(yerr)))

    def row(z, db, std, eps):
        return dict(
            method="central_dp", noise_multiplier=z, best_val_mse_db_mean=db, best_val_mse_db_std=std, aggregate_epsilon=eps, aggregate_epsilon_poisson=None
        )

    rows = [row(0.03, -22.0, 0.2, 2e4), row(0.1, -18.0, float("nan"), 2e3), row(1.0, 129.0, 3.0, 44.0)]
    front_figures.dp_figure(str(tmp_path / "dp.png"), rows, reference_db=-23.0)
    assert drawn == [[0.2, 0.0, 0.0]]


def _fake_adaptive_run(root, name, rounds):
    """A finished run recording its allocation: `rounds` is [(phase, val_mse_db, {group: weight})]."""
    d = os.path.join(root, name)
    os.makedirs(d)
    groups = sorted({g for _, _, w in rounds for g in w})
    with open(os.path.join(d, "metrics.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["round", "phase", "val_mse_db"] + [f"allocator/weight_{g}" for g in groups])
        w.writeheader()
        for i, (phase, db, weights) in enumerate(rounds, 1):
            w.writerow({"round": i, "phase": phase, "val_mse_db": db, **{f"allocator/weight_{g}": weights.get(g, NAN) for g in groups}})
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump({"best_val_mse_db": min(db for _, db, _ in rounds)}, f)


def test_allocation_csv_holds_every_recorded_weight_and_the_moves_per_run(tmp_path):
    root = str(tmp_path)
    stage1 = [(1, -10.0 - 0.1 * i, {"block0": 0.25 + 0.01 * i, "residual": 0.75 - 0.01 * i}) for i in range(3)]
    stage2 = [(2, -12.0 - 0.1 * i, {"block0": 0.5, "residual": 0.5 - 0.1 * i}) for i in range(2)]
    _fake_adaptive_run(root, "adaptive_nu0.01_s0", stage1 + stage2)
    _fake_run(root, "uniform_nu0.01_s0", -15.0, [(1, 50, 100)])  # Records no allocation.
    out = front_report.write_results(root, ["uniform", "adaptive"], [0.01], [0, 1], skip_missing=True)
    rows = list(csv.DictReader(open(out["allocation_csv"])))
    assert tuple(rows[0]) == front_report.ALLOCATION_COLUMNS
    assert len(rows) == 10 and {r["method"] for r in rows} == {"adaptive"}
    assert rows[2] == dict(method="adaptive", noise_multiplier="0.01", seed="0", round="2", group="block0", weight="0.26", phase="1")
    (move,) = out["allocation_moves"]
    assert move["first_to_last"] == pytest.approx(0.35)  # residual 0.75 -> 0.4 (round 1 -> 5)
    assert move["within_phase"] == pytest.approx(0.1)  # stage 2's residual 0.5 -> 0.4
    assert "| adaptive_nu0.01_s0 | 1-5 | 0.350 | 0.100 |" in open(out["table_md"]).read()
    assert os.path.getsize(out["allocation_figure"]) > 10_000
    assert "allocation_csv" not in front_report.write_results(root, ["uniform"], [0.01], [0])  # No run records one.


def test_a_stage_that_ends_at_a_constant_validation_mse_is_noted_as_dead(tmp_path):
    root = str(tmp_path)
    alive = [(1, -16.0 + 0.02 * i, {}) for i in range(12)]  # 0.18 dB over the last 10 rounds
    dead = [(1, -16.0, {})] * 2 + [(2, -12.39, {})] * front_report.DEAD_ROUNDS
    _fake_adaptive_run(root, "none_s0", alive)
    _fake_adaptive_run(root, "none_s1", dead)
    table = open(front_report.write_results(root, ["none"], [0.01], [0, 1])["table_md"]).read()
    assert "- none_s1: stage 2's validation MSE stays at -12.39 dB over its last 10 rounds (a dead model)" in table
    assert "none_s0: stage" not in table
    assert front_report.dead_stage([]) is None and front_report.dead_stage(pf.privacy_table.read_metrics(os.path.join(root, "none_s0"))) is None


def test_the_close_up_holds_every_point_near_no_defense_and_leaves_out_a_destroyed_model():
    def row(method, db, ratio, ratio_std=np.nan, db_std=np.nan):
        return {"method": method, "best_val_mse_db_mean": db, "best_val_mse_db_std": db_std, "r_mean": ratio, "r_std": ratio_std}

    rows = [
        row("none", -16.0, 0.10, 0.05),
        row("uniform", -16.5, 0.08, db_std=0.5),  # its bar reaches -17 dB
        row("uniform", -14.0, 0.20, 0.10),  # within 3 dB: sets the top with its bar
        row("subspace", 5.0, 0.99),  # a destroyed model: outside the close-up
        row("clip", np.nan, np.nan),  # no figures: ignored
    ]
    (left, right), (bottom, top) = front_figures.zoom_window(rows, "r")
    assert right == pytest.approx(-13.0) and left == pytest.approx(-17.0 - 0.15)
    assert bottom == 0.0 and top == pytest.approx(1.1 * 0.30)
    # Without a No Defense row the close-up starts from the best point.
    (left, right), _ = front_figures.zoom_window(rows[1:], "r")
    assert right == pytest.approx(-13.5)
    assert front_figures.zoom_window([row("clip", np.nan, np.nan)], "r") is None
    # No Defense without an attack figure and every scored point far from it: the full height.
    (left, right), heights = front_figures.zoom_window([row("none", -16.0, np.nan), row("uniform", 0.0, 0.5)], "r")
    assert heights == (0.0, 1.05) and left < -16.0 < right == pytest.approx(-13.0)
