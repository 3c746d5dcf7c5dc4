"""Tables and figures of the EPFL-REMNet experiments, from hand-made run results over seeds and splits."""

import csv
import os

import numpy as np
import pytest

from baselines import remnet_figures, remnet_tables, remnet_tuning
from tff_radiomap.learning import stacked_runner
from tff_radiomap.learning import rem_runner
from tff_radiomap.data import rem_points
from tff_radiomap.learning.epfl_remnet import EpflRemnetConfig


def _config(**overrides):
    defaults = dict(
        base=EpflRemnetConfig(k_fraction=0.05, sync_period=2),
        scenarios=("light", "heavy"),
        seeds=(0, 1, 2),
        detail_scenarios=("heavy",),
        pareto_k_fractions=(0.01, 0.05),
        pareto_sync_periods=(1, 2),
    )
    return remnet_tables.TablesConfig(**{**defaults, **overrides})


def test_plan_puts_main_runs_first_and_dedups_equal_configs():
    config = _config()
    runs = remnet_tables.plan(config)
    main = [r for r in runs if r.label in config.main_methods]
    assert runs[: len(main)] == main and len(main) == 2 * 3 * 2 * len(remnet_tables.MAIN_METHODS)
    assert {"fedrep", "ditto", "pfedgp"} <= {r.label for r in main}
    detail = runs[len(main) :]
    assert {(r.split, r.scenario) for r in detail} == {("block", "heavy")}
    keys = {(r.seed, r.label): r.key() for r in runs if r.split == "block" and r.scenario == "heavy"}
    assert keys[(0, "pareto_k0.05_R2")] == keys[(0, "epfl_remnet")]  # The default point is the proposal.
    assert keys[(0, "pareto_k0.05_R1")] == keys[(0, "no_sync")]
    assert keys[(0, "epfl_remnet")] != keys[(1, "epfl_remnet")]  # Seeds are different runs.
    assert config.method("fedavg").config.client_learning_rate == dict(config.learning_rates)["fedavg"]


def test_pareto_front():
    points = [(1.0, 5.0), (2.0, 4.0), (3.0, 4.5), (0.5, 9.0), (2.0, 4.0)]
    assert remnet_tables.pareto_front(points) == [True, True, False, True, True]


def _fake_results(tmp_path, config):
    rng = np.random.default_rng(0)
    results = {}
    for planned in remnet_tables.plan(config):
        run_dir = tmp_path / planned.split / str(planned.seed) / planned.scenario / planned.label
        os.makedirs(run_dir, exist_ok=True)
        macro = float(rng.uniform(2, 6)) if planned.label != "fedavg" else 9.0 + planned.seed
        mb = 1000.0 if planned.method.config.k_fraction is None else 20.0
        with open(run_dir / "metrics.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=stacked_runner.CSV_FIELDS)
            writer.writeheader()
            for r in range(4):
                writer.writerow(
                    {
                        "round": r,
                        "cum_uplink_mb": mb * (r + 1) / 4,
                        "macro_rmse": macro + 4 - r if r % 2 else "",
                        "val_macro_rmse": macro + 5 - r if r % 2 else "",
                    }
                )
        per_client = list(rng.uniform(1, 8, 20))
        results[(planned.split, planned.seed, planned.scenario, planned.label)] = {
            "micro_rmse": macro * 1.1,
            "macro_rmse": macro,
            "macro_mae": macro * 0.7,
            "cum_uplink_mb": mb,
            "per_bs_rmse": [macro] * 4,
            "per_client_rmse": per_client,
            "run_dir": str(run_dir),
            "wall_s": 1.0,
        }
    return results


def test_tables_average_over_seeds_check_and_draw(tmp_path):
    config = _config()
    results = _fake_results(tmp_path, config)
    tables = remnet_tables.build_tables(config, results)
    methods = len(remnet_tables.MAIN_METHODS)
    assert len(tables["main"]) == 2 * 2 * methods and len(tables["checks"]) == 4
    assert len(tables["ablation"]) == 6 and len(tables["pareto"]) == 4
    row = [r for r in tables["main"] if r["split"] == "block" and r["scenario"] == "heavy" and r["method"] == "FedAvg"][0]
    assert row["seeds"] == 3 and row["macro_rmse_mean"] == pytest.approx(10.0) and row["macro_rmse_std"] == pytest.approx(1.0)
    worst = [np.sort(results[("block", s, "heavy", "fedavg")]["per_client_rmse"])[-2:].mean() for s in (0, 1, 2)]
    assert row["worst10_rmse_mean"] == pytest.approx(np.mean(worst))
    check = [r for r in tables["checks"] if r["split"] == "block" and r["scenario"] == "heavy"][0]
    assert check["below_fedavg"] and check["uplink_vs_pfl_pct"] == pytest.approx(2.0) and check["uplink_at_most_3pct"]
    # A seed missing for one method: its row says so, and the check counts the fewest seeds.
    del results[("random", 2, "light", "epfl_remnet")]
    partial = remnet_tables.build_tables(config, results)
    assert [r["seeds"] for r in partial["checks"] if r["split"] == "random" and r["scenario"] == "light"] == [2]
    for name, rows in tables.items():
        remnet_tables.write_table(rows, str(tmp_path / name), remnet_tables.TITLES[name])
        with open(tmp_path / f"{name}.csv") as f:
            assert len(list(csv.DictReader(f))) == len(rows)
        with_std = any(k.endswith("_std") for k in rows[0])  # The table's header, rule and rows, then the note on +-.
        assert (tmp_path / f"{name}.md").read_text().count("\n") == len(rows) + 4 + 2 * with_std
    main = (tmp_path / "main.md").read_text()
    assert " +- " in main and "+- is the sample standard deviation (ddof = 1) over 3 seeds" in main
    for path in remnet_figures.write_figures(config, results, str(tmp_path)):
        assert os.path.getsize(path) > 10_000 and open(path, "rb").read(4) == b"\x89PNG"


def test_tuning_chooses_on_validation_and_one_budget():
    rows = []
    for label, method, curve in (("a1", "a", [5.0, 4.0, 3.9, 3.9]), ("a2", "a", [5.0, 4.5, 4.2, 4.1]), ("b1", "b", [9.0, 8.0, 7.0, 6.95])):
        rows += [{"method": method, "label": label, "round": 5 * (i + 1), "val_macro_rmse_db": v} for i, v in enumerate(curve)]
    chosen = remnet_tuning.choose(rows)
    assert chosen == {"a": "a1", "b": "b1"}
    assert remnet_tuning.round_budget(rows, chosen, tolerance=0.02) == 15  # b reaches 7.0 <= 1.02 * 6.95 at round 15.
    assert remnet_tuning.round_budget(rows, chosen, tolerance=0.0) == 20


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="test_splits"):
        _config(test_splits=("diagonal",))
    with pytest.raises(ValueError, match="expected a list holding epfl_remnet, fedavg and pfl_uncompressed"):
        _config(main_methods=("epfl_remnet", "pfl_uncompressed"))
    with pytest.raises(ValueError, match="seeds"):
        _config(seeds=(0, 0))
    with pytest.raises(ValueError, match="pareto_k_fractions"):
        _config(pareto_k_fractions=(0.0,))
    with pytest.raises(ValueError, match="pareto_sync_periods"):
        _config(pareto_sync_periods=())
    with pytest.raises(ValueError, match="main_methods=.*subset"):  # An ablation is not a main-table method.
        _config(main_methods=("epfl_remnet", "fedavg", "pfl_uncompressed", "no_ema"))
    with pytest.raises(ValueError, match=r"clients_per_round=91: expected an integer in 1\.\.90"):
        _config(run=rem_runner.RunConfig(clients_per_round=91))
    with pytest.raises(ValueError, match="map_id=-1"):
        rem_points.RemPointsConfig(map_id=-1)


