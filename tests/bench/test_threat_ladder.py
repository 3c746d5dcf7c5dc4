"""A run's ladder is saved after every round and resumes (`threat_ladder.resumed_rows`, called by
bench/deployment_observer.py): ladder.csv reads back as `threat_ladder.ladder` made it, and a folder
made with other settings is refused untouched. `ladder_table` tabulates the ladders of several runs
over seeds (bench/threat_ladder.py)."""

import json
import os

import numpy as np
import pytest
from tff_radiomap.experiments import ladder_table, threat_ladder
from tff_radiomap.privacy.set_scoring import SetScore


def _rows():
    scores = {"observer": SetScore(20.0, 100.0, 0.25, 12), "constant": SetScore(100.0, 100.0, 0.0, 12)}
    return (
        threat_ladder._rows(1, "upload_twin", scores, 12.5)
        + threat_ladder._rows(1, "single_twin", scores, 3.0, run_ratio=0.05)
        + threat_ladder._rows(10, "upload_twin", None, 0.0, note="unobservable")
    )


def test_ladder_csv_reads_back_as_the_ladder_made_it(tmp_path):
    rows = _rows()
    threat_ladder.report(rows, str(tmp_path), "run")
    back = threat_ladder.read_rows(str(tmp_path / "ladder.csv"))
    assert threat_ladder.markdown(back, "run") == threat_ladder.markdown(rows, "run")
    assert back[0]["round"] == 1 and back[0]["transmitters"] == 12 and back[0]["ratio"] == pytest.approx(0.2)
    assert back[-1] == {
        "round": 10,
        "column": "upload_twin",
        "attacker": "observer",
        "seconds": 0.0,
        "run_ratio": pytest.approx(float("nan"), nan_ok=True),
        "note": "unobservable",
    }


def test_a_stopped_ladder_resumes_with_its_settings_and_is_refused_with_others(tmp_path):
    out = str(tmp_path / "ladder")
    record = {"run": "/runs/none_s0", "settings": {"stride": 4, "sweeps": 3}, "columns": ["upload_twin"], "shadowed_root": None}
    assert threat_ladder.resumed_rows(out, record) == []  # A new folder: the record is written.
    assert threat_ladder.resumed_rows(out, record) == []  # No round finished yet.
    threat_ladder.report(_rows(), out, "none_s0")
    assert {r["round"] for r in threat_ladder.resumed_rows(out, record)} == {1, 10}
    saved = {name: open(os.path.join(out, name), "rb").read() for name in os.listdir(out)}
    other = dict(record, settings={"stride": 2, "sweeps": 3})
    with pytest.raises(ValueError, match=r"holds a ladder made otherwise \(settings: saved .*'stride': 4.*asked .*'stride': 2"):
        threat_ladder.resumed_rows(out, other)
    assert {name: open(os.path.join(out, name), "rb").read() for name in os.listdir(out)} == saved


def _ladder(root, name, defense, nu, seed, observer_ratios, prior=0.4, baselines=None):
    """A ladder folder of rounds 1, 10 and 20: the observer at `observer_ratios[i]` of a 100 m constant
    guess, its search 0.1 above; `baselines` {attacker: ratio} adds those attackers' rows."""
    rows = []
    for r, ratio in zip((1, 10, 20), observer_ratios):
        for column in threat_ladder.COLUMNS:
            found = (("observer", ratio, 0.5), ("search", ratio + 0.1, 0.4), ("prior", prior, 0.1)) + tuple((a, q, 0.0) for a, q in (baselines or {}).items())
            scores = {a: SetScore(100.0 * q, 100.0, w, 10) for a, q, w in found}
            rows += (
                threat_ladder._rows(r, column, scores, 1.0, run_ratio=ratio / 10 if column == "single_twin" else float("nan"))
                if defense != "ddp" or column.startswith("sum")
                else threat_ladder._rows(r, column, None, 0.0, note="unobservable")
            )
    out = os.path.join(root, name)
    threat_ladder.report(rows, out, name)
    with open(os.path.join(out, "ladder_settings.json"), "w") as f:
        json.dump({"run": f"/runs/{name}", "defense": defense, "noise_multiplier": nu, "seed": seed}, f)


