"""The front's defenses on the aggregate (central DP, DDP): their rows, and front.md's table of
utility against epsilon (the figure is `front_figures.dp_figure`). Rows are `front_report.front_rows`'."""

from __future__ import annotations

import numpy as np

from tff_radiomap.experiments.privacy_table import LABELS
from tff_radiomap.metrics import over_seeds


def on_aggregate(row: dict) -> bool:
    """Whether a front row is a defense on the aggregate (it has an aggregate epsilon: central DP,
    DDP), whose noise parameter is z rather than paper 000's nu."""
    return row.get("aggregate_epsilon") is not None


def dp_rows(rows: list[dict]) -> list[dict]:
    """The rows of the defenses on the aggregate (`on_aggregate`), in front order, for the table and
    figure of utility against epsilon."""
    return [r for r in rows if on_aggregate(r)]


def _no_defense(rows: list[dict]) -> dict | None:
    return next((r for r in rows if r["method"] == "none"), None)


def reference_db(rows: list[dict]) -> float | None:
    """No Defense's best validation MSE (mean over its seeds), the front's utility reference."""
    none = _no_defense(rows)
    return None if none is None else none["best_val_mse_db_mean"]


def paired_cost_db(row: dict, rows: list[dict]) -> float | None:
    """`row`'s cost in best validation MSE over No Defense's, seed by seed: the mean over the seeds
    both have of the difference (a row of seed 0 against No Defense's seed 0, not against its mean
    over more seeds). None without No Defense or a seed in common."""
    none = _no_defense(rows)
    if none is None:
        return None
    shared = sorted(set(row["best_by_seed"]) & set(none["best_by_seed"]))
    if not shared:
        return None
    return float(np.mean([row["best_by_seed"][s] - none["best_by_seed"][s] for s in shared]))


def dp_table(rows: list[dict]) -> list[str]:
    """front.md's table of utility against epsilon (empty without a defense on the aggregate)."""
    dp = dp_rows(rows)
    if not dp:
        return []
    lines = [
        "",
        "Utility against epsilon, the defenses on the aggregate (dp.png): cost = best validation MSE over No "
        "Defense's (dB), seed by seed over the seeds both have; epsilon as aggregate_epsilon(_poisson) above; the observer of individual uploads reads the row "
        "as late_attack_ratio.",
        "",
        "| defense | z | seeds | best_val_mse_db | cost_db | final_val_mse_db | epsilon | epsilon_poisson | upload observer |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in dp:
        paired = paired_cost_db(r, rows)
        cost = "" if paired is None else f"{paired:+.2f}"
        if not r["uploads_observable"]:
            observer = "unobservable"
        elif np.isfinite(r["late_attack_ratio_mean"]):
            observer = over_seeds.plus_minus(f"{r['late_attack_ratio_mean']:.2f}", r["late_attack_ratio_std"])
        else:
            observer = "not attacked after round 1"
        cells = [
            LABELS.get(r["method"], r["method"]),
            f"{r['noise_multiplier']:g}",
            str(r["seeds"]),
            over_seeds.plus_minus(f"{r['best_val_mse_db_mean']:.2f}", r["best_val_mse_db_std"]),
            cost,
            over_seeds.plus_minus(f"{r['final_val_mse_db_mean']:.2f}", r["final_val_mse_db_std"]),
            _epsilon(r["aggregate_epsilon"]),
            _epsilon(r["aggregate_epsilon_poisson"]),
            observer,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _epsilon(value) -> str:
    return "" if value is None else f"{value:.3g}"
