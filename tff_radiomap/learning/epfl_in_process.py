"""EPFL-REMNet with the clients' rounds in this Python process (the GPU path), TFF for the rest.

The same round as `epfl_remnet.build_process` (see its docstring), with only step 2 moved
(`build_process` here; `rem_runner` picks it for `client_placement` 'in_process'):

    broadcast theta^t (TFF computation) -> each client, one after the other, in this process (on
    the GPU if TensorFlow sees one): `epfl_remnet.client_update_fn`, the same local training, error
    feedback and Top-K as the TFF client computation -> the upload factory's `AggregationProcess`
    (decode and average, TFF) -> the server update and uplink count (TFF computations).

State and `next(server_state, client_states, client_data)` are those of the TFF process:
server_state OrderedDict(model, aggregator); client_states and client_data lists of OrderedDicts
of numpy values (`rem_runner.ClientStateStore`, `rem_runner.padded_client_data`); returns
(server_state, new client states, metrics with train_loss, uploads, uplink_bytes,
nonfinite_updates, aggregator).
"""

from __future__ import annotations

import collections

import numpy as np
import tensorflow as tf

from tff_radiomap.learning import epfl_remnet
from tff_radiomap.learning import local_model as local_lib
from tff_radiomap.learning.model_layout import ModelLayout


def build_process(config: epfl_remnet.EpflRemnetConfig, local: local_lib.LocalModel | None = None, seed: int = 0) -> tuple[InProcessEpflRemnet, ModelLayout]:
    """`epfl_remnet.build_process` with the clients in this process: the process and the layout
    of the parameters (`local` as there)."""
    process = InProcessEpflRemnet(config, epfl_remnet.local_model_of(config, local), seed)
    return process, process.parts.layout


class InProcessEpflRemnet:
    def __init__(self, config: epfl_remnet.EpflRemnetConfig, local: local_lib.LocalModel, seed: int = 0):
        self.parts = epfl_remnet.server_parts(config, local, seed)
        self._model = local.build()  # Eager: placed on the GPU if any.
        self._client_update = tf.function(epfl_remnet.client_update_fn(config, local, self.parts.layout, self._model))

    def uses_gpu(self) -> bool:
        """True if the clients' model lives on a GPU."""
        return any("GPU" in v.device.upper() for v in self._model.variables)

    def initialize(self):
        return self.parts.initialize()

    def next(self, server_state, client_states, client_data):
        # Server broadcast: theta^t and the round number (TFF).
        broadcast = tf.nest.map_structure(tf.constant, self.parts.broadcast_part(server_state["model"]))
        # Client work: local training, error feedback, upload, in this process, one after the other.
        uploads, weights, new_states, per_client = [], [], [], []
        for state, data in zip(client_states, client_data):
            upload, weight, new_state, metrics = self._client_update(
                broadcast, tf.nest.map_structure(tf.constant, state), tf.nest.map_structure(tf.constant, data)
            )
            uploads.append(tf.nest.map_structure(lambda t: t.numpy(), upload))
            weights.append(np.float32(weight.numpy()))
            new_states.append(tf.nest.map_structure(lambda t: t.numpy(), new_state))
            per_client.append({k: v.numpy() for k, v in metrics.items()})
        # Inner aggregation: decode (Top-K, quantization) and average the uploads (TFF).
        aggregate = self.parts.aggregator.next(server_state["aggregator"], uploads, weights)
        # Server update: theta^(t+1), its EMA, the round counter; the round's uplink (TFF).
        new_model = self.parts.server_update(server_state["model"], aggregate.result)
        column = lambda key: np.asarray([m[key] for m in per_client])  # noqa: E731
        examples = column("examples").astype(np.float32)
        uploaded = np.int32(column("uploaded").sum())
        with np.errstate(invalid="ignore", divide="ignore"):  # As tff.federated_mean(loss, weight=examples): NaN if no weight.
            train_loss = np.float32(np.sum(column("loss").astype(np.float32) * examples) / np.float32(examples.sum()))
        metrics = collections.OrderedDict(
            train_loss=train_loss,
            uploads=uploaded,
            uplink_bytes=self.parts.uplink_bytes(uploaded, np.int64(column("side_bytes").sum())),
            nonfinite_updates=np.int32(column("nonfinite").sum()),
            aggregator=aggregate.measurements,
        )
        return collections.OrderedDict(model=new_model, aggregator=aggregate.state), new_states, metrics
