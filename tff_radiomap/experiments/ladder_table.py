"""The threat ladder over runs: a row per defense, the five observers of `threat_ladder` as columns,
round 1 and the later attack rounds, each cell the observer's RMSE over the constant guess (mean and
sample std over seeds) beside the prior set's, the level of an observer that read nothing.

`collect(root)` reads every ladder folder under `root` that `bench/deployment_observer.py` wrote
(ladder.csv and ladder_settings.json, which names the run's defense, noise multiplier and seed);
`write(root, output_dir)` writes ladder.csv, ladder.md and ladder.png there. A seed's later rounds are
pooled over their transmitters before the mean over seeds (`set_scoring.pooled`). `baselines` puts the
search of columns (iii-v), seed by seed, against the baselines the issue names (the constant guess, the
single-sample matching attacker applied to the upload, candidates ranked by correlation) and the prior
set; ladder.md ends with that table.
"""

from __future__ import annotations

import csv
import json
import os
import textwrap

import numpy as np

from tff_radiomap.experiments import threat_ladder
from tff_radiomap.experiments.defense_registry import labels
from tff_radiomap.metrics import over_seeds

GROUPS = ("round 1", "late")
FIELDS = (
    "defense",
    "noise_multiplier",
    "group",
    "column",
    "attacker",
    "seeds",
    "ratio_mean",
    "ratio_std",
    "within_10m_mean",
    "transmitters",
    "run_ratio_mean",
    "note",
    "rounds",
)


def collect(root: str) -> list[dict]:
    """[{defense, noise_multiplier, seed, folder, rows}] for every ladder folder directly under `root`
    (or `root` itself), in folder order. FileNotFoundError if there is none."""
    folders = [root] + [os.path.join(root, d) for d in sorted(os.listdir(root))] if os.path.isdir(root) else []
    found = []
    for folder in folders:
        settings, table = os.path.join(folder, "ladder_settings.json"), os.path.join(folder, "ladder.csv")
        if not (os.path.isfile(settings) and os.path.isfile(table)):
            continue
        with open(settings) as f:
            record = json.load(f)
        missing = [k for k in ("defense", "noise_multiplier", "seed") if k not in record]
        if missing:
            raise ValueError(f"{settings} lacks {missing}: rerun bench.deployment_observer into a new folder")
        found.append(
            dict(
                defense=record["defense"],
                noise_multiplier=float(record["noise_multiplier"]),
                seed=int(record["seed"]),
                folder=folder,
                rows=threat_ladder.read_rows(table),
            )
        )
    if not found:
        raise FileNotFoundError(f"{root} holds no ladder (ladder.csv and ladder_settings.json, from bench.deployment_observer)")
    return found


def _group_rounds(rows: list[dict], group: str) -> list[int]:
    rounds = sorted({r["round"] for r in rows})
    return [r for r in rounds if (r == 1) == (group == "round 1")]


def _registry_rank(defense: str) -> int:
    """`defense`'s place in the registry's order (`labels()`); unknown defenses after all."""
    order = list(labels())
    return order.index(defense) if defense in order else len(order)


def table(ladders: list[dict]) -> list[dict]:
    """Rows of `FIELDS`: per (defense, noise multiplier), round group, column and attacker, the ratio's
    mean and sample std over the seeds that have the cell; note 'unobservable' where the defense
    leaves the column's observer nothing."""
    out = []
    keys = sorted({(ld["defense"], ld["noise_multiplier"]) for ld in ladders}, key=lambda k: (_registry_rank(k[0]), k))
    for key in keys:
        runs = [ld for ld in ladders if (ld["defense"], ld["noise_multiplier"]) == key]
        for group in GROUPS:
            rounds = [_group_rounds(ld["rows"], group) for ld in runs]
            pooled = [threat_ladder.pooled_rows(ld["rows"], r) for ld, r in zip(runs, rounds)]  # Each seed's rounds pooled.
            round_text = " ".join(str(r) for r in sorted({r for seed_rounds in rounds for r in seed_rounds}))  # Rows may pool other rounds.
            for column in threat_ladder.COLUMNS:
                unobservable = any(r["column"] == column and r.get("note") == "unobservable" for ld in runs for r in ld["rows"])
                if unobservable:
                    out.append(dict(zip(FIELDS, (*key, group, column, "observer", len(runs), np.nan, np.nan, np.nan, 0, np.nan, "unobservable", round_text))))
                    continue
                for attacker in ("observer", "search", "prior"):
                    per_seed = [p[(column, attacker)] for p in pooled if (column, attacker) in p]
                    run_ratios = [
                        r["run_ratio"]
                        for ld, group_rounds in zip(runs, rounds)
                        for r in ld["rows"]
                        if r["round"] in group_rounds and (r["column"], r["attacker"]) == (column, attacker) and np.isfinite(r.get("run_ratio", np.nan))
                    ]
                    if not per_seed:
                        continue
                    ratios = [s.ratio for s in per_seed]
                    std = float(np.std(ratios, ddof=1)) if len(ratios) > 1 else np.nan
                    within = float(np.mean([s.within_share for s in per_seed]))
                    out.append(
                        dict(
                            zip(
                                FIELDS,
                                (
                                    *key,
                                    group,
                                    column,
                                    attacker,
                                    len(per_seed),
                                    float(np.mean(ratios)),
                                    std,
                                    within,
                                    sum(s.transmitters for s in per_seed),
                                    np.mean(run_ratios) if run_ratios else np.nan,
                                    "",
                                    round_text,
                                ),
                            )
                        )
                    )
    return out


