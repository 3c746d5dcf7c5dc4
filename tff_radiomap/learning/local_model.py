"""What a REM client trains, and how: the model, its shared/private split, one local step.

A `LocalModel` tells the federated process (`epfl_remnet.py`) everything model-specific:
  - `build()`: a fresh Keras model;
  - `shared(model)` / `private(model)`: the variables that are uploaded and aggregated, and the
    ones that never leave the client (EPFL-REMNet: backbone / head; FedAvg: all / none);
  - `step(model, x, y)`: (loss, gradients of `model.trainable_variables`, side_bytes), where
    side_bytes are uplink bytes the step itself sends (FedFly's activations; 0 otherwise);
  - `predict(model, x_train, y_train, x)`: the client's predictions of z-scored labels (pFedGP
    conditions on its training data; the others ignore it);
  - `device_shared(model)` (optional): the shared variables whose upload is the device's uplink,
    when part of the shared model lives elsewhere (FedFly's edge-side layers).
`train_locally` runs E epochs of minibatch steps on a client's padded arrays, as TFF's
`build_weighted_fed_avg` client work does on a `batch(B).repeat(E)` data set.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import tensorflow as tf

from tff_radiomap.models import remnet


@dataclasses.dataclass(frozen=True)
class LocalModel:
    build: Callable[[], tf.keras.Model]
    shared: Callable[[tf.keras.Model], list]
    private: Callable[[tf.keras.Model], list]
    step: Callable
    predict: Callable
    name: str = "remnet"
    device_shared: Callable | None = None  # Shared variables the device uploads; None: all shared.


def remnet_local_model(config: remnet.RemNetConfig, split_head: bool = True) -> LocalModel:
    """Backbone + head; with `split_head` the head is private, else everything is shared."""
    loss_fn = remnet.huber_loss(config)

    def step(model, x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        return loss, tape.gradient(loss, model.trainable_variables), tf.constant(0, tf.int64)

    if split_head:
        shared, private = remnet.backbone_variables, remnet.head_variables
    else:
        shared, private = (lambda m: m.trainable_variables), (lambda m: [])
    return LocalModel(
        build=lambda: remnet.build_remnet(config),
        shared=shared,
        private=private,
        step=step,
        predict=lambda model, x_train, y_train, x: model(x, training=False),
        name="remnet" if split_head else "remnet_global",
    )


@dataclasses.dataclass(frozen=True)
class LocalTraining:
    epochs: int = 2
    batch_size: int = 32
    shuffle: bool = True

    def __post_init__(self):
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError(f"epochs={self.epochs}, batch_size={self.batch_size}: expected integers >= 1")


def epoch_order(num_examples, shuffle: bool, seed):
    """The visiting order of one epoch: 0..n-1, or a stateless shuffle of it under `seed`."""
    order = tf.range(num_examples)
    if not shuffle:
        return order
    keys = tf.random.stateless_uniform([num_examples], seed=seed)
    return tf.gather(order, tf.argsort(keys))


def build_train_fn(local: LocalModel, model: tf.keras.Model, optimizer, training: LocalTraining):
    """A tf.function (data, seed) -> (mean loss, side bytes) training `model` in place.

    data: {'x': [N, D], 'y': [N, M], 'num_examples': int32} (rows past num_examples are padding);
    seed: int64 [2], the stateless seed of this client's shuffles this round.
    """
    variables = model.trainable_variables
    specs = tuple(tf.TensorSpec(v.shape, v.dtype) for v in variables)
    batch_size = training.batch_size

    @tf.function
    def train(data, seed):
        n = tf.cast(data["num_examples"], tf.int32)
        steps = (n + batch_size - 1) // batch_size
        opt_state = optimizer.initialize(specs)
        loss_sum = tf.constant(0.0, tf.float32)
        side_bytes = tf.constant(0, tf.int64)
        for epoch in tf.range(training.epochs):
            order = epoch_order(n, training.shuffle, seed + tf.cast(tf.stack([0, epoch]), tf.int64))
            for s in tf.range(steps):
                idx = order[s * batch_size : tf.minimum((s + 1) * batch_size, n)]
                x, y = tf.gather(data["x"], idx), tf.gather(data["y"], idx)
                loss, grads, step_bytes = local.step(model, x, y)
                opt_state, updated = optimizer.next(opt_state, tuple(v.read_value() for v in variables), tuple(grads))
                for v, w in zip(variables, updated):
                    v.assign(w)
                loss_sum += loss * tf.cast(tf.size(idx), tf.float32)
                side_bytes += step_bytes
        return loss_sum / tf.cast(n * training.epochs, tf.float32), side_bytes

    return train
