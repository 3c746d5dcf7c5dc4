"""Accuracy of radio-environment-map predictions in dB (EPFL-REMNet, Sec. IV-A "Evaluation Metrics").

Given each client's test predictions and targets in dB ([n_c, M] per client c):
  - micro RMSE / MAE: over all test samples (and base stations) of all clients pooled;
  - macro RMSE / MAE: the per-client RMSE / MAE, averaged over clients;
  - per-base-station RMSE: micro RMSE of base station m alone;
  - per-client RMSE: the distribution behind the macro average (the box plot).
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class RemAccuracy:
    micro_rmse: float
    macro_rmse: float
    micro_mae: float
    macro_mae: float
    per_bs_rmse: tuple[float, ...]
    per_client_rmse: tuple[float, ...]

    def row(self) -> dict:
        """Flat dict for CSV rows: rmse_bs{m} for each base station, no per-client list."""
        out = {"micro_rmse": self.micro_rmse, "macro_rmse": self.macro_rmse, "micro_mae": self.micro_mae, "macro_mae": self.macro_mae}
        out.update({f"rmse_bs{m}": v for m, v in enumerate(self.per_bs_rmse)})
        return out


def rem_accuracy(predictions_db: list[np.ndarray], targets_db: list[np.ndarray]) -> RemAccuracy:
    """Micro/macro RMSE and MAE, per-base-station and per-client RMSE, all in dB."""
    if len(predictions_db) != len(targets_db) or not predictions_db:
        raise ValueError(f"{len(predictions_db)} prediction arrays for {len(targets_db)} clients: expected the same, non-zero count")
    errors = []
    for c, (p, t) in enumerate(zip(predictions_db, targets_db)):
        p, t = np.asarray(p, np.float64), np.asarray(t, np.float64)
        if p.shape != t.shape or p.ndim != 2 or len(p) == 0:
            raise ValueError(f"client {c}: predictions {p.shape} vs targets {t.shape}: expected equal [n > 0, M] shapes")
        errors.append(p - t)
    pooled = np.concatenate(errors)
    return RemAccuracy(
        micro_rmse=float(np.sqrt(np.mean(pooled**2))),
        macro_rmse=float(np.mean([np.sqrt(np.mean(e**2)) for e in errors])),
        micro_mae=float(np.mean(np.abs(pooled))),
        macro_mae=float(np.mean([np.mean(np.abs(e)) for e in errors])),
        per_bs_rmse=tuple(float(v) for v in np.sqrt(np.mean(pooled**2, axis=0))),
        per_client_rmse=tuple(float(np.sqrt(np.mean(e**2))) for e in errors),
    )


def worst_fraction_rmse(per_client_rmse, fraction: float = 0.1) -> float:
    """Mean RMSE of the worst `fraction` of clients (at least one): the long tail (Sec. IV-A)."""
    values = np.sort(np.asarray(per_client_rmse, np.float64))[::-1]
    if not len(values) or not 0 < fraction <= 1:
        raise ValueError(f"{len(values)} clients, fraction={fraction}: expected clients and a fraction in (0, 1]")
    return float(values[: max(1, int(np.ceil(fraction * len(values))))].mean())
