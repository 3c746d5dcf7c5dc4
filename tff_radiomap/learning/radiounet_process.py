"""Federated training of the two-stage RadioUNet as TFF learning processes (Section II, Eq. (5)).

One `tff.learning.templates.LearningProcess` trains one phase (`phases.Phase`); it is composed
from `tff.learning` pieces: broadcast distributor, the RadioUNet client work (`client_work.py`),
the model-update aggregator (any `tff.aggregators` factory), and a server-optimizer finalizer.
Round r of a phase:

    broadcast theta_r -> clients train locally -> upload theta_r - theta_loc (the phase's trainable
    weights) -> aggregate (weighted by n_k, Eq. (5), or as the factory decides) -> server optimizer.

`PhasedProcess` strings phase processes together over the rounds of one run:
    `build_two_stage_process` (No Defense): rounds 1..R1 train stage 1; rounds R1+1..R train
        stage 2 with stage 1 frozen and its prediction as context;
    `build_fedsgd_process`: every round, one local gradient step on both stages jointly.
A federated computation cannot branch on a server value, so the switch of phase is made here, in
Python, between rounds: the stage-2 process starts from the stage-1 process's final weights, with
the fresh aggregator and server-optimizer states of its own `initialize()`.

`model_aggregator` takes a `tff.aggregators.WeightedAggregationFactory` (client weights n_k reach
it) or an `UnweightedAggregationFactory` (wrapped with `tff.aggregators.as_weighted_aggregator`;
the clients are then averaged uniformly, as in `tff.learning.algorithms.build_unweighted_fed_avg`).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_radiomap.aggregators import keyed, secure_dp
from tff_radiomap.aggregators.weighting import AggregationFactory, as_weighted  # noqa: F401 (callers take them from here)
from tff_radiomap.models import phases
from tff_radiomap.learning.optimizers import build_optimizer  # noqa: F401 (callers build theirs here)
from tff_radiomap.learning import client_work, keras_wrap, local_training, state_packing
from tff_radiomap.models.phases import NetworkWeights, Phase
from tff_radiomap.models import radiounet


def build_phase_process(
    config: radiounet.RadioUNetConfig,
    phase: Phase,
    initial: NetworkWeights,
    client_optimizer: tff.learning.optimizers.Optimizer,
    server_optimizer: tff.learning.optimizers.Optimizer,
    model_aggregator: AggregationFactory | None = None,
    local_steps: local_training.LocalSteps = local_training.LocalSteps.EPOCHS,
    batch_size: int | None = None,
    data_by_reference: bool = False,
) -> tff.learning.templates.LearningProcess:
    """The learning process of one phase; `initialize()` starts from `initial`.

    `batch_size` None: the local loop iterates over the clients' data sets (`dataset.reduce`); an
    integer: over slices of their samples gathered into tensors (faster, same updates). With
    `data_by_reference` clients get `federated_data.FederatedRadioMaps.round_references` instead
    of data sets (see `client_work.build_client_work`).
    """
    is_keyed = keyed.is_keyed(model_aggregator)
    # A factory marked `secure_aggregation` (`aggregators.secure_dp`) gets measurements summed securely too.
    secure = bool(getattr(model_aggregator, "secure_aggregation", False))
    work = client_work.build_client_work(
        config, phase, client_optimizer, local_steps, batch_size, data_by_reference, keyed=is_keyed, secure_measurements=secure
    )
    weights_type = work.next.type_signature.parameter[1].member
    start = keras_wrap.to_model_weights(initial, phase)

    @tff.tensorflow.computation
    def initial_model_weights_fn():
        return tf.nest.map_structure(tf.constant, start)

    weighted, _ = as_weighted(model_aggregator)
    update_type = keyed.keyed_type(weights_type.trainable) if is_keyed else weights_type.trainable
    aggregator = weighted.create(update_type, tff.TensorType(np.float32))
    if secure:  # DDP's computations nest too deep for TFF to compose as they are.
        aggregator = secure_dp.flattened(aggregator)
    process = tff.learning.templates.compose_learning_process(
        initial_model_weights_fn,
        tff.learning.templates.build_broadcast_process(weights_type),
        work,
        aggregator,
        tff.learning.templates.build_apply_optimizer_finalizer(server_optimizer, weights_type),
    )
    phases.restore_eager_keras()  # Tracing the client work built Keras models in a graph.
    return process


CLIENT_PLACEMENTS = ("tff", "in_process")


def _placed_phase_process(
    client_placement: str, config, phase, initial, client_optimizer, server_optimizer, model_aggregator, local_steps, batch_size, data_by_reference
):
    """The phase's process with the clients in the TFF worker ('tff': `build_phase_process`) or in
    this Python process ('in_process': `in_process_clients.InProcessClientsProcess`, on a GPU if
    TensorFlow sees one; aggregation and server step stay TFF computations)."""
    if client_placement == "tff":
        return build_phase_process(
            config,
            phase,
            initial,
            client_optimizer,
            server_optimizer,
            model_aggregator,
            local_steps=local_steps,
            batch_size=batch_size,
            data_by_reference=data_by_reference,
        )
    if client_placement == "in_process":
        from tff_radiomap.learning import in_process_clients  # It imports this module.

        return in_process_clients.InProcessClientsProcess(
            config, phase, initial, client_optimizer, server_optimizer, model_aggregator, batch_size=batch_size, local_steps=local_steps
        )
    raise ValueError(f"client_placement={client_placement!r}: expected one of {CLIENT_PLACEMENTS}")


class PhasedProcess:
    """Phase processes run in sequence over the rounds of one training run.

    State (`initialize`, `next`): OrderedDict(phase=int, learning=the phase process's
    `LearningAlgorithmState`). `next(state, round_num, client_data)` runs round `round_num`
    (1-based) on the list of client data (`round_data` gives it); its metrics hold `phase` and
    the phase process's metrics (`client_work`, `aggregator`, `finalizer`, `distributor`). `client_weighting[phase]`
    is 'num_examples' (Eq. (5)) or 'uniform' (an unweighted aggregator). With `client_placement`
    'in_process' the phase processes are `InProcessClientsProcess`es and the client data are
    numpy samples (`round_data`). With `server_learning_rate` (round -> rate) the server
    optimizer's learning rate is set to that rate before each round (a schedule: a pure function
    of the round, so a resumed run sets what an uninterrupted one set), and the round's metrics
    hold it as `server_learning_rate`.
    """

    def __init__(
        self,
        processes: dict[Phase, tff.learning.templates.LearningProcess],
        phase_for_round: Callable[[int], Phase],
        initial: NetworkWeights,
        client_weighting: dict[Phase, str],
        data_by_reference: bool = False,
        client_placement: str = "tff",
        server_learning_rate: Callable[[int], float] | None = None,
    ):
        self.processes = processes
        self.server_learning_rate = server_learning_rate
        self.phase_for_round = phase_for_round
        self.initial = initial
        self.client_weighting = client_weighting
        self.data_by_reference = data_by_reference
        self.client_placement = client_placement

    def round_data(self, data, clients, round_num: int, batch_size: int, epochs: int = 1) -> list:
        """The client data `next` takes for `clients` of a `federated_data.FederatedRadioMaps`."""
        if self.client_placement == "in_process":
            return [data.client_samples(k, round_num, epochs) for k in clients]
        if self.data_by_reference:
            return data.round_references(clients, round_num, epochs)
        return data.round_datasets(clients, round_num, batch_size, epochs)

    def phase_after_round(self, round_num: int) -> Phase:
        """Phase of the state saved after `round_num` rounds (0: the initial state)."""
        return self.phase_for_round(max(round_num, 1))

    def initialize(self) -> collections.OrderedDict:
        phase = self.phase_for_round(1)
        return collections.OrderedDict(phase=int(phase), learning=self.processes[phase].initialize())

    def network_weights(self, state) -> NetworkWeights:
        phase = Phase(int(state["phase"]))
        return keras_wrap.from_model_weights(state["learning"].global_model_weights, phase, self.initial)

    def next(self, state, round_num: int, client_data: Sequence):
        phase = self.phase_for_round(round_num)
        if phase != Phase(int(state["phase"])):
            state = self._enter(phase, state)
        learning = state["learning"]
        if self.server_learning_rate is not None:
            rate = float(self.server_learning_rate(round_num))
            learning = set_server_learning_rate(self.processes[phase], learning, rate)
        output = self.processes[phase].next(learning, list(client_data))
        metrics = collections.OrderedDict(phase=int(phase))
        metrics.update(output.metrics)
        if self.server_learning_rate is not None:
            metrics["server_learning_rate"] = rate
        return collections.OrderedDict(phase=int(phase), learning=output.state), metrics

    def warm_up(self, phases, client_data: Sequence) -> None:
        """Runs `next` of each phase in `phases` once on `client_data` from that phase's initial
        state, and discards the result: the worker loads (and Python traces) every computation a
        run will need before its first round, so a later phase switch neither stalls the run nor
        adds a step to its memory mid-run. The run's state is not touched."""
        for phase in sorted(set(phases)):
            process = self.processes[phase]
            process.next(process.initialize(), list(client_data))

    def _enter(self, phase: Phase, state) -> collections.OrderedDict:
        """The first state of `phase`, holding the weights reached so far."""
        process = self.processes[phase]
        weights = keras_wrap.to_model_weights(self.network_weights(state), phase)
        return collections.OrderedDict(phase=int(phase), learning=process.set_model_weights(process.initialize(), weights))

    # -- program state: the learning state packed into one array per dtype -----------------------
    def to_program_state(self, state) -> collections.OrderedDict:
        return collections.OrderedDict(phase=np.int32(state["phase"]), packed=state_packing.pack(state["learning"]))

    def from_program_state(self, saved, round_num: int) -> collections.OrderedDict:
        phase = self.phase_after_round(round_num)
        if int(saved["phase"]) != int(phase):
            raise ValueError(f"saved state after round {round_num} is phase {int(saved['phase'])}, expected {int(phase)}")
        learning = state_packing.unpack(saved["packed"], self.processes[phase].initialize())
        return collections.OrderedDict(phase=int(phase), learning=learning)

    def program_state_template(self, round_num: int) -> collections.OrderedDict:
        """A program state shaped like the one saved after `round_num` rounds (for loading)."""
        phase = self.phase_after_round(round_num)
        return self.to_program_state(collections.OrderedDict(phase=int(phase), learning=self.processes[phase].initialize()))


