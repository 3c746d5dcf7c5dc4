"""The privacy-utility front's tables and figures, from the runs `privacy_front.run_front` finished.

`write_results` reads the runs in `output_dir` (`privacy_front.run_name`) and writes

    front.csv, front.md   one row per (method, nu): best validation MSE (dB) and the attacker RMSE
                          (m) at the last attack, mean and sample std over seeds (std empty, 'n/a' in
                          front.md, for one seed); the attacker RMSE averaged over a run's attacks;
                          the constant-guess floor; the max epsilon (delta 1e-5) over the seeds'
                          clients, empty ('no guarantee' in front.md) where a run's uploads have
                          none (`saved_runs.max_epsilon_of_run`; replayed for old runs);
                          then the final validation MSE (dB; after the last round: stage 2's
                          output, which the best, often stage 1's, does not see)
    front.png             attacker RMSE against best validation MSE, one line per method across
                          nu, error bars (std over seeds) in both axes, the constant guess dashed
    allocation.csv, .png  where runs learn their allocation (Adaptive): the mean client's weight
                          of each group after each round (`ALLOCATION_COLUMNS`; the allocator's
                          `allocator/weight_<group>` measurements), one panel per run
    dp.png                the defenses on the aggregate (central DP, DDP): best validation MSE
                          against the worst client's aggregate epsilon, beside a table of the same
                          in front.md (`front_dp`)

A run counts once its summary.json is written. `write_results(..., skip_missing=True)` reports
from the finished runs alone and names the others. Reading the runs reuses Table I's pieces
(`privacy_table.read_metrics`, `mean_std`, `last_attack`); the figures are `front_figures`'.
"""

from __future__ import annotations

import csv
import json
import os

import numpy as np

from tff_radiomap.experiments import front_dp, front_figures, privacy_accounting, privacy_table, saved_runs
from tff_radiomap.metrics import over_seeds
from tff_radiomap.experiments.privacy_front import cells, finished, run_name

COLUMNS = (
    "method",
    "noise_multiplier",
    "seeds",
    "best_val_mse_db_mean",
    "best_val_mse_db_std",
    "final_attack_rmse_m_mean",
    "final_attack_rmse_m_std",
    "mean_attack_rmse_m_mean",
    "constant_rmse_m",
    "max_epsilon",  # The columns before it are those of fronts written before it existed.
    "final_val_mse_db_mean",  # The model after the last round (stage 2's), which best_val may not see.
    "final_val_mse_db_std",
    # The attacks after round 1, averaged run by run, then over seeds: round 1's attack reads the
    # initial model (at the constant guess under every noise defense), and the last attack alone
    # moves between neighbouring attacks; this mean spreads less over seeds (bench/RESULTS.md,
    # "The front").
    "late_attack_rmse_m_mean",
    "late_attack_rmse_m_std",
    # The same as ratios to each attacker's constant guess on its own observed samples: the
    # strongest attacker (what attack_rmse_m holds), round 1's and the later rounds'; the matching
    # attacker alone and the ridge alone (its better view) over the later rounds. nan for runs
    # scored before the matching attacker existed.
    "first_attack_ratio_mean",
    "late_attack_ratio_mean",
    "late_attack_ratio_std",
    "late_matching_ratio_mean",
    "late_matching_ratio_std",
    "late_ridge_ratio_mean",
    # The gain's RMSE in dB over all validation pixels (nan for runs finished before it existed).
    "best_val_rmse_db_mean",
    "best_val_rmse_db_std",
    "final_val_rmse_db_mean",
    "final_val_rmse_db_std",
    # The defenses on the aggregate (central DP, distributed DP): the worst client's epsilon over
    # the seeds against an observer of the round's aggregate who knows who took part, and with
    # Poisson sampling amplification (central DP); empty for the other defenses.
    "aggregate_epsilon",
    "aggregate_epsilon_poisson",
    # False where an observer of individual uploads sees nothing (secure aggregation): no attack.
    "uploads_observable",
)
ATTACK_COLUMNS = tuple(c for c in COLUMNS if "attack" in c or c.endswith("_ratio_mean") or c.endswith("_ratio_std") or c == "constant_rmse_m")
OPTIONAL_COLUMNS = ("max_epsilon", "aggregate_epsilon", "aggregate_epsilon_poisson")  # None -> an empty cell.
STD_COLUMNS = tuple(c for c in COLUMNS if c.endswith("_std"))
ALLOCATION_COLUMNS = ("method", "noise_multiplier", "seed", "round", "group", "weight", "phase")
WEIGHT_PREFIX = "allocator/weight_"
# A stage whose validation MSE stays within this many dB over its last DEAD_ROUNDS rounds is
# reported as dead (a constant map: a ReLU output whose pre-activations are all negative); the
# spreads that set the threshold are in bench/RESULTS.md ("Stage 2's output made linear: seed 1's dead stage 2").
DEAD_ROUNDS, DEAD_SPREAD_DB = 10, 0.1


