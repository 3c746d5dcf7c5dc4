"""A client's local training (Eq. (4)) on one Keras model, shared by every place that trains.

The same functions run inside the TFF client work (`client_work.py`), in the centralised
reference (`centralised.py`) and outside TFF for the attack (`local_updates`, `ClientSimulator`),
so the updates an attacker observes are produced by exactly the code the clients run.

Modes:
    EPOCHS:      one optimizer step per batch, over every batch of the data set (FedAvg; the data
                 set holds the client's local epochs).
    ONE_STEP:    the gradient of the mean loss over the whole data set, then one optimizer step
                 (FedSGD).
"""

from __future__ import annotations

import enum

import numpy as np
import tensorflow as tf

from tff_radiomap.models import phases, radiounet
from tff_radiomap.models.phases import mse_loss


class LocalSteps(enum.Enum):
    EPOCHS = "epochs"
    ONE_STEP = "one_step"


def _assign(variables, values):
    for variable, value in zip(variables, values):
        variable.assign(value)


def _batch_gradient(model, batch):
    with tf.GradientTape() as tape:
        loss = mse_loss(batch["y"], model(batch["x"], training=True))
    return loss, tape.gradient(loss, model.trainable_variables)


def train_epochs(model: tf.keras.Model, optimizer, optimizer_state, dataset: tf.data.Dataset):
    """One `optimizer` step per batch of `dataset` on `model`'s trainable variables (in place).

    Returns (optimizer_state, loss_sum, num_examples): the loss summed over the examples, each
    batch's loss taken before its step.
    """
    variables = model.trainable_variables

    def step(carry, batch):
        opt_state, loss_sum, count = carry
        loss, grads = _batch_gradient(model, batch)
        opt_state, updated = optimizer.next(opt_state, tuple(variables), tuple(grads))
        _assign(variables, updated)
        n = tf.shape(batch["y"], out_type=tf.int64)[0]
        return opt_state, loss_sum + loss * tf.cast(n, tf.float32), count + n

    zero = (optimizer_state, tf.constant(0.0), tf.constant(0, tf.int64))
    return dataset.reduce(zero, step)


def train_one_step(model: tf.keras.Model, optimizer, optimizer_state, dataset: tf.data.Dataset):
    """One `optimizer` step on the gradient of the mean loss over all of `dataset` (in place).

    Returns (optimizer_state, loss_sum, num_examples), the loss taken before the step.
    """
    variables = model.trainable_variables

    def accumulate(carry, batch):
        grad_sums, loss_sum, count = carry
        loss, grads = _batch_gradient(model, batch)
        n = tf.shape(batch["y"], out_type=tf.int64)[0]
        nf = tf.cast(n, tf.float32)
        grad_sums = tuple(s + g * nf for s, g in zip(grad_sums, grads))
        return grad_sums, loss_sum + loss * nf, count + n

    zero = (tuple(tf.zeros_like(v) for v in variables), tf.constant(0.0), tf.constant(0, tf.int64))
    grad_sums, loss_sum, count = dataset.reduce(zero, accumulate)
    denominator = tf.maximum(tf.cast(count, tf.float32), 1.0)
    grads = tuple(s / denominator for s in grad_sums)
    optimizer_state, updated = optimizer.next(optimizer_state, tuple(variables), grads)
    _assign(variables, updated)
    return optimizer_state, loss_sum, count


TRAINERS = {LocalSteps.EPOCHS: train_epochs, LocalSteps.ONE_STEP: train_one_step}


# -- The same local training on in-memory tensors --------------------------------------------------
# `x [N,r,r,2]`, `y [N,r,r,1]` hold the client's samples in the order a data set would yield them
# (its local epochs concatenated); batch i is rows [i*batch_size, (i+1)*batch_size). The loop is a
# `tf.while_loop` over those slices: it gives the updates of the data-set trainers above (same
# batches, same order) without `dataset.reduce`, whose reducer function TensorFlow instantiates
# again at every call (its cost: bench/RESULTS.md, "RadioUNet round against plain TensorFlow").
def _num_batches(x, batch_size: int):
    n = tf.shape(x, out_type=tf.int64)[0]
    return n, (n + batch_size - 1) // batch_size


