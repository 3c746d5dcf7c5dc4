"""The four privacy defenses against numpy references, and inside TFF's FedAvg."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff
from scipy import stats

from tff_radiomap.aggregators import AdaptiveGroupNoiseFactory, ClipOnlyFactory, DirectedNoiseFactory, UniformNoiseFactory
from tff_radiomap.aggregators import client_perturbation
from tff_radiomap.privacy import allocator_net, budget as budget_lib
from tff_radiomap.privacy.groups import ParameterGroups

SHAPES = [(60, 50), (4000,)]
VALUE_TYPE = tff.to_type([tff.TensorType(np.float32, s) for s in SHAPES])


def _groups():
    ids0 = np.full(SHAPES[0], 2, np.int32)
    ids0[:6] = 0  # 300 sensitive coordinates of "stage 1"
    ids1 = np.full(SHAPES[1], 2, np.int32)
    ids1[:500] = 1  # 500 of "stage 2"
    return ParameterGroups(("stage1_transmitter", "stage2_transmitter", "residual"), (True, True, False), (ids0, ids1))


def _value(scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    return [(scale * rng.normal(size=s)).astype(np.float32) for s in SHAPES]


def _clip(value, c):
    norm = np.sqrt(sum(np.sum(v.astype(np.float64) ** 2) for v in value))
    return [v * min(1.0, c / norm) for v in value], norm


def _noise_by_group(result, clipped, groups):
    diff = np.concatenate([(r - c).ravel() for r, c in zip(result, clipped)])
    ids = np.concatenate([i.ravel() for i in groups.ids])
    return [diff[ids == g] for g in range(groups.num_groups)]


def _assert_variance(noise, sigma):
    """Two-sided chi-square test of Var(noise) = sigma^2 at level 1e-4 (fixed seed)."""
    n = noise.size
    stat = np.sum(noise.astype(np.float64) ** 2) / sigma**2
    p = 2 * min(stats.chi2.cdf(stat, n), stats.chi2.sf(stat, n))
    assert p > 1e-4, f"empirical variance {np.mean(noise**2):.6g} vs sigma^2 {sigma**2:.6g} (n={n}, p={p:.2g})"
    assert abs(np.mean(noise)) < 6 * sigma / np.sqrt(n)


def _run_once(factory, value, weighted=False):
    process = factory.create(VALUE_TYPE, tff.TensorType(np.float32)) if weighted else factory.create(VALUE_TYPE)
    state = process.initialize()
    out = process.next(state, [value], [1.0]) if weighted else process.next(state, [value])
    return out


def test_clip_only_clips_and_adds_nothing(tff_runtime):
    value = _value(scale=0.1)
    out = _run_once(ClipOnlyFactory(clip_norm=1.0), value)
    clipped, norm = _clip(value, 1.0)
    for r, c in zip(out.result, clipped):
        np.testing.assert_allclose(r, c, rtol=1e-5, atol=1e-7)
    m = out.measurements["defense"]
    assert m["norm_before_clip"] == pytest.approx(norm, rel=1e-5)
    assert m["norm_after_clip"] == pytest.approx(1.0, rel=1e-5) and m["clipped_fraction"] == 1.0
    assert m["budget"] == 0 and m["budget_spent"] == 0


def test_small_update_is_not_clipped(tff_runtime):
    value = _value(scale=1e-4)
    out = _run_once(ClipOnlyFactory(clip_norm=10.0), value)
    for r, v in zip(out.result, value):
        np.testing.assert_allclose(r, v, rtol=1e-6)
    assert out.measurements["defense"]["clipped_fraction"] == 0.0


@pytest.mark.parametrize("weighted", [False, True])
def test_uniform_noise_variance_and_budget(tff_runtime, weighted):
    groups = _groups()
    factory = UniformNoiseFactory(clip_norm=0.5, noise_multiplier=3.0, groups=groups, seed=11)
    value = _value()
    out = _run_once(factory, value, weighted)
    clipped, _ = _clip(value, 0.5)
    for noise in _noise_by_group(out.result, clipped, groups):
        _assert_variance(noise, 1.5)
    m = out.measurements["defense"]
    np.testing.assert_allclose(m["sigma"], [1.5] * 3, rtol=1e-6)
    assert m["budget_spent"] == pytest.approx(groups.num_coordinates * 1.5**2, rel=1e-5)
    assert m["budget"] == pytest.approx(m["budget_spent"], rel=1e-5)


def test_budget_without_groups_names_what_is_missing():
    factory = UniformNoiseFactory(1, 2)
    with pytest.raises(ValueError, match=r"UniformNoiseFactory\(clip_norm=1.0, noise_multiplier=2.0\).budget\(\): .* needs the number of coordinates d"):
        factory.budget()
    groups = ParameterGroups.single(SHAPES)
    assert factory.budget(groups) == pytest.approx(groups.num_coordinates * (1 * 2) ** 2)


def test_uniform_noise_without_seed_uses_tf_privacy_and_is_fresh(tff_runtime):
    factory = UniformNoiseFactory(clip_norm=0.5, noise_multiplier=2.0)
    process = factory.create(VALUE_TYPE)
    state = process.initialize()
    value = _value()
    a = process.next(state, [value]).result
    b = process.next(state, [value]).result
    assert not np.allclose(a[1], b[1])
    clipped, _ = _clip(value, 0.5)
    _assert_variance(np.concatenate([(x - c).ravel() for x, c in zip(a, clipped)]), 1.0)


def test_directed_noise_only_on_sensitive_groups(tff_runtime):
    groups = _groups()
    factory = DirectedNoiseFactory(clip_norm=0.5, noise_multiplier=3.0, groups=groups, seed=3)
    value = _value()
    out = _run_once(factory, value)
    clipped, _ = _clip(value, 0.5)
    noise = _noise_by_group(out.result, clipped, groups)
    budget = groups.num_coordinates * 1.5**2
    sigma = np.sqrt(budget / 800)
    _assert_variance(noise[0], sigma)
    _assert_variance(noise[1], sigma)
    np.testing.assert_allclose(noise[2], 0.0, atol=1e-6)
    assert out.measurements["defense"]["budget_spent"] == pytest.approx(budget, rel=1e-5)


def test_adaptive_noise_matches_its_allocation(tff_runtime):
    groups = _groups()
    eta = allocator_net.init_params(3, groups.sizes, seed=5, init="uniform")
    eta["w2"] = np.random.default_rng(5).normal(size=eta["w2"].shape).astype(np.float32)
    factory = AdaptiveGroupNoiseFactory(clip_norm=0.5, noise_multiplier=3.0, groups=groups, total_rounds=10, eta=eta, seed=9)
    value = _value()
    out = _run_once(factory, value)
    clipped, _ = _clip(value, 0.5)
    s = allocator_net.summary_statistics(clipped, [tf.constant(i) for i in groups.ids], groups.sizes, 0.5, 0.0, 0)
    w = budget_lib.masked_softmax(allocator_net.logits(eta, s), groups.sizes).numpy()
    budget = groups.num_coordinates * 1.5**2
    sigma = np.sqrt(budget * w / groups.sizes)
    m = out.measurements["defense"]
    np.testing.assert_allclose(m["sigma"], sigma, rtol=1e-4)
    assert m["budget_spent"] == pytest.approx(budget, rel=1e-5)
    for noise, sg in zip(_noise_by_group(out.result, clipped, groups), sigma):
        _assert_variance(noise, sg)
    assert factory.dp_event() is None


def test_adaptive_floor_and_state_plumbing(tff_runtime):
    groups = _groups()
    factory = AdaptiveGroupNoiseFactory(clip_norm=0.5, noise_multiplier=3.0, groups=groups, sigma_min=0.5, seed=1)
    process = factory.create(VALUE_TYPE)
    state = process.initialize()
    assert state["extras"]["round_index"] == 0
    out = process.next(state, [_value()])
    assert out.state["extras"]["round_index"] == 1
    m = out.measurements["defense"]
    assert np.all(m["sigma"] >= 0.5 - 1e-6)
    assert m["budget_spent"] == pytest.approx(groups.num_coordinates * 1.5**2, rel=1e-5)
    assert factory.dp_event().noise_multiplier == pytest.approx(1.0)
    # Replacing eta between rounds changes the allocation.
    eta = {k: np.array(v) for k, v in out.state["extras"]["eta"].items()}
    eta["b2"] = np.array([5.0, -5.0, -5.0], np.float32)
    out2 = process.next(client_perturbation.replace_extras(out.state, eta=collections.OrderedDict(eta)), [_value()])
    assert out2.measurements["defense"]["sigma"][0] > m["sigma"][0]
    np.testing.assert_array_equal(client_perturbation.get_extras(out2.state)["eta"]["b2"], eta["b2"])
    with pytest.raises(ValueError, match="the floor alone spends"):
        AdaptiveGroupNoiseFactory(clip_norm=0.5, noise_multiplier=3.0, groups=groups, sigma_min=2.0)


def test_perturbation_state_reads_and_replaces_extras_only():
    inner = collections.OrderedDict(value_sum_process=())
    value = collections.OrderedDict(extras=collections.OrderedDict(round_index=3, phase=1), inner=inner)
    state = client_perturbation.PerturbationState.from_value(value)
    assert client_perturbation.PerturbationState.holds(value) and not client_perturbation.PerturbationState.holds(inner)
    assert client_perturbation.get_extras(value) == collections.OrderedDict(round_index=3, phase=1)
    new = client_perturbation.replace_extras(value, phase=2)
    assert list(new) == ["extras", "inner"] and new["inner"] is inner
    assert new["extras"] == collections.OrderedDict(round_index=3, phase=2) and value["extras"]["phase"] == 1
    assert state.replace_extras(phase=2).as_value() == new
    with pytest.raises(KeyError, match="no extra 'eta'"):
        client_perturbation.replace_extras(value, eta=0)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="clip_norm=-1"):
        UniformNoiseFactory(clip_norm=-1.0)
    with pytest.raises(ValueError, match="noise_multiplier=-2"):
        UniformNoiseFactory(clip_norm=1.0, noise_multiplier=-2.0)
    with pytest.raises(ValueError, match="transmitter-sensitive"):
        DirectedNoiseFactory(1.0, 3.0, ParameterGroups.single(SHAPES))
    with pytest.raises(ValueError, match="upload tensor 0 has shape"):
        UniformNoiseFactory(1.0, groups=ParameterGroups.single([(2, 2), (4000,)])).create(VALUE_TYPE)


def _keras_model():
    return tf.keras.Sequential([tf.keras.layers.InputLayer((3,)), tf.keras.layers.Dense(4, activation="relu"), tf.keras.layers.Dense(1)])


def _client_data(seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(16, 3)).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices((x, x.sum(1, keepdims=True))).batch(8)


@pytest.mark.parametrize("name", ["clip", "uniform", "directed", "adaptive"])
@pytest.mark.parametrize("weighted", [False, True])
def test_every_factory_runs_inside_tff_fed_avg(tff_runtime, name, weighted):
    data = [_client_data(i) for i in range(3)]
    spec = data[0].element_spec

    def model_fn():
        return tff.learning.models.from_keras_model(_keras_model(), loss=tf.keras.losses.MeanSquaredError(), input_spec=spec)

    shapes = [tuple(v.shape) for v in _keras_model().trainable_variables]
    ids = [np.full(s, 1, np.int32) for s in shapes]
    ids[0][1, :] = 0  # The kernel row that reads input feature 1: our "sensitive" group here.
    groups = ParameterGroups(("sensitive", "residual"), (True, False), tuple(ids))
    factory = {
        "clip": lambda: ClipOnlyFactory(1.0, groups=groups),
        "uniform": lambda: UniformNoiseFactory(1.0, 0.1, groups=groups),
        "directed": lambda: DirectedNoiseFactory(1.0, 0.1, groups=groups),
        "adaptive": lambda: AdaptiveGroupNoiseFactory(1.0, 0.1, groups=groups),
    }[name]()
    build = tff.learning.algorithms.build_weighted_fed_avg if weighted else tff.learning.algorithms.build_unweighted_fed_avg
    process = build(model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.05), model_aggregator=factory)
    state = process.initialize()
    for _ in range(2):
        out = process.next(state, data)
        state = out.state
    agg = out.metrics["aggregator"]["defense"]
    expected_budget = 0.0 if name == "clip" else groups.num_coordinates * 0.1**2
    assert agg["budget_spent"] == pytest.approx(expected_budget, rel=1e-5, abs=1e-9)
    weights = process.get_model_weights(state).trainable
    assert all(np.all(np.isfinite(w)) for w in weights)


def _factories(clip_norm, noise_multiplier):
    groups = _groups()
    return {
        "clip": ClipOnlyFactory(clip_norm, groups=groups),
        "uniform": UniformNoiseFactory(clip_norm, noise_multiplier, groups=groups, seed=2),
        "directed": DirectedNoiseFactory(clip_norm, noise_multiplier, groups=groups, seed=2),
        "adaptive": AdaptiveGroupNoiseFactory(clip_norm, noise_multiplier, groups=groups, seed=2),
        "adaptive_floor": AdaptiveGroupNoiseFactory(clip_norm, noise_multiplier, groups=groups, sigma_min=0.05, seed=2),
    }


@pytest.mark.parametrize("name", ["clip", "uniform", "directed", "adaptive", "adaptive_floor"])
def test_clipping_never_leaves_a_norm_above_c(name):
    """Eq. (17) for every factory, over 300 random updates whose norms span 1e-6 .. 1e7 x C."""
    c = 0.7
    factory = _factories(c, 3.0)[name]
    rng = np.random.default_rng(123)
    for i in range(300):
        scale = 10.0 ** rng.uniform(-7, 6)
        value = [tf.constant((scale * rng.standard_t(3, size=s)).astype(np.float32)) for s in SHAPES]
        clipped, norm = factory._clip(value)
        before = np.sqrt(sum(np.sum(v.numpy().astype(np.float64) ** 2) for v in value))
        after = np.sqrt(sum(np.sum(np.asarray(t, np.float64) ** 2) for t in clipped))
        assert after <= c * (1 + 1e-5), f"update {i}: norm {before:.3g} clipped to {after:.9g} > C = {c}"
        assert float(norm) == pytest.approx(before, rel=1e-4)
        if before <= c * (1 - 1e-5):  # An update already within C is left as it is.
            for t, v in zip(clipped, value):
                np.testing.assert_allclose(t, v, rtol=1e-5, atol=1e-30)
        else:
            assert after == pytest.approx(c, rel=1e-5)


def test_adaptive_floor_noise_variance_per_group(tff_runtime):
    """With sigma_min, every group's empirical variance matches the sigma_g the factory reports
    (chi-square at a fixed seed), each sigma_g >= sigma_min, and the budget is spent exactly."""
    groups = _groups()
    eta = allocator_net.init_params(3, groups.sizes, seed=7, init="uniform")
    eta["w2"] = np.random.default_rng(7).normal(size=eta["w2"].shape).astype(np.float32)
    factory = AdaptiveGroupNoiseFactory(clip_norm=0.5, noise_multiplier=3.0, groups=groups, sigma_min=0.8, eta=eta, seed=13)
    value = _value()
    out = _run_once(factory, value, weighted=True)
    clipped, _ = _clip(value, 0.5)
    m = out.measurements["defense"]
    sigma = np.asarray(m["sigma"])
    assert np.all(sigma >= 0.8 - 1e-6) and np.ptp(sigma) > 0.1  # The floor binds, the split is not uniform.
    for noise, sg in zip(_noise_by_group(out.result, clipped, groups), sigma):
        _assert_variance(noise, sg)
    assert m["budget_spent"] == pytest.approx(groups.num_coordinates * 1.5**2, rel=1e-5)
