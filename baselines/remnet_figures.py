"""Figures of the EPFL-REMNet experiments (PNG, matplotlib's Agg backend).

  convergence.png  per split and scenario: validation macro RMSE (dB) against the round for the
                   main methods, mean over seeds (what the round budget was read from; Fig. 2)
  pareto.png       per detail split and scenario: test macro RMSE against cumulative uplink over
                   the k_fraction x R grid (means over seeds), the Pareto front joined, the
                   baselines as reference points (Fig. 3)
  boxplot.png      per split and scenario: the per-client test RMSE of the main methods, the
                   clients of every seed pooled (the long tail)

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

from baselines import remnet_tables as tables  # noqa: E402

MARKERS = {"fedavg": "s", "fedfly": "^", "pfedgp": "D", "fedrep": "v", "ditto": "X", "pfl_uncompressed": "P", "epfl_remnet": "o"}


def _read_curve(run_dir: str) -> dict[str, list[float]]:
    with open(os.path.join(run_dir, "metrics.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    evaluated = [r for r in rows if r["macro_rmse"]]
    return {
        "round": [int(r["round"]) + 1 for r in rows],
        "cum_mb": [float(r["cum_uplink_mb"]) for r in rows],
        "eval_round": [int(r["round"]) + 1 for r in evaluated],
        "macro_rmse": [float(r["macro_rmse"]) for r in evaluated],
        "val_macro_rmse": [float(r["val_macro_rmse"]) if r.get("val_macro_rmse") else float("nan") for r in evaluated],
    }


def _seed_runs(config, results, split, scenario, label):
    return [results[(split, seed, scenario, label)] for seed in config.seeds if (split, seed, scenario, label) in results]


def convergence(config, results, path: str) -> None:
    """Per split and scenario: the validation macro RMSE against the round, mean over seeds."""
    splits = config.test_splits
    fig, axes = plt.subplots(len(splits), len(config.scenarios), figsize=(4.2 * len(config.scenarios), 3.4 * len(splits)), squeeze=False)
    for i, split in enumerate(splits):
        for j, s in enumerate(config.scenarios):
            for name in config.main_methods:
                curves = [_read_curve(r["run_dir"]) for r in _seed_runs(config, results, split, s, name)]
                if not curves:
                    continue
                n = min(len(c["eval_round"]) for c in curves)
                mean = np.mean([c["val_macro_rmse"][:n] for c in curves], axis=0)
                axes[i, j].plot(curves[0]["eval_round"][:n], mean, label=tables.LABELS[name], marker=MARKERS.get(name, "."))
            axes[i, j].set(title=f"{s.capitalize()} Non-IID, {split} split", xlabel="round", ylabel="validation macro RMSE (dB)")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _mean(runs, key):
    return float(np.mean([r[key] for r in runs]))


def pareto(config, results, path: str) -> None:
    """Per detail split and scenario: mean test macro RMSE against mean uplink over the grid."""
    cells = [(split, s) for split in config.test_splits for s in config.scenarios if config.detailed(split, s)]
    if not cells:
        return
    fig, axes = plt.subplots(1, len(cells), figsize=(4.2 * len(cells), 3.8), squeeze=False)
    for j, (split, s) in enumerate(cells):
        ax = axes[0, j]
        grid = [(k, r, _seed_runs(config, results, split, s, tables.pareto_label(k, r))) for k in config.pareto_k_fractions for r in config.pareto_sync_periods]
        grid = [g for g in grid if g[2]]
        points = [(_mean(g[2], "cum_uplink_mb"), _mean(g[2], "macro_rmse")) for g in grid]
        if points:
            ax.scatter(*zip(*points), c="tab:blue", s=18, label="EPFL-REMNet grid")
            for (k, r, _), (x, y) in zip(grid, points):
                ax.annotate(f"k={k:g},R={r}", (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
            front = sorted(p for p, keep in zip(points, tables.pareto_front(points)) if keep)
            ax.plot(*zip(*front), c="tab:blue", lw=1.2, label="Pareto front")
        for name in config.main_methods:
            runs = _seed_runs(config, results, split, s, name)
            if runs and name != "epfl_remnet":
                ax.scatter([_mean(runs, "cum_uplink_mb")], [_mean(runs, "macro_rmse")], marker=MARKERS.get(name, "."), s=36, label=tables.LABELS[name])
        ax.set(title=f"{s.capitalize()} Non-IID, {split} split", xlabel="cumulative uplink (MB)", ylabel="test macro RMSE (dB)", xscale="log")
    axes[0, 0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def boxplot(config, results, path: str) -> None:
    """Per split and scenario: the per-client test RMSE of every main method, clients of all seeds."""
    splits = config.test_splits
    fig, axes = plt.subplots(len(splits), len(config.scenarios), figsize=(4.6 * len(config.scenarios), 3.8 * len(splits)), squeeze=False)
    for i, split in enumerate(splits):
        for j, s in enumerate(config.scenarios):
            names = [n for n in config.main_methods if _seed_runs(config, results, split, s, n)]
            data = [[v for r in _seed_runs(config, results, split, s, n) for v in r["per_client_rmse"]] for n in names]
            if data:
                axes[i, j].boxplot(data, labels=[tables.LABELS[n].split(" (")[0] for n in names])
            axes[i, j].set(title=f"{s.capitalize()} Non-IID, {split} split", ylabel="per-client test RMSE (dB)")
            axes[i, j].tick_params(axis="x", labelsize=7, rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_figures(config, results, out_dir: str) -> list[str]:
    paths = []
    for name, draw in (("convergence", convergence), ("pareto", pareto), ("boxplot", boxplot)):
        path = os.path.join(out_dir, f"{name}.png")
        draw(config, results, path)
        if os.path.exists(path):
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
