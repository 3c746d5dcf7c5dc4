"""What runs around the rounds of a privacy experiment: the attack evaluated between rounds, the
adaptive allocator's training between rounds, and the twin's leakage basis refreshed for the
defenses on the leakage partition (`basis_refresh`). The defenses themselves are rows of
`defense_registry`.
"""

from __future__ import annotations

import collections
import dataclasses
import time

import numpy as np
import tensorflow as tf
from absl import logging

from tff_radiomap.aggregators import AdaptiveGroupNoiseFactory, client_perturbation
from tff_radiomap.data import radiomapseer
from tff_radiomap.experiments import basis_refresh, privacy_matching, shared_models
from tff_radiomap.experiments.defense_registry import DEFENSES
from tff_radiomap.experiments.basis_refresh import due_in_phase
from tff_radiomap.learning import local_training, radiounet_process
from tff_radiomap.models import phases
from tff_radiomap.models.phases import Phase
from tff_radiomap.privacy import allocator, attack

# Per attacked round: the strongest attacker (what tables report: `privacy_matching.strongest`), the
# ridge's constant guess, its plain and defense-aware views, and the matching attacker's figures.
ATTACK_METRICS = ("attack_rmse_m", "attack_constant_rmse_m", "attack_plain_rmse_m", "attack_aware_rmse_m") + privacy_matching.MATCHING_METRICS


def aggregator_extras(state, factory):
    """The defense extras in a `PhasedProcess` state (the factory's initial ones if absent)."""
    agg = getattr(state["learning"], "aggregator", None)
    return client_perturbation.get_extras(agg) if client_perturbation.PerturbationState.holds(agg) else factory.initial_extras()


def replace_extras(state, **updates):
    """A `PhasedProcess` state whose aggregator extras have `updates` (e.g. eta)."""
    learning = state["learning"]  # A tff.learning.templates.LearningAlgorithmState (a NamedTuple).
    new_learning = learning._replace(aggregator=client_perturbation.replace_extras(learning.aggregator, **updates))
    return collections.OrderedDict(phase=state["phase"], learning=new_learning)


@dataclasses.dataclass
class PrivacyHooks:
    """Attack evaluation and allocator training around the rounds of one run."""

    config: object
    attacker_pool: dict  # x, y, coords_m of the observer's labelled samples (train and held-out traces).
    factories: dict  # Phase -> factory or None.
    allocator_trainer: dict = dataclasses.field(default_factory=dict)
    extra_pool: dict | None = None  # x, y, coords_m the observer simulated itself: training traces only.
    matching: privacy_matching.MatchingObserver | None = None  # The twin-matching attacker (None: ridge only).
    _collectors: dict = dataclasses.field(default_factory=dict)  # Phase -> attack.TraceCollector (the run's defense inside)

    def attack_due(self, round_num: int) -> bool:
        return attack_due(self.config, round_num)

    def _model(self, phase: Phase, weights: phases.NetworkWeights) -> tf.keras.Model:
        """The phase's uploaded model holding `weights`: the process's (`shared_models`), so that the
        traced trace and allocator functions are reused round after round and run after run."""
        model = shared_models.phase_model(self.config.model_config(), phase)
        phases.set_phase_weights(model, weights, phase)
        return model

    def _client_optimizer(self):
        return radiounet_process.build_optimizer(self.config.client_optimizer, self.config.client_learning_rate)

    def round_extras(self, state, round_num: int):
        """The defense parameters the clients of round `round_num` use (None: No Defense): the
        state's, or the factory's initial ones in a phase's first round."""
        factory = self.factories.get(self.config.phase_for_round(round_num))
        if factory is None:
            return None
        in_phase = int(state["phase"]) == int(self.config.phase_for_round(round_num))
        return aggregator_extras(state, factory) if in_phase else factory.initial_extras()

    def attack(self, trainer, state, round_num: int) -> dict:
        """Attacker RMSE against the uploads of round `round_num` (from the model broadcast in it)."""
        return self.attack_weights(trainer.network_weights(state), self.round_extras(state, round_num), round_num)

    def attack_weights(self, weights: phases.NetworkWeights, extras, round_num: int) -> dict:
        """`ATTACK_METRICS` of the uploads of round `round_num` from the broadcast `weights`, the
        defense holding `extras` (`round_extras`) and its current basis: every attacker, and the
        strongest of them."""
        cfg = self.config
        phase = cfg.phase_for_round(round_num)
        factory = self.factories.get(phase)
        model = self._model(phase, weights)
        if phase not in self._collectors:
            self._collectors[phase] = attack.TraceCollector(
                model, self._client_optimizer(), cfg.attack_steps, factory, local_updates=local_training.local_updates
            )
        collector = self._collectors[phase]
        collector.extras = extras
        if extras is not None and hasattr(factory, "observe"):  # The batched trace path reads them there.
            factory.observe(extras)
        result = attack.run_attack(
            collector,
            self.attacker_pool,
            attack.AttackConfig(cfg.attack_steps, cfg.attack_train_traces, cfg.attack_test_traces, seed=cfg.seed + round_num),
            extra=self.extra_pool,
        )
        matched = None
        if self.matching is not None:
            traces = shared_models.upload_traces(cfg.model_config(), phase, cfg.client_optimizer, cfg.client_learning_rate, cfg.attack_steps)
            t0 = time.monotonic()
            matched = self.matching.attack(traces, factory, extras, cfg.seed + round_num, self.attacker_pool["coords_m"].mean(0))
            matching_seconds = time.monotonic() - t0
            if not np.isfinite(matched.rmse_m):
                raise FloatingPointError("the matching attacker's estimate is not finite: the global model's local steps diverged")
        strongest = privacy_matching.strongest(result.rmse_m, result.constant_rmse_m, matched)
        values = (strongest, result.constant_rmse_m, result.plain_rmse_m, result.aware_rmse_m)
        if matched is None:
            values += (float("nan"),) * len(privacy_matching.MATCHING_METRICS)
        else:
            values += (matched.rmse_m, matched.map_rmse_m, matched.constant_rmse_m, matching_seconds)
        return dict(zip(ATTACK_METRICS, values))

    def train_allocator(self, trainer, state, round_num: int):
        """After round `round_num`: one allocator round for the adaptive defense if due (a phase's
        first round and every `allocator_every` rounds of it); new state and its measurements."""
        cfg = self.config
        phase = Phase(int(state["phase"]))
        factory = self.factories.get(phase)
        if not isinstance(factory, AdaptiveGroupNoiseFactory) or not due_in_phase(cfg, round_num, cfg.allocator_every):
            return state, {}
        trainer_of_phase = self._allocator_trainer(phase, factory)
        model = self._model(phase, trainer.network_weights(state))
        eta, measurements = trainer_of_phase.round(
            model, self._client_optimizer(), self.attacker_pool, aggregator_extras(state, factory), steps=cfg.attack_steps
        )
        return replace_extras(state, eta=eta), {f"allocator/{k}": v for k, v in measurements.items()}

    def _allocator_trainer(self, phase: Phase, factory) -> allocator.AllocatorTrainer:
        if phase not in self.allocator_trainer:
            cfg = self.config
            self.allocator_trainer[phase] = allocator.AllocatorTrainer(
                factory,
                allocator.AllocatorConfig(lambda_p=cfg.allocator_lambda_p, lambda_h=cfg.allocator_lambda_h, seed=cfg.seed, map_size_m=cfg.map_size_m),
                local_updates=local_training.local_updates,
                collector_for=lambda model, optimizer: shared_models.upload_collector(
                    cfg.model_config(), phase, cfg.client_optimizer, cfg.client_learning_rate
                ),
            )
        return self.allocator_trainer[phase]

    def allocator_state(self) -> dict:
        """Arrays of every phase's allocator trainer (proxy, optimizer slots), for checkpoints."""
        return {f"{int(p)}/{k}": v for p, t in self.allocator_trainer.items() for k, v in t.state().items()}

    def restore_allocator(self, arrays: dict) -> None:
        """Undoes `allocator_state()` (on hooks that have not trained yet)."""
        for phase in {Phase(int(k.split("/", 1)[0])) for k in arrays}:
            prefix = f"{int(phase)}/"
            self._allocator_trainer(phase, self.factories[phase]).restore({k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)})


