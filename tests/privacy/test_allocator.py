"""The closed-form proxy attacker (Eq. (20)), the allocator step (Eq. (21)) and the adaptive
factory over subspace groups."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_radiomap.models import phases
from tff_radiomap.aggregators.adaptive_noise import AdaptiveGroupNoiseFactory, AdaptiveSubspaceNoiseFactory
from tff_radiomap.learning import local_training
from tff_radiomap.privacy import allocator, allocator_net, attack, proxy
from tff_radiomap.privacy import budget as budget_lib
from tff_radiomap.privacy.groups import ParameterGroups, SubspaceGroups

SHAPES = [(20, 10), (100,)]  # d = 300
D = 300


def _mask_groups(leak=40):
    """Group 0: the first `leak` coordinates of tensor 0; group 1: the rest."""
    ids0 = np.ones(SHAPES[0], np.int32)
    ids0.ravel()[:leak] = 0
    return ParameterGroups(("leak", "rest"), (True, False), (ids0, np.ones(SHAPES[1], np.int32)))


def _leaky_traces(n=160, leak=40, seed=0, signal=0.05, clutter=0.02):
    """Uploads [n, D] whose first `leak` coordinates are linear in the position, the rest noise."""
    rng = np.random.default_rng(seed)
    coords = rng.uniform(0, 1, size=(n, 2))
    u = clutter * rng.standard_normal((n, D))
    u[:, :leak] += signal * (coords - 0.5) @ rng.standard_normal((2, leak))
    return u.astype(np.float32), coords


def _problem(u, coords, groups, n_test, seed=1, basis=None):
    grams = proxy.group_grams(u, groups, basis)
    cross, noise = proxy.sample_noise_grams(grams, groups.sizes, np.random.default_rng(seed))
    n = len(u)
    return proxy.ProxyProblem(grams, cross, noise, coords, np.arange(n - n_test), np.arange(n - n_test, n), np.asarray(groups.sizes))


def _ridge_mse(x, coords, train, test, alpha):
    """Explicit dual ridge on features x (centred on the training mean), held-out MSE."""
    x = x - x[train].mean(0)
    y_mean = coords[train].mean(0)
    a = np.linalg.solve(x[train] @ x[train].T + alpha * np.eye(len(train)), coords[train] - y_mean)
    pred = x[test] @ x[train].T @ a + y_mean
    return float(np.mean(np.sum((coords[test] - pred) ** 2, axis=1)))


def test_the_signed_block_is_the_fingerprints_first_part():
    rng = np.random.default_rng(0)
    uploads = [[tf.constant(rng.normal(size=s), tf.float32) for s in [(2, 2, 3, 4), (4,)]] for _ in range(3)]
    phi = attack.fingerprint(uploads, [False, False])
    block = attack.signed_block(uploads)
    np.testing.assert_array_equal(phi[: block.shape[0]], block)
    flat = tf.stack([tf.stack([tf.concat([tf.reshape(t, [-1]) for t in up], 0) for up in uploads])])  # [1, S, d]
    np.testing.assert_array_equal(attack.fingerprint_batch(flat, [(2, 2, 3, 4), (4,)], [False, False])[:, : block.shape[0]], attack.signed_block(flat))


def test_the_noisy_gram_of_a_given_draw_is_the_ridge_on_those_noised_traces():
    groups = _mask_groups()
    u, coords = _leaky_traces(n=60)
    rng = np.random.default_rng(3)
    ids = np.concatenate([a.ravel() for a in groups.ids])
    z = rng.standard_normal((60, D))
    sigma = rng.uniform(0.01, 0.05, size=(60, 2))  # Per trace and group.
    # The blocks of this very draw (E_g = z on group g's coordinates).
    grams = proxy.group_grams(u, groups)
    cross = np.stack([(u[:, ids == g] @ z[:, ids == g].T) for g in range(2)]).astype(np.float64)
    noise = np.stack([(z[:, ids == g] @ z[:, ids == g].T) for g in range(2)])
    problem = proxy.ProxyProblem(grams, cross, noise, coords, np.arange(45), np.arange(45, 60), np.asarray(groups.sizes))
    x = u.astype(np.float64) + z * sigma[:, ids]
    for alpha in (1e-3, 0.1):
        got = float(problem.heldout_mse(problem.noisy_gram(sigma), alpha))
        assert got == pytest.approx(_ridge_mse(x, coords, np.arange(45), np.arange(45, 60), alpha), rel=1e-6)
    # The whitened view: group g scaled by min sigma / sigma_g, trace by trace.
    scale = sigma.min(axis=1, keepdims=True) / sigma
    got = float(problem.heldout_mse(problem.noisy_gram(sigma, scale), 0.1))
    assert got == pytest.approx(_ridge_mse(x * scale[:, ids], coords, np.arange(45), np.arange(45, 60), 0.1), rel=1e-6)


def test_the_closed_form_matches_a_monte_carlo_ridge_on_noised_traces():
    """The proxy's expected held-out MSE (its draws of the noise Grams) against explicit ridge fits
    on actually noised traces, many draws each: equal within Monte-Carlo error."""
    groups = _mask_groups()
    u, coords = _leaky_traces(n=80)
    ids = np.concatenate([a.ravel() for a in groups.ids])
    sigma = np.tile([[0.03, 0.01]], (80, 1))
    train, test, alpha, draws = np.arange(60), np.arange(60, 80), 0.05, 300
    rng = np.random.default_rng(7)
    explicit = [_ridge_mse(u + rng.standard_normal((80, D)) * sigma[:, ids], coords, train, test, alpha) for _ in range(draws)]
    grams = proxy.group_grams(u, groups)
    closed = []
    for k in range(draws):
        cross, noise = proxy.sample_noise_grams(grams, groups.sizes, np.random.default_rng([11, k]))
        problem = proxy.ProxyProblem(grams, cross, noise, coords, train, test, np.asarray(groups.sizes))
        closed.append(float(problem.heldout_mse(problem.noisy_gram(sigma), alpha)))
    err = 3 * np.sqrt(np.var(explicit) / draws + np.var(closed) / draws)
    assert abs(np.mean(closed) - np.mean(explicit)) < err, (np.mean(closed), np.mean(explicit), err)
    clean = _ridge_mse(u.astype(np.float64), coords, train, test, alpha)
    assert np.mean(explicit) > 1.2 * clean  # The noise matters at this scale: the comparison is not vacuous.


def test_the_proxy_reads_a_leaking_group_and_noise_there_hides_it():
    groups = _mask_groups()
    u, coords = _leaky_traces()
    problem = _problem(u, coords, groups, n_test=40)
    quiet = np.full((160, 2), 1e-4)
    l_clean, choice = proxy.proxy_step(problem, quiet)
    assert float(l_clean) < 0.3 and np.isfinite(choice[1])
    leak_noised = np.tile([[0.2, 1e-4]], (160, 1))
    rest_noised = np.tile([[1e-4, 0.2]], (160, 1))
    assert float(proxy.proxy_step(problem, leak_noised)[0]) > 0.8
    assert float(proxy.proxy_step(problem, rest_noised)[0]) < 0.4
    # Never worse than the constant guess.
    assert float(proxy.proxy_step(problem, np.full((160, 2), 10.0))[0]) <= 1.0 + 1e-12


def test_an_allocator_step_moves_weight_toward_the_leaking_group():
    groups = _mask_groups()
    u, coords = _leaky_traces()
    problem = _problem(u, coords, groups, n_test=40)
    budget = budget_lib.total_budget(D, 1.0, 0.01)  # Uniform: sigma 0.01 everywhere; the leak stays readable.
    eta = {k: tf.Variable(v) for k, v in allocator_net.init_params(2, groups.sizes, seed=0, init="proportional").items()}
    summaries = tf.zeros([160, allocator_net.summary_size(2)])
    optimizer = tf.keras.optimizers.Adam(0.1)

    def loss_fn(eta):
        w = budget_lib.masked_softmax(allocator_net.logits(eta, summaries), groups.sizes)
        _, sigma = budget_lib.allocate(w, budget, groups.sizes)
        l_proxy, _ = proxy.proxy_step(problem, sigma)
        return -tf.cast(l_proxy, tf.float32), {"w": w, "proxy": l_proxy}

    _, start = loss_fn(eta)
    w0 = float(tf.reduce_mean(start["w"][:, 0]))
    assert w0 == pytest.approx(40 / D, rel=1e-3)  # Uniform's allocation: w_g = d_g / d.
    for _ in range(10):
        allocator.allocator_step(eta, optimizer, loss_fn)
    _, end = loss_fn(eta)
    assert float(tf.reduce_mean(end["w"][:, 0])) > w0 + 0.05
    assert float(end["proxy"]) > float(start["proxy"])


def test_the_allocator_step_leaves_eta_alone_on_a_non_finite_gradient():
    eta = {"b": tf.Variable([1.0, 2.0])}
    result = allocator.allocator_step(eta, tf.keras.optimizers.Adam(0.1), lambda e: (tf.reduce_sum(e["b"]) * np.float32("nan"), {}))
    assert result is None
    np.testing.assert_array_equal(eta["b"].numpy(), [1.0, 2.0])


def test_subspace_grams_split_the_total():
    rng = np.random.default_rng(0)
    basis, _ = np.linalg.qr(rng.standard_normal((D, 12)))
    groups = SubspaceGroups(tuple(SHAPES), (8, 4), basis=basis.astype(np.float32))
    u = rng.standard_normal((30, D)).astype(np.float32)
    grams = proxy.group_grams(u, groups, groups.basis)
    np.testing.assert_allclose(grams.sum(0), u.astype(np.float64) @ u.T.astype(np.float64), rtol=1e-4, atol=1e-3)
    coef = u.astype(np.float64) @ groups.basis[:, 8:]
    np.testing.assert_allclose(grams[1], coef @ coef.T, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# The adaptive factory over subspace groups.
def _subspace_groups(blocks=(20, 10), seed=0):
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(D, sum(blocks))))
    return SubspaceGroups(tuple(SHAPES), blocks, basis=q.astype(np.float32))


def _eta(groups, seed=3):
    eta = allocator_net.init_params(groups.num_groups, groups.sizes, seed=seed, init="uniform")
    eta["w2"] = (np.random.default_rng(seed).normal(size=eta["w2"].shape)).astype(np.float32)  # Input-dependent.
    return eta


def _upload(seed=5, scale=0.01):
    rng = np.random.default_rng(seed)
    return [(scale * rng.normal(size=s)).astype(np.float32) for s in SHAPES]


def test_adaptive_subspace_starts_at_uniform_and_keeps_the_budget():
    groups = _subspace_groups()
    factory = AdaptiveSubspaceNoiseFactory(1.0, 0.5, groups, total_rounds=10, seed=0)
    noised, sigma = factory.privatize(_upload(), seed=4)
    np.testing.assert_allclose(sigma.numpy(), 0.5, rtol=0.03)  # init="proportional": Uniform's sigma C nu (w2 ~ 0.01 moves it a little).
    factory = AdaptiveSubspaceNoiseFactory(1.0, 0.5, groups, total_rounds=10, eta=_eta(groups), seed=0)
    _, sigma = factory.privatize(_upload(), seed=4)
    assert np.ptp(sigma.numpy()) > 0.01
    assert float(budget_lib.spent_budget(sigma, groups.sizes)) == pytest.approx(factory.budget(), rel=1e-4)


def test_adaptive_subspace_noise_is_confined_to_each_block():
    groups = _subspace_groups()
    factory = AdaptiveSubspaceNoiseFactory(1.0, 0.5, groups, eta=_eta(groups), seed=0)
    value = _upload()
    flat = np.concatenate([v.ravel() for v in value]).astype(np.float64)
    v = groups.basis.astype(np.float64)
    noised, sigma = factory.privatize(value, seed=9)
    noise = np.concatenate([np.asarray(t).ravel() for t in noised]) - flat
    coef = v.T @ noise
    residual = noise - v @ coef
    sigma = sigma.numpy()
    # Block coefficients have their block's sigma; the residual lies outside span(V) with its own.
    assert np.std(coef[:20]) == pytest.approx(sigma[0], rel=0.4) and np.std(coef[20:]) == pytest.approx(sigma[1], rel=0.5)
    assert np.max(np.abs(v.T @ residual)) < 1e-4
    assert np.sum(residual**2) / (D - 30) == pytest.approx(sigma[2] ** 2, rel=0.2)
    # The batched eager path gives each row the noise `privatize` gives it.
    rows, sig_rows = factory.privatize_batch(tf.constant(flat[None], tf.float32), seeds=tf.constant([[9, 0]], tf.int64))
    np.testing.assert_allclose(rows.numpy()[0], flat + noise, atol=1e-5)
    np.testing.assert_allclose(sig_rows.numpy()[0], sigma, rtol=1e-5)


def test_adaptive_subspace_observes_a_rounds_extras_noise_seed_included():
    """A seeded factory's round state carries the noise seed beside eta, round index and phase (the
    attack hook observes it): the seed is not a defense parameter and is not observed."""
    groups = _subspace_groups()
    factory = AdaptiveSubspaceNoiseFactory(1.0, 0.5, groups, total_rounds=10, eta=_eta(groups), seed=0)
    rows, seeds = tf.constant(np.concatenate([v.ravel() for v in _upload()])[None]), tf.constant([[3, 1]], tf.int64)
    _, sigma_start = factory.privatize_batch(rows, seeds)
    later = collections.OrderedDict(factory.initial_extras(), round_index=np.int32(9), seed=np.array([0, 7], np.int64))
    factory.observe(later)
    _, sigma_later = factory.privatize_batch(rows, seeds)
    np.testing.assert_allclose(sigma_later.numpy(), factory.privatize_batch(rows, seeds, extras=tf.nest.map_structure(tf.convert_to_tensor, later))[1].numpy())
    assert np.max(np.abs(sigma_later.numpy() - sigma_start.numpy())) > 1e-4  # The round index moved the allocation.
    with pytest.raises(ValueError, match=r"observe: the extras lack \['phase'\]"):
        factory.observe(collections.OrderedDict((k, v) for k, v in later.items() if k != "phase"))


@pytest.mark.parametrize("sigma_min", [0.0, 0.2])
def test_adaptive_subspace_sigmas_batch_is_privatize_batchs_sigma(sigma_min):
    """The matching attacker's candidates take only their scales: the same as privatizing them
    (to the last bit), with the floor's seeded draw when the allocation reads a floor-noised copy."""
    groups = _subspace_groups()
    factory = AdaptiveSubspaceNoiseFactory(1.0, 0.5, groups, eta=_eta(groups), seed=0, sigma_min=sigma_min)
    rows = tf.constant(np.stack([np.concatenate([v.ravel() for v in _upload(seed=s, scale=0.01 * (s + 1))]) for s in range(4)]), tf.float32)
    seeds = tf.constant([[3, i] for i in range(4)], tf.int64)
    _, sigma = factory.privatize_batch(rows, seeds)
    np.testing.assert_array_equal(factory.sigmas_batch(rows, seeds).numpy(), sigma.numpy())
    assert np.ptp(sigma.numpy()[:, 0]) > 0  # Each row its own allocation.
    if sigma_min > 0:  # The floor's draw matters: other seeds, other scales.
        other = factory.sigmas_batch(rows, seeds + tf.constant([[0, 50]], tf.int64)).numpy()
        assert np.max(np.abs(other - sigma.numpy())) > 0


