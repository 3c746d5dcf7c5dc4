"""`tff.learning.templates.ClientWorkProcess` that trains one RadioUNet phase on each client.

Each selected client k starts from the broadcast global weights theta_r, runs its local training
(`local_training.LocalSteps`) and uploads theta_r - theta_loc (TFF's sign convention: the negative
of Eq. (6)), restricted to the phase's trainable weights, with the weight n_k = the number of
examples it trained on (Eq. (5)). A client whose update is not finite uploads zeros with weight 0.

State: the client optimizer's hyperparameters (as in `tff.learning`'s model-delta client work).
Measurements: `train_loss` (the examples' loss before their step, averaged over the examples of the
clients whose update is finite), `num_examples` (all clients' examples) and `nonfinite_updates`
(clients whose update held a NaN or Inf and was zeroed). With `secure_measurements` they are
summed with `tff.aggregators.SecureSumFactory` (integers clipped to [0, `COUNT_BOUND`], the loss
in fixed point), so that a process over a secure model aggregator aggregates nothing
in the clear (`aggregators.secure_dp`).
"""

from __future__ import annotations

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_radiomap.aggregators import keyed as keyed_lib
from tff_radiomap.models import phases
from tff_radiomap.learning import federated_data, keras_wrap, local_training
from tff_radiomap.models import radiounet

COUNT_BOUND = 2**24  # A client's examples, its 0/1 non-finite flag and its summed loss in LOSS_SCALE units.
LOSS_SCALE = 1e4  # Fixed point of the summed loss: its examples' losses are normalized MSEs (< 1 each).


def _weights_type(config: radiounet.RadioUNetConfig, phase: phases.Phase):
    with phases.keras_graph():
        model = phases.build_phase_model(config, phase)
        weights = tff.learning.models.ModelWeights.from_model(model)
        specs = tf.nest.map_structure(lambda v: tf.TensorSpec(v.shape, v.dtype), weights)
    return tff.types.tensorflow_to_type(specs)


def build_client_work(
    config: radiounet.RadioUNetConfig,
    phase: phases.Phase,
    optimizer: tff.learning.optimizers.Optimizer,
    local_steps: local_training.LocalSteps,
    batch_size: int | None = None,
    data_by_reference: bool = False,
    keyed: bool = False,
    secure_measurements: bool = False,
) -> tff.learning.templates.ClientWorkProcess:
    """Client work training `phase` of the network `config` with `optimizer`.

    A client's data is a `tf.data.Dataset` of batches (`keras_wrap.batch_spec`). With `batch_size`
    None the local loop iterates over it (`dataset.reduce`). With an integer, the client's samples
    are first gathered into two tensors, in the data set's order, and the loop runs over slices of
    `batch_size` rows (`local_training.train_epochs_on_tensors`): the same updates when the data set
    is batched by `batch_size` (it may also be one element holding every sample), several times
    faster. The data set must then hold at least one sample. With `data_by_reference` (needs
    `batch_size`) a client's data is instead a one-element data set naming its sample files and
    the round's order (`federated_data.reference_spec`), read inside the computation. With `keyed`
    (needs `data_by_reference`) the update is the keyed value <update, client> of
    `aggregators.keyed`, the key from the client's reference, for a keyed aggregation factory.
    With `secure_measurements` the measurements are summed securely (see the module docstring).
    """
    if batch_size is not None and not (isinstance(batch_size, int) and batch_size >= 1):
        raise ValueError(f"batch_size={batch_size!r}: expected None or an integer >= 1")
    if data_by_reference and batch_size is None:
        raise ValueError("data_by_reference=True needs a batch_size")
    if keyed and not data_by_reference:
        raise ValueError("keyed=True needs data_by_reference=True (the client's key comes with its data reference)")
    spec = federated_data.reference_spec() if data_by_reference else keras_wrap.batch_spec(config.resolution)
    data_type = tff.SequenceType(tff.types.tensorflow_to_type(spec))
    weights_type = _weights_type(config, phase)
    initial_hparams = optimizer.get_hparams(optimizer.initialize(tf.TensorSpec([], tf.float32)))

    @tff.federated_computation
    def init_fn():
        return tff.federated_value(initial_hparams, tff.SERVER)

    hparams_type = init_fn.type_signature.result.member
    train = _trainer(local_steps, batch_size, config.resolution if data_by_reference else None)
    client_update = _client_update(config, phase, optimizer, train, (hparams_type, weights_type, data_type), keyed)
    sum_measurements = _measurement_sum(client_update.type_signature.result[1], secure_measurements)

    @tff.tensorflow.computation
    def finalize_measurements(sums):
        count = tf.cast(sums["loss_examples"], tf.float32)
        return collections.OrderedDict(
            train_loss=sums["loss_sum"] / tf.maximum(count, 1.0),
            num_examples=sums["num_examples"],
            nonfinite_updates=sums["nonfinite_updates"],
        )

    @tff.federated_computation(
        init_fn.type_signature.result,
        tff.FederatedType(weights_type, tff.CLIENTS),
        tff.FederatedType(data_type, tff.CLIENTS),
    )
    def next_fn(state, weights, client_data):
        # Client work: local training from the broadcast weights.
        results, client_measurements = tff.federated_map(client_update, (tff.federated_broadcast(state), weights, client_data))
        # Measurements: example-weighted training loss over the round's clients.
        measurements = tff.federated_map(finalize_measurements, sum_measurements(client_measurements))
        return tff.templates.MeasuredProcessOutput(state, results, measurements)

    @tff.tensorflow.computation(hparams_type)
    def get_hparams_fn(state):
        return state

    @tff.tensorflow.computation(hparams_type, hparams_type)
    def set_hparams_fn(state, hparams):
        del state
        return hparams

    return tff.learning.templates.ClientWorkProcess(init_fn, next_fn, get_hparams_fn=get_hparams_fn, set_hparams_fn=set_hparams_fn)


