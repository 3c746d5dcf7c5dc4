"""Figures of the EPFL-REMNet experiments (PNG, matplotlib's Agg backend).

  convergence.png  per scenario: cumulative uplink (MB) and macro RMSE (dB) against the round
                   for the main methods (Fig. 2)
  pareto.png       per scenario: macro RMSE against cumulative uplink over the k_fraction x R
                   grid, the Pareto front joined, the baselines as reference points (Fig. 3)
  boxplot.png      per scenario: the distribution of per-client RMSE of the main methods

and of one run (`write_run_figures`, programs.epfl_remnet):

  curves.png       macro RMSE (dB) and cumulative uplink (MB) against the round
  client_rmse.png  per-client RMSE (dB) on the 10 x 9 grid of clients
"""

from __future__ import annotations

import csv
import os

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from tff_radiomap.experiments import remnet_tables as tables  # noqa: E402

MARKERS = {"fedavg": "s", "fedfly": "^", "pfedgp": "D", "pfl_uncompressed": "P", "epfl_remnet": "o"}


def _read_curve(run_dir: str) -> dict[str, list[float]]:
    with open(os.path.join(run_dir, "metrics.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    evaluated = [r for r in rows if r["macro_rmse"]]
    return {
        "round": [int(r["round"]) + 1 for r in rows],
        "cum_mb": [float(r["cum_uplink_mb"]) for r in rows],
        "eval_round": [int(r["round"]) + 1 for r in evaluated],
        "macro_rmse": [float(r["macro_rmse"]) for r in evaluated],
    }


def convergence(config, results, path: str) -> None:
    fig, axes = plt.subplots(2, len(config.scenarios), figsize=(4.2 * len(config.scenarios), 6.5), squeeze=False)
    for j, s in enumerate(config.scenarios):
        for name in tables.MAIN_METHODS:
            curve = _read_curve(results[(s, name)]["run_dir"])
            axes[0, j].plot(curve["round"], curve["cum_mb"], label=tables.LABELS[name], marker=MARKERS[name], markevery=max(1, len(curve["round"]) // 6))
            axes[1, j].plot(curve["eval_round"], curve["macro_rmse"], label=tables.LABELS[name], marker=MARKERS[name])
        axes[0, j].set(title=f"{s.capitalize()} Non-IID", ylabel="cumulative uplink (MB)", yscale="log")
        axes[1, j].set(xlabel="round", ylabel="macro RMSE (dB)")
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def pareto(config, results, path: str) -> None:
    fig, axes = plt.subplots(1, len(config.scenarios), figsize=(4.2 * len(config.scenarios), 3.8), squeeze=False)
    for j, s in enumerate(config.scenarios):
        ax = axes[0, j]
        grid = [(k, r, results[(s, tables.pareto_label(k, r))]) for k in config.pareto_k_fractions for r in config.pareto_sync_periods]
        points = [(g[2]["cum_uplink_mb"], g[2]["macro_rmse"]) for g in grid]
        on_front = tables.pareto_front(points)
        ax.scatter(*zip(*points), c="tab:blue", s=18, label="EPFL-REMNet grid")
        for (k, r, _), (x, y) in zip(grid, points):
            ax.annotate(f"k={k:g},R={r}", (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
        front = sorted(p for p, keep in zip(points, on_front) if keep)
        ax.plot(*zip(*front), c="tab:blue", lw=1.2, label="Pareto front")
        for name in ("fedavg", "fedfly", "pfedgp", "pfl_uncompressed"):
            r = results[(s, name)]
            ax.scatter([r["cum_uplink_mb"]], [r["macro_rmse"]], marker=MARKERS[name], s=36, label=tables.LABELS[name])
        ax.set(title=f"{s.capitalize()} Non-IID", xlabel="cumulative uplink (MB)", ylabel="macro RMSE (dB)", xscale="log")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def boxplot(config, results, path: str) -> None:
    fig, axes = plt.subplots(1, len(config.scenarios), figsize=(4.2 * len(config.scenarios), 3.8), squeeze=False)
    for j, s in enumerate(config.scenarios):
        data = [results[(s, name)]["per_client_rmse"] for name in tables.MAIN_METHODS]
        axes[0, j].boxplot(data, labels=[tables.LABELS[n].replace(" (", "\n(") for n in tables.MAIN_METHODS])
        axes[0, j].set(title=f"{s.capitalize()} Non-IID", ylabel="per-client RMSE (dB)")
        axes[0, j].tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_figures(config, results, out_dir: str) -> list[str]:
    paths = []
    for name, draw in (("convergence", convergence), ("pareto", pareto), ("boxplot", boxplot)):
        path = os.path.join(out_dir, f"{name}.png")
        draw(config, results, path)
        paths.append(path)
    return paths


# -- one run of programs.epfl_remnet -----------------------------------------------------------
RUN_CURVES, RUN_CLIENT_MAP = "curves.png", "client_rmse.png"


def run_curves(run_dir: str, path: str) -> str:
    """curves.png of one run: macro RMSE (dB) at the evaluated rounds and cumulative uplink (MB)."""
    curve = _read_curve(run_dir)
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.6))
    axes[0].plot(curve["eval_round"], curve["macro_rmse"], marker="o")
    axes[0].set(xlabel="round", ylabel="macro RMSE (dB)", title="Accuracy")
    axes[1].plot(curve["round"], curve["cum_mb"], marker=".")
    axes[1].set(xlabel="round", ylabel="cumulative uplink (MB)", title="Communication")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def client_map(per_client_rmse, grid: tuple[int, int], path: str) -> str:
    """client_rmse.png: each client's test RMSE (dB) on the clients' grid (client c = band *
    grid[1] + cell; bands are row quantiles of the map, cells column quantiles within a band)."""
    values = np.asarray(per_client_rmse, dtype=np.float64).reshape(grid)
    fig, ax = plt.subplots(figsize=(5.2, 5.0))
    image = ax.imshow(values, cmap="magma")
    for (i, j), v in np.ndenumerate(values):
        ax.text(j, i, f"{v:.1f}", ha="center", va="center", fontsize=6, color="white" if v < np.nanmean(values) else "black")
    fig.colorbar(image, ax=ax, fraction=0.046, label="per-client RMSE (dB)")
    ax.set(xlabel="cell within the band (columns, left to right)", ylabel="band (rows, top to bottom)", title="Per-client RMSE")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_run_figures(run_dir: str, final: dict, grid: tuple[int, int]) -> list[str]:
    """curves.png and client_rmse.png of one run from its metrics.csv and final.json content."""
    return [
        run_curves(run_dir, os.path.join(run_dir, RUN_CURVES)),
        client_map(final["per_client_rmse"], grid, os.path.join(run_dir, RUN_CLIENT_MAP)),
    ]
