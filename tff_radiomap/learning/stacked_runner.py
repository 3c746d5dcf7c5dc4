"""Driving the stacked clients (`epfl_stacked`) on a scenario: checkpoints, validation and test.

The run folder is `rem_runner`'s (config.json, metrics.csv, checkpoint.npz, final.json; no
TensorBoard). Every `eval_every` rounds (and after the last) the personalized models are scored
on the clients' validation pixels (`val_*` columns, for choosing hyperparameters and the round
budget) and on their test pixels (the reported numbers). A killed run resumes from its last
checkpoint; a finished one is read back.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import time

import numpy as np

from tff_radiomap.data.rem_points import RemScenario
from tff_radiomap.learning import epfl_stacked, rem_runner
from tff_radiomap.metrics.rem_accuracy import RemAccuracy, rem_accuracy
from tff_radiomap.runtime import run_folder
from tff_radiomap import seeds as seeds_lib

ENGINE = "stacked"
CSV_FIELDS = ["round", "train_loss", "uploads", "uplink_bytes", "cum_uplink_mb", "round_s", "val_micro_rmse", "val_macro_rmse"]
CSV_FIELDS += ["micro_rmse", "macro_rmse", "micro_mae", "macro_mae", "nonfinite_updates"]


def stacked_data(scenario: RemScenario, pad_to: int | None = None) -> dict:
    """The clients' training arrays as [C, N, ...] (padded to the largest client or `pad_to`)."""
    data, _ = rem_runner.padded_client_data(scenario, pad_to)
    return {
        "x": np.stack([d["x"] for d in data]),
        "y": np.stack([d["y"] for d in data]),
        "num_examples": np.asarray([d["num_examples"] for d in data], np.int32),
    }


def _padded(arrays: list[np.ndarray]) -> np.ndarray:
    out = np.zeros((len(arrays), max(len(a) for a in arrays)) + arrays[0].shape[1:], np.float32)
    for i, a in enumerate(arrays):
        out[i, : len(a)] = a
    return out


class StackedEvaluator:
    """Each client's personalized model on its 'val' and 'test' pixels, in dB: both splits from one
    prediction (one pass over the model; pFedGP: one posterior for both)."""

    SPLITS = ("val", "test")

    def __init__(self, process: epfl_stacked.StackedProcess, scenario: RemScenario, train: dict):
        self.process, self.scenario, self.train = process, scenario, train
        self.inputs = {split: _padded([c.held_out(split)[0] for c in scenario.clients]) for split in self.SPLITS}
        self._both = np.concatenate([self.inputs[s] for s in self.SPLITS], axis=1)

    def both(self, state) -> dict[str, RemAccuracy]:
        """{'val': ..., 'test': ...} of the personalized models in `state`."""
        predictions = self.process.predict(state, self.train, self._both)
        out, start = {}, 0
        for split in self.SPLITS:
            width = self.inputs[split].shape[1]
            out[split] = self._score(split, predictions[:, start : start + width])
            start += width
        return out

    def __call__(self, state, split: str) -> RemAccuracy:
        return self._score(split, self.process.predict(state, self.train, self.inputs[split]))

    def _score(self, split: str, predictions: np.ndarray) -> RemAccuracy:
        pred_db, target_db = [], []
        for i, client in enumerate(self.scenario.clients):
            _, y = client.held_out(split)
            pred_db.append(client.to_db(predictions[i, : len(y)]))
            target_db.append(client.to_db(y))
        return rem_accuracy(pred_db, target_db)


def _save(path, state, meta):
    arrays = {"meta": np.asarray(json.dumps(meta))}
    for part, values in state.items():
        if part == "seeds":
            arrays["seeds"] = np.asarray(values)
        else:
            arrays.update({f"{part}/{k}": np.asarray(v) for k, v in values.items()})
    run_folder.write_npz(path, arrays)


def _load(path, template):
    with np.load(path) as arrays:
        state = {part: (np.asarray(arrays["seeds"]) if part == "seeds" else {k: arrays[f"{part}/{k}"] for k in values}) for part, values in template.items()}
        return state, json.loads(str(arrays["meta"]))


def process_key(method: rem_runner.Method) -> str:
    """Runs whose methods share this key share one `StackedProcess` (and its traced round)."""
    return json.dumps(method.record(), sort_keys=True, default=str)


