"""Defenses against a baseline defense at the same nu and seed: the strongest attacker over rounds
10-50 and the best validation MSE, seed by seed.

    python -m bench.paired_front --dirs=bench/privacy_front,runs/front_client \
        --methods=subspace_client,aligned --baseline=uniform --noise_multipliers=0.01 --seeds=0,1,2

Each run is looked up in the folders of --dirs in order (the first holding a finished run wins;
names as `privacy_front.run_name`). Per (method, nu, seed): 'late' is the strongest attacker's RMSE
over its constant guess averaged over the attacks after round 1 (`front_report.attack_ratios`), its
ratio to the baseline's at the same nu and seed, and the best validation MSE in dB minus the
baseline's; then No Defense's best (if found) for the 0.2 dB bound. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from tff_radiomap.experiments import front_report, privacy_table
from tff_radiomap.experiments.privacy_front import finished, run_name


def _list(text: str) -> list[str]:
    return [v for v in text.split(",") if v]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.paired_front")
    parser.add_argument("--dirs", type=_list, default=["bench/privacy_front"], help="Front folders, searched in order.")
    parser.add_argument("--methods", type=_list, default=["subspace_client", "aligned"], help="Defenses to compare.")
    parser.add_argument("--baseline", default="uniform", help="The defense each is paired with.")
    parser.add_argument("--noise_multipliers", type=_list, default=["0.01"], help="nu values.")
    parser.add_argument("--seeds", type=_list, default=["0", "1", "2"], help="Seeds.")
    return parser.parse_args(argv)


def find(dirs, method: str, nu: float, seed: int) -> str | None:
    for folder in dirs:
        run_dir = os.path.join(folder, run_name(method, nu, seed))
        if finished(run_dir):
            return run_dir
    return None


def figures(run_dir: str) -> tuple[float, float]:
    """(late strongest ratio, best validation MSE in dB) of a finished run."""
    with open(os.path.join(run_dir, "summary.json")) as f:
        best = float(json.load(f)["best_val_mse_db"])
    return front_report.attack_ratios(privacy_table.read_metrics(run_dir))["late"], best


def table(args: argparse.Namespace) -> str:
    lines = [
        "| method | nu | seed | late ratio | baseline's | / baseline | best dB | - baseline's | - No Defense's |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for nu in (float(v) for v in args.noise_multipliers):
        for method in args.methods:
            for seed in (int(s) for s in args.seeds):
                run, base, none = (find(args.dirs, m, n, seed) for m, n in ((method, nu), (args.baseline, nu), ("none", 0.0)))
                if run is None:
                    lines.append(f"| {method} | {nu:g} | {seed} | not finished | | | | | |")
                    continue
                late, best = figures(run)
                cells = [f"{late:.3f}", "-", "-", f"{best:.2f}", "-", "-"]
                if base is not None:
                    b_late, b_best = figures(base)
                    cells[1:3], cells[4] = [f"{b_late:.3f}", f"{late / b_late:.2f}"], f"{best - b_best:+.2f}"
                if none is not None:
                    cells[5] = f"{best - figures(none)[1]:+.2f}"
                lines.append(f"| {method} | {nu:g} | {seed} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(parse(sys.argv[1:])))