def test_adaptive_subspace_sigmas_batch_from_given_projections():
    """The matching attacker hands over the candidates' projections V^T u it computes for its
    distances: the scales are those computed from the uploads alone, to float rounding."""
    groups = _subspace_groups()
    factory = AdaptiveSubspaceNoiseFactory(1.0, 0.5, groups, eta=_eta(groups), seed=0)
    rows = np.stack([np.concatenate([v.ravel() for v in _upload(seed=s, scale=0.3 * (s + 1))]) for s in range(4)]).astype(np.float32)
    clipped = rows * np.minimum(1.0, 1.0 / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    coef = clipped @ groups.basis
    expected = factory.sigmas_batch(tf.constant(rows)).numpy()
    got = factory.sigmas_batch(tf.constant(clipped), coef=coef).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert np.ptp(expected[:, 0]) > 0
    wrong = factory.sigmas_batch(tf.constant(clipped), coef=np.zeros_like(coef)).numpy()  # The projections are used.
    assert np.max(np.abs(wrong - expected)) > 1e-3


def test_adaptive_subspace_whitening_removes_the_per_block_scales():
    groups = _subspace_groups()
    factory = AdaptiveSubspaceNoiseFactory(1.0, 0.5, groups, eta=_eta(groups), seed=0)
    sigma = tf.constant([[0.2, 0.05, 0.1], [0.1, 0.1, 0.4]])
    w = factory.aware_weights(sigma, "whitened").numpy()
    np.testing.assert_allclose(w, [[0.25, 1.0, 0.5], [1.0, 1.0, 0.25]], rtol=1e-5)
    np.testing.assert_allclose(factory.aware_weights(sigma, "projected").numpy(), [[0, 1, 0], [1, 1, 0]])
    u = tf.constant(np.random.default_rng(1).normal(size=(2, D)), tf.float32)
    white = factory.whiten_batch(u, tf.constant(w)).numpy()
    v = groups.basis
    np.testing.assert_allclose(white[0] @ v[:, :20], 0.25 * (u.numpy()[0] @ v[:, :20]), rtol=1e-4, atol=1e-5)
    r = u.numpy()[1] - v @ (v.T @ u.numpy()[1])
    np.testing.assert_allclose(white[1] - v @ (v.T @ white[1]), 0.25 * r, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("blocks, sigma_min", [((30,), 0.0), ((30,), 0.2), ((20, 10), 0.0)])
def test_adaptive_subspace_views_batch_is_privatize_then_whiten(blocks, sigma_min):
    """The attack's views come from the privatization's own products: the noised rows are
    `privatize_batch`'s to the last bit, each aware view `whiten_batch`'s to float rounding."""
    groups = _subspace_groups(blocks)
    factory = AdaptiveSubspaceNoiseFactory(1.0, 0.5, groups, eta=_eta(groups), seed=0, sigma_min=sigma_min)
    rows = tf.constant(np.stack([np.concatenate([v.ravel() for v in _upload(seed=s, scale=0.3 * (s + 1))]) for s in range(4)]), tf.float32)
    seeds = tf.constant([[5, i] for i in range(4)], tf.int64)
    noised, sigma = factory.privatize_batch(rows, seeds)
    views, sigma_views = factory.privatize_views_batch(rows, ("whitened", "projected"), seeds)
    np.testing.assert_array_equal(views[0].numpy(), noised.numpy())
    np.testing.assert_array_equal(sigma_views.numpy(), sigma.numpy())
    assert np.ptp(sigma.numpy()[:, 0]) > 0  # Each row its own allocation: the weights differ by row.
    for view, variant in zip(views[1:], ("whitened", "projected")):
        expected = factory.whiten_batch(noised, factory.aware_weights(sigma, variant)).numpy()
        np.testing.assert_allclose(view.numpy(), expected, rtol=1e-5, atol=1e-6)
        assert np.max(np.abs(expected - noised.numpy())) > 0.01  # The view is not the plain upload.


def test_adaptive_subspace_runs_in_a_tff_aggregation(tff_runtime):
    groups = _subspace_groups()
    factory = AdaptiveSubspaceNoiseFactory(1.0, 0.5, groups, eta=_eta(groups), seed=2)
    value_type = tff.to_type([tff.TensorType(np.float32, s) for s in SHAPES])
    process = factory.create(value_type)
    state = process.initialize()
    values = [_upload(seed=s) for s in range(3)]
    out = process.next(state, values)
    m = out.measurements["defense"]
    assert m["budget_spent"] == pytest.approx(m["budget"], rel=1e-4)
    mean = np.mean([np.concatenate([t.ravel() for t in v]) for v in values], axis=0)
    result = np.concatenate([np.asarray(t).ravel() for t in out.result])
    assert 0 < np.linalg.norm(result - mean) < 3 * 0.5 * np.sqrt(D / 3)  # Noised, at the budget's scale.
    assert int(out.state["extras"]["round_index"]) == 1


def test_the_mask_factory_keeps_its_start_at_directed_uniform():
    ids0 = np.full(SHAPES[0], 1, np.int32)
    ids0[:2] = 0
    groups = ParameterGroups(("tx", "residual"), (True, False), (ids0, np.ones(SHAPES[1], np.int32)))
    factory = AdaptiveGroupNoiseFactory(1.0, 0.5, groups=groups)
    w, _, _ = factory.allocation(factory.initial_extras(), np.zeros(allocator_net.summary_size(2), np.float32), groups)
    assert float(w[0]) == pytest.approx(1.0, abs=1e-6)


def test_projected_summary_statistics_match_a_numpy_reference():
    groups = _subspace_groups()
    u = np.random.default_rng(2).normal(size=(3, D)).astype(np.float32)
    s = allocator_net.summary_statistics_projected(u, tf.constant(groups.basis), groups.block_of_column(), groups.sizes, 2.0, 0.5, 1).numpy()
    v = groups.basis.astype(np.float64)
    coef = u.astype(np.float64) @ v
    r = u - coef @ v.T
    parts = [coef[:, :20], coef[:, 20:], r]
    sizes = groups.sizes.astype(np.float64)
    for g, (p, d_g) in enumerate(zip(parts, sizes)):
        norm = np.sqrt(np.sum(p**2, axis=1)) if g < 2 else np.sqrt(np.sum(u.astype(np.float64) ** 2, axis=1) - np.sum(coef**2, axis=1))
        np.testing.assert_allclose(s[:, 4 * g], norm / 2.0, rtol=1e-4)
        np.testing.assert_allclose(s[:, 4 * g + 1], np.sum(np.abs(p), axis=1) / d_g / (2.0 / np.sqrt(d_g)), rtol=1e-4)
        np.testing.assert_allclose(s[:, 4 * g + 3], d_g / D, rtol=1e-6)
    np.testing.assert_allclose(s[:, -3], np.sqrt(np.sum(u.astype(np.float64) ** 2, axis=1)) / 2.0, rtol=1e-4)
    np.testing.assert_allclose(s[:, -2:], [[0.5, 1.0]] * 3)


# ---------------------------------------------------------------------------------------------
# The trainer on a tiny RadioUNet.
@pytest.fixture(scope="module")
def tiny():

    from tff_radiomap.models import radiounet

    cfg = radiounet.RadioUNetConfig(resolution=16, width=0.125, min_bottleneck=4)
    tf.keras.utils.set_random_seed(0)  # The same weights whatever ran before (the harm probes' sign depends on them).
    model = phases.build_phase_model(cfg, phases.Phase.STAGE1)
    rng = np.random.default_rng(0)
    n = 40
    x = np.zeros((n, 16, 16, 2), np.float32)
    x[..., 0] = rng.random((n, 16, 16)) < 0.3
    pos = rng.integers(0, 16, size=(n, 2))
    x[np.arange(n), pos[:, 0], pos[:, 1], 1] = 1
    y = rng.random((n, 16, 16, 1)).astype(np.float32)
    samples = {"x": x, "y": y, "coords_m": (pos[:, ::-1] * 16 + 8).astype(np.float32)}
    return cfg, model, samples


def _paper_factory(cfg):

    from tff_radiomap.privacy import groups as G

    return AdaptiveGroupNoiseFactory(1.0, 3.0, groups=G.radiounet_groups(cfg, phases.Phase.STAGE1), total_rounds=10)


def _tiny_subspace_factory(model, k=12, blocks=(8, 4)):
    shapes = tuple(tuple(int(s) for s in v.shape) for v in model.trainable_variables)
    d = sum(int(np.prod(s)) for s in shapes)
    q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(d, k)))
    return AdaptiveSubspaceNoiseFactory(1.0, 0.3, SubspaceGroups(shapes, blocks, basis=q.astype(np.float32)), total_rounds=10)