def front_rows(output_dir: str, methods, noise_multipliers, seeds, skip_missing: bool = False) -> tuple[list[dict], list[str], list[str]]:
    """(rows, missing run names, notes on attacks skipped before the last round).

    A row per (method, nu) with at least one finished seed; without `skip_missing` an unfinished
    run raises FileNotFoundError naming it.
    """
    rows, missing, notes = [], [], []
    for method, nu in cells(methods, noise_multipliers):
        runs = []
        for seed in seeds:
            run_dir = os.path.join(output_dir, run_name(method, nu, seed))
            if not finished(run_dir):
                if not skip_missing:
                    raise FileNotFoundError(f"{run_dir} has no finished run (summary.json, metrics.csv)")
                missing.append(os.path.basename(run_dir))
                continue
            with open(os.path.join(run_dir, "summary.json")) as f:
                summary = json.load(f)
            runs.append((seed, summary, privacy_table.read_metrics(run_dir), saved_runs.max_epsilon_of_run(run_dir, summary)))
        if not runs:
            continue
        last = [privacy_table.last_attack(metrics) for _, _, metrics, _ in runs]
        for (seed, summary, metrics, _), (_, at) in zip(runs, last):
            final = max((int(r["round"]) for r in metrics), default=0)
            if at < final and _uploads_observable(summary):  # Secure aggregation is never attacked.
                notes.append(f"{run_name(method, nu, seed)}: last attack at round {at} of {final} (later ones skipped: model not finite)")
            dead = dead_stage(metrics)
            if dead is not None:
                notes.append(
                    f"{run_name(method, nu, seed)}: stage {dead[0]}'s validation MSE stays at {dead[1]:.2f} dB over its last {DEAD_ROUNDS} rounds (a dead model)"
                )
        best_by_seed = {seed: float(s["best_val_mse_db"]) for seed, s, _, _ in runs}
        best = privacy_table.mean_std(list(best_by_seed.values()))
        final_mse = privacy_table.mean_std([s.get("final_val_mse_db", np.nan) for _, s, _, _ in runs])
        final_attack = privacy_table.mean_std([a for a, _ in last])
        per_run_mean = [privacy_table.mean_std([r.get("attack_rmse_m", np.nan) for r in metrics])[0] for _, _, metrics, _ in runs]
        constant = [privacy_table.mean_std([r.get("attack_constant_rmse_m", np.nan) for r in metrics])[0] for _, _, metrics, _ in runs]
        late = privacy_table.mean_std(
            [privacy_table.mean_std([r.get("attack_rmse_m", np.nan) for r in metrics if int(r["round"]) > 1])[0] for _, _, metrics, _ in runs]
        )
        ratios = [attack_ratios(metrics) for _, _, metrics, _ in runs]
        per_seed = {key: [r[key] for r in ratios] for key in ratios[0]}
        epsilons = [e for _, _, _, e in runs]
        best_rmse = privacy_table.mean_std([s.get("best_val_rmse_db", np.nan) for _, s, _, _ in runs])
        final_rmse = privacy_table.mean_std([float(metrics[-1].get("val_rmse_db", np.nan)) if metrics else np.nan for _, _, metrics, _ in runs])
        aggregate = [s.get("privacy", {}).get("aggregate") for _, s, _, _ in runs]
        observable = all(_uploads_observable(s) for _, s, _, _ in runs)
        row = dict(
            zip(
                COLUMNS,
                (
                    method,
                    nu,
                    len(runs),
                    best[0],
                    best[1],
                    final_attack[0],
                    final_attack[1],
                    privacy_table.mean_std(per_run_mean)[0],
                    privacy_table.mean_std(constant)[0],  # Run by run, then over seeds.
                    _worst(epsilons),
                    final_mse[0],
                    final_mse[1],
                    late[0],
                    late[1],
                    privacy_table.mean_std(per_seed["first"])[0],
                    *privacy_table.mean_std(per_seed["late"]),
                    *privacy_table.mean_std(per_seed["late_matching"]),
                    privacy_table.mean_std(per_seed["late_ridge"])[0],
                    *best_rmse,
                    *final_rmse,
                    _worst_aggregate(aggregate, "epsilon"),
                    _worst_aggregate(aggregate, "epsilon_poisson"),
                    observable,
                ),
            )
        )
        row["best_by_seed"] = best_by_seed  # For paired costs (front_dp); not in front.csv.
        rows.append(row)
    return rows, missing, notes


