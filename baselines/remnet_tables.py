"""The EPFL-REMNet experiment family: every run behind the paper's tables, and the tables.

`plan(config)` lists the runs: for every test split (random, block), seed and scenario the
proposal and the baselines (`MAIN_METHODS`); for the `detail_splits` x `detail_scenarios` also
the five ablations and a Pareto grid of (k_fraction, R) around the proposal (a grid point equal to
an already planned configuration reuses its run). The data split follows the seed (each seed is
another train/val/test draw, initial model and shuffles). `run_all` trains them on the stacked
clients (`stacked_runner`; each resumable in its own folder), `build_tables` averages over seeds
(mean and sample standard deviation, ddof = 1) and `write_table` writes CSV and Markdown.

Tables (rows of dicts; every metric as `<name>_mean`, `<name>_std`, with `seeds`):
  main      split, scenario, method: micro/macro RMSE, macro MAE, worst-10%-of-clients RMSE,
            cumulative uplink MB (Table I)
  per_bs    split, scenario, method: RMSE per base station (Table II)
  ablation  split, scenario, variant: micro/macro RMSE, uplink, change of the means vs Full (Table III)
  pareto    split, scenario, k_fraction, R: macro RMSE, uplink, on the front of the means or not
  checks    split, scenario: EPFL-REMNet's macro RMSE below FedAvg's; its uplink at most 3% of
            uncompressed personalized FL's at a macro RMSE at most 10% higher (means over seeds)
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import os

import numpy as np

from baselines import remnet_methods
from tff_radiomap.data import rem_points
from tff_radiomap.learning import epfl_ablations, rem_runner, stacked_runner
from tff_radiomap.learning.epfl_remnet import EpflRemnetConfig
from tff_radiomap.metrics import over_seeds
from tff_radiomap.metrics.rem_accuracy import worst_fraction_rmse

MAIN_METHODS = ("fedavg", "pfedgp", "fedrep", "ditto", "pfl_uncompressed", "epfl_remnet")
LABELS = {
    "fedavg": "FedAvg",
    "fedfly": "FedFly",
    "pfedgp": "pFedGP",
    "fedrep": "FedRep",
    "ditto": "Ditto",
    "pfl_uncompressed": "PFL (uncompressed, = FedPer)",
    "epfl_remnet": "EPFL-REMNet",
    **epfl_ablations.LABELS,
}
COMM_RATIO_MAX = 0.03  # "over 97% less uplink" than uncompressed personalized FL.
RMSE_RATIO_MAX = 1.10  # "negligible accuracy loss", read as at most 10% higher macro RMSE.
WORST_FRACTION = 0.1
# Chosen on validation pixels only (heavy scenario, block split, seed 0; `remnet_tuning`,
# bench/RESULTS.md "The validation sweep and the round budget"): EPFL-REMNet's configuration, each
# method's client learning rate, and the one round budget of every method.
TUNED_BASE = EpflRemnetConfig(client_learning_rate=1e-2, k_fraction=0.02, sync_period=1, ema_decay=0.5)
TUNED_LEARNING_RATES = (("fedavg", 1e-2), ("fedfly", 1e-2), ("pfedgp", 1e-3), ("fedrep", 3e-3), ("ditto", 3e-3), ("pfl_uncompressed", 1e-2))
ROUND_BUDGET = 115


@dataclasses.dataclass(frozen=True)
class TablesConfig:
    base: EpflRemnetConfig = TUNED_BASE  # EPFL-REMNet's; the baselines derive from it.
    learning_rates: tuple[tuple[str, float], ...] = TUNED_LEARNING_RATES  # Per baseline (others: base's).
    data: rem_points.RemPointsConfig = rem_points.RemPointsConfig()
    run: rem_runner.RunConfig = rem_runner.RunConfig()
    scenarios: tuple[str, ...] = rem_points.SCENARIOS
    test_splits: tuple[str, ...] = ("block", "random")  # Block first: the checks are on it.
    seeds: tuple[int, ...] = (0, 1, 2)
    main_methods: tuple[str, ...] = MAIN_METHODS
    detail_splits: tuple[str, ...] = ("block",)  # Where ablations and the Pareto grid run.
    detail_scenarios: tuple[str, ...] = ("heavy",)  # CPU budget; --detail_scenarios adds the others.
    pareto_k_fractions: tuple[float, ...] = (0.01, 0.05, 0.2)
    pareto_sync_periods: tuple[int, ...] = (1, 2)

    def __post_init__(self):
        for name, values, allowed in (
            ("scenarios", self.scenarios, rem_points.SCENARIOS),
            ("detail_scenarios", self.detail_scenarios, rem_points.SCENARIOS),
            ("test_splits", self.test_splits, rem_points.TEST_SPLITS),
            ("detail_splits", self.detail_splits, rem_points.TEST_SPLITS),
            ("main_methods", self.main_methods, remnet_methods.EPFL_AND_BASELINES),
        ):
            if (set(values) - set(allowed)) or (not values and name in ("scenarios", "test_splits", "main_methods")):
                raise ValueError(f"{name}={values}: expected a {'non-empty ' if name in ('scenarios', 'test_splits') else ''}subset of {allowed}")
        if not {"epfl_remnet", "fedavg", "pfl_uncompressed"} <= set(self.main_methods):
            raise ValueError(f"main_methods={self.main_methods}: expected a list holding epfl_remnet, fedavg and pfl_uncompressed (the checks)")
        if not self.seeds or min(self.seeds) < 0 or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds={self.seeds}: expected distinct integers >= 0")
        if not self.pareto_k_fractions or any(not 0 < k <= 1 for k in self.pareto_k_fractions):
            raise ValueError(f"pareto_k_fractions={self.pareto_k_fractions}: expected fractions in (0, 1]")
        if not self.pareto_sync_periods or any(r < 1 for r in self.pareto_sync_periods):
            raise ValueError(f"pareto_sync_periods={self.pareto_sync_periods}: expected integers >= 1")
        if self.run.clients_per_round > self.data.num_clients:
            raise ValueError(f"clients_per_round={self.run.clients_per_round}: expected an integer in 1..{self.data.num_clients}")

    def method(self, name: str) -> rem_runner.Method:
        """The method `name` around `base`, with its own validation-chosen learning rate."""
        lr = dict(self.learning_rates).get(name, self.base.client_learning_rate)
        return remnet_methods.method(name, dataclasses.replace(self.base, client_learning_rate=lr))

    def detailed(self, split: str, scenario: str) -> bool:
        return split in self.detail_splits and scenario in self.detail_scenarios and scenario in self.scenarios and split in self.test_splits


@dataclasses.dataclass(frozen=True)
class PlannedRun:
    split: str
    seed: int
    scenario: str
    label: str  # A method name, or pareto_k{k}_R{R}.
    method: rem_runner.Method

    def key(self) -> str:
        """What makes two runs the same run: split, seed, scenario and configuration, not the label."""
        record = self.method.record()
        record.pop("name")
        return json.dumps([self.split, self.seed, self.scenario, record], sort_keys=True, default=str)

    def run_dir(self, out_dir: str) -> str:
        return os.path.join(out_dir, "runs", self.split, f"seed{self.seed}", self.scenario, self.label)


def pareto_label(k_fraction: float, sync_period: int) -> str:
    return f"pareto_k{k_fraction:g}_R{sync_period}"


def plan(config: TablesConfig) -> list[PlannedRun]:
    """Main runs first (every split and seed), then the detail runs, so that a partial run of the
    program has the main table."""
    main, detail = [], []
    for split in config.test_splits:
        for seed in config.seeds:
            for scenario in config.scenarios:
                main += [PlannedRun(split, seed, scenario, n, config.method(n)) for n in config.main_methods]
                if not config.detailed(split, scenario):
                    continue
                detail += [PlannedRun(split, seed, scenario, n, config.method(n)) for n in remnet_methods.ABLATIONS]
                for k in config.pareto_k_fractions:
                    for r in config.pareto_sync_periods:
                        grid = dataclasses.replace(config.base, k_fraction=k, sync_period=r)
                        detail.append(PlannedRun(split, seed, scenario, pareto_label(k, r), remnet_methods.epfl_remnet(grid, "epfl_remnet")))
    return main + detail


def shard_of(config: TablesConfig, shard: tuple[int, int]) -> set[str]:
    """Keys of the distinct planned runs of shard (i, n): every n-th, starting at the i-th."""
    keys = list(dict.fromkeys(p.key() for p in plan(config)))
    return set(keys[shard[0] :: shard[1]])


def claim(claims_dir: str, planned: PlannedRun) -> bool:
    """True for the first process to claim `planned` in `claims_dir` (an exclusively created file)."""
    path = os.path.join(claims_dir, hashlib.sha1(planned.key().encode()).hexdigest())
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _next_run(pending: list[PlannedRun], processes: dict, loaded: tuple | None) -> PlannedRun:
    """The first pending run in plan order, preferring one whose configuration this process has
    traced already (with --jobs each child keeps to its configurations), then one on the loaded data."""
    return min(pending, key=lambda p: (stacked_runner.process_key(p.method) not in processes, (p.split, p.seed) != loaded))


def load_split(config: TablesConfig, split: str, seed: int) -> tuple[dict, int]:
    """The scenarios of one (split, seed) and the padded client size of their stacked data."""
    scenarios = rem_points.load_scenarios(dataclasses.replace(config.data, test_split=split, seed=seed), config.scenarios)
    n_max = max(c.num_train for s in scenarios.values() for c in s.clients)
    return scenarios, -(-n_max // config.base.batch_size) * config.base.batch_size  # Whole batches: seeds of a split share one trace.


def run_all(
    config: TablesConfig, out_dir: str, log=print, train: bool = True, shard: tuple[int, int] = (0, 1), claims_dir: str | None = None
) -> dict[tuple, dict]:
    """Runs (or reads back) every planned run; returns (split, seed, scenario, label) -> final
    result (with its `run_dir`). A run whose configuration equals an earlier one's is not repeated.
    `train=False` only reads back the finished runs (the tables of a partial run); `shard` (i, n)
    trains only the i-th of n interleaved shares of the distinct runs; `claims_dir` (`--jobs`) trains
    the runs this process claims there first (see `claim`), several processes sharing one plan."""
    results, by_key, processes = {}, {}, {}
    mine = shard_of(config, shard) if shard != (0, 1) and claims_dir is None else None
    aliases = {}  # Planned runs equal to an earlier one: (ident, ident of the run that stands for it).
    pending = []
    for planned in plan(config):
        ident = (planned.split, planned.seed, planned.scenario, planned.label)
        if mine is not None and planned.key() not in mine:
            continue
        if planned.key() in by_key:
            aliases[ident] = by_key[planned.key()]
            continue
        by_key[planned.key()] = ident
        pending.append(planned)
    if not train:
        for planned in pending:
            final = os.path.join(planned.run_dir(out_dir), "final.json")
            if os.path.exists(final):
                with open(final) as f:
                    results[(planned.split, planned.seed, planned.scenario, planned.label)] = dict(json.load(f), run_dir=planned.run_dir(out_dir))
        pending = []
    loaded, scenarios = None, None  # One split in memory at a time.
    while pending:
        planned = _next_run(pending, processes, loaded) if claims_dir else pending[0]
        pending.remove(planned)
        if claims_dir and not claim(claims_dir, planned):
            continue
        if (planned.split, planned.seed) != loaded:
            loaded = (planned.split, planned.seed)
            scenarios, pad_to = load_split(config, *loaded)
        run = dataclasses.replace(config.run, seed=planned.seed)
        run_dir = planned.run_dir(out_dir)
        log(f"== {planned.split} / seed {planned.seed} / {planned.scenario} / {planned.label}")
        result = stacked_runner.run_stacked(run_dir, scenarios[planned.scenario], planned.method, run, log=log, pad_to=pad_to, processes=processes)
        results[(planned.split, planned.seed, planned.scenario, planned.label)] = dict(result, run_dir=run_dir)
    for ident, source in aliases.items():
        if source in results:
            results[ident] = results[source]
    return results


# ---------------------------------------------------------------------------------------------
# Tables.
def _pct(new: float, ref: float) -> float:
    return 100.0 * (new - ref) / ref if ref else float("nan")


def pareto_front(points: list[tuple[float, float]]) -> list[bool]:
    """For (cost, error) points: True where no other point is at most as costly and as wrong,
    and strictly better in one of the two."""
    return [not any((c2 <= c and e2 <= e) and (c2 < c or e2 < e) for j, (c2, e2) in enumerate(points) if j != i) for i, (c, e) in enumerate(points)]


def _metrics(result: dict) -> dict[str, float]:
    out = {k: result[k] for k in ("micro_rmse", "macro_rmse", "macro_mae")}
    out["worst10_rmse"] = worst_fraction_rmse(result["per_client_rmse"], WORST_FRACTION)
    out["uplink_mb"] = result["cum_uplink_mb"]
    out.update({f"rmse_bs{chr(ord('A') + m)}": v for m, v in enumerate(result["per_bs_rmse"])})
    return out


def seed_summary(per_seed: list[dict[str, float]], names) -> dict:
    """`<name>_mean` and `<name>_std` (`over_seeds.mean_std`: ddof = 1, nan for one seed) of each
    metric over seeds; both nan where a seed's value is not finite (a diverged run shows)."""
    out = {"seeds": len(per_seed)}
    for n in names:
        values = [m[n] for m in per_seed]
        out[f"{n}_mean"], out[f"{n}_std"] = over_seeds.mean_std(values) if np.all(np.isfinite(values)) else (float("nan"), float("nan"))
    return out