def _process_for(method: rem_runner.Method, processes: dict | None) -> epfl_stacked.StackedProcess:
    """The method's process, built or reused from `processes` (one trace serves every seed)."""
    key = process_key(method)
    if processes is not None and key in processes:
        return processes[key]
    built = epfl_stacked.StackedProcess(method.config, method.local)
    if processes is not None:
        processes[key] = built
    return built


def run_stacked(
    run_dir: str,
    scenario: RemScenario,
    method: rem_runner.Method,
    run: rem_runner.RunConfig,
    log=print,
    pad_to: int | None = None,
    processes: dict | None = None,
) -> dict:
    """Runs (or resumes, or reads back) one method on one scenario; returns final.json's content:
    the test accuracy (rem_accuracy's fields), `val` (the same on validation pixels), uplink."""
    record = {"engine": ENGINE, "method": method.record(), "scenario": scenario.name, "data": dataclasses.asdict(scenario.config), "run": run.record()}
    rem_runner._prepare_run_dir(run_dir, record)
    final_path = os.path.join(run_dir, "final.json")
    if os.path.exists(final_path):
        with open(final_path) as f:
            return json.load(f)
    data = stacked_data(scenario, pad_to)
    process = _process_for(method, processes)
    state = process.initial_state(len(scenario.clients), [seeds_lib.client_seed(run.seed, i) for i in range(len(scenario.clients))], model_seed=run.seed)
    evaluate = StackedEvaluator(process, scenario, data)
    csv_path, ckpt_path = os.path.join(run_dir, "metrics.csv"), os.path.join(run_dir, "checkpoint.npz")
    meta = {"round": -1, "cum_uplink_bytes": 0, "wall_s": 0.0}
    if os.path.exists(ckpt_path):
        state, meta = _load(ckpt_path, state)
        log(f"{run_dir}: resuming after round {meta['round']}")
    run_folder.truncate_csv(csv_path, meta["round"], fields=CSV_FIELDS)
    test = val = None
    for r in range(meta["round"] + 1, run.rounds):
        start = time.monotonic()
        selected = np.isin(np.arange(len(scenario.clients)), rem_runner.select_clients(len(scenario.clients), run.clients_per_round, run.seed, r))
        state, metrics = process.next(state, data, selected, r)
        meta["cum_uplink_bytes"] += metrics["uplink_bytes"]
        row = {"round": r, "train_loss": float(metrics["train_loss"]), "uploads": int(metrics["uploads"]), "uplink_bytes": metrics["uplink_bytes"]}
        row.update(nonfinite_updates=int(metrics["nonfinite_updates"]), cum_uplink_mb=meta["cum_uplink_bytes"] / rem_runner.MEGABYTE)
        if (r + 1) % run.eval_every == 0 or r == run.rounds - 1:
            val, test = evaluate.both(state).values()
            row.update(val_micro_rmse=val.micro_rmse, val_macro_rmse=val.macro_rmse)
            row.update({k: v for k, v in test.row().items() if k in CSV_FIELDS})
        row["round_s"] = time.monotonic() - start
        meta["wall_s"] += row["round_s"]
        meta["round"] = r
        with open(csv_path, "a", newline="") as f:
            csv.DictWriter(f, fieldnames=CSV_FIELDS).writerow(row)
        if (r + 1) % run.checkpoint_every == 0 or r == run.rounds - 1:
            _save(ckpt_path, state, meta)
    if test is None:  # Resumed at the very end.
        val, test = evaluate.both(state).values()
    log(f"{run_dir}: {run.rounds} rounds, val macro RMSE {val.macro_rmse:.3f} dB, uplink {meta['cum_uplink_bytes'] / rem_runner.MEGABYTE:.2f} MB")
    final = {
        **dataclasses.asdict(test),
        "val": dataclasses.asdict(val),
        "cum_uplink_mb": meta["cum_uplink_bytes"] / rem_runner.MEGABYTE,
        "cum_uplink_bytes": meta["cum_uplink_bytes"],
        "bytes_per_upload": process.bytes_per_upload,
        "rounds": run.rounds,
        "wall_s": meta["wall_s"],
    }
    return rem_runner._write_json(final_path, final)