def _uploads_observable(summary: dict) -> bool:
    """False for a run whose uploads an observer of individual uploads never sees (secure aggregation)."""
    return summary.get("privacy", {}).get("uploads_observable", True)


def attack_ratio(row: dict, rmse_keys, constant_key: str) -> float:
    """A metrics row's attacker RMSE over its constant guess: the lowest finite of `rmse_keys`
    (an attacker's views) over `constant_key`; nan where none is finite."""
    values = [float(row.get(k, "nan")) for k in rmse_keys]
    values = [v for v in values if np.isfinite(v)]
    return (min(values) if values else np.nan) / float(row.get(constant_key, "nan"))


def attack_ratios(metrics: list[dict]) -> dict:
    """One run's attacker RMSE over the constant guess: the strongest at round 1 ('first') and
    averaged over the later attacks ('late'), the matching attacker's and the ridge's later mean."""

    def mean(rows, *args):
        return privacy_table.mean_std([attack_ratio(r, *args) for r in rows])[0]

    attacked = [r for r in metrics if np.isfinite(float(r.get("attack_rmse_m", "nan")))]
    first, later = [r for r in attacked if int(r["round"]) == 1], [r for r in attacked if int(r["round"]) > 1]
    strongest = (("attack_rmse_m",), "attack_constant_rmse_m")
    return {
        "first": mean(first, *strongest),
        "late": mean(later, *strongest),
        "late_matching": mean(later, ("attack_matching_rmse_m",), "attack_matching_constant_rmse_m"),
        "late_ridge": mean(later, ("attack_plain_rmse_m", "attack_aware_rmse_m"), "attack_constant_rmse_m"),
    }


def dead_stage(metrics: list[dict]) -> tuple[int, float] | None:
    """(phase, dB) if the run's last phase ends with DEAD_ROUNDS rounds of a constant validation
    MSE (spread under DEAD_SPREAD_DB), else None."""
    if not metrics:
        return None
    phase = metrics[-1].get("phase")
    tail = [r["val_mse_db"] for r in metrics if r.get("phase") == phase][-DEAD_ROUNDS:]
    if len(tail) < DEAD_ROUNDS or not np.all(np.isfinite(tail)) or np.ptp(tail) >= DEAD_SPREAD_DB:
        return None
    return int(phase), float(np.mean(tail))