def _over_seeds(config, results, split, scenario, label) -> list[dict]:
    return [_metrics(results[(split, seed, scenario, label)]) for seed in config.seeds if (split, seed, scenario, label) in results]


MAIN_METRICS = ("micro_rmse", "macro_rmse", "macro_mae", "worst10_rmse", "uplink_mb")


def build_tables(config: TablesConfig, results: dict[tuple, dict]) -> dict[str, list[dict]]:
    """The tables from whatever runs `results` holds (rows with no finished seed are left out)."""
    tables = {"main": [], "per_bs": [], "ablation": [], "pareto": [], "checks": []}
    for split in config.test_splits:
        for s in config.scenarios:
            summary = {}
            for name in config.main_methods:
                per_seed = _over_seeds(config, results, split, s, name)
                if not per_seed:
                    continue
                summary[name] = seed_summary(per_seed, MAIN_METRICS)
                tables["main"].append({"split": split, "scenario": s, "method": LABELS[name], **summary[name]})
                bs = sorted(k for k in per_seed[0] if k.startswith("rmse_bs"))
                tables["per_bs"].append({"split": split, "scenario": s, "method": LABELS[name], **seed_summary(per_seed, bs)})
            if config.detailed(split, s) and "epfl_remnet" in summary:
                _detail_rows(config, results, split, s, summary["epfl_remnet"], tables)
            if all(m in summary for m in ("epfl_remnet", "fedavg", "pfl_uncompressed")):
                tables["checks"].append(_check_row(split, s, summary))
    return tables


