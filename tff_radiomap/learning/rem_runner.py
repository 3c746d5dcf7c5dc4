"""Driving a stateful-client REM process: the client-state store, checkpoints, evaluation, logs.

The TFF process (`epfl_remnet.build_process`) takes and returns client states; this module keeps
them between rounds (`ClientStateStore`, client id -> state), checkpoints them with the server
state, evaluates the personalized models in dB, and writes one CSV row (and TensorBoard scalars)
per round. A run folder holds:
    config.json      the full configuration (data, model, process, run); a different one is refused
    metrics.csv      one row per round; accuracy columns filled every `eval_every` rounds and last
    checkpoint.npz   server state, client states, round and uplink counters (every
                     `checkpoint_every` rounds and at the end)
    final.json       the final accuracy (with per-client RMSE), uplink and wall time
    tensorboard/     the same scalars for TensorBoard
A killed run restarted on the same folder resumes from its checkpoint and drops the CSV rows of
the rounds after it, so no row is duplicated; a finished one is read back; `overwrite` deletes the
folder's run files (`RUN_FILES`) first.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import json
import os
import time

import numpy as np
import tensorflow as tf

from tff_radiomap.data.rem_points import RemScenario
from tff_radiomap.learning import epfl_in_process, epfl_remnet
from tff_radiomap.learning import local_model as local_lib
from tff_radiomap.learning.model_layout import ModelLayout
from tff_radiomap.metrics.rem_accuracy import RemAccuracy, rem_accuracy
from tff_radiomap.runtime import nan_injection, run_folder
from tff_radiomap.runtime.hold import hold
from tff_radiomap import seeds as seeds_lib

MEGABYTE = 1e6  # Uplink is reported in MB = 10^6 bytes.


RunFolderConflict = run_folder.RunFolderConflict  # The run folder holds a run with another configuration.
RUN_FILES = ("config.json", "metrics.csv", "checkpoint.npz", "final.json", "tensorboard")


@dataclasses.dataclass(frozen=True)
class Method:
    """A named way of training: the process configuration and the local model it trains."""

    name: str
    config: epfl_remnet.EpflRemnetConfig
    local: local_lib.LocalModel

    def record(self) -> dict:
        return {"name": self.name, "local_model": self.local.name, "process": dataclasses.asdict(self.config)}


@dataclasses.dataclass(frozen=True)
class RunConfig:
    rounds: int = 30
    clients_per_round: int = 90
    eval_every: int = 5
    checkpoint_every: int = 5
    seed: int = 0
    # Test hook: "ROUND:CLIENT" (0-based, as in metrics.csv) feeds client CLIENT NaN inputs in round
    # ROUND if it is selected; its round must be dropped and counted (nonfinite_updates).
    inject_nan_client: str = ""
    # Where the clients train: "tff" (the TFF worker) or "in_process" (this Python process, on a GPU
    # if TensorFlow sees one; `epfl_in_process`). Equal to float tolerance, not bitwise.
    client_placement: str = "tff"

    def __post_init__(self):
        for name in ("rounds", "clients_per_round", "eval_every", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)}: expected an integer >= 1")
        if self.seed < 0:
            raise ValueError(f"seed={self.seed}: expected an integer >= 0")
        if self.client_placement not in epfl_remnet.CLIENT_PLACEMENTS:
            raise ValueError(f"client_placement={self.client_placement!r}: expected one of {epfl_remnet.CLIENT_PLACEMENTS}")
        self.nan_injection()

    def nan_injection(self) -> tuple[int, int] | None:
        """(round, client) of the `inject_nan_client` test hook (0-based rounds, as in metrics.csv), or None."""
        return nan_injection.parse(self.inject_nan_client, 0, self.rounds - 1)

    def record(self) -> dict:
        """The configuration as recorded in config.json (the hook only when set, the placement only
        when not 'tff', so that folders written before they existed still match)."""
        record = dataclasses.asdict(self)
        if not self.inject_nan_client:
            record.pop("inject_nan_client")
        if self.client_placement == "tff":
            record.pop("client_placement")
        return record


# ---------------------------------------------------------------------------------------------
# Client states and checkpoints.
class ClientStateStore:
    """client id -> state (nested OrderedDicts of numpy values), with gather and scatter by ids."""

    def __init__(self, states: dict[int, collections.OrderedDict]):
        self.states = dict(states)

    def gather(self, ids) -> list:
        return [self.states[i] for i in ids]

    def scatter(self, ids, states) -> None:
        if len(ids) != len(states):
            raise ValueError(f"{len(states)} states for {len(ids)} client ids")
        for i, s in zip(ids, states):
            self.states[i] = tf.nest.map_structure(np.asarray, s)

    def flat(self) -> dict[str, np.ndarray]:
        return {f"client/{i}/{j}": np.asarray(leaf) for i, s in self.states.items() for j, leaf in enumerate(tf.nest.flatten(s))}

    def restore(self, arrays) -> None:
        """Overwrites every client's state from `flat()` arrays, in the structure of the current one."""
        for i, s in self.states.items():
            leaves = tf.nest.flatten(s)
            self.states[i] = tf.nest.pack_sequence_as(s, [np.asarray(arrays[f"client/{i}/{j}"]) for j in range(len(leaves))])