def set_server_learning_rate(process, state, rate: float):
    """`state` of `process` (a learning process, or `InProcessClientsProcess`) with the server
    optimizer's learning rate set to `rate` (through the process's hyperparameters)."""
    hparams = process.get_hparams(state)
    hparams["finalizer"]["learning_rate"] = np.asarray(rate, np.asarray(hparams["finalizer"]["learning_rate"]).dtype)
    return process.set_hparams(state, hparams)


def cosine_schedule(base: float, final_fraction: float, first: int, last: int) -> Callable[[int], float]:
    """Round -> rate: `base` at round `first`, decaying on a half cosine to `final_fraction * base`
    at round `last` (constant `base` where first == last)."""
    if not 0 <= final_fraction <= 1:
        raise ValueError(f"final_fraction={final_fraction!r}: expected a number in [0, 1]")

    def rate(round_num: int) -> float:
        progress = 0.0 if last <= first else min(max((round_num - first) / (last - first), 0.0), 1.0)
        return base * (final_fraction + (1.0 - final_fraction) * 0.5 * (1.0 + np.cos(np.pi * progress)))

    return rate


def build_two_stage_process(
    config: radiounet.RadioUNetConfig,
    initial: NetworkWeights,
    stage1_rounds: int,
    client_optimizer: tff.learning.optimizers.Optimizer,
    server_optimizer: tff.learning.optimizers.Optimizer,
    model_aggregator: AggregationFactory | Mapping[Phase, AggregationFactory | None] | None = None,
    batch_size: int | None = None,
    data_by_reference: bool = False,
    client_placement: str = "tff",
    server_learning_rate: Callable[[int], float] | None = None,
) -> PhasedProcess:
    """No Defense's protocol: stage 1 for rounds 1..`stage1_rounds`, then stage 2 (stage 1 frozen).

    `model_aggregator` is one factory for both phases, or {Phase.STAGE1: f1, Phase.STAGE2: f2}
    when the aggregation depends on which stage is uploaded (None: the weighted mean).
    `batch_size`, `data_by_reference`: see `build_phase_process`; `client_placement`: 'tff' or
    'in_process' (see `_placed_phase_process`; needs an integer `batch_size`);
    `server_learning_rate`: a schedule (see `PhasedProcess`).
    """
    if stage1_rounds < 0:
        raise ValueError(f"stage1_rounds={stage1_rounds}: expected >= 0")
    phases = (Phase.STAGE1, Phase.STAGE2)
    if isinstance(model_aggregator, Mapping):
        missing = [p.name for p in phases if p not in model_aggregator]
        if missing:
            raise ValueError(f"model_aggregator mapping lacks phases {missing}; expected keys Phase.STAGE1, Phase.STAGE2")
        factories = {p: model_aggregator[p] for p in phases}
    else:
        factories = {p: model_aggregator for p in phases}
    processes = {
        p: _placed_phase_process(
            client_placement,
            config,
            p,
            initial,
            client_optimizer,
            server_optimizer,
            factories[p],
            local_training.LocalSteps.EPOCHS,
            batch_size,
            data_by_reference,
        )
        for p in phases
    }
    return PhasedProcess(
        processes,
        lambda r: Phase.STAGE1 if r <= stage1_rounds else Phase.STAGE2,
        initial,
        {p: as_weighted(factories[p])[1] for p in phases},
        data_by_reference,
        client_placement,
        server_learning_rate,
    )


