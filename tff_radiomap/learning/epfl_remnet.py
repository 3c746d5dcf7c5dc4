"""EPFL-REMNet (Algorithm 1) as a `tff.templates.IterativeProcess` with stateful clients.

    next(server_state@SERVER, client_states@CLIENTS, client_data@CLIENTS)
      -> <server_state@SERVER, client_states@CLIENTS, metrics@SERVER>

A round t (0-based; the paper's t mod R == 0 is our (t + 1) mod R == 0, the R-th round):
  1. Server broadcast: the shared parameters theta^t (the backbone).
  2. Local training: each client sets its backbone to theta^t and its head to its own phi_i,
     trains both for E epochs, keeps phi_i, and forms Delta_i = theta_i - theta^t.
  3. Every R-th round (periodic synchronization) the client uploads: error feedback
     u = Delta + e (Eq. (9)), one Top-K split of u into T_K(u, K), uploaded, and e = u - T_K(u, K)
     (Eq. (10)), kept (`epfl_steps`); 8-bit symmetric quantization. The `upload_factory` (TopK
     around SymmetricQuantization around a mean) finds the upload sparse and quantizes it. In the
     other R - 1 rounds Delta is dropped, as Algorithm 1's ClientUpdate returns null.
  4. Server aggregation: theta^(t+1) = theta^t + eta * mean(decoded uploads) (eta = 1 in the
     paper), and optionally an EMA of theta (`ema_decay`), the backbone used for evaluation.
A client whose local result holds a NaN or Inf (a poisoned or diverged client) is dropped for the
round before anything is uploaded: it uploads nothing, keeps its previous head and error, and is
counted in the `nonfinite_updates` metric, so the backbone and the other clients stay finite.
The head never leaves the client: with `split_head` (the default) the server state holds
backbone variables only (keys `backbone_*`), and client states hold `head` (phi_i), `error` (e),
`rounds` and `uploads` counters and `seed`.

Ablations are configurations: split_head=False (everything shared and uploaded, no private
head), sync_period=1, k_fraction=None (no Top-K, so no error feedback), bits=None (float32
values), ema_decay=0.
"""

from __future__ import annotations

import collections
import dataclasses
import math

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_radiomap.aggregators import SymmetricQuantizationFactory, TopKFactory, wire
from tff_radiomap.learning import epfl_steps, optimizers
from tff_radiomap.learning import local_model as local_lib
from tff_radiomap.learning.model_layout import ModelLayout, model_layout
from tff_radiomap.models import remnet

CLIENT_WEIGHTINGS = ("uniform", "num_examples")
OPTIMIZERS = ("sgd", "adam")


@dataclasses.dataclass(frozen=True)
class EpflRemnetConfig:
    model: remnet.RemNetConfig = remnet.RemNetConfig()
    local_epochs: int = 2
    batch_size: int = 32
    shuffle: bool = True
    client_optimizer: str = "adam"
    client_learning_rate: float = 1e-3
    server_learning_rate: float = 1.0
    split_head: bool = True
    k_fraction: float | None = 0.05  # None: no Top-K (and no error feedback).
    bits: int | None = 8  # None: values sent as float32.
    scale_scope: str = "tensor"
    sync_period: int = 2  # R.
    ema_decay: float = 0.5  # 0: no EMA.
    client_weighting: str = "uniform"  # Algorithm 1 averages the uploads with equal weights.
    # Local schedules of the PFL baselines (the stacked clients only, `epfl_stacked`):
    head_epochs: int = 0  # FedRep: > 0 trains the head this many epochs first, then the body.
    ditto_lambda: float | None = None  # Ditto: a personal model pulled toward the global one.

    def __post_init__(self):
        checks = [
            (self.client_optimizer in OPTIMIZERS, "client_optimizer", f"one of {OPTIMIZERS}"),
            (self.client_weighting in CLIENT_WEIGHTINGS, "client_weighting", f"one of {CLIENT_WEIGHTINGS}"),
            (self.local_epochs >= 1, "local_epochs", "an integer >= 1"),
            (self.batch_size >= 1, "batch_size", "an integer >= 1"),
            (math.isfinite(self.client_learning_rate) and self.client_learning_rate > 0, "client_learning_rate", "a positive learning rate"),
            (math.isfinite(self.server_learning_rate) and self.server_learning_rate > 0, "server_learning_rate", "a positive learning rate"),
            (self.k_fraction is None or 0 < self.k_fraction <= 1, "k_fraction", "a fraction in (0, 1] (none: no Top-K)"),
            (self.bits is None or 2 <= self.bits <= 16, "bits", "2..16 (none: float32 values)"),
            (self.sync_period >= 1, "sync_period", "an integer >= 1"),
            (0.0 <= self.ema_decay < 1.0, "ema_decay", "a decay in [0, 1)"),
            (self.head_epochs >= 0 and (not self.head_epochs or self.split_head), "head_epochs", ">= 0, and a private head (split_head) when > 0"),
            (
                self.ditto_lambda is None or (self.ditto_lambda >= 0 and not self.split_head),
                "ditto_lambda",
                ">= 0 with the whole model shared (split_head=False)",
            ),
        ]
        for ok, name, expected in checks:
            if not ok:
                raise ValueError(f"{name}={getattr(self, name)!r}: expected {expected}")

    @property
    def training(self) -> local_lib.LocalTraining:
        return local_lib.LocalTraining(self.local_epochs, self.batch_size, self.shuffle)