def _trainer(local_steps: local_training.LocalSteps, batch_size: int | None, reference_resolution: int | None):
    """(model, optimizer, optimizer state, client data) -> (optimizer state, loss_sum, count)."""
    if batch_size is None:
        return local_training.TRAINERS[local_steps]
    train_on_tensors = local_training.TENSOR_TRAINERS[local_steps]

    def train(model, optimizer, state, dataset):
        if reference_resolution is not None:
            samples = federated_data.read_samples(dataset.get_single_element(), reference_resolution)
        else:  # Every sample in one element (batch() reserves at most 2**16 slots, whatever its size).
            samples = dataset.unbatch().batch(2**62).get_single_element()
        return train_on_tensors(model, optimizer, state, samples["x"], samples["y"], batch_size)

    return train


def _measurement_sum(measurement_type, secure: bool):
    """client measurements -> their sum at the server: `tff.federated_sum`, or with `secure` one
    `SecureSumFactory` over integers (floats sent in fixed point, `LOSS_SCALE` units, and
    converted back at the server; TFF 0.87's float secure sum does not trace for scalars)."""
    if not secure:
        return tff.federated_sum
    names = [n for n, _ in tff.structure.iter_elements(measurement_type)]
    floats = {n for n in names if np.issubdtype(measurement_type[n].dtype.type, np.floating)}
    process = tff.aggregators.SecureSumFactory(COUNT_BOUND).create(tff.StructWithPythonType([(n, np.int32) for n in names], collections.OrderedDict))

    @tff.tensorflow.computation(measurement_type)
    def to_fixed(m):
        return collections.OrderedDict(
            (n, tf.cast(tf.round(tf.clip_by_value(m[n] * LOSS_SCALE, 0.0, COUNT_BOUND)), tf.int32) if n in floats else tf.cast(m[n], tf.int32)) for n in names
        )

    @tff.tensorflow.computation(process.next.type_signature.result.result.member)
    def from_fixed(total):
        return collections.OrderedDict(
            (n, tf.cast(total[n], tf.float32) / LOSS_SCALE if n in floats else tf.cast(total[n], measurement_type[n].dtype)) for n in names
        )

    def secure_sum(client_measurements):
        total = process.next(process.initialize(), tff.federated_map(to_fixed, client_measurements)).result
        return tff.federated_map(from_fixed, total)

    return secure_sum


def _client_update(config, phase, optimizer, train, parameter_types, keyed: bool = False):
    """(hparams, theta_r, client data) -> (ClientResult(theta_r - theta_loc, n_k), loss sums); with
    `keyed`, the result's update is <theta_r - theta_loc, the client's key>."""

    @tff.tensorflow.computation(*parameter_types)
    def client_update(hparams, initial_weights, dataset):
        model = phases.build_phase_model(config, phase)
        weights = tff.learning.models.ModelWeights.from_model(model)

        @tf.function
        def run(initial_weights, dataset):
            tf.nest.map_structure(lambda v, w: v.assign(w), weights, initial_weights)
            state = optimizer.set_hparams(local_training.initial_optimizer_state(optimizer, model), hparams)
            _, loss_sum, count = train(model, optimizer, state, dataset)
            update = tf.nest.map_structure(tf.subtract, initial_weights.trainable, weights.trainable)
            update, non_finite = _zero_if_non_finite(update)
            weight = tf.where(non_finite, 0.0, tf.cast(count, tf.float32))
            if keyed:
                update = keyed_lib.keyed_value(update, dataset.get_single_element()[keyed_lib.CLIENT])
            measurements = collections.OrderedDict(
                loss_sum=tf.where(non_finite, 0.0, loss_sum),
                loss_examples=tf.where(non_finite, tf.zeros_like(count), count),
                num_examples=count,
                nonfinite_updates=tf.cast(non_finite, tf.int32),
            )
            return tff.learning.templates.ClientResult(update=update, update_weight=weight), measurements

        return run(initial_weights, dataset)

    return client_update


def _zero_if_non_finite(update):
    """(update, False) if every value of `update` is finite, else (zeros like it, True)."""
    flat = tf.nest.flatten(update)
    finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(t)) for t in flat])
    zeroed = [tf.where(finite, t, tf.zeros_like(t)) for t in flat]
    return tf.nest.pack_sequence_as(update, zeroed), tf.logical_not(finite)
