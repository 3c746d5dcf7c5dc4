"""The EPFL-REMNet experiment family: every run behind the paper's tables, and the tables.

`plan(config)` lists the runs for each scenario: the proposal, the four baselines, the five
ablations and a Pareto grid of (k_fraction, R) around the proposal (a grid point equal to an
already planned configuration reuses its run). `run_all` trains them (each resumable in its own
folder), `build_tables` turns the results into rows, `write_table` writes CSV and Markdown.

Tables (rows of dicts):
  main      scenario, method, micro/macro RMSE, macro MAE, cumulative uplink MB (Table I)
  per_bs    scenario, method, RMSE per base station (Table II)
  ablation  scenario, variant, micro/macro RMSE, uplink, change vs the full method (Table III)
  pareto    scenario, k_fraction, R, macro RMSE, uplink, on the Pareto front or not
  checks    per scenario, the claims: EPFL-REMNet's macro RMSE below FedAvg's; its uplink at
            most 3% of uncompressed personalized FL's with a macro RMSE at most 10% higher
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os

from baselines import remnet_methods
from tff_radiomap.data import rem_points
from tff_radiomap.learning import epfl_ablations, rem_runner
from tff_radiomap.learning.epfl_remnet import EpflRemnetConfig

MAIN_METHODS = ("fedavg", "fedfly", "pfedgp", "pfl_uncompressed", "epfl_remnet")
LABELS = {
    "fedavg": "FedAvg",
    "fedfly": "FedFly",
    "pfedgp": "pFedGP",
    "pfl_uncompressed": "PFL (uncompressed)",
    "epfl_remnet": "EPFL-REMNet",
    **epfl_ablations.LABELS,
}
COMM_RATIO_MAX = 0.03  # "over 97% less uplink" than uncompressed personalized FL.
RMSE_RATIO_MAX = 1.10  # "negligible accuracy loss", read as at most 10% higher macro RMSE.


@dataclasses.dataclass(frozen=True)
class TablesConfig:
    base: EpflRemnetConfig = EpflRemnetConfig()
    data: rem_points.RemPointsConfig = rem_points.RemPointsConfig()
    run: rem_runner.RunConfig = rem_runner.RunConfig()
    scenarios: tuple[str, ...] = rem_points.SCENARIOS
    pareto_k_fractions: tuple[float, ...] = (0.01, 0.05, 0.2)
    pareto_sync_periods: tuple[int, ...] = (1, 2)

    def __post_init__(self):
        unknown = set(self.scenarios) - set(rem_points.SCENARIOS)
        if unknown or not self.scenarios:
            raise ValueError(f"scenarios={self.scenarios}: expected a non-empty subset of {rem_points.SCENARIOS}")
        if any(not 0 < k <= 1 for k in self.pareto_k_fractions) or any(r < 1 for r in self.pareto_sync_periods):
            raise ValueError(f"Pareto grid k={self.pareto_k_fractions}, R={self.pareto_sync_periods}: expected k in (0, 1], R >= 1")


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    scenario: str
    label: str  # A method name, or pareto_k{k}_R{R}.
    method: rem_runner.Method

    def key(self) -> str:
        """What makes two runs the same run: scenario and configuration, not the label."""
        record = self.method.record()
        record.pop("name")
        return json.dumps([self.scenario, record], sort_keys=True, default=str)


def pareto_label(k_fraction: float, sync_period: int) -> str:
    return f"pareto_k{k_fraction:g}_R{sync_period}"


def plan(config: TablesConfig) -> list[PlannedRun]:
    runs = []
    for scenario in config.scenarios:
        for name in remnet_methods.METHODS:
            runs.append(PlannedRun(scenario, name, remnet_methods.method(name, config.base)))
        for k in config.pareto_k_fractions:
            for r in config.pareto_sync_periods:
                grid = dataclasses.replace(config.base, k_fraction=k, sync_period=r)
                runs.append(PlannedRun(scenario, pareto_label(k, r), remnet_methods.epfl_remnet(grid, "epfl_remnet")))
    return runs


def run_all(config: TablesConfig, out_dir: str, log=print) -> dict[tuple[str, str], dict]:
    """Runs (or reads back) every planned run; returns (scenario, label) -> final result (with
    its `run_dir`). A run whose configuration equals an earlier one's is not repeated: its label
    points to the earlier run's result."""
    scenarios = rem_points.load_scenarios(config.data, config.scenarios)
    pad_to = max(c.num_train for s in scenarios.values() for c in s.clients)
    results, by_key, processes = {}, {}, {}
    for planned in plan(config):
        if planned.key() in by_key:
            results[(planned.scenario, planned.label)] = results[by_key[planned.key()]]
            continue
        run_dir = os.path.join(out_dir, "runs", planned.scenario, planned.label)
        log(f"== {planned.scenario} / {planned.label}")
        result = rem_runner.run_experiment(run_dir, scenarios[planned.scenario], planned.method, config.run, log=log, pad_to=pad_to, processes=processes)
        result = dict(result, run_dir=run_dir)
        by_key[planned.key()] = (planned.scenario, planned.label)
        results[(planned.scenario, planned.label)] = result
    return results


