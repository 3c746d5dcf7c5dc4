"""One RadioUNet phase with client training in this Python process (the GPU path), TFF aggregating.

TFF's `worker_binary` on the package index is built without CUDA: whatever runs inside it runs on
the CPU. TensorFlow in the Python process itself uses a GPU when it sees one. This process keeps
the federated arithmetic of `radiounet_process.build_phase_process(..., batch_size=B)` and moves
only the clients' local training out of TFF:

    broadcast theta_r -> each client, one after the other, in this process (on the GPU if any):
    the local loop `local_training.train_epochs_on_tensors` (or the FedSGD step) from theta_r with a
    fresh client optimizer state, upload theta_r - theta_loc with weight n_k (zeros, weight 0, if
    not finite) -> the model-update aggregator's `AggregationProcess` (any `tff.aggregators`
    factory: the privacy defenses, Top-K, ...) on the TFF worker -> TFF's apply-optimizer finalizer.

So a defense's clipping and noise still run as TFF computations (on the CPU worker; they are cheap,
see bench/RESULTS.md), and the expensive part, the U-Net's forward and backward passes, runs on
the GPU. Client work happens sequentially; a GPU gains from it at full resolution only.

The process has the contract of the phase's `tff.learning.templates.LearningProcess`, so that a
`radiounet_process.PhasedProcess` runs it in its place (`client_placement='in_process'`):
`initialize()` gives a `tff.learning.templates.LearningAlgorithmState` (global_model_weights: a
`tff.learning.models.ModelWeights` of numpy arrays; distributor and client_work: (); aggregator:
the factory's state; finalizer: the server optimizer's state), `set_model_weights` replaces the
weights, and `next(state, client_data)` returns a `LearningProcessOutput` whose metrics have the
TFF process's structure: distributor, client_work (train_loss, num_examples, nonfinite_updates),
aggregator, finalizer. `client_data` is a list of OrderedDict(x [n,r,r,2], y [n,r,r,1], client)
numpy arrays, the samples in training order and the client's key, which a keyed defense gets with
the upload (`federated_data.FederatedRadioMaps.client_samples`, `aggregators.keyed`).
"""

from __future__ import annotations

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_radiomap.aggregators import keyed, weighting
from tff_radiomap.models import phases
from tff_radiomap.learning import keras_wrap, local_training
from tff_radiomap.models.phases import NetworkWeights, Phase
from tff_radiomap.models import radiounet


