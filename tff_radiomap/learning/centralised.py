"""Centralised reference: the same two-stage RadioUNet trained without federation.

The training maps of all clients are pooled. Round r of the reference trains on as many samples
as round r of the federated run (the sampled clients' sample counts times the local epochs), taken
from one stream of reshuffled passes over the pooled set, in batches of the same size, with the
clients' optimizer (its state persists within a phase and restarts at the switch to stage 2).
Stage 1 is trained for rounds 1..R1 and stage 2 afterwards, as in the federated protocol, so its
validation curve is comparable round by round and ends after the same number of sample passes.

State: OrderedDict(phase, samples_seen, stage1, stage2 (weights), optimizer (state)).
"""

from __future__ import annotations

import collections
from collections.abc import Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_radiomap.models import phases
from tff_radiomap.learning import federated_data, keras_wrap, local_training, state_packing
from tff_radiomap.models.phases import NetworkWeights, Phase
from tff_radiomap.models import radiounet


class CentralisedReference:
    def __init__(
        self,
        config: radiounet.RadioUNetConfig,
        initial: NetworkWeights,
        train: tuple[np.ndarray, np.ndarray],
        phase_for_round: Callable[[int], Phase],
        optimizer: tff.learning.optimizers.Optimizer,
        batch_size: int,
        seed: int,
    ):
        self.initial = initial
        self.phase_for_round = phase_for_round
        self.optimizer = optimizer
        self.batch_size = batch_size
        self.seed = seed
        self._x, self._y = train
        self._models = {}
        self._steps = {}
        self._config = config

    def _model(self, phase: Phase):
        if phase not in self._models:
            model = phases.build_phase_model(self._config, phase)
            optimizer = self.optimizer

            @tf.function
            def step(opt_state, dataset):
                return local_training.train_epochs(model, optimizer, opt_state, dataset)

            self._models[phase], self._steps[phase] = model, step
        return self._models[phase], self._steps[phase]

    def phase_after_round(self, round_num: int) -> Phase:
        return self.phase_for_round(max(round_num, 1))

    def _fresh_state(self, phase: Phase, weights: NetworkWeights, samples_seen: int):
        model, _ = self._model(phase)
        opt_state = local_training.initial_optimizer_state(self.optimizer, model)
        return collections.OrderedDict(
            phase=int(phase),
            samples_seen=np.int64(samples_seen),
            stage1=list(weights.stage1),
            stage2=list(weights.stage2),
            optimizer=tf.nest.map_structure(np.asarray, opt_state),
        )

    def initialize(self):
        return self._fresh_state(self.phase_for_round(1), self.initial, 0)

    def network_weights(self, state) -> NetworkWeights:
        return NetworkWeights(tuple(state["stage1"]), tuple(state["stage2"]))

    def _stream(self, start: int, count: int) -> np.ndarray:
        """Indices start..start+count-1 of the stream of reshuffled passes over the pooled set."""
        n = len(self._x)
        positions = np.arange(start, start + count)
        epochs = positions // n
        out = np.empty(count, np.int64)
        for e in np.unique(epochs):
            order = federated_data.epoch_order(n, self.seed, int(e), federated_data._CENTRAL, 0, 1)
            mask = epochs == e
            out[mask] = order[positions[mask] % n]
        return out

    def next(self, state, round_num: int, num_samples: int):
        phase = self.phase_for_round(round_num)
        if phase != Phase(int(state["phase"])):
            state = self._fresh_state(phase, self.network_weights(state), int(state["samples_seen"]))
        model, step = self._model(phase)
        weights = keras_wrap.to_model_weights(self.network_weights(state), phase)
        for variables, values in ((model.trainable_variables, weights.trainable), (model.non_trainable_variables, weights.non_trainable)):
            for variable, value in zip(variables, values):
                variable.assign(value)

        index = self._stream(int(state["samples_seen"]), num_samples)
        dataset = federated_data.batched(self._x[index], self._y[index], self.batch_size)
        opt_state, loss_sum, count = step(state["optimizer"], dataset)

        trained = keras_wrap.from_model_weights(tff.learning.models.ModelWeights.from_model(model), phase, self.network_weights(state))
        new_state = collections.OrderedDict(
            phase=int(phase),
            samples_seen=np.int64(int(state["samples_seen"]) + int(count)),
            stage1=list(trained.stage1),
            stage2=list(trained.stage2),
            optimizer=tf.nest.map_structure(np.asarray, opt_state),
        )
        metrics = collections.OrderedDict(
            phase=int(phase),
            client_work=collections.OrderedDict(train_loss=float(loss_sum) / max(int(count), 1), num_examples=int(count)),
        )
        return new_state, metrics

    # -- program state ------------------------------------------------------------------------
    def to_program_state(self, state):
        return collections.OrderedDict(phase=np.int32(state["phase"]), packed=state_packing.pack(state))

    def program_state_template(self, round_num: int):
        phase = self.phase_after_round(round_num)
        return self.to_program_state(self._fresh_state(phase, self.initial, 0))

    def from_program_state(self, saved, round_num: int):
        phase = self.phase_after_round(round_num)
        state = state_packing.unpack(saved["packed"], self._fresh_state(phase, self.initial, 0))
        state["phase"] = int(state["phase"])
        return state