def save_checkpoint(path: str, server_state, store: ClientStateStore, meta: dict) -> None:
    arrays = {f"server/{j}": np.asarray(leaf) for j, leaf in enumerate(tf.nest.flatten(server_state))}
    arrays.update(store.flat())
    arrays["meta"] = np.asarray(json.dumps(meta))
    run_folder.write_npz(path, arrays)  # Never leave a half-written checkpoint.


def load_checkpoint(path: str, server_template, store: ClientStateStore):
    """(server_state, meta); `store` is restored in place."""
    with np.load(path) as arrays:
        n = len(tf.nest.flatten(server_template))
        server_state = tf.nest.pack_sequence_as(server_template, [arrays[f"server/{j}"] for j in range(n)])
        store.restore(arrays)
        meta = json.loads(str(arrays["meta"]))
    return server_state, meta


# ---------------------------------------------------------------------------------------------
# Data and evaluation.
def padded_client_data(scenario: RemScenario, pad_to: int | None = None) -> tuple[list, int]:
    """Every client's training arrays padded to N_max rows, the largest client's or `pad_to`."""
    n_max = max(c.num_train for c in scenario.clients)
    if pad_to is not None:
        if pad_to < n_max:
            raise ValueError(f"pad_to={pad_to}: a client of scenario {scenario.name!r} has {n_max} training samples")
        n_max = pad_to
    out = []
    for c in scenario.clients:
        x = np.zeros((n_max, scenario.num_features), np.float32)
        y = np.zeros((n_max, scenario.num_outputs), np.float32)
        x[: c.num_train], y[: c.num_train] = c.x_train, c.y_train
        out.append(collections.OrderedDict(x=x, y=y, num_examples=np.int32(c.num_train)))
    return out, n_max


def evaluated_shared(server_state) -> collections.OrderedDict:
    """The shared parameters a client evaluates with: the EMA if the process keeps one."""
    model = server_state["model"]
    return model["ema"] if "ema" in model else model["shared"]


class Evaluator:
    """Each client's personalized model (shared parameters + its private ones) on its test set."""

    def __init__(self, local: local_lib.LocalModel, layout: ModelLayout, scenario: RemScenario):
        self.local, self.layout, self.scenario = local, layout, scenario
        self.model = local.build()
        self.shared_vars, self.private_vars = local.shared(self.model), local.private(self.model)

    def __call__(self, server_state, store: ClientStateStore) -> RemAccuracy:
        shared = evaluated_shared(server_state)
        for v, key in zip(self.shared_vars, self.layout.shared_keys):
            v.assign(shared[key])
        predictions, targets = [], []
        for i, client in enumerate(self.scenario.clients):
            for v, key in zip(self.private_vars, self.layout.private_keys):
                v.assign(store.states[i]["head"][key])
            y_z = np.asarray(self.local.predict(self.model, client.x_train, client.y_train, client.x_test))
            predictions.append(client.to_db(y_z))
            targets.append(client.to_db(client.y_test))
        return rem_accuracy(predictions, targets)


# ---------------------------------------------------------------------------------------------
# The run.
CSV_FIELDS = [
    "round",
    "train_loss",
    "uploads",
    "uplink_bytes",
    "cum_uplink_mb",
    "round_s",
    "micro_rmse",
    "macro_rmse",
    "micro_mae",
    "macro_mae",
    "nonfinite_updates",
]


def _csv_fields(num_outputs: int) -> list[str]:
    return CSV_FIELDS + [f"rmse_bs{m}" for m in range(num_outputs)]


def _prepare_run_dir(run_dir: str, record: dict) -> None:
    os.makedirs(run_dir, exist_ok=True)
    if not run_folder.check_config(record, run_dir):
        run_folder.write_json(os.path.join(run_dir, "config.json"), record)  # Tuples become lists, as check_config reads them.


def select_clients(num_clients: int, per_round: int, seed: int, round_num: int) -> list[int]:
    """All clients, or `per_round` of them drawn without replacement (seeded by the round)."""
    if per_round >= num_clients:
        return list(range(num_clients))
    return sorted(np.random.default_rng([seed, round_num]).choice(num_clients, per_round, replace=False).tolist())


def _process_for(method: Method, data_type, n_max: int, seed: int, processes: dict | None, client_placement: str = "tff"):
    """The method's process for this data type: built, or reused from `processes`."""
    key = (json.dumps(method.record(), sort_keys=True, default=str), n_max, seed, client_placement)
    if processes is not None and key in processes:
        return processes[key]
    if client_placement == "tff":
        built = epfl_remnet.build_process(method.config, data_type, method.local, seed=seed)
    elif client_placement == "in_process":
        built = epfl_in_process.build_process(method.config, method.local, seed)
    else:
        raise ValueError(f"client_placement={client_placement!r}: expected one of {epfl_remnet.CLIENT_PLACEMENTS}")
    if processes is not None:
        processes[key] = built
    return built