class InProcessClientsProcess:
    def __init__(
        self,
        config: radiounet.RadioUNetConfig,
        phase: Phase,
        initial: NetworkWeights,
        client_optimizer: tff.learning.optimizers.Optimizer,
        server_optimizer: tff.learning.optimizers.Optimizer,
        model_aggregator: weighting.AggregationFactory | None = None,
        batch_size: int = 64,
        local_steps: local_training.LocalSteps = local_training.LocalSteps.EPOCHS,
    ):
        if not (isinstance(batch_size, int) and batch_size >= 1):
            raise ValueError(f"batch_size={batch_size!r}: expected an integer >= 1")
        self.phase = phase
        self._start = keras_wrap.to_model_weights(initial, phase)
        self._model = phases.build_phase_model(config, phase)  # Eager: placed on the GPU if any.
        self._client_update = tf.function(self._make_client_update(client_optimizer, local_steps, batch_size))
        specs = tf.nest.map_structure(lambda w: tf.TensorSpec(w.shape, tf.float32), self._start)
        weights_type = tff.types.tensorflow_to_type(specs)
        weighted, self.client_weighting = weighting.as_weighted(model_aggregator)
        self._keyed = keyed.is_keyed(model_aggregator)
        update_type = keyed.keyed_type(weights_type.trainable) if self._keyed else weights_type.trainable
        self._aggregator = weighted.create(update_type, tff.TensorType(np.float32))
        self._finalizer = tff.learning.templates.build_apply_optimizer_finalizer(server_optimizer, weights_type)
        phases.restore_eager_keras()  # Tracing TFF computations built Keras classes in a graph.

    def _make_client_update(self, optimizer, local_steps, batch_size):
        model, train = self._model, local_training.TENSOR_TRAINERS[local_steps]

        def client_update(trainable, non_trainable, x, y):
            for v, w in zip(model.trainable_variables, trainable):
                v.assign(w)
            for v, w in zip(model.non_trainable_variables, non_trainable):
                v.assign(w)
            state = local_training.initial_optimizer_state(optimizer, model)
            _, loss_sum, count = train(model, optimizer, state, x, y, batch_size)
            update = [w - v for w, v in zip(trainable, model.trainable_variables)]
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(u)) for u in update])
            update = [tf.where(finite, u, tf.zeros_like(u)) for u in update]
            weight = tf.where(finite, tf.cast(count, tf.float32), 0.0)
            return update, weight, tf.where(finite, loss_sum, 0.0), tf.where(finite, count, 0), count, finite

        return client_update

    def uses_gpu(self) -> bool:
        """True if the clients' model lives on a GPU."""
        return any("GPU" in v.device.upper() for v in self._model.trainable_variables)

    def initialize(self) -> tff.learning.templates.LearningAlgorithmState:
        return tff.learning.templates.LearningAlgorithmState(
            global_model_weights=self._start,
            distributor=(),
            client_work=(),
            aggregator=self._aggregator.initialize(),
            finalizer=self._finalizer.initialize(),
        )

    def get_hparams(self, state) -> collections.OrderedDict:
        """As a composed learning process's: the client work has none here; the finalizer's."""
        return collections.OrderedDict(client_work=collections.OrderedDict(), finalizer=self._finalizer.get_hparams(state.finalizer))

    def set_hparams(self, state, hparams):
        return state._replace(finalizer=self._finalizer.set_hparams(state.finalizer, hparams["finalizer"]))

    def set_model_weights(self, state, weights: tff.learning.models.ModelWeights):
        return state._replace(global_model_weights=weights)

    def network_weights(self, state, previous: NetworkWeights) -> NetworkWeights:
        return keras_wrap.from_model_weights(state.global_model_weights, self.phase, previous)

    def next(self, state, client_data) -> tff.learning.templates.LearningProcessOutput:
        weights = state.global_model_weights
        trainable = [tf.constant(w) for w in weights.trainable]
        non_trainable = [tf.constant(w) for w in weights.non_trainable]
        # Client work: local training in this process, one client after the other.
        updates, update_weights = [], []
        loss_sum, loss_examples, num_examples, nonfinite = 0.0, 0, 0, 0
        for samples in client_data:
            update, weight, loss, examples, count, finite = self._client_update(trainable, non_trainable, tf.constant(samples["x"]), tf.constant(samples["y"]))
            update = [u.numpy() for u in update]
            if self._keyed:  # A keyed defense: the client's key with its upload (`client_samples`).
                update = keyed.keyed_value(update, np.int32(samples["client"]))
            updates.append(update)
            update_weights.append(float(weight))
            loss_sum, loss_examples = loss_sum + float(loss), loss_examples + int(examples)
            num_examples, nonfinite = num_examples + int(count), nonfinite + int(not bool(finite))
        # Aggregation: the factory's TFF process over the uploads.
        aggregated = self._aggregator.next(state.aggregator, updates, update_weights)
        # Server: TFF's apply-optimizer finalizer.
        finalized = self._finalizer.next(state.finalizer, weights, aggregated.result)
        metrics = collections.OrderedDict(
            distributor=(),
            client_work=collections.OrderedDict(
                train_loss=np.float32(loss_sum / max(loss_examples, 1)), num_examples=num_examples, nonfinite_updates=nonfinite
            ),
            aggregator=aggregated.measurements,
            finalizer=finalized.measurements,
        )
        new_state = state._replace(global_model_weights=finalized.result, aggregator=aggregated.state, finalizer=finalized.state)
        return tff.learning.templates.LearningProcessOutput(new_state, metrics)
