"""The privacy defenses of paper 000 in the experiment runner: factories per phase, the attack
evaluated between rounds, and the adaptive allocator's training between rounds.

Each defense uses the two-stage protocol and uploads, per phase, the trainable weights of that
phase; its parameter groups (`privacy.groups.radiounet_groups`) are built per phase, so the budget
B = d (C nu)^2 counts the coordinates actually uploaded.
"""

from __future__ import annotations

import collections
import dataclasses

import tensorflow as tf

from tff_radiomap.aggregators import AdaptiveGroupNoiseFactory, ClipOnlyFactory, DirectedNoiseFactory, UniformNoiseFactory
from tff_radiomap.aggregators.client_perturbation import with_extras
from tff_radiomap.learning import keras_wrap, local_training, radiounet_process
from tff_radiomap.learning.keras_wrap import Phase
from tff_radiomap.privacy import allocator, attack, groups

NOISE_DEFENSES = ("uniform", "directed", "adaptive")


def make_factory(name: str, config, phase: Phase):
    """The `tff.aggregators` factory of defense `name` for the uploads of `phase`."""
    g = groups.radiounet_groups(config.model_config(), phase)
    c, nu, seed = config.clip_norm, config.noise_multiplier, config.seed
    if name == "clip":
        return ClipOnlyFactory(c)
    if name == "uniform":
        return UniformNoiseFactory(c, nu, groups=g, seed=seed)
    if name == "directed":
        return DirectedNoiseFactory(c, nu, groups=g, seed=seed)
    if name == "adaptive":
        return AdaptiveGroupNoiseFactory(
            c, nu, groups=g, total_rounds=config.rounds, phase=int(phase == Phase.STAGE2), sigma_min=config.sigma_min, seed=seed
        )
    raise ValueError(f"defense {name!r}: expected one of clip, {', '.join(NOISE_DEFENSES)}")


def aggregator_extras(state, factory):
    """The defense extras in a `PhasedProcess` state (the factory's initial ones if absent)."""
    agg = getattr(state["learning"], "aggregator", None)
    if isinstance(agg, collections.abc.Mapping) and "extras" in agg:
        return agg["extras"]
    return factory.initial_extras()


def replace_extras(state, **updates):
    """A `PhasedProcess` state whose aggregator extras have `updates` (e.g. eta)."""
    learning = state["learning"]  # A tff.learning.templates.LearningAlgorithmState (a NamedTuple).
    new_learning = learning._replace(aggregator=with_extras(learning.aggregator, **updates))
    return collections.OrderedDict(phase=state["phase"], learning=new_learning)


@dataclasses.dataclass
class PrivacyHooks:
    """Attack evaluation and allocator training around the rounds of one run."""

    config: object
    attacker_pool: dict  # x, y, coords_m of the observer's labelled samples (train and held-out traces).
    factories: dict  # Phase -> factory or None.
    allocator_trainer: dict = dataclasses.field(default_factory=dict)
    extra_pool: dict | None = None  # x, y, coords_m the observer simulated itself: training traces only.
    _models: dict = dataclasses.field(default_factory=dict)  # Phase -> keras_wrap.build_phase_model(...)
    _collectors: dict = dataclasses.field(default_factory=dict)  # Phase -> attack.TraceCollector

    def attack_due(self, round_num: int) -> bool:
        every = self.config.attack_every
        return every > 0 and (round_num == 1 or round_num % every == 0 or round_num == self.config.rounds)

    def _model(self, phase: Phase, weights: keras_wrap.NetworkWeights) -> tf.keras.Model:
        """The phase's uploaded model holding `weights`: built once a phase, so that the traced
        trace and allocator functions are reused round after round."""
        if phase not in self._models:
            self._models[phase] = keras_wrap.build_phase_model(self.config.model_config(), phase)
        local_training.set_phase_weights(self._models[phase], weights, phase)
        return self._models[phase]

    def _client_optimizer(self):
        return radiounet_process.build_optimizer(self.config.client_optimizer, self.config.client_learning_rate)

    def attack(self, trainer, state, round_num: int) -> dict:
        """Attacker RMSE against the uploads of round `round_num` (from the model broadcast in it)."""
        cfg = self.config
        phase = cfg.phase_for_round(round_num)
        factory = self.factories.get(phase)
        model = self._model(phase, trainer.network_weights(state))
        extras = None
        if factory is not None:
            in_phase = int(state["phase"]) == int(phase)
            extras = aggregator_extras(state, factory) if in_phase else factory.initial_extras()
        if phase not in self._collectors:
            self._collectors[phase] = attack.TraceCollector(model, self._client_optimizer(), cfg.attack_steps, factory)
        collector = self._collectors[phase]
        collector.extras = extras
        result = attack.run_attack(
            collector,
            self.attacker_pool,
            attack.AttackConfig(cfg.attack_steps, cfg.attack_train_traces, cfg.attack_test_traces, seed=cfg.seed + round_num),
            extra=self.extra_pool,
        )
        return {"attack_rmse_m": result.rmse_m, "attack_constant_rmse_m": result.constant_rmse_m}

    def train_allocator(self, trainer, state, round_num: int):
        """After round `round_num`: one allocator round for the adaptive defense; new state."""
        cfg = self.config
        phase = Phase(int(state["phase"]))
        factory = self.factories.get(phase)
        if not isinstance(factory, AdaptiveGroupNoiseFactory):
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


def attacker_pool(data, map_positions) -> dict:
    """x, y, coords_m of every sample of the maps at `map_positions` (the observer's labelled pool)."""
    a = data.arrays(map_positions)
    return {"x": a["x"], "y": a["y"], "coords_m": a["coords_m"]}