def test_the_ladder_over_runs_has_a_row_per_defense_with_the_mean_over_seeds(tmp_path):
    root = str(tmp_path / "ladders")
    _ladder(root, "none_s0", "none", 0.0, 0, (0.2, 0.3, 0.5))
    _ladder(root, "none_s1", "none", 0.0, 1, (0.4, 0.5, 0.5))
    _ladder(root, "ddp_nu0.1_s0", "ddp", 0.1, 0, (0.9, 0.8, 0.8))
    paths = ladder_table.write(root, str(tmp_path / "out"))
    rows = {(r["defense"], r["group"], r["column"], r["attacker"]): r for r in ladder_table.table(ladder_table.collect(root))}
    first = rows[("none", "round 1", "upload_twin", "observer")]
    assert first["seeds"] == 2 and first["ratio_mean"] == pytest.approx(0.3) and first["ratio_std"] == pytest.approx(0.1 * np.sqrt(2))
    late = rows[("none", "late", "upload_twin", "observer")]  # Seed 0's rounds pooled by RMS: sqrt((30^2 + 50^2) / 2) / 100.
    assert late["ratio_mean"] == pytest.approx((np.sqrt((0.09 + 0.25) / 2) + 0.5) / 2)
    assert rows[("ddp", "late", "upload_twin", "observer")]["note"] == "unobservable"
    assert rows[("ddp", "late", "sum_shadowed", "observer")]["ratio_mean"] == pytest.approx(0.8)
    table = open(paths["md"]).read()
    assert table.index("| No Defense") < table.index("| Distributed DP")  # The registry's order, not the folders'.
    assert (
        "| No Defense (2 seeds) | 0.30 +- 0.14 / 50% (the run's attacker, every cell: 0.03) | 0.30 +- 0.14 / 50% | 0.30 +- 0.14 / 50% (search 0.40, prior 0.40) |"
        in table
    )
    assert (
        "| Distributed DP, z = 0.1 (1 seed) | unobservable | unobservable | unobservable | unobservable | 0.90 +- n/a / 50% (search 1.00, prior 0.40) |"
        in table
    )
    assert "| No Defense (2 seeds; rounds 10, 20) |" in table  # The later rounds a row pools are named: runs may differ.
    assert os.path.getsize(paths["png"]) > 10_000 and paths["runs"] == ["ddp_nu0.1_s0", "none_s0", "none_s1"]
    assert "baselines_csv" not in paths and "against its baselines" not in table  # These ladders hold no baselines.
    with pytest.raises(FileNotFoundError, match="holds no ladder"):
        ladder_table.collect(str(tmp_path / "out"))


def test_the_search_is_put_against_each_baseline_seed_by_seed(tmp_path):
    root = str(tmp_path / "ladders")
    beaten = {"constant": 1.0, "matching": 1.3, "correlation": 0.7}
    _ladder(root, "none_s0", "none", 0.0, 0, (0.2, 0.3, 0.5), baselines=beaten)  # Search 0.3, then 0.4 and 0.6 pooled.
    _ladder(root, "none_s1", "none", 0.0, 1, (0.4, 0.5, 0.7), baselines=dict(beaten, correlation=0.55))
    paths = ladder_table.write(root, str(tmp_path / "out"))
    rows = {(r["seed"], r["group"], r["column"]): r for r in ladder_table.baselines(ladder_table.collect(root))}
    assert {k[2] for k in rows} == set(ladder_table.SET_COLUMNS)  # Only the columns of sets: a search and baselines.
    first = rows[(0, "round 1", "upload_twin")]
    assert first["search"] == pytest.approx(0.3) and first["correlation"] == pytest.approx(0.7) and first["rounds"] == "1"
    assert first["beats_baselines"] and first["beats_prior"]  # 0.3 below 1.0, 1.3, 0.7 and the prior's 0.4.
    late = rows[(1, "late", "upload_shadowed")]  # Search sqrt((0.6^2 + 0.8^2) / 2) = 0.71 against correlation 0.55.
    assert late["search"] == pytest.approx(np.sqrt((0.36 + 0.64) / 2)) and late["rounds"] == "10 20"
    assert not late["beats_baselines"] and not late["beats_prior"]
    table = open(paths["md"]).read()
    assert "| No Defense | 0 | 1 | (iii) real upload, perfect twin | 0.30 | 1.00 | 1.30 | 0.70 | 0.40 | yes / yes |" in table
    assert "| No Defense | 1 | 10 20 | (iv) real upload, shadowed reality | 0.71 | 1.00 | 1.30 | 0.55 | 0.40 | no / no |" in table
    assert len(open(paths["baselines_csv"]).read().splitlines()) == 1 + 2 * 2 * 3  # Header, seeds x groups x columns.