def upload_factory(config: EpflRemnetConfig):
    """The uplink pipeline: [TopK ->] [quantize ->] weighted mean (no_nan: a round with no upload
    averages to zero)."""
    factory = tff.aggregators.MeanFactory(no_nan_division=True)
    if config.bits is not None:
        factory = SymmetricQuantizationFactory(config.bits, scale_scope=config.scale_scope, inner_factory=factory)
    if config.k_fraction is not None:
        factory = TopKFactory(k_fraction=config.k_fraction, inner_factory=factory)
    return factory


def kept_entries(config: EpflRemnetConfig, layout: ModelLayout) -> int | None:
    """K, the entries of u a client uploads each sync (those `upload_factory` keeps); None: no Top-K."""
    factory = upload_factory(config)
    return factory.kept(layout.shared_type) if isinstance(factory, TopKFactory) else None


def upload_bytes_per_client(factory, value_type) -> int:
    """Exact bytes of one client's upload through `factory` (float32 values if it is no stage)."""
    if hasattr(factory, "byte_counts"):
        return int(factory.byte_counts(value_type)["bytes_per_client"])
    return wire.dense_bytes(factory, value_type)


def client_optimizer(config: EpflRemnetConfig):
    return optimizers.build_optimizer(config.client_optimizer, config.client_learning_rate)


# ---------------------------------------------------------------------------------------------
# Types and initial values.
def initial_client_state(config: EpflRemnetConfig, layout: ModelLayout, seed: int) -> collections.OrderedDict:
    """A client's state before its first round (numpy): its head starts from the common init."""
    state = collections.OrderedDict()
    if layout.private_keys:
        state["head"] = collections.OrderedDict(zip(layout.private_keys, (v.copy() for v in layout.initial_private)))
    if config.k_fraction is not None:
        state["error"] = collections.OrderedDict((k, np.zeros_like(v)) for k, v in zip(layout.shared_keys, layout.initial_shared))
    state["rounds"] = np.int32(0)
    state["uploads"] = np.int32(0)
    state["seed"] = np.int64(seed)
    return state


def client_state_type(config: EpflRemnetConfig, layout: ModelLayout):
    fields = collections.OrderedDict()
    if layout.private_keys:
        fields["head"] = layout.private_type
    if config.k_fraction is not None:
        fields["error"] = layout.shared_type
    fields["rounds"] = tff.TensorType(np.int32)
    fields["uploads"] = tff.TensorType(np.int32)
    fields["seed"] = tff.TensorType(np.int64)
    return tff.types.to_type(fields)


def client_data_type(max_examples: int, num_features: int, num_outputs: int):
    return tff.types.to_type(
        collections.OrderedDict(
            x=tff.TensorType(np.float32, [max_examples, num_features]),
            y=tff.TensorType(np.float32, [max_examples, num_outputs]),
            num_examples=tff.TensorType(np.int32),
        )
    )