def _detail_rows(config, results, split, s, full, tables) -> None:
    for name in remnet_methods.ABLATIONS + ("epfl_remnet",):
        if name != "epfl_remnet" and config.method(name).config == config.method("epfl_remnet").config:
            continue  # The tuned configuration already lacks this component (e.g. R = 1: no periodic sync).
        per_seed = _over_seeds(config, results, split, s, name)
        if not per_seed:
            continue
        row = seed_summary(per_seed, ("micro_rmse", "macro_rmse", "uplink_mb"))
        tables["ablation"].append(
            {
                "split": split,
                "scenario": s,
                "variant": "Full" if name == "epfl_remnet" else LABELS[name],
                **row,
                "d_macro_rmse_pct": _pct(row["macro_rmse_mean"], full["macro_rmse_mean"]),
                "d_uplink_pct": _pct(row["uplink_mb_mean"], full["uplink_mb_mean"]),
            }
        )
    grid = []
    for k in config.pareto_k_fractions:
        for rr in config.pareto_sync_periods:
            per_seed = _over_seeds(config, results, split, s, pareto_label(k, rr))
            if per_seed:
                grid.append((k, rr, seed_summary(per_seed, ("macro_rmse", "uplink_mb"))))
    front = pareto_front([(g[2]["uplink_mb_mean"], g[2]["macro_rmse_mean"]) for g in grid])
    for (k, rr, row), on_front in zip(grid, front):
        tables["pareto"].append({"split": split, "scenario": s, "k_fraction": k, "sync_period": rr, **row, "on_front": on_front})