def allocation_rows(output_dir: str, methods, noise_multipliers, seeds) -> list[dict]:
    """`ALLOCATION_COLUMNS` rows of every finished run that records its allocation."""
    rows = []
    for method, nu in cells(methods, noise_multipliers):
        for seed in seeds:
            run_dir = os.path.join(output_dir, run_name(method, nu, seed))
            if not finished(run_dir):
                continue
            for r in privacy_table.read_metrics(run_dir):
                for key, weight in r.items():
                    if key.startswith(WEIGHT_PREFIX) and np.isfinite(weight):
                        rows.append(dict(zip(ALLOCATION_COLUMNS, (method, nu, seed, int(r["round"]), key[len(WEIGHT_PREFIX) :], weight, int(r["phase"])))))
    return rows


def allocation_moves(rows: list[dict]) -> list[dict]:
    """Per run: the largest change of a group's weight between its first and last recorded round
    (`first_to_last`), and within one phase (`within_phase`)."""
    runs = {}
    for r in rows:
        runs.setdefault((r["method"], r["noise_multiplier"], r["seed"]), []).append(r)
    moves = []
    for (method, nu, seed), rs in runs.items():

        def weights(select):
            return {r["group"]: r["weight"] for r in rs if select(r)}

        first_round, last_round = min(r["round"] for r in rs), max(r["round"] for r in rs)
        first, last = weights(lambda r: r["round"] == first_round), weights(lambda r: r["round"] == last_round)
        within = 0.0
        for phase in {r["phase"] for r in rs}:
            rounds = [r["round"] for r in rs if r["phase"] == phase]
            a, b = weights(lambda r: r["phase"] == phase and r["round"] == min(rounds)), weights(lambda r: r["phase"] == phase and r["round"] == max(rounds))
            within = max([within] + [abs(b[g] - a[g]) for g in a if g in b])
        moves.append(
            dict(
                method=method,
                noise_multiplier=nu,
                seed=seed,
                first_round=first_round,
                last_round=last_round,
                first_to_last=max([abs(last[g] - first[g]) for g in first if g in last], default=0.0),
                within_phase=within,
            )
        )
    return moves


def _worst(epsilons) -> float | None:
    """The worst client of any seed: None (no guarantee) if a run has none, nan if one is not known."""
    if any(e is None for e in epsilons):
        return None
    return float("nan") if any(not np.isfinite(e) for e in epsilons) else max(epsilons)


def _worst_aggregate(aggregates, key: str) -> float | None:
    """The worst seed's aggregate epsilon `key`; None where a run has none."""
    values = [a.get(key) if a else None for a in aggregates]
    return None if any(v is None for v in values) else max(values)


