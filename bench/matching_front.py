r"""The attack figures of a front's runs, finished or not: per run and per (method, nu).

  python -m bench.matching_front runs/front_matching
  python -m bench.matching_front runs/front_matching --out=bench/privacy_front/attacks.md

`programs.privacy_front`'s own report (front.csv) reads finished runs only; this reads every run
folder's metrics.csv as far as it goes (a front stopped with --stop_after_round, or cut short), so
that round 1's attack of every run can be read while the later rounds still run. Ratios are
attacker RMSE over that attacker's own constant guess (1 = learns nothing): the strongest
(attack_rmse_m, what the run reports), the twin-matching attacker's posterior mean and MAP, and
the ridge's better view. "late" averages a run's attacks after round 1 (the front's late columns),
then the seeds. Cost: a run's seconds with and without its matching attacks (the rounds' wall
seconds, less attack_matching_seconds; set-up not counted), projected over the whole schedule for
runs not yet through their last round.
"""

import argparse
import json
import math
import os

import numpy as np

from tff_radiomap.experiments import front_report, privacy_table
from tff_radiomap.metrics import over_seeds

RATIOS = (
    ("strongest", ("attack_rmse_m",), "attack_constant_rmse_m"),
    ("matching", ("attack_matching_rmse_m",), "attack_matching_constant_rmse_m"),
    ("matching MAP", ("attack_matching_map_rmse_m",), "attack_matching_constant_rmse_m"),
    ("ridge", ("attack_plain_rmse_m", "attack_aware_rmse_m"), "attack_constant_rmse_m"),
)


def attack_rows(run_dir: str) -> list[dict]:
    """{round, <ratio name>: ratio, matching_seconds} of each attacked round of a run."""
    rows = []
    for r in privacy_table.read_metrics(run_dir):
        if not math.isfinite(r.get("attack_rmse_m", math.nan)):
            continue
        row = {"round": int(r["round"]), "matching_seconds": r.get("attack_matching_seconds", math.nan)}
        for name, keys, constant in RATIOS:
            row[name] = front_report.attack_ratio(r, keys, constant)
        rows.append(row)
    return rows


def run_cost(run_dir: str) -> tuple[float, float, bool] | None:
    """(seconds of the run's rounds, the same less its matching attacks, projected): measured for a
    run through its last round; else projected over the whole schedule from the rounds so far (the
    median round without an attack, the mean attack round with and without its matching part),
    None before it has both kinds of round."""
    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    rounds, every = config["rounds"], config["attack_every"]
    metrics = privacy_table.read_metrics(run_dir)
    matching = [r.get("attack_matching_seconds", math.nan) for r in metrics]
    matching = [m if math.isfinite(m) else 0.0 for m in matching]
    if metrics and int(metrics[-1]["round"]) >= rounds:
        total = sum(r["seconds"] for r in metrics)
        return total, total - sum(matching), False
    attacked = {1, rounds} | set(range(every, rounds + 1, every)) if every > 0 else set()
    was_attacked = [math.isfinite(r.get("attack_rmse_m", math.nan)) for r in metrics]
    plain = [r["seconds"] for r, a in zip(metrics, was_attacked) if not a]
    attack = [(r["seconds"], m) for r, m, a in zip(metrics, matching, was_attacked) if a]
    if not plain or not attack:
        return None
    plain_total = (rounds - len(attacked)) * float(np.median(plain))
    with_matching = len(attacked) * float(np.mean([s for s, _ in attack]))
    without = len(attacked) * float(np.mean([s - m for s, m in attack]))
    return plain_total + with_matching, plain_total + without, True


def run_label(run_dir: str) -> tuple[str, float, int]:
    with open(os.path.join(run_dir, "config.json")) as f:
        config = json.load(f)
    return config["defense"], float(config["noise_multiplier"]), int(config["seed"])


def _fmt(values) -> str:
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    mean, std = over_seeds.mean_std(values)
    return f"{over_seeds.plus_minus(f'{mean:.3f}', std, '.3f')} ({min(values):.3f}-{max(values):.3f})"


def report(front_dir: str) -> str:
    runs = sorted(
        (run_label(os.path.join(front_dir, d)), os.path.join(front_dir, d))
        for d in os.listdir(front_dir)
        if os.path.exists(os.path.join(front_dir, d, "metrics.csv")) and os.path.exists(os.path.join(front_dir, d, "config.json"))
    )
    names = [n for n, _, _ in RATIOS]
    lines = ["## Per run and attack round", "", "| run | round | " + " | ".join(names) + " | matching s |", "|---" * (len(names) + 3) + "|"]
    cells = {}
    for (method, nu, seed), run_dir in runs:
        rows = attack_rows(run_dir)
        if not rows:  # Not yet through its first attack.
            continue
        for r in rows:
            ratios = " | ".join(f"{r[n]:.3f}" for n in names)
            lines.append(f"| {os.path.basename(run_dir)} | {r['round']} | {ratios} | {r['matching_seconds']:.0f} |")
        first = [r for r in rows if r["round"] == 1]
        later = [r for r in rows if r["round"] > 1]
        cell = cells.setdefault((method, nu), {"seeds": [], "cost": []})
        cell["seeds"].append(
            {
                "first": {n: first[0][n] if first else math.nan for n in names},
                "late": {n: float(np.mean([r[n] for r in later])) if later else math.nan for n in names},
                "late_rounds": [r["round"] for r in later],
            }
        )
        cost = run_cost(run_dir)
        if cost is not None:
            cell["cost"].append(cost)
    lines += ["", "## Per method and nu (mean +- std over seeds, then min-max)", "", over_seeds.std_note(), ""]
    lines += ["| method | nu | seeds | round 1: " + " | round 1: ".join(names) + " | late rounds | late: " + " | late: ".join(names) + " |"]
    lines += ["|---" * (2 * len(names) + 4) + "|"]
    for (method, nu), cell in cells.items():
        seeds = cell["seeds"]
        first = [_fmt([s["first"][n] for s in seeds]) for n in names]
        late = [_fmt([s["late"][n] for s in seeds]) for n in names]
        rounds = sorted({r for s in seeds for r in s["late_rounds"]})
        lines.append(f"| {method} | {nu:g} | {len(seeds)} | " + " | ".join(first) + f" | {','.join(map(str, rounds)) or '-'} | " + " | ".join(late) + " |")
    costs = [(m, nu, c) for (m, nu), cell in cells.items() for c in cell["cost"]]
    if costs:
        lines += ["", "## Cost of the matching attacker (the rounds' seconds; projected for unfinished runs)", ""]
        lines += ["| method | nu | run s | without matching s | ratio | |", "|---|---|---|---|---|---|"]
        lines += [f"| {m} | {nu:g} | {t:.0f} | {w:.0f} | {t / w:.2f} | {'projected' if p else 'measured'} |" for m, nu, (t, w, p) in costs]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("front_dir")
    parser.add_argument("--out", default="", help="Also write the tables to this markdown file.")
    args = parser.parse_args()
    if not os.path.isdir(args.front_dir):
        parser.error(f"{args.front_dir!r} is not a folder of front runs")
    text = report(args.front_dir)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