def _check_row(split, s, summary) -> dict:
    full, fedavg, pfl = summary["epfl_remnet"], summary["fedavg"], summary["pfl_uncompressed"]
    comm_ratio = full["uplink_mb_mean"] / pfl["uplink_mb_mean"]
    rmse_ratio = full["macro_rmse_mean"] / pfl["macro_rmse_mean"]
    return {
        "split": split,
        "scenario": s,
        "seeds": min(full["seeds"], fedavg["seeds"], pfl["seeds"]),
        "epfl_macro_rmse_db": full["macro_rmse_mean"],
        "fedavg_macro_rmse_db": fedavg["macro_rmse_mean"],
        "pfl_macro_rmse_db": pfl["macro_rmse_mean"],
        "below_fedavg": full["macro_rmse_mean"] < fedavg["macro_rmse_mean"],
        "uplink_vs_pfl_pct": 100.0 * comm_ratio,
        "uplink_at_most_3pct": comm_ratio <= COMM_RATIO_MAX,
        "macro_rmse_vs_pfl_pct": _pct(full["macro_rmse_mean"], pfl["macro_rmse_mean"]),
        "rmse_at_most_10pct_higher": rmse_ratio <= RMSE_RATIO_MAX,
    }


def _fmt(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.0f}"
    return str(value)