CONFIG = allocator.AllocatorConfig(buffer_traces=32, steps=3, harm_samples=8)


def _next_extras(extras, eta):
    new = dict(extras, eta=eta)
    new["round_index"] = extras["round_index"] + 1
    return new


@pytest.mark.parametrize("kind", ["paper", "subspace"])
def test_an_allocator_round_updates_eta_and_keeps_the_budget(tiny, kind):
    cfg, model, samples = tiny
    factory = _paper_factory(cfg) if kind == "paper" else _tiny_subspace_factory(model)
    trainer = allocator.AllocatorTrainer(factory, CONFIG, local_updates=local_training.local_updates)
    extras = factory.initial_extras()
    eta, m = trainer.round(model, tff.learning.optimizers.build_sgdm(0.05), samples, extras)
    assert any(not np.allclose(eta[k], extras["eta"][k]) for k in eta)
    assert all(np.isfinite(v) for v in m.values()) and m["skipped"] == 0
    assert 0 < m["proxy_loss"] <= 1.0 + 1e-9
    weights = [m[f"weight_{n}"] for n in factory.groups.names]
    assert sum(weights) == pytest.approx(1.0, abs=1e-5)
    if kind == "paper":
        assert m["weight_stage2_transmitter"] == 0.0  # Not uploaded in stage 1: no share of B.
    assert all(np.isfinite(m[f"harm_per_energy_{n}"]) for n in factory.groups.names)  # A small energy may measure < 0 (then 0 in L_task).