def _write_row(csv_path: str, fields: list[str], writer, row: dict) -> None:
    with open(csv_path, "a", newline="") as f:
        csv.DictWriter(f, fieldnames=fields).writerow(row)
    with writer.as_default(step=row["round"]):
        for key, value in row.items():
            if key != "round":
                tf.summary.scalar(key, value)


def _write_json(path: str, content: dict) -> dict:
    content = json.loads(json.dumps(content))  # As a rerun will read it back (lists, not tuples).
    run_folder.write_json(path, content)
    return content


def run_experiment(
    run_dir: str,
    scenario: RemScenario,
    method: Method,
    run: RunConfig,
    log=print,
    pad_to: int | None = None,
    processes: dict | None = None,
    overwrite: bool = False,
) -> dict:
    """Runs (or resumes, or just reads back) one method on one scenario; returns final.json's content.

    `pad_to` pads every client's data to that many rows, so that scenarios share one client data
    type; `processes` (a dict the caller keeps) then reuses a process built for an earlier run
    of the same method instead of tracing it again.
    """
    record = {"method": method.record(), "scenario": scenario.name, "data": dataclasses.asdict(scenario.config), "run": run.record()}
    if overwrite and os.path.isdir(run_dir):
        run_folder.clear(run_dir, RUN_FILES)
    _prepare_run_dir(run_dir, record)
    final_path = os.path.join(run_dir, "final.json")
    if os.path.exists(final_path):
        with open(final_path) as f:
            return json.load(f)

    data, n_max = padded_client_data(scenario, pad_to)
    data_type = epfl_remnet.client_data_type(n_max, scenario.num_features, scenario.num_outputs)
    process, layout = _process_for(method, data_type, n_max, run.seed, processes, run.client_placement)
    store = ClientStateStore({i: epfl_remnet.initial_client_state(method.config, layout, seed=seeds_lib.client_seed(run.seed, i)) for i in range(len(data))})
    server_state = process.initialize()
    evaluate = Evaluator(method.local, layout, scenario)

    fields = _csv_fields(scenario.num_outputs)
    csv_path, ckpt_path = os.path.join(run_dir, "metrics.csv"), os.path.join(run_dir, "checkpoint.npz")
    meta = {"round": -1, "cum_uplink_bytes": 0, "wall_s": 0.0}
    if os.path.exists(ckpt_path):
        server_state, meta = load_checkpoint(ckpt_path, server_state, store)
        log(f"{run_dir}: resuming after round {meta['round']}")
    run_folder.truncate_csv(csv_path, meta["round"], fields=fields)
    writer = tf.summary.create_file_writer(os.path.join(run_dir, "tensorboard"))

    accuracy = None
    for r in range(meta["round"] + 1, run.rounds):
        start = time.monotonic()
        ids = select_clients(len(data), run.clients_per_round, run.seed, r)
        server_state, new_states, metrics = process.next(
            server_state, store.gather(ids), nan_injection.poison(run.nan_injection(), r, ids, [data[i] for i in ids])
        )
        store.scatter(ids, new_states)
        meta["cum_uplink_bytes"] += int(metrics["uplink_bytes"])
        row = {"round": r, "train_loss": float(metrics["train_loss"]), "uploads": int(metrics["uploads"]), "uplink_bytes": int(metrics["uplink_bytes"])}
        row["nonfinite_updates"] = int(metrics.get("nonfinite_updates", 0))
        row["cum_uplink_mb"] = meta["cum_uplink_bytes"] / MEGABYTE
        if (r + 1) % run.eval_every == 0 or r == run.rounds - 1:
            accuracy = evaluate(server_state, store)
            row.update(accuracy.row())
        row["round_s"] = time.monotonic() - start
        meta["wall_s"] += row["round_s"]
        meta["round"] = r
        _write_row(csv_path, fields, writer, row)
        if (r + 1) % run.checkpoint_every == 0 or r == run.rounds - 1:
            save_checkpoint(ckpt_path, server_state, store, meta)
            hold(f"checkpoint after round {r + 1}")  # Kill-and-resume tests stop a program here (`runtime.hold`).
        if "macro_rmse" in row:
            log(f"{run_dir}: round {r + 1}/{run.rounds} macro RMSE {row['macro_rmse']:.3f} dB, uplink {row['cum_uplink_mb']:.2f} MB")
    writer.flush()

    if accuracy is None:  # Resumed at the very end: evaluate the checkpointed state.
        accuracy = evaluate(server_state, store)
    final = {
        **dataclasses.asdict(accuracy),
        "cum_uplink_mb": meta["cum_uplink_bytes"] / MEGABYTE,
        "cum_uplink_bytes": meta["cum_uplink_bytes"],
        "bytes_per_upload": epfl_remnet.upload_bytes_per_client(epfl_remnet.upload_factory(method.config), layout.uploaded_type),
        "rounds": run.rounds,
        "wall_s": meta["wall_s"],
    }
    return _write_json(final_path, final)
