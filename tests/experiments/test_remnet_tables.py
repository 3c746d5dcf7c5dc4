"""Tables and figures of the EPFL-REMNet experiments, from hand-made run results."""

import csv
import os

import numpy as np
import pytest

from tff_radiomap.experiments import remnet_figures, remnet_tables
from tff_radiomap.learning import rem_runner


def test_plan_covers_methods_ablations_and_grid_and_dedups_equal_configs():
    config = remnet_tables.TablesConfig(scenarios=("heavy",), pareto_k_fractions=(0.01, 0.05), pareto_sync_periods=(1, 2))
    runs = remnet_tables.plan(config)
    labels = [r.label for r in runs]
    assert {"epfl_remnet", "fedavg", "fedfly", "pfedgp", "pfl_uncompressed", "no_sync", "no_ema"} <= set(labels)
    keys = {r.label: r.key() for r in runs}
    assert keys["pareto_k0.05_R2"] == keys["epfl_remnet"]  # The default point is the proposal itself.
    assert keys["pareto_k0.05_R1"] == keys["no_sync"]
    assert len(set(keys.values())) == len(labels) - 2


def test_pareto_front():
    points = [(1.0, 5.0), (2.0, 4.0), (3.0, 4.5), (0.5, 9.0), (2.0, 4.0)]
    assert remnet_tables.pareto_front(points) == [True, True, False, True, True]


def _fake_results(tmp_path, config):
    rng = np.random.default_rng(0)
    results = {}
    for planned in remnet_tables.plan(config):
        run_dir = tmp_path / planned.scenario / planned.label
        os.makedirs(run_dir, exist_ok=True)
        macro = float(rng.uniform(2, 6))
        mb = 1000.0 if planned.method.config.k_fraction is None else 20.0
        if planned.label == "fedavg":
            macro = 9.0
        with open(run_dir / "metrics.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=rem_runner._csv_fields(4))
            writer.writeheader()
            for r in range(4):
                writer.writerow({"round": r, "cum_uplink_mb": mb * (r + 1) / 4, "macro_rmse": macro + 4 - r if r % 2 else ""})
        results[(planned.scenario, planned.label)] = {
            "micro_rmse": macro * 1.1, "macro_rmse": macro, "macro_mae": macro * 0.7, "cum_uplink_mb": mb,
            "per_bs_rmse": [macro] * 4, "per_client_rmse": list(rng.uniform(1, 8, 10)), "run_dir": str(run_dir), "wall_s": 1.0,
        }
    return results


def test_tables_checks_and_figures_are_written(tmp_path):
    config = remnet_tables.TablesConfig(scenarios=("light", "heavy"), pareto_k_fractions=(0.01, 0.05), pareto_sync_periods=(1, 2))
    results = _fake_results(tmp_path, config)
    results[("heavy", "epfl_remnet")]["macro_rmse"] = 1.2 * results[("heavy", "pfl_uncompressed")]["macro_rmse"]
    tables = remnet_tables.build_tables(config, results)
    assert len(tables["main"]) == 2 * 5 and len(tables["ablation"]) == 2 * 6 and len(tables["pareto"]) == 2 * 4
    heavy = [r for r in tables["checks"] if r["scenario"] == "heavy"][0]
    assert heavy["below_fedavg"] and heavy["uplink_vs_pfl_pct"] == pytest.approx(2.0)
    assert heavy["uplink_at_most_3pct"] and not heavy["rmse_at_most_10pct_higher"]
    full = [r for r in tables["ablation"] if r["scenario"] == "heavy" and r["variant"] == "Full"][0]
    assert full["d_macro_rmse_pct"] == 0.0
    for name, rows in tables.items():
        remnet_tables.write_table(rows, str(tmp_path / name), remnet_tables.TITLES[name])
        with open(tmp_path / f"{name}.csv") as f:
            assert len(list(csv.DictReader(f))) == len(rows)
        assert (tmp_path / f"{name}.md").read_text().count("\n") == len(rows) + 4
    for path in remnet_figures.write_figures(config, results, str(tmp_path)):
        assert os.path.getsize(path) > 10_000 and open(path, "rb").read(4) == b"\x89PNG"