def build_fedsgd_process(
    config: radiounet.RadioUNetConfig,
    initial: NetworkWeights,
    client_optimizer: tff.learning.optimizers.Optimizer,
    server_optimizer: tff.learning.optimizers.Optimizer,
    model_aggregator: AggregationFactory | None = None,
    batch_size: int | None = None,
    data_by_reference: bool = False,
    client_placement: str = "tff",
    server_learning_rate: Callable[[int], float] | None = None,
) -> PhasedProcess:
    """FedSGD: each client takes one step on its full local gradient; both stages, every round."""
    process = _placed_phase_process(
        client_placement,
        config,
        Phase.JOINT,
        initial,
        client_optimizer,
        server_optimizer,
        model_aggregator,
        local_training.LocalSteps.ONE_STEP,
        batch_size,
        data_by_reference,
    )
    return PhasedProcess(
        {Phase.JOINT: process},
        lambda r: Phase.JOINT,
        initial,
        {Phase.JOINT: as_weighted(model_aggregator)[1]},
        data_by_reference,
        client_placement,
        server_learning_rate,
    )


def uploaded_update_type(process: tff.learning.templates.LearningProcess) -> tff.types.Type:
    """The TFF type of the update a client uploads in `process` (its trainable weights' type).

    Entry i of the update belongs to variable `phases.uploaded_layer_names(config, phase)[i]`.
    """
    return process.get_model_weights.type_signature.result.trainable