def attack_due(config, round_num: int) -> bool:
    """Whether round `round_num` is an attack round: round 1, every `attack_every`-th, and the last."""
    every = config.attack_every
    return every > 0 and (round_num == 1 or round_num % every == 0 or round_num == config.rounds)


def attacker_pool(data, map_positions) -> dict:
    """x, y, coords_m, map_id of every sample of the maps at `map_positions` (the observer's
    labelled pool)."""
    a = data.arrays(map_positions)
    return {"x": a["x"], "y": a["y"], "coords_m": a["coords_m"], "map_id": a["map_id"]}


class DataTooSmallError(ValueError):
    """The data set cannot serve the configuration (e.g. fewer samples than the attack needs)."""


def build_hooks(config, maps: radiomapseer.RadioMapSeer, factories: dict) -> PrivacyHooks | None:
    """Attack and allocator hooks of the run (None when it needs neither). `maps`: the run's data
    set, already read; `factories`: {phase: what an observer of the phase's uploads sees}
    (`defense_registry.upload_views`). A defense whose uploads are not observable (secure
    aggregation) is not attacked: the run logs so."""
    if config.centralised or (config.attack_every == 0 and config.defense != "adaptive"):
        return None
    if not DEFENSES[config.defense].uploads_observable:
        if config.attack_every:
            logging.info("defense %s: an observer of individual uploads sees only masked values (secure aggregation); no attack", config.defense)
        return None
    # The observer's labelled pool: every (map, transmitter) sample of the data set (building maps
    # are public; the held-out traces are other samples), plus its own simulations if given.
    pool = attacker_pool(maps, np.arange(len(maps.map_ids)))
    need = config.attack_train_traces + config.attack_test_traces
    if config.attack_every and len(pool["x"]) < need:
        raise DataTooSmallError(
            f"--attack_train_traces={config.attack_train_traces} --attack_test_traces={config.attack_test_traces}: "
            f"expected together at most the {len(pool['x'])} samples of {config.data_root}"
        )
    extra = None
    if config.attack_extra_root:
        own = radiomapseer.RadioMapSeer(radiomapseer.LoaderConfig(root=config.attack_extra_root, resolution=config.resolution))
        extra = attacker_pool(own, np.arange(len(own.map_ids)))
    matching = privacy_matching.MatchingObserver(config, maps) if config.attack_every and config.matching_maps else None
    return PrivacyHooks(config, pool, factories, extra_pool=extra, matching=matching)


def basis_refresher(config, basis_dir: str, hooks: PrivacyHooks | None) -> basis_refresh.BasisRefresher | None:
    """The leakage basis keeper of a defense on the leakage partition (else None); its twin is
    made if absent."""
    if not basis_refresh.uses_basis(config):
        return None
    return basis_refresh.BasisRefresher(config, basis_dir, hooks.factories if hooks is not None else {})