def _slice(x, y, i, batch_size: int):
    begin = i * batch_size
    return {"x": x[begin : begin + batch_size], "y": y[begin : begin + batch_size]}


def train_epochs_on_tensors(model: tf.keras.Model, optimizer, optimizer_state, x, y, batch_size: int):
    """`train_epochs` on the batches of (x, y); returns (optimizer_state, loss_sum, num_examples)."""
    variables = model.trainable_variables
    count, num_batches = _num_batches(x, batch_size)

    def step(i, opt_state, loss_sum):
        batch = _slice(x, y, i, batch_size)
        loss, grads = _batch_gradient(model, batch)
        opt_state, updated = optimizer.next(opt_state, tuple(variables), tuple(grads))
        _assign(variables, updated)
        n = tf.cast(tf.shape(batch["y"])[0], tf.float32)
        return i + 1, opt_state, loss_sum + loss * n

    start = (tf.constant(0, tf.int64), optimizer_state, tf.constant(0.0))
    _, optimizer_state, loss_sum = tf.while_loop(lambda i, *_: i < num_batches, step, start)
    return optimizer_state, loss_sum, count


def train_one_step_on_tensors(model: tf.keras.Model, optimizer, optimizer_state, x, y, batch_size: int):
    """`train_one_step` on the batches of (x, y); returns (optimizer_state, loss_sum, num_examples)."""
    variables = model.trainable_variables
    count, num_batches = _num_batches(x, batch_size)

    def accumulate(i, grad_sums, loss_sum):
        batch = _slice(x, y, i, batch_size)
        loss, grads = _batch_gradient(model, batch)
        n = tf.cast(tf.shape(batch["y"])[0], tf.float32)
        return i + 1, tuple(s + g * n for s, g in zip(grad_sums, grads)), loss_sum + loss * n

    start = (tf.constant(0, tf.int64), tuple(tf.zeros_like(v) for v in variables), tf.constant(0.0))
    _, grad_sums, loss_sum = tf.while_loop(lambda i, *_: i < num_batches, accumulate, start)
    denominator = tf.maximum(tf.cast(count, tf.float32), 1.0)
    grads = tuple(s / denominator for s in grad_sums)
    optimizer_state, updated = optimizer.next(optimizer_state, tuple(variables), grads)
    _assign(variables, updated)
    return optimizer_state, loss_sum, count


TENSOR_TRAINERS = {LocalSteps.EPOCHS: train_epochs_on_tensors, LocalSteps.ONE_STEP: train_one_step_on_tensors}


def initial_optimizer_state(optimizer, model: tf.keras.Model):
    specs = tuple(tf.TensorSpec(v.shape, v.dtype) for v in model.trainable_variables)
    return optimizer.initialize(specs)


def local_updates(model: tf.keras.Model, optimizer, x, y, steps: int):
    """The uploads of `steps` local steps on one batch (x, y), from `model`'s current weights.

    Runs eagerly (wrap in `tf.function` for speed); `model` ends at its starting weights. Returns a
    list of `steps` lists of tensors: entry s is the upload after s+1 steps, theta_r - theta_loc
    (the negative of Eq. (6), TFF's sign convention), one tensor per trainable variable.
    """
    variables = model.trainable_variables
    start = [tf.identity(v) for v in variables]
    state = initial_optimizer_state(optimizer, model)
    batch = {"x": tf.convert_to_tensor(x, tf.float32), "y": tf.convert_to_tensor(y, tf.float32)}
    uploads = []
    for _ in range(steps):
        _, grads = _batch_gradient(model, batch)
        state, updated = optimizer.next(state, tuple(variables), tuple(grads))
        _assign(variables, updated)
        uploads.append([s - v for s, v in zip(start, variables)])
    _assign(variables, start)
    return uploads