def test_the_harm_probes_leave_the_model_as_it_was(tiny):
    cfg, model, samples = tiny
    trainer = allocator.AllocatorTrainer(_tiny_subspace_factory(model), CONFIG, local_updates=local_training.local_updates)
    before = [v.numpy() for v in model.trainable_variables]
    c = trainer.harm_per_energy(model, tf.constant(samples["x"][:8]), tf.constant(samples["y"][:8]), np.full(3, 0.5), [0, 1])
    for v, b in zip(model.trainable_variables, before):
        np.testing.assert_array_equal(v.numpy(), b)
    # Measured, not assumed: an untrained model's curvature may give either sign, never all zero.
    assert c.shape == (3,) and np.all(np.isfinite(c)) and np.all(c != 0)


def test_an_allocator_round_on_a_broken_model_keeps_eta_and_says_so(tiny):

    cfg, _, samples = tiny
    model = phases.build_phase_model(cfg, phases.Phase.STAGE1)
    model.trainable_variables[0].assign(tf.fill(model.trainable_variables[0].shape, float("nan")))
    factory = _paper_factory(cfg)
    trainer = allocator.AllocatorTrainer(factory, CONFIG, local_updates=local_training.local_updates)
    extras = factory.initial_extras()
    eta, m = trainer.round(model, tff.learning.optimizers.build_sgdm(0.05), samples, extras)
    assert m == {"skipped": 1.0}
    for k in eta:
        np.testing.assert_array_equal(eta[k], extras["eta"][k])


