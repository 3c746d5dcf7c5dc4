"""Pictures of one privacy-experiment run (PNG, matplotlib's Agg backend).

  curves.png       validation MSE in dB against the round (the phase switch marked; the right axis
                   reads it as the gain's RMSE in dB over all pixels) and, where the
                   attack was measured (metrics.csv column attack_rmse_m), the attacker's RMSE in m
  predictions.png  a few validation samples, one a row: buildings with the transmitter, the true
                   map, the predicted map and the error (predicted - true), in dB

Gains in dB are decoded from the normalized target t of `radiomapseer.normalize_gain`:
gray / 255 = thresh + t (1 - thresh), then `encoding.gray_to_gain_db`; everything at or below the
threshold shows as its gain (-127.2 dB for thresh 0.2).
"""

from __future__ import annotations

import csv
import math
import os

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from tff_radiomap.data import encoding, radiomapseer  # noqa: E402
from tff_radiomap.metrics import reconstruction  # noqa: E402

CURVES, PREDICTIONS = "curves.png", "predictions.png"


def target_to_gain_db(target: np.ndarray, thresh: float = radiomapseer.DEFAULT_THRESH) -> np.ndarray:
    """The inverse of `radiomapseer.normalize_gain` in dB (targets clipped to [0, 1] first)."""
    g = thresh + np.clip(np.asarray(target, dtype=np.float64), 0.0, 1.0) * (1.0 - thresh)
    return encoding.gray_to_gain_db(255.0 * g)


def _column(rows: list[dict], name: str) -> list[float]:
    values = []
    for r in rows:
        try:
            values.append(float(r.get(name) or "nan"))
        except ValueError:
            values.append(float("nan"))
    return values


def curves(metrics_csv: str, path: str) -> str:
    """curves.png from a run's metrics.csv; returns `path`."""
    with open(metrics_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    rounds = [int(r["round"]) for r in rows]
    mse_db = _column(rows, "val_mse_db")
    attack = _column(rows, "attack_rmse_m")
    measured = [(r, a) for r, a in zip(rounds, attack) if math.isfinite(a)]
    fig, axes = plt.subplots(1, 2 if measured else 1, figsize=(9.5 if measured else 5, 3.6), squeeze=False)
    ax = axes[0, 0]
    ax.plot(rounds, mse_db, marker=".", color="tab:blue")
    phases = [int(r["phase"]) for r in rows]
    for i in range(1, len(rows)):
        if phases[i] != phases[i - 1]:
            ax.axvline(rounds[i] - 0.5, color="gray", ls="--", lw=0.8)
            ax.annotate("stage 2", (rounds[i] - 0.5, 1.0), xycoords=("data", "axes fraction"), fontsize=8, va="top", xytext=(3, -3), textcoords="offset points")
    ax.set(xlabel="round", ylabel="validation MSE (dB)", title="Reconstruction")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    # The same curve read as the gain's RMSE over all pixels: 79.33 dB x sqrt(MSE) (metrics.reconstruction).
    unit = reconstruction.GAIN_DB_PER_UNIT
    rmse_axis = ax.secondary_yaxis(
        "right", functions=(lambda d: unit * np.power(10.0, np.asarray(d) / 20.0), lambda r: 20.0 * np.log10(np.maximum(np.asarray(r), 1e-12) / unit))
    )
    rmse_axis.set_ylabel("gain RMSE, all pixels (dB)")
    if measured:
        ax = axes[0, 1]
        ax.plot(*zip(*measured), marker="o", color="tab:red", label="attack (defense-unaware)")
        aware = [(r, a) for r, a in zip(rounds, _column(rows, "attack_aware_rmse_m")) if math.isfinite(a)]
        if aware:
            ax.plot(*zip(*aware), marker="s", color="tab:purple", label="attack (defense-aware)")
        constant = [a for a in _column(rows, "attack_constant_rmse_m") if math.isfinite(a)]
        if constant:
            ax.axhline(float(np.mean(constant)), color="gray", ls=":", label="constant guess")
        ax.set(xlabel="round", ylabel="attacker RMSE (m)", title="Localization attack")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def predictions(x: np.ndarray, y: np.ndarray, predicted: np.ndarray, path: str, thresh: float = radiomapseer.DEFAULT_THRESH) -> str:
    """predictions.png for samples x [n,r,r,2] (buildings, transmitter), y and `predicted` [n,r,r,1]."""
    n = len(x)
    fig, axes = plt.subplots(n, 4, figsize=(12, 2.8 * n), squeeze=False)
    fig.subplots_adjust(wspace=0.35, hspace=0.25)
    true_db, pred_db = target_to_gain_db(y[..., 0], thresh), target_to_gain_db(predicted[..., 0], thresh)
    low, high = float(true_db.min()), float(true_db.max())
    for i in range(n):
        ax = axes[i]
        ax[0].imshow(x[i, ..., 0], cmap="gray_r", vmin=0, vmax=1)
        row, col = np.unravel_index(np.argmax(x[i, ..., 1]), x[i, ..., 1].shape)
        ax[0].scatter([col], [row], marker="*", s=120, c="red", edgecolors="white")
        true_im = ax[1].imshow(true_db[i], cmap="viridis", vmin=low, vmax=high)
        ax[2].imshow(pred_db[i], cmap="viridis", vmin=low, vmax=high)
        error = pred_db[i] - true_db[i]
        span = max(float(np.abs(error).max()), 1e-6)
        error_im = ax[3].imshow(error, cmap="RdBu_r", vmin=-span, vmax=span)
        fig.colorbar(true_im, ax=ax[2], fraction=0.046, label="dB")
        fig.colorbar(error_im, ax=ax[3], fraction=0.046, label="dB")
        rmse = float(np.sqrt(np.mean(error**2)))
        for a, title in zip(ax, ("buildings, transmitter", "true gain (dB)", "predicted gain (dB)", f"error (dB), RMSE {rmse:.1f}")):
            a.set_title(title, fontsize=9)
            a.set_xticks([])
            a.set_yticks([])
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def sample_indices(count: int, n: int = 3, seed: int = 0) -> np.ndarray:
    """`n` validation samples (seeded, sorted) of `count`."""
    return np.sort(np.random.default_rng(seed).choice(count, size=min(n, count), replace=False))


def paths(output_dir: str) -> list[str]:
    return [os.path.join(output_dir, CURVES), os.path.join(output_dir, PREDICTIONS)]


def write_run_pictures(output_dir: str, model_config, phase, val: tuple, weights, seed: int = 0, samples: int = 3) -> list[str]:
    """curves.png (from OUTPUT_DIR/metrics.csv) and predictions.png: `samples` validation samples
    of `val` = (x, y) through the network holding `weights` (`phases.NetworkWeights`), its
    output of `phase` (the coarse map in stage 1, else the refined one). Returns both paths."""
    from tff_radiomap.models.phases import Phase
    from tff_radiomap.models import radiounet

    curves_path, predictions_path = paths(output_dir)
    curves(os.path.join(output_dir, "metrics.csv"), curves_path)
    x, y = val
    idx = sample_indices(len(x), samples, seed)
    x, y = np.asarray(x[idx], np.float32), np.asarray(y[idx], np.float32)
    net = radiounet.build_radiounet(model_config)
    weights.assign_to(net)
    coarse, refined = net.wnet(x, training=False)
    predicted = coarse if phase == Phase.STAGE1 else refined
    predictions(x, y, np.asarray(predicted), predictions_path)
    return [curves_path, predictions_path]