def test_report_only_reads_back_the_finished_runs(tmp_path):
    import json

    config = _config(scenarios=("heavy",), test_splits=("block",), seeds=(0, 1), detail_scenarios=())
    runs = remnet_tables.plan(config)
    finished = runs[0]
    os.makedirs(finished.run_dir(str(tmp_path)))
    with open(os.path.join(finished.run_dir(str(tmp_path)), "final.json"), "w") as f:
        json.dump({"macro_rmse": 3.0}, f)
    results = remnet_tables.run_all(config, str(tmp_path), train=False)
    assert list(results) == [(finished.split, finished.seed, finished.scenario, finished.label)]
    assert results[list(results)[0]]["macro_rmse"] == 3.0 and len(runs) == 2 * len(config.main_methods)


def test_shards_partition_the_distinct_runs():
    config = _config()
    shards = [remnet_tables.shard_of(config, (i, 3)) for i in range(3)]
    keys = {p.key() for p in remnet_tables.plan(config)}
    assert set().union(*shards) == keys and sum(len(s) for s in shards) == len(keys)


def test_an_ablation_equal_to_the_full_method_gets_no_row(tmp_path):
    config = _config(base=EpflRemnetConfig(k_fraction=0.05, sync_period=1))  # R = 1: "w/o periodic sync" is Full.
    tables = remnet_tables.build_tables(config, _fake_results(tmp_path, config))
    variants = [r["variant"] for r in tables["ablation"] if r["split"] == "block"]
    assert "w/o periodic sync" not in variants and "w/o Top-K" in variants and "Full" in variants


def test_the_sweep_trains_only_the_methods_asked_for(tmp_path, monkeypatch):
    """`run_sweep(methods=...)`: the candidates of the other methods are neither trained nor reported
    (two invocations with disjoint lists share the cores; a third with all reads them back)."""
    trained = []

    def fake_run(run_dir, scenario, method, run, log=None, processes=None):
        trained.append((method.name, method.config.client_learning_rate))
        os.makedirs(run_dir, exist_ok=True)
        with open(os.path.join(run_dir, "metrics.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, ["round", "val_macro_rmse", "cum_uplink_mb"])
            w.writeheader()
            w.writerows({"round": r, "val_macro_rmse": 5.0 - r / 10, "cum_uplink_mb": r} for r in range(run.rounds))
        return {"val": {"macro_rmse": 5.0 - (run.rounds - 1) / 10}}

    monkeypatch.setattr(rem_points, "load_scenarios", lambda data, names: {n: None for n in names})
    monkeypatch.setattr(stacked_runner, "run_stacked", fake_run)
    rows = remnet_tuning.run_sweep(str(tmp_path), rem_points.RemPointsConfig(), rounds=10, methods=("fedavg", "ditto"), log=lambda *_: None)
    expected = [(name, params["client_learning_rate"]) for name in ("fedavg", "ditto") for params in remnet_tuning.GRID[name]]
    assert trained == expected
    assert {r["method"] for r in rows} == {"fedavg", "ditto"} and {r["round"] for r in rows} == set(range(1, 11))