# ---------------------------------------------------------------------------------------------
# Client and server work.
def client_update_fn(config: EpflRemnetConfig, local: local_lib.LocalModel, layout: ModelLayout, model: tf.keras.Model):
    """The client's round on `model` (built by `local.build()`) as a Python function
    (broadcast, state, data) -> (upload, weight, new state, metrics), for a `tf.function`: inside
    the TFF client computation, or in this process (`epfl_in_process`)."""
    k = kept_entries(config, layout)
    shared_vars, private_vars = local.shared(model), local.private(model)
    train = local_lib.build_train_fn(local, model, client_optimizer(config), config.training)

    def update(broadcast, state, data):
        theta = [broadcast["shared"][key] for key in layout.shared_keys]
        for v, value in zip(shared_vars, theta):
            v.assign(value)
        for v, key in zip(private_vars, layout.private_keys):
            v.assign(state["head"][key])
        seed = tf.stack([state["seed"], tf.cast(broadcast["round"], tf.int64)])
        loss, side_bytes = train(data, seed)
        delta = [v.read_value() - t for v, t in zip(shared_vars, theta)]
        # A round whose result holds a NaN or Inf is dropped: no upload, the old head and error.
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(t)) for t in [loss] + delta + [v.read_value() for v in private_vars]])
        delta = [tf.where(finite, d, tf.zeros_like(d)) for d in delta]
        sync = tf.logical_and(epfl_steps.is_sync_round(broadcast["round"], config.sync_period), finite)
        new_state = collections.OrderedDict()
        if private_vars:
            new_state["head"] = collections.OrderedDict(
                (key, tf.where(finite, v.read_value(), state["head"][key])) for key, v in zip(layout.private_keys, private_vars)
            )
        if k is not None:
            error = [state["error"][key] for key in layout.shared_keys]
            # u = Delta + e (Eq. (9)); T_K(u, K) is uploaded, e = u - T_K(u, K) (Eq. (10)) stays.
            upload, new_error = tf.cond(
                sync, lambda: epfl_steps.sparsify_with_error_feedback(delta, error, k), lambda: ([tf.zeros_like(d) for d in delta], error)
            )
            new_state["error"] = collections.OrderedDict(zip(layout.shared_keys, new_error))
        else:
            upload = [tf.where(sync, d, tf.zeros_like(d)) for d in delta]
        new_state["rounds"] = state["rounds"] + 1
        new_state["uploads"] = state["uploads"] + tf.cast(sync, tf.int32)
        new_state["seed"] = state["seed"]
        examples = tf.cast(data["num_examples"], tf.float32)
        weight = tf.cast(sync, tf.float32) * (examples if config.client_weighting == "num_examples" else 1.0)
        metrics = collections.OrderedDict(
            loss=tf.where(finite, loss, 0.0),
            examples=tf.where(finite, examples, 0.0),
            uploaded=tf.cast(sync, tf.int32),
            side_bytes=side_bytes,
            nonfinite=tf.cast(tf.logical_not(finite), tf.int32),
        )
        return collections.OrderedDict(zip(layout.shared_keys, upload)), weight, new_state, metrics

    return update


def _client_round(config: EpflRemnetConfig, local: local_lib.LocalModel, layout: ModelLayout, broadcast_type, state_type, data_type):
    """The client's TF computation: (broadcast, state, data) -> (upload, weight, state, metrics)."""

    @tff.tensorflow.computation(broadcast_type, state_type, data_type)
    def client_round(broadcast, state, data):
        return tf.function(client_update_fn(config, local, layout, local.build()))(broadcast, state, data)

    return client_round


def _server_fns(config: EpflRemnetConfig, layout: ModelLayout, shared_type, bytes_per_client: int):
    """Server TF computations: the initial model state, its update, and the round's uplink."""
    keys, eta, decay = layout.shared_keys, config.server_learning_rate, config.ema_decay

    @tff.tensorflow.computation
    def server_init():
        state = collections.OrderedDict(shared=collections.OrderedDict((k, tf.constant(v)) for k, v in zip(keys, layout.initial_shared)))
        if decay > 0:
            state["ema"] = collections.OrderedDict((k, tf.constant(v)) for k, v in zip(keys, layout.initial_shared))
        state["round"] = tf.constant(0, tf.int32)
        return state

    model_state_type = server_init.type_signature.result

    @tff.tensorflow.computation(model_state_type, shared_type)
    def server_update(state, mean_upload):
        sync = epfl_steps.is_sync_round(state["round"], config.sync_period)
        new = collections.OrderedDict()
        shared = collections.OrderedDict((k, tf.where(sync, state["shared"][k] + eta * mean_upload[k], state["shared"][k])) for k in keys)
        new["shared"] = shared
        if decay > 0:
            new["ema"] = collections.OrderedDict((k, tf.where(sync, epfl_steps.ema_update(state["ema"][k], shared[k], decay), state["ema"][k])) for k in keys)
        new["round"] = state["round"] + 1
        return new

    @tff.tensorflow.computation(model_state_type)
    def broadcast_part(state):
        return collections.OrderedDict(shared=state["shared"], round=state["round"])

    @tff.tensorflow.computation(np.int32, np.int64)
    def uplink_bytes(uploads, side_bytes):
        return tf.cast(uploads, tf.int64) * bytes_per_client + side_bytes

    return server_init, server_update, broadcast_part, uplink_bytes


# ---------------------------------------------------------------------------------------------
# The process.
CLIENT_PLACEMENTS = ("tff", "in_process")


@dataclasses.dataclass(frozen=True)
class ServerParts:
    """The TFF computations of a round other than the client work (both placements use them)."""

    layout: ModelLayout
    aggregator: tff.templates.AggregationProcess
    initialize: tff.Computation  # () -> <model, aggregator>@SERVER
    server_update: tff.Computation
    broadcast_part: tff.Computation
    uplink_bytes: tff.Computation