def write_results(output_dir: str, methods, noise_multipliers, seeds, skip_missing: bool = False) -> dict:
    """Writes front.csv, front.md and front.png from the finished runs; returns their paths, the
    rows and the names of the missing runs. FileNotFoundError if no run (or, without
    `skip_missing`, not every run) is finished."""
    rows, missing, notes = front_rows(output_dir, methods, noise_multipliers, seeds, skip_missing)
    if not rows:
        raise FileNotFoundError(f"{output_dir} holds no finished run of the front (missing: {', '.join(missing)})")
    paths = {k: os.path.join(output_dir, f"front.{k}") for k in ("csv", "md", "png")}
    with open(paths["csv"], "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows({k: privacy_table.csv_cell(r[k]) if k in STD_COLUMNS + OPTIONAL_COLUMNS else r[k] for k in COLUMNS} for r in rows)
    allocation = allocation_rows(output_dir, methods, noise_multipliers, seeds)
    moves = allocation_moves(allocation)
    with open(paths["md"], "w") as f:
        f.write(_markdown(rows, seeds, missing, notes, moves))
    front_figures.front_figure(paths["png"], rows)
    result = {"rows": rows, "missing": missing, "table_md": paths["md"], "csv": paths["csv"], "figure": paths["png"]}
    if front_dp.dp_rows(rows):
        result["dp_figure"] = os.path.join(output_dir, "dp.png")
        front_figures.dp_figure(result["dp_figure"], front_dp.dp_rows(rows), front_dp.reference_db(rows))
    if allocation:
        result.update(
            allocation_csv=os.path.join(output_dir, "allocation.csv"), allocation_figure=os.path.join(output_dir, "allocation.png"), allocation_moves=moves
        )
        with open(result["allocation_csv"], "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=ALLOCATION_COLUMNS)
            writer.writeheader()
            writer.writerows(allocation)
        front_figures.allocation_figure(result["allocation_figure"], allocation)
    return result


def _markdown_columns() -> list[str]:
    """front.md's columns: COLUMNS with each `x_mean`, `x_std` pair shown as one `x` (mean +- std)."""
    return [c[: -len("_mean")] if c.endswith("_mean") and c[: -len("_mean")] + "_std" in COLUMNS else c for c in COLUMNS if c not in STD_COLUMNS]


def _markdown_cell(row: dict, column: str) -> str:
    if column in ("method", "seeds", "uploads_observable"):
        return str(row[column])
    if not row.get("uploads_observable", True) and (column in ATTACK_COLUMNS or column + "_mean" in ATTACK_COLUMNS):
        return "unobservable"
    if column in ("aggregate_epsilon", "aggregate_epsilon_poisson"):
        return "" if row[column] is None else f"{row[column]:.3g}"
    if column == "noise_multiplier":
        return f"{row[column]:g}"
    if column == "max_epsilon":
        eps = row[column]
        return "no guarantee" if eps is None else "n/a" if not np.isfinite(eps) else f"{eps:.3g}"
    if column not in row:  # A mean +- std pair.
        return over_seeds.plus_minus(f"{row[column + '_mean']:.2f}", row[column + "_std"])
    return f"{row[column]:.2f}"


def _markdown(rows, seeds, missing, notes, moves=()) -> str:
    columns = _markdown_columns()
    lines = [
        over_seeds.markdown_table(
            columns, ([_markdown_cell(r, c) for c in columns] for r in rows), f"Privacy-utility front (seeds {', '.join(map(str, seeds))})"
        ).rstrip("\n")
    ]
    lines += [
        "",
        over_seeds.std_note(),
        "",
        f"max_epsilon: the worst client's epsilon at delta {privacy_accounting.DELTA:g} over the seeds, against an observer of "
        "individual uploads (each client composes its own uploads; no amplification by sampling); 'no guarantee' where an "
        "upload had none; 'n/a' where a run's is not known (no config.json). "
        "final_val_mse_db: after the last round (stage 2's output), where best_val_mse_db may be stage 1's. "
        "late_attack_rmse_m: the mean of a run's attacks after round 1, then over seeds (less noisy than the last attack). "
        "attack_rmse_m is the strongest attacker of each attack (the lowest ratio to its constant guess among the ridge's "
        "views and the twin-matching attacker's posterior mean and MAP); the *_ratio columns are attacker RMSE over the "
        "constant guess (1: learns nothing): the strongest at round 1 and later, the matching attacker and the ridge alone. "
        "best/final_val_rmse_db: the gain's RMSE in dB over all validation pixels. aggregate_epsilon: the defenses on the "
        "aggregate (central DP, distributed DP), the worst client's epsilon at the same delta against an observer of the "
        "round's aggregate who knows who took part (each client composes the rounds it took part in); "
        "aggregate_epsilon_poisson: central DP with Poisson sampling amplification (participation unknown). "
        "'unobservable': secure aggregation leaves an observer of individual uploads nothing to attack.",
    ]
    lines += front_dp.dp_table(rows)
    if moves:
        lines += [
            "",
            "Learned allocations (allocation.csv): the largest change of a group's weight, between the first and last "
            "recorded round, and within one phase (each phase has its own allocator and groups).",
            "",
            "| run | rounds | first to last | within a phase |",
            "| --- | --- | --- | --- |",
        ]
        lines += [
            f"| {run_name(m['method'], m['noise_multiplier'], m['seed'])} | {m['first_round']}-{m['last_round']} | "
            f"{m['first_to_last']:.3f} | {m['within_phase']:.3f} |"
            for m in moves
        ]
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    if missing:
        lines += ["", f"Not finished, left out: {', '.join(missing)}."]
    return "\n".join(lines) + "\n"