def test_allocator_state_restores_a_trainer_that_continues_identically(tiny):
    cfg, model, samples = tiny
    factory = _tiny_subspace_factory(model)
    opt = tff.learning.optimizers.build_sgdm(0.05)
    extras = factory.initial_extras()
    straight = allocator.AllocatorTrainer(factory, CONFIG, local_updates=local_training.local_updates)
    eta1, _ = straight.round(model, opt, samples, extras)
    saved = {k: v.copy() for k, v in straight.state().items()}
    eta2, m2 = straight.round(model, opt, samples, _next_extras(extras, eta1))
    restored = allocator.AllocatorTrainer(factory, CONFIG, local_updates=local_training.local_updates)
    restored.restore(saved)
    eta2b, m2b = restored.round(model, opt, samples, _next_extras(extras, eta1))
    for k in eta2:
        np.testing.assert_allclose(eta2b[k], eta2[k], rtol=1e-6)
    assert m2b == pytest.approx(m2, rel=1e-6)


def test_the_attack_observes_the_adaptive_subspace_defense_batched(tiny):
    """The scoring attack privatizes with the allocation of the observed eta, whitening row by row."""
    cfg, model, samples = tiny
    factory = _tiny_subspace_factory(model)
    collector = attack.TraceCollector(model, tff.learning.optimizers.build_sgdm(0.05), steps=2, defense=factory, local_updates=local_training.local_updates)
    assert collector.batched and collector.variants == ("plain", "whitened", "projected")
    x, y = samples["x"][:4], samples["y"][:4]
    a = collector.collect_views(x, y, seed=(1, 0))
    factory.observe(dict(factory.initial_extras(), eta=_eta(factory.groups)))
    b = collector.collect_views(x, y, seed=(1, 0))
    assert all(np.all(np.isfinite(v)) for v in b.values())
    assert not np.allclose(a["plain"], b["plain"])  # Another eta, other noise scales, same traced graph.


