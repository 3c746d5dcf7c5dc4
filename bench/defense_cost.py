"""What a defense's run costs against a baseline run's, part by part, from finished run folders.

    python -m bench.defense_cost BASELINE_RUN RUN [RUN ...]

Each run folder is one `programs.privacy_radiomap` (or `programs.privacy_front`) run through its
last round. Parts: set-up (the call's wall time less its rounds and refreshes: data, trainer, twin,
pictures), the attack rounds (the ridge and the matching attacker, with their training round), the
basis refreshes (before their rounds, outside the rounds' `seconds`), and the other rounds. The figure that counts is the whole run's
wall time over the baseline's; it is only a cost ratio when the runs ran side by side under the
same load (two runs at a time, one thread each, as `privacy_front --jobs=2` runs them, with a third
run queued so that neither ran alone at its end). Prints a Markdown table.
"""

from __future__ import annotations

import json
import math
import os
import sys

from tff_radiomap.experiments import privacy_table


def parts(run_dir: str) -> dict:
    """{wall, setup, attack, refresh, other, rounds} seconds of a finished run."""
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    metrics = privacy_table.read_metrics(run_dir)
    if not metrics or int(metrics[-1]["round"]) < int(config["rounds"]):
        raise ValueError(f"{run_dir}: not finished (metrics.csv ends before round {config['rounds']})")
    if int(metrics[0]["round"]) != 1:
        raise ValueError(f"{run_dir}: metrics.csv does not start at round 1")
    attacked = [math.isfinite(r.get("attack_rmse_m", math.nan)) for r in metrics]
    refresh = sum(float(r.get("basis_seconds", 0.0) or 0.0) for r in metrics)  # Before a round, outside its `seconds`.
    rounds = sum(r["seconds"] for r in metrics)
    wall = float(summary["wall_seconds_this_call"])
    return {
        "label": f"{config['defense']} nu={config['noise_multiplier']:g} s{config['seed']}",
        "wall": wall,
        "setup": wall - rounds - refresh,
        "attack": sum(r["seconds"] for r, a in zip(metrics, attacked) if a),
        "refresh": refresh,
        "other": sum(r["seconds"] for r, a in zip(metrics, attacked) if not a),
        "resumed": float(summary.get("train_seconds", rounds)) > wall + 1.0,
    }


def table(run_dirs: list[str]) -> str:
    rows = [parts(d) for d in run_dirs]
    base = rows[0]
    lines = [
        "| run | wall s | / baseline | set-up s | attack rounds s | refreshes s | other rounds s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        note = " (resumed: wall is the last call's)" if r["resumed"] else ""
        lines.append(
            f"| {r['label']}{note} | {r['wall']:.0f} | {r['wall'] / base['wall']:.2f} | {r['setup']:.0f} | {r['attack']:.0f} | {r['refresh']:.0f} | {r['other']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    missing = [d for d in argv if not os.path.isfile(os.path.join(d, "summary.json"))]
    if missing:
        print(f"not a finished run folder (no summary.json): {', '.join(missing)}", file=sys.stderr)
        return 2
    print(table(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