SET_COLUMNS = ("upload_twin", "upload_shadowed", "sum_shadowed")
BASELINES = ("constant", "matching", "correlation")


def baselines(ladders: list[dict]) -> list[dict]:
    """Per run (defense and seed), round group and column of sets (iii-v): the ratio of the search,
    of each baseline and of the prior set (transmitters of the group's rounds pooled), and whether the
    search is below every baseline (`beats_baselines`) and below the prior (`beats_prior`)."""
    out = []
    for ld in sorted(ladders, key=lambda ld: (_registry_rank(ld["defense"]), ld["noise_multiplier"], ld["seed"])):
        for group in GROUPS:
            rounds = _group_rounds(ld["rows"], group)
            pooled = threat_ladder.pooled_rows(ld["rows"], rounds)
            for column in SET_COLUMNS:
                ratios = {a: pooled[(column, a)].ratio for a in ("search", "prior") + BASELINES if (column, a) in pooled}
                if "search" not in ratios or not all(a in ratios for a in BASELINES):
                    continue  # Unobservable, not attacked, or a ladder made without the baselines.
                out.append(
                    dict(
                        defense=ld["defense"],
                        noise_multiplier=ld["noise_multiplier"],
                        seed=ld["seed"],
                        group=group,
                        rounds=" ".join(map(str, rounds)),
                        column=column,
                        **{a: ratios.get(a, np.nan) for a in ("search", "prior") + BASELINES},
                        beats_baselines=all(ratios["search"] < ratios[a] for a in BASELINES),
                        beats_prior=bool(ratios["search"] < ratios.get("prior", np.nan)),
                    )
                )
    return out


def baselines_markdown(rows: list[dict]) -> str:
    """The section of ladder.md that `baselines` fills: a line per run, group and column."""
    header = [
        "defense",
        "seed",
        "rounds",
        "column",
        "search",
        "constant",
        "matching (one sample)",
        "correlation",
        "prior set",
        "search below the three / the prior",
    ]
    body = [
        [
            _label(r["defense"], r["noise_multiplier"]),
            str(r["seed"]),
            r["rounds"],
            threat_ladder.LABELS[r["column"]],
            *(f"{r[a]:.2f}" for a in ("search",) + BASELINES + ("prior",)),
            f"{'yes' if r['beats_baselines'] else 'no'} / {'yes' if r['beats_prior'] else 'no'}",
        ]
        for r in rows
    ]
    return over_seeds.markdown_table(
        header,
        body,
        title="## The search against its baselines, seed by seed",
        notes=[
            "RMSE over the constant guess of the observer's search alone (no fallback to the prior set) and of the "
            "baselines on the same transmitters: the constant guess (1 by definition), paper 000's single-sample "
            "matching attacker applied to the upload as if it were one sample's, candidates ranked by their correlation "
            "with the upload, and the prior set (an observer that read nothing). Lower is better for the observer."
        ],
    )


def _label(defense: str, nu: float) -> str:
    name = labels().get(defense, defense)
    if defense in ("none", "clip", "fedsgd"):
        return name
    return f"{name}, {'z' if defense in ('central_dp', 'ddp') else 'nu'} = {nu:g}"


def _find(rows: list[dict], key, group: str, column: str, attacker: str) -> dict | None:
    return next((r for r in rows if (r["defense"], r["noise_multiplier"], r["group"], r["column"], r["attacker"]) == (*key, group, column, attacker)), None)


def _cell(rows: list[dict], key, group: str, column: str) -> str:
    observer, search, prior = (_find(rows, key, group, column, attacker) for attacker in ("observer", "search", "prior"))
    if observer is None:
        return "-"
    if observer["note"] == "unobservable":
        return "unobservable"
    ratio = over_seeds.plus_minus(f"{observer['ratio_mean']:.2f}", observer["ratio_std"])
    text = f"{ratio} / {observer['within_10m_mean']:.0%}"
    if np.isfinite(observer["run_ratio_mean"]):
        text += f" (the run's attacker, every cell: {observer['run_ratio_mean']:.2f})"
    if column.startswith(("upload", "sum")) and prior is not None:
        text += f" (search {search['ratio_mean']:.2f}, prior {prior['ratio_mean']:.2f})" if search is not None else f" (prior {prior['ratio_mean']:.2f})"
    return text


