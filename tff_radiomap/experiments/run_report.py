"""What a privacy run releases: each round's row of metrics.csv, and the summary of a finished run
(summary.json: best and final validation scores, the test maps' scores of the final model).

Scores are the MSE of the normalized gain, in dB, and the RMSE of the gain in dB over all pixels
and over the outdoor ones (`metrics.reconstruction`).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Mapping

import numpy as np

from tff_radiomap.experiments import privacy_table
from tff_radiomap.experiments.privacy_config import ExperimentConfig
from tff_radiomap.metrics import reconstruction


def flatten_metrics(metrics: Mapping, prefix: str = "") -> collections.OrderedDict:
    """Numeric leaves of nested metrics as {'a/b': float or int}; empty structures are dropped."""
    flat = collections.OrderedDict()
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_metrics(value, name + "/"))
        elif isinstance(value, (tuple, list)) and not value:
            continue
        else:
            array = np.asarray(value)
            if array.shape == () and array.dtype.kind in "biuf":
                flat[name] = array.item()
    return flat


def metrics_row(metrics, scores: dict, seconds: float) -> collections.OrderedDict:
    """One release: phase, train_loss, num_examples, val_mse(_db), val_(outdoor_)rmse_db, seconds,
    then other measurements."""
    val_mse = scores["mse"]
    flat = flatten_metrics({k: v for k, v in metrics.items() if k != "phase"})
    row = collections.OrderedDict(
        phase=int(metrics["phase"]),
        train_loss=float(flat.pop("client_work/train_loss")),
        num_examples=int(flat.pop("client_work/num_examples")),
        nonfinite_updates=int(flat.pop("client_work/nonfinite_updates", 0)),
        val_mse=float(val_mse),
        val_mse_db=reconstruction.mse_db(val_mse) if val_mse > 0 else float("nan"),
        val_rmse_db=float(scores["rmse_db"]),
        val_outdoor_rmse_db=float(scores["outdoor_rmse_db"]),
        seconds=float(seconds),
    )
    row.update(flat)
    return row


def summary(config: ExperimentConfig, program_state, output_dir: str, wall_seconds: float) -> dict:
    """summary.json's scores of a finished run from its program state and metrics.csv (the best
    round's outdoor RMSE is its row's)."""
    best = float(program_state["best_val_mse"])
    final = float(program_state["final_val_mse"])
    return {
        "defense": "centralised" if config.centralised else config.defense,
        "rounds": config.rounds,
        "best_val_mse": best,
        "best_val_mse_db": reconstruction.mse_db(best),
        "best_round": int(program_state["best_round"]),
        "final_val_mse": final,
        "final_val_mse_db": reconstruction.mse_db(final),
        "best_val_rmse_db": _rmse_db(best),
        "final_val_rmse_db": _rmse_db(final),
        "train_seconds": float(program_state["train_seconds"]),
        "wall_seconds_this_call": wall_seconds,
        **_best_outdoor(output_dir, int(program_state["best_round"])),
    }


def test_scores(config: ExperimentConfig, test: tuple, weights) -> dict:
    """The test maps' MSE in dB and gain RMSE in dB (all and outdoor pixels) of `weights`, the
    output of the run's last phase: scored once, at the end of a run."""
    scores = reconstruction.Evaluator(config.model_config(), *test).scores(weights, config.phase_for_round(config.rounds))
    return {
        "mse_db": reconstruction.mse_db(scores["mse"]) if scores["mse"] > 0 else float("nan"),
        "rmse_db": scores["rmse_db"],
        "outdoor_rmse_db": scores["outdoor_rmse_db"],
    }


def _rmse_db(mse: float) -> float:
    return reconstruction.gain_rmse_db(mse) if math.isfinite(mse) and mse >= 0 else float("nan")


def _best_outdoor(output_dir: str, best_round: int) -> dict:
    """{'best_val_outdoor_rmse_db': ...} from the best round's metrics.csv row (NaN where the row or
    its column is missing: a run resumed from rounds saved before the column existed)."""
    rows = [r for r in privacy_table.read_metrics(output_dir) if r["round"] == best_round]
    return {"best_val_outdoor_rmse_db": rows[0].get("val_outdoor_rmse_db", float("nan")) if rows else float("nan")}
