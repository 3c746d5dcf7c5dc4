"""The privacy defenses inside the two-stage RadioUNet process, with the attack and allocator hooks."""

import collections
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tff_radiomap.models import phases
from tff_radiomap.aggregators import AdaptiveGroupNoiseFactory, DirectedNoiseFactory
from tff_radiomap.experiments import defense_registry
from tff_radiomap.experiments import privacy_defenses as pd
from tff_radiomap.learning import radiounet_process as rp
from tff_radiomap.models.phases import Phase
from tff_radiomap.models import radiounet


@dataclasses.dataclass(frozen=True)
class _Config:
    """The fields of the experiment configuration the hooks read."""

    resolution: int = 16
    width: float = 0.125
    rounds: int = 4
    stage1_rounds: int = 2
    clip_norm: float = 0.01  # Small enough that nu = 3 noise under server SGD(1.0) keeps the model finite.
    noise_multiplier: float = 3.0
    sigma_min: float = 0.0
    fresh_noise: bool = False
    adaptive_partition: str = "paper"
    seed: int = 0
    client_optimizer: str = "sgd"
    client_learning_rate: float = 0.05
    attack_every: int = 2
    attack_steps: int = 2
    attack_train_traces: int = 24
    attack_test_traces: int = 8
    allocator_lambda_p: float = 1.0
    allocator_lambda_h: float = 0.01
    allocator_every: int = 1
    basis_every: int = 10
    map_size_m: float = 64.0

    def model_config(self):
        return radiounet.RadioUNetConfig(resolution=self.resolution, width=self.width)

    def phase_for_round(self, r):
        return Phase.STAGE1 if r <= self.stage1_rounds else Phase.STAGE2


def _pool(n=32, seed=0):
    rng = np.random.default_rng(seed)
    x = np.zeros((n, 16, 16, 2), np.float32)
    x[..., 0] = rng.random((n, 16, 16)) < 0.3
    pos = rng.integers(0, 16, size=(n, 2))
    x[np.arange(n), pos[:, 0], pos[:, 1], 1] = 1
    return {"x": x, "y": rng.random((n, 16, 16, 1)).astype(np.float32), "coords_m": (pos[:, ::-1] * 4 + 2).astype(np.float32)}


def _datasets(pool):
    return [tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=pool["x"][i::3], y=pool["y"][i::3])).batch(4) for i in range(3)]


def test_factories_per_phase():
    cfg = _Config()
    assert isinstance(defense_registry.make_factory("directed", cfg, Phase.STAGE1), DirectedNoiseFactory)
    adaptive2 = defense_registry.make_factory("adaptive", cfg, Phase.STAGE2)
    assert isinstance(adaptive2, AdaptiveGroupNoiseFactory) and adaptive2.phase == 1
    assert adaptive2.groups.sizes[0] == 0 and adaptive2.groups.sizes[1] > 0
    with pytest.raises(ValueError, match="defense 'bogus': expected one of"):
        defense_registry.make_factory("bogus", cfg, Phase.STAGE1)


def test_adaptive_defense_runs_in_the_two_stage_process_with_hooks(tff_runtime, small_allocator):
    """The attack when due and an allocator round after every round (its small config: the hooks'
    wiring is tested, not what the allocator learns) on the phases' adaptive factories."""
    cfg = _Config()
    pool = _pool()
    initial = phases.initial_weights(cfg.model_config(), seed=0)
    factories = {p: defense_registry.make_factory("adaptive", cfg, p) for p in (Phase.STAGE1, Phase.STAGE2)}
    trainer = rp.build_two_stage_process(
        cfg.model_config(), initial, cfg.stage1_rounds, rp.build_optimizer("sgd", 0.05), rp.build_optimizer("sgd", 1.0), factories
    )
    hooks = pd.PrivacyHooks(cfg, pool, factories)
    state = trainer.initialize()
    seen = []
    for r in range(1, cfg.rounds + 1):
        if hooks.attack_due(r):
            result = hooks.attack(trainer, state, r)
            assert np.isfinite(result["attack_rmse_m"]) and result["attack_constant_rmse_m"] > 0
            seen.append(r)
        state, metrics = trainer.next(state, r, _datasets(pool))
        spent = metrics["aggregator"]["defense"]["budget_spent"]
        assert spent == pytest.approx(metrics["aggregator"]["defense"]["budget"], rel=1e-4)
        before = {k: np.array(v) for k, v in pd.aggregator_extras(state, factories[Phase(int(state["phase"]))])["eta"].items()}
        state, measured = hooks.train_allocator(trainer, state, r)
        after = pd.aggregator_extras(state, factories[Phase(int(state["phase"]))])["eta"]
        assert any(not np.allclose(before[k], after[k]) for k in before)
        assert measured["allocator/weight_residual"] >= 0, (r, measured)
    assert seen == [1, 2, 4]
    weights = trainer.network_weights(state)
    assert all(np.all(np.isfinite(w)) for w in weights.stage1 + weights.stage2)


def test_the_allocator_trains_at_each_phases_first_round_and_every_n_rounds_of_it():
    cfg = dataclasses.replace(_Config(), rounds=7, stage1_rounds=3, allocator_every=2)
    assert [r for r in range(1, 8) if pd.due_in_phase(cfg, r, cfg.allocator_every)] == [1, 3, 4, 6]
    assert [r for r in range(1, 8) if pd.due_in_phase(cfg, r, 1)] == list(range(1, 8))
    factories = {p: defense_registry.make_factory("adaptive", cfg, p) for p in (Phase.STAGE1, Phase.STAGE2)}
    hooks = pd.PrivacyHooks(cfg, _pool(), factories)
    state = {"phase": np.int32(Phase.STAGE1)}
    # Not due: the state comes back as it was, nothing measured, the trainer not touched.
    assert hooks.train_allocator(None, state, 2) == (state, {})
    assert hooks.allocator_trainer == {}