class ClientSimulator:
    """One client's local steps from given global weights, outside TFF (the attack's observer).

        simulator = ClientSimulator(config, Phase.STAGE1, client_optimizer)
        simulator.set_global_weights(process.network_weights(state))
        uploads = simulator.uploads(x, y, steps=S)  # S uploads, Eq. (7)'s Delta theta^(1:S)

    `uploads(x, y, steps)` runs `steps` optimizer steps on the batch (x [N,r,r,2], y [N,r,r,1];
    N = 1 for one sample) from the global weights, with a fresh optimizer state as a client
    starts each round, and returns the `steps` uploads theta_r - theta_loc as lists of numpy
    arrays in the order of `phases.uploaded_layer_names(config, phase)`. The global weights
    are restored afterwards. Traced once per `steps` value.
    """

    def __init__(self, config: radiounet.RadioUNetConfig, phase: phases.Phase, optimizer):
        self.phase = phase
        self._model = phases.build_phase_model(config, phase)
        self._optimizer = optimizer
        self._traced = {}

    def set_global_weights(self, weights: phases.NetworkWeights) -> None:
        phases.set_phase_weights(self._model, weights, self.phase)

    def uploads(self, x, y, steps: int) -> list:
        if steps < 1:
            raise ValueError(f"steps={steps!r}: expected an integer >= 1")
        if steps not in self._traced:
            self._traced[steps] = tf.function(lambda x, y: local_updates(self._model, self._optimizer, x, y, steps))
        result = self._traced[steps](tf.convert_to_tensor(x, tf.float32), tf.convert_to_tensor(y, tf.float32))
        return [[t.numpy() for t in upload] for upload in result]


class ClientTrainer:
    """A client's whole local training from given global weights, outside TFF (the deployment
    observer, `experiments.deployment_observer`): what a client of `in_process_clients` computes.

        trainer = ClientTrainer(model, client_optimizer, batch_size=16)
        upload = trainer.upload(x, y)  # theta_r - theta_loc, flat [d]

    `model` holds the broadcast weights; (x [N,r,r,2], y [N,r,r,1]) are the client's samples in
    training order, its local epochs concatenated (`FederatedRadioMaps.client_samples`). A fresh
    optimizer state, one step per batch of `batch_size` rows (`LocalSteps.EPOCHS`) or one step on
    the mean gradient (`LocalSteps.ONE_STEP`); the model's weights are restored afterwards. The
    upload is flat in the order of the model's trainable variables. Traced once.
    """

    def __init__(self, model: tf.keras.Model, optimizer, batch_size: int, local_steps: LocalSteps = LocalSteps.EPOCHS):
        if not (isinstance(batch_size, int) and batch_size >= 1):
            raise ValueError(f"batch_size={batch_size!r}: expected an integer >= 1")
        self.model, self.optimizer, self.batch_size, self.train = model, optimizer, batch_size, TENSOR_TRAINERS[local_steps]
        signature = [tf.TensorSpec([None, *model.input_shape[1:]], tf.float32), tf.TensorSpec([None, *model.output_shape[1:]], tf.float32)]
        self._upload = tf.function(self._upload_impl, input_signature=signature)

    def _upload_impl(self, x, y):
        variables = self.model.trainable_variables
        start = [tf.identity(v) for v in variables]
        state = initial_optimizer_state(self.optimizer, self.model)
        self.train(self.model, self.optimizer, state, x, y, self.batch_size)
        update = tf.concat([tf.reshape(s - v, [-1]) for s, v in zip(start, variables)], 0)
        _assign(variables, start)
        return update

    def upload(self, x, y) -> np.ndarray:
        return self._upload(tf.constant(x, tf.float32), tf.constant(y, tf.float32)).numpy()