def test_adaptive_subspace_process_reads_the_basis_file_every_round_as_an_embedded_basis(tff_runtime, tmp_path):
    from tff_radiomap.aggregators.subspace_noise import write_basis

    groups = _subspace_groups()
    path = str(tmp_path / "basis.bin")
    write_basis(path, groups.basis)
    value_type = tff.types.to_type([(np.float32, s) for s in SHAPES])
    embedded = AdaptiveSubspaceNoiseFactory(1.0, 0.5, groups, eta=_eta(groups), seed=3)
    from_file = AdaptiveSubspaceNoiseFactory(1.0, 0.5, SubspaceGroups(tuple(SHAPES), (20, 10)), basis_path=path, eta=_eta(groups), seed=3)
    clients = [_upload(seed=s) for s in (1, 2, 3)]
    results = []
    for factory in (embedded, from_file):
        process = factory.create(value_type)
        state = process.initialize()
        out = process.next(state, clients)
        results.append(np.concatenate([np.asarray(t).ravel() for t in out.result]))
    np.testing.assert_allclose(results[0], results[1], atol=1e-6)  # The same V and seeds: the same noise (to float rounding).
    # The next round reads the refreshed file: the same process, another span.
    other = _subspace_groups(seed=7).basis
    write_basis(path, other)
    out = process.next(state, [clients[0]])
    embedded_other = AdaptiveSubspaceNoiseFactory(1.0, 0.5, groups.with_basis(other), eta=_eta(groups), seed=3)
    reference = embedded_other.create(value_type)
    expected = reference.next(reference.initialize(), [clients[0]]).result
    np.testing.assert_allclose(
        np.concatenate([np.asarray(t).ravel() for t in out.result]), np.concatenate([np.asarray(t).ravel() for t in expected]), atol=1e-6
    )
