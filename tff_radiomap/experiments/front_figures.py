"""The privacy-utility front's figures (PNG, matplotlib's Agg backend), from the rows of
`front_report.front_rows` and `front_report.allocation_rows`.

    front.png       attacker RMSE over the constant guess against best validation MSE, one line per
                    method across nu, error bars (std over seeds) in both axes, the constant guess
                    dashed; below, the close-up near No Defense (`zoom_window`)
    allocation.png  where runs learn their allocation (Adaptive), one panel per run
    dp.png          the defenses on the aggregate (central DP, DDP): best validation MSE against the
                    worst client's epsilon, No Defense's level dashed (`front_dp.dp_rows`)
"""

from __future__ import annotations

import textwrap

import numpy as np

from tff_radiomap.experiments import front_dp
from tff_radiomap.experiments.privacy_front import NOISE_FREE, run_name
from tff_radiomap.experiments.privacy_table import LABELS


ZOOM_DB = 3.0  # the lower panels: points within this much validation MSE of No Defense's


def zoom_window(rows, key: str, width_db: float = ZOOM_DB) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """(x, y) limits of the front's close-up: best validation MSE within `width_db` of No Defense's
    (of the best point's where no No Defense row is), attacker ratio from 0 to the highest mean plus
    its std in that range. None where no point has both figures."""
    points = [(r["best_val_mse_db_mean"], r[f"{key}_mean"], np.nan_to_num(r[f"{key}_std"]), np.nan_to_num(r["best_val_mse_db_std"])) for r in rows]
    points = [p for p in points if np.isfinite(p[0]) and np.isfinite(p[1])]
    if not points:
        return None
    anchor = [r["best_val_mse_db_mean"] for r in rows if r["method"] == "none" and np.isfinite(r["best_val_mse_db_mean"])]
    right = (anchor[0] if anchor else min(x for x, *_ in points)) + width_db
    left = min([x - x_std for x, _, _, x_std in points] + [right - width_db])
    top = max((y + y_std for x, y, y_std, _ in points if x <= right), default=0.0)
    return (left - 0.05 * width_db, right), (0.0, min(1.05, 1.1 * top) if top > 0 else 1.05)


def _on_panel(row: dict, key: str) -> bool:
    """Whether a front row has a point on the panel of attacker ratio `key`."""
    return row.get("uploads_observable", True) and np.isfinite(row["best_val_mse_db_mean"]) and np.isfinite(row[f"{key}_mean"])


def _noise_name(row: dict, tex: bool = False) -> str:
    """The name of a row's noise parameter: z for the defenses on the aggregate
    (`front_dp.on_aggregate`), nu (paper 000's noise multiplier) for the rest."""
    if front_dp.on_aggregate(row):
        return "z"
    return r"$\nu$" if tex else "nu"


def off_panel(rows, key: str) -> list[str]:
    """The rows with no point on a front panel of attacker ratio `key`: unobservable uploads (DDP),
    or no attack after round 1 (a model that stopped being finite); each as `method nu=value: why`
    (z=value for the defenses on the aggregate)."""
    left = []
    for r in rows:
        name = f"{LABELS.get(r['method'], r['method'])} {_noise_name(r)}={r['noise_multiplier']:g}"
        if not r.get("uploads_observable", True):
            left.append(f"{name}: uploads unobservable")
        elif not _on_panel(r, key):
            left.append(f"{name}: not attacked after round 1")
    return left