# ---------------------------------------------------------------------------------------------
# Tables.
def _pct(new: float, ref: float) -> float:
    return 100.0 * (new - ref) / ref if ref else float("nan")


def pareto_front(points: list[tuple[float, float]]) -> list[bool]:
    """For (cost, error) points: True where no other point is at most as costly and as wrong,
    and strictly better in one of the two."""
    return [
        not any((c2 <= c and e2 <= e) and (c2 < c or e2 < e) for j, (c2, e2) in enumerate(points) if j != i)
        for i, (c, e) in enumerate(points)
    ]


def build_tables(config: TablesConfig, results: dict[tuple[str, str], dict]) -> dict[str, list[dict]]:
    tables = {"main": [], "per_bs": [], "ablation": [], "pareto": [], "checks": []}
    for s in config.scenarios:
        for name in MAIN_METHODS:
            r = results[(s, name)]
            tables["main"].append(
                {"scenario": s, "method": LABELS[name], "micro_rmse_db": r["micro_rmse"], "macro_rmse_db": r["macro_rmse"], "macro_mae_db": r["macro_mae"], "uplink_mb": r["cum_uplink_mb"]}
            )
            tables["per_bs"].append({"scenario": s, "method": LABELS[name], **{f"rmse_bs{chr(ord('A') + m)}_db": v for m, v in enumerate(r["per_bs_rmse"])}})
        full = results[(s, "epfl_remnet")]
        for name in remnet_methods.ABLATIONS + ("epfl_remnet",):
            r = results[(s, name)]
            tables["ablation"].append(
                {
                    "scenario": s,
                    "variant": "Full" if name == "epfl_remnet" else LABELS[name],
                    "micro_rmse_db": r["micro_rmse"],
                    "macro_rmse_db": r["macro_rmse"],
                    "uplink_mb": r["cum_uplink_mb"],
                    "d_micro_rmse_pct": _pct(r["micro_rmse"], full["micro_rmse"]),
                    "d_macro_rmse_pct": _pct(r["macro_rmse"], full["macro_rmse"]),
                    "d_uplink_pct": _pct(r["cum_uplink_mb"], full["cum_uplink_mb"]),
                }
            )
        grid = [(k, rr, results[(s, pareto_label(k, rr))]) for k in config.pareto_k_fractions for rr in config.pareto_sync_periods]
        front = pareto_front([(g[2]["cum_uplink_mb"], g[2]["macro_rmse"]) for g in grid])
        for (k, rr, r), on_front in zip(grid, front):
            tables["pareto"].append({"scenario": s, "k_fraction": k, "sync_period": rr, "macro_rmse_db": r["macro_rmse"], "uplink_mb": r["cum_uplink_mb"], "on_front": on_front})
        fedavg, pfl = results[(s, "fedavg")], results[(s, "pfl_uncompressed")]
        comm_ratio = full["cum_uplink_mb"] / pfl["cum_uplink_mb"]
        rmse_ratio = full["macro_rmse"] / pfl["macro_rmse"]
        tables["checks"].append(
            {
                "scenario": s,
                "epfl_macro_rmse_db": full["macro_rmse"],
                "fedavg_macro_rmse_db": fedavg["macro_rmse"],
                "below_fedavg": full["macro_rmse"] < fedavg["macro_rmse"],
                "uplink_vs_pfl_pct": 100.0 * comm_ratio,
                "uplink_at_most_3pct": comm_ratio <= COMM_RATIO_MAX,
                "macro_rmse_vs_pfl_pct": _pct(full["macro_rmse"], pfl["macro_rmse"]),
                "rmse_at_most_10pct_higher": rmse_ratio <= RMSE_RATIO_MAX,
            }
        )
    return tables


def _fmt(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.0f}"
    return str(value)


def write_table(rows: list[dict], path_stem: str, title: str) -> None:
    """`path_stem`.csv (full precision) and `path_stem`.md (a Markdown table under `title`)."""
    if not rows:
        raise ValueError(f"table {title!r} has no rows")
    fields = list(rows[0])
    with open(path_stem + ".csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    lines = [f"### {title}", "", "| " + " | ".join(fields) + " |", "|" + "---|" * len(fields)]
    lines += ["| " + " | ".join(_fmt(r[k]) for k in fields) + " |" for r in rows]
    with open(path_stem + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")


TITLES = {
    "main": "Main results: accuracy (dB) and cumulative uplink (MB = 10^6 bytes)",
    "per_bs": "RMSE per base station (dB)",
    "ablation": "Ablations of EPFL-REMNet (changes relative to the full method)",
    "pareto": "Accuracy-communication grid of EPFL-REMNet over k_fraction x R",
    "checks": "Claims checked",
}