def write_table(rows: list[dict], path_stem: str, title: str) -> None:
    """`path_stem`.csv (full precision) and `path_stem`.md (a Markdown table under `title`;
    `x_mean` / `x_std` pairs shown as one `x` column, mean +- std, and the convention said under
    the table where it has any)."""
    if not rows:
        raise ValueError(f"table {title!r} has no rows")
    fields = list(rows[0])
    with open(path_stem + ".csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    shown = [f[: -len("_mean")] if f.endswith("_mean") else f for f in fields if not f.endswith("_std")]

    def cell(row, name):
        if name + "_mean" in row:
            return over_seeds.plus_minus(_fmt(row[name + "_mean"]), row[name + "_std"], _fmt)
        return _fmt(row[name])

    seeds = sorted({r["seeds"] for r in rows if "seeds" in r})
    notes = [over_seeds.std_note(seeds[0] if len(seeds) == 1 else None)] if any(f.endswith("_std") for f in fields) else []
    with open(path_stem + ".md", "w") as f:
        f.write(over_seeds.markdown_table(shown, ([cell(r, k) for k in shown] for r in rows), f"### {title}", notes))


TITLES = {
    "main": "Main results: accuracy (dB) and cumulative uplink (MB = 10^6 bytes), mean +- std over seeds",
    "per_bs": "RMSE per base station (dB), mean +- std over seeds",
    "ablation": "Ablations of EPFL-REMNet (changes of the means relative to the full method)",
    "pareto": "Accuracy-communication grid of EPFL-REMNet over k_fraction x R (front of the means)",
    "checks": "Claims checked (means over seeds)",
}