def server_parts(config: EpflRemnetConfig, local: local_lib.LocalModel, seed: int = 0) -> ServerParts:
    layout = model_layout(local, seed)
    factory = upload_factory(config)
    aggregator = factory.create(layout.shared_type, tff.TensorType(np.float32))
    bytes_per_upload = upload_bytes_per_client(factory, layout.uploaded_type)
    server_init, server_update, broadcast_part, uplink_bytes = _server_fns(config, layout, layout.shared_type, bytes_per_upload)

    @tff.federated_computation
    def initialize():
        return tff.federated_zip(collections.OrderedDict(model=tff.federated_eval(server_init, tff.SERVER), aggregator=aggregator.initialize()))

    return ServerParts(layout, aggregator, initialize, server_update, broadcast_part, uplink_bytes)


def local_model_of(config: EpflRemnetConfig, local: local_lib.LocalModel | None = None) -> local_lib.LocalModel:
    """`local`, by default the REMNet of `config.model` with the head private iff `split_head`.
    Raises for FedRep's and Ditto's configurations, which only the stacked clients run."""
    if config.head_epochs or config.ditto_lambda is not None:
        raise ValueError("FedRep (head_epochs) and Ditto (ditto_lambda) run on the stacked clients (epfl_stacked), not this process")
    return local or local_lib.remnet_local_model(config.model, config.split_head)


def build_process(
    config: EpflRemnetConfig,
    data_type,
    local: local_lib.LocalModel | None = None,
    seed: int = 0,
) -> tuple[tff.templates.IterativeProcess, ModelLayout]:
    """The EPFL-REMNet process for clients whose data has `data_type` (`client_data_type`).

    `local` defaults to the REMNet of `config.model` with the head private iff `split_head`
    (`local_model_of`). Returns the process and the layout (keys and initial values) of the
    parameters. Metrics: `train_loss` (examples-weighted mean over clients), `uploads` (clients
    that uploaded), `nonfinite_updates` (clients whose round produced a NaN or Inf: dropped, their
    state kept), `uplink_bytes` (exact bytes they sent: uploads x bytes per upload of the device's
    shared part + per-step side bytes), `aggregator` (the upload factory's measurements; its own
    `uplink_bytes` counts every client it aggregates, zero-weight non-sync clients included, so
    the process's `uplink_bytes` is the figure to use). The clients run in the TFF worker;
    `epfl_in_process.build_process` is the same `next` with the clients in this Python process
    (`client_placement` 'in_process', chosen by `rem_runner`).
    """
    local = local_model_of(config, local)
    parts = server_parts(config, local, seed)
    layout, aggregator = parts.layout, parts.aggregator
    state_type = client_state_type(config, layout)
    client_round = _client_round(config, local, layout, parts.broadcast_part.type_signature.result, state_type, data_type)
    initialize, server_update, broadcast_part, uplink_bytes = parts.initialize, parts.server_update, parts.broadcast_part, parts.uplink_bytes

    @tff.federated_computation(initialize.type_signature.result, tff.FederatedType(state_type, tff.CLIENTS), tff.FederatedType(data_type, tff.CLIENTS))
    def next_fn(server_state, client_states, client_data):
        # Server broadcast: theta^t and the round number.
        broadcast = tff.federated_broadcast(tff.federated_map(broadcast_part, server_state.model))
        # Client work: local training, error feedback, upload (or nothing between syncs).
        upload, weight, new_client_states, client_metrics = tff.federated_map(client_round, (broadcast, client_states, client_data))
        # Inner aggregation: decode (Top-K, quantization) and average the uploads.
        aggregate = aggregator.next(server_state.aggregator, upload, weight)
        # Server update: theta^(t+1), its EMA, the round counter; the round's uplink.
        new_model = tff.federated_map(server_update, (server_state.model, aggregate.result))
        uploads = tff.federated_sum(client_metrics.uploaded)
        metrics = collections.OrderedDict(
            train_loss=tff.federated_mean(client_metrics.loss, weight=client_metrics.examples),
            uploads=uploads,
            uplink_bytes=tff.federated_map(uplink_bytes, (uploads, tff.federated_sum(client_metrics.side_bytes))),
            nonfinite_updates=tff.federated_sum(client_metrics.nonfinite),
            aggregator=aggregate.measurements,
        )
        new_server_state = tff.federated_zip(collections.OrderedDict(model=new_model, aggregator=aggregate.state))
        return new_server_state, new_client_states, tff.federated_zip(metrics)

    return tff.templates.IterativeProcess(initialize, next_fn), layout