def markdown(rows: list[dict]) -> str:
    """ladder.md: per round group, a row per defense and a column per observer."""
    keys = list(dict.fromkeys((r["defense"], r["noise_multiplier"]) for r in rows))
    lines = [
        "# The threat ladder",
        "",
        "Each cell: the observer's RMSE over the constant guess (mean +- sample std over seeds) / its share of "
        "transmitters within 10 m; in the columns of sets (iii-v), beside it the ratio of its search alone (the observer "
        "answers the prior set instead where its twin rounds show the search reading nothing) and the prior set's: k "
        "guesses spread over the outdoor area, what one-to-one scoring gives an observer that read nothing. Only a "
        "ratio below the prior's is information from the uploads. Column (i) scores the ladder's candidates "
        "(every `stride`-th cell); beside it, the run's own strongest attacker on the same rounds (every cell, "
        "metrics.csv), the figure the privacy front reports.",
        "",
    ]
    for group in GROUPS:
        present = [k for k in keys if any(r["group"] == group and (r["defense"], r["noise_multiplier"]) == k for r in rows if r["attacker"] == "observer")]
        if not present:
            continue
        lines += [f"## {'round 1' if group == 'round 1' else 'the later attack rounds'}", ""]
        lines += ["| defense | " + " | ".join(threat_ladder.LABELS[c] for c in threat_ladder.COLUMNS) + " |", "|---" * 6 + "|"]
        for key in present:
            mine = [r for r in rows if (r["defense"], r["noise_multiplier"], r["group"]) == (*key, group)]
            seeds = max(r["seeds"] for r in mine)
            pooled_rounds = mine[0]["rounds"].split()
            when = "" if group == "round 1" else f"; round{'s' if len(pooled_rounds) > 1 else ''} {', '.join(pooled_rounds)}"
            lines.append(
                f"| {_label(*key)} ({seeds} seed{'s' if seeds > 1 else ''}{when}) | "
                + " | ".join(_cell(rows, key, group, c) for c in threat_ladder.COLUMNS)
                + " |"
            )
        lines.append("")
    lines.append(over_seeds.std_note())
    return "\n".join(lines) + "\n"


def figure(rows: list[dict], path: str) -> None:
    """ladder.png: per round group, the observer's ratio in each column, a bar per defense (error bar:
    std over seeds), the prior set's ratio as a black tick on each bar of the columns of sets, and in
    column (i) the run's own strongest attacker (every cell) as a black cross: the worst case (a red
    one hid on the fourth row's red bar)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(dict.fromkeys((r["defense"], r["noise_multiplier"]) for r in rows))
    groups = [g for g in GROUPS if any(r["group"] == g and r["attacker"] == "observer" for r in rows)]
    fig, axes = plt.subplots(1, len(groups), figsize=(7 * len(groups), 4.6), squeeze=False)
    width = 0.8 / max(1, len(keys))
    columns = threat_ladder.COLUMNS
    for ax, group in zip(axes[0], groups):
        marked = False  # The cross is labelled once a panel; the last panel's legend shows it.
        for j, key in enumerate(keys):
            x = np.arange(len(columns)) + (j - (len(keys) - 1) / 2) * width
            observed = [_find(rows, key, group, c, "observer") for c in columns]
            ax.bar(
                x,
                [np.nan if r is None else r["ratio_mean"] for r in observed],
                width,
                yerr=[0 if r is None else np.nan_to_num(r["ratio_std"]) for r in observed],
                capsize=2,
                label=_label(*key),
            )
            for xi, c, r in zip(x, columns, observed):
                prior = _find(rows, key, group, c, "prior")
                if prior is not None and c.startswith(("upload", "sum")):
                    ax.plot([xi - width / 2, xi + width / 2], [prior["ratio_mean"]] * 2, color="k", lw=2)
                if r is not None and np.isfinite(r["run_ratio_mean"]):
                    ax.plot(xi, r["run_ratio_mean"], "x", color="k", ms=7, mew=2, label="the run's own attacker, every cell" if not marked else None)
                    marked = True
                if r is not None and r["note"] == "unobservable":
                    ax.text(xi, 0.02, "unobservable", rotation=90, ha="center", va="bottom", fontsize=6)
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_xticks(np.arange(len(columns)), [textwrap.fill(threat_ladder.LABELS[c], 18) for c in columns], fontsize=7)
        ax.set_title("round 1" if group == "round 1" else "later attack rounds")
        ax.set_ylabel("observer RMSE / constant guess (black: prior set)")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle("The threat ladder: from paper 000's observer (left) to a secure-aggregation server's (right)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(root: str, output_dir: str) -> dict:
    """Writes ladder.csv, ladder.md, ladder.png and (where the ladders hold the baselines)
    ladder_baselines.csv of the ladders under `root` into `output_dir`."""
    ladders = collect(root)
    rows = table(ladders)
    os.makedirs(output_dir, exist_ok=True)
    paths = {k: os.path.join(output_dir, f"ladder.{k}") for k in ("csv", "md", "png")}
    with open(paths["csv"], "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    against = baselines(ladders)
    with open(paths["md"], "w") as f:
        f.write(markdown(rows) + ("\n" + baselines_markdown(against) if against else ""))
    if against:
        paths["baselines_csv"] = os.path.join(output_dir, "ladder_baselines.csv")
        with open(paths["baselines_csv"], "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(against[0]))
            writer.writeheader()
            writer.writerows(against)
    figure(rows, paths["png"])
    return dict(paths, runs=[os.path.basename(ld["folder"]) for ld in ladders])