def _draw_front(ax, rows, key: str) -> None:
    """One panel: a line per method across nu, attacker ratio `key` against best validation MSE;
    a method with no point on it (`off_panel`) has no line and no legend entry."""
    for method in dict.fromkeys(r["method"] for r in rows):
        points = sorted((r for r in rows if r["method"] == method and _on_panel(r, key)), key=lambda r: r["noise_multiplier"])
        if not points:
            continue
        x, y = [p["best_val_mse_db_mean"] for p in points], [p[f"{key}_mean"] for p in points]
        bar = lambda k: [np.nan_to_num(p[k]) for p in points]  # noqa: E731  (one seed: no bar)
        bars = dict(xerr=bar("best_val_mse_db_std"), yerr=bar(f"{key}_std"), capsize=3)
        if method == "none":
            ax.errorbar(x, y, **bars, color="k", marker="*", markersize=14, linestyle="none", zorder=3, label=LABELS["none"])
        else:
            ax.errorbar(x, y, **bars, marker="o", label=LABELS.get(method, method))
        for p, px, py in zip(points, x, y):
            if method not in NOISE_FREE and np.isfinite(py):
                ax.annotate(f"{_noise_name(p, tex=True)}={p['noise_multiplier']:g}", (px, py), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.axhline(1.0, color="k", linestyle="--", label="constant guess")
    ax.set(xlabel="best validation MSE (dB)")
    ax.grid(alpha=0.3)


def front_figure(path: str, rows) -> None:
    """front.png: attacker ratio against best validation MSE, the strongest attacker (left) and the
    matching attacker alone (right), every point (top) and the close-up near No Defense (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # Left: the strongest attacker (what the front is judged by); right: the matching attacker alone.
    # Top: every point; bottom: the close-up near No Defense, where most points crowd.
    panels = (("late_attack_ratio", "strongest attacker, rounds after 1"), ("late_matching_ratio", "twin-matching attacker alone"))
    fig, axes = plt.subplots(2, 2, figsize=(12, 10))
    for (full, close), (key, title) in zip(axes.T, panels):
        _draw_front(full, rows, key)
        full.set_title(title)
        _draw_front(close, rows, key)
        window = zoom_window(rows, key)
        if window is None:
            close.set_title(title)
        else:
            close.set(xlim=window[0], ylim=window[1])
            close.set_title(f"{title}: within {ZOOM_DB:g} dB of No Defense", fontsize=10)
    for ax in axes[:, 0]:
        ax.set_ylabel("attacker RMSE / constant guess")
    axes[0, 0].legend(fontsize=8)
    left = off_panel(rows, "late_attack_ratio")
    # The rows off the panels, wrapped to the figure's width (one line ran off both edges with DDP's four z).
    note = textwrap.fill(f"not on it: {'; '.join(left)}", 150) if left else ""
    fig.suptitle("Privacy-utility front" + (f"\n{note}" if note else ""), fontsize=11 if left else 12)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def allocation_figure(path: str, rows: list[dict]) -> None:
    """allocation.png: one panel per run, the mean client's weight of each group against the round."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = sorted({(r["method"], r["noise_multiplier"], r["seed"]) for r in rows})
    cols = min(3, len(runs))
    nrows = -(-len(runs) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.2 * nrows), squeeze=False, sharey=True)
    for ax, run in zip(axes.flat, runs):
        mine = [r for r in rows if (r["method"], r["noise_multiplier"], r["seed"]) == run]
        for group in dict.fromkeys(r["group"] for r in mine):
            points = sorted((r["round"], r["weight"]) for r in mine if r["group"] == group)
            ax.plot(*zip(*points), marker=".", markersize=3, label=group)
        for change in sorted({r["round"] for r in mine if r["phase"] != mine[0]["phase"]})[:1]:
            ax.axvline(change - 0.5, color="k", linestyle=":", linewidth=0.8)
        ax.set(title=run_name(*run), xlabel="round", ylabel="weight (mean client)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(runs) :]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def dp_figure(path: str, rows: list[dict], reference_db: float | None, span_db: float = 8.0) -> None:
    """dp.png: best validation MSE against the worst client's epsilon of the aggregate, a line per
    defense on the aggregate (`front_dp.dp_rows`), dotted with Poisson amplification where a
    defense has it, with bars of its std over seeds; No Defense's best (`reference_db`) dashed. The y axis spans `span_db` above it; a
    model worse than that is drawn on the top edge (a triangle) with its figure written beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    finite = [r["best_val_mse_db_mean"] for r in rows if np.isfinite(r["best_val_mse_db_mean"])]
    top = (reference_db if reference_db is not None else min(finite, default=0.0)) + span_db
    for index, method in enumerate(dict.fromkeys(r["method"] for r in rows)):
        points = sorted((r for r in rows if r["method"] == method), key=lambda r: r["noise_multiplier"])
        y = [min(r["best_val_mse_db_mean"], top) if np.isfinite(r["best_val_mse_db_mean"]) else top for r in points]
        edge = [not r["best_val_mse_db_mean"] <= top for r in points]  # Worse than the axis (or not finite): drawn on its top edge.
        spread = [0.0 if e else np.nan_to_num(r["best_val_mse_db_std"]) for r, e in zip(points, edge)]  # One seed: no bar.
        colour = None
        for key, style in (("aggregate_epsilon", "-o"), ("aggregate_epsilon_poisson", ":s")):
            x = [np.nan if r[key] is None else r[key] for r in points]
            if np.all(np.isnan(x)):
                continue
            label = LABELS.get(method, method) + (", Poisson amplification" if key.endswith("poisson") else "")
            (line,) = ax.plot(x, y, style, label=label)
            colour = colour or line.get_color()  # The labels take the first (plain) line's.
            ax.errorbar(x, y, yerr=spread, fmt="none", ecolor=line.get_color(), capsize=3)
            off = [(px, py) for px, py, e in zip(x, y, edge) if e]
            if off:
                ax.plot(*zip(*off), "^", color=line.get_color(), markersize=10)
        for r, py, on_edge in zip(points, y, edge):
            off = f" ({r['best_val_mse_db_mean']:+.0f} dB)" if on_edge else ""
            # In its colour: one defense's labels left of and below its points, the next's right of
            # and above them (their points can coincide; the Poisson marker sits to the right).
            if r["aggregate_epsilon"] is not None:
                left, row = index % 2 == 0, index // 2
                if on_edge:
                    shift = (4, -10 - 9 * index)
                else:
                    shift = (-5, -11 - 9 * row) if left else (5, 4 + 9 * row)
                ax.annotate(
                    rf"z={r['noise_multiplier']:g}{off}",
                    (r["aggregate_epsilon"], py),
                    textcoords="offset points",
                    xytext=shift,
                    ha="right" if left and not on_edge else "left",
                    fontsize=7,
                    color=colour,
                )
    if reference_db is not None:
        ax.axhline(reference_db, color="k", linestyle="--", label=f"{LABELS['none']} ({reference_db:.2f} dB)")
    ax.set(xscale="log", xlabel=r"worst client's $\epsilon$ (user level, observer of the aggregate)", ylabel="best validation MSE (dB)")
    ax.set_ylim(top=top + 0.5)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="lower left")
    ax.set_title(f"Utility against epsilon: the defenses on the aggregate (above {top:.1f} dB: on the top edge)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
