import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_radiomap.models import phases
from tff_radiomap.aggregators import UniformNoiseFactory
from tff_radiomap.learning import local_training
from tff_radiomap.models import radiounet
from tff_radiomap.privacy import attack, ridge_attacker
from tff_radiomap.privacy import groups as G


def test_attacker_recovers_a_leaky_feature_and_not_noise():
    rng = np.random.default_rng(0)
    coords = rng.uniform(0, 256, size=(400, 2))
    mix = rng.normal(size=(2, 50))
    leaky = coords @ mix + rng.normal(scale=1.0, size=(400, 50))
    att = ridge_attacker.LocalizationAttacker().fit(leaky[:300], coords[:300])
    err = np.sqrt(np.mean(np.sum((att.predict(leaky[300:]) - coords[300:]) ** 2, 1)))
    assert err < 5.0
    noise = rng.normal(size=(400, 50))
    att = ridge_attacker.LocalizationAttacker().fit(noise[:300], coords[:300])
    err = np.sqrt(np.mean(np.sum((att.predict(noise[300:]) - coords[300:]) ** 2, 1)))
    const = np.sqrt(np.mean(np.sum((coords[300:] - coords[:300].mean(0)) ** 2, 1)))
    assert err > 0.9 * const


def test_fingerprint_is_the_first_upload_then_norms_over_input_channels():
    k = tf.reshape(tf.range(2 * 2 * 3 * 4, dtype=tf.float32), [2, 2, 3, 4])
    b = tf.constant([1.0, -2.0])
    raw = np.concatenate([k.numpy().ravel(), [1.0, -2.0]])
    phi = attack.fingerprint([[k, b]], [False, False]).numpy()
    np.testing.assert_allclose(phi[:50], raw)
    np.testing.assert_allclose(phi[50:66], np.sqrt(np.sum(k.numpy() ** 2, axis=2)).ravel(), rtol=1e-5)
    np.testing.assert_allclose(phi[66:], [1.0, -2.0])
    phi_t = attack.fingerprint([[k, b]], [True, False]).numpy()
    np.testing.assert_allclose(phi_t[50:62], np.sqrt(np.sum(k.numpy() ** 2, axis=3)).ravel(), rtol=1e-5)
    two = attack.fingerprint([[k, b], [2 * k, b]], [False, False]).numpy()
    assert two.shape == (50 + 2 * 18,)  # Raw first upload once, then the norms of each upload.
    np.testing.assert_allclose(two[68:84], 2 * phi[50:66], rtol=1e-5)


def test_split_is_disjoint_and_checked():
    cfg = attack.AttackConfig(train_traces=20, test_traces=5)
    tr, te = attack.split_traces(30, cfg)
    assert len(set(tr) & set(te)) == 0 and len(tr) == 20 and len(te) == 5
    with pytest.raises(ValueError, match="needs 25 samples"):
        attack.split_traces(24, cfg)


@pytest.fixture(scope="module")
def tiny():
    cfg = radiounet.RadioUNetConfig(resolution=16, width=0.125, min_bottleneck=4)
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


def test_run_attack_end_to_end(tiny):
    cfg, model, samples = tiny
    groups = G.radiounet_groups(cfg, phases.Phase.STAGE1)
    opt = tff.learning.optimizers.build_sgdm(0.05)
    defense = UniformNoiseFactory(1.0, 3.0, groups=groups)
    collector = attack.TraceCollector(model, opt, steps=2, defense=defense, extras=defense.initial_extras(), local_updates=local_training.local_updates)
    result = attack.run_attack(collector, samples, attack.AttackConfig(steps=2, train_traces=30, test_traces=10))
    assert np.isfinite(result.rmse_m) and result.constant_rmse_m > 0 and result.test_traces == 10
    clean = attack.TraceCollector(model, opt, steps=2, local_updates=local_training.local_updates).collect(samples["x"][:2], samples["y"][:2])
    noisy = collector.collect(samples["x"][:2], samples["y"][:2])
    assert clean.shape == noisy.shape and not np.allclose(clean, noisy)


def test_the_observers_extra_samples_never_include_a_held_out_one():
    rng = np.random.default_rng(0)
    x = rng.random((6, 4, 4, 2)).astype(np.float32)
    coords = rng.random((6, 2)) * 100
    held_out = {"x": x[:2], "coords_m": coords[:2]}
    # The extra pool: held-out sample 0 again, sample 1's map with another position, and others.
    extra_x = np.concatenate([x[:1], x[1:2], x[2:]])
    extra_coords = np.concatenate([coords[:1], coords[1:2] + 1.0, coords[2:]])
    kept = attack.drop_held_out({"x": extra_x, "coords_m": extra_coords}, held_out)
    assert len(kept["x"]) == 5
    np.testing.assert_array_equal(kept["coords_m"], extra_coords[1:])


def test_seeded_traces_repeat_and_differ_from_another_seed(tiny):
    cfg, model, samples = tiny
    defense = UniformNoiseFactory(1.0, 3.0, groups=G.radiounet_groups(cfg, phases.Phase.STAGE1))
    collector = attack.TraceCollector(model, tff.learning.optimizers.build_sgdm(0.05), steps=2, defense=defense, local_updates=local_training.local_updates)
    x, y = samples["x"][:3], samples["y"][:3]
    a, b = collector.collect(x, y, seed=(4, 1)), collector.collect(x, y, seed=(4, 1))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, collector.collect(x, y, seed=(4, 2)))
    # A chunk boundary does not change a sample's noise (the seed is per sample index).
    np.testing.assert_array_equal(collector.collect(x, y, chunk=2, seed=(4, 1)), a)


def test_ridge_grid_reaches_the_constant_predictor():
    # Features that carry nothing, few traces: a ridge with the small alphas of the grid overfits
    # and scores worse than the mean position; the grid's constant predictor does not.
    rng = np.random.default_rng(3)
    coords = rng.uniform(0, 256, size=(60, 2))
    noise = rng.normal(size=(60, 5000))
    att = ridge_attacker.LocalizationAttacker(alphas=(1e-3,)).fit(noise[:40], coords[:40])
    assert att.alpha == np.inf
    np.testing.assert_allclose(att.predict(noise[40:]), np.broadcast_to(coords[:40].mean(0), (20, 2)))


def _whitening_defense(sigmas):
    """A two-group defense over one tensor of 10 coordinates (3 + 7) with fixed sigmas."""
    from tff_radiomap.aggregators.client_perturbation import ClientPerturbationFactory

    ids = np.array([0, 0, 0, 1, 1, 1, 1, 1, 1, 1], np.int32)

    class Fixed(ClientPerturbationFactory):
        def _client_sigmas(self, extras, clipped_flat, group_ids, groups):
            return tf.constant(sigmas, tf.float32)

    return Fixed(1.0, 1.0, groups=G.ParameterGroups(("a", "b"), (True, False), (ids,)))


def test_aware_views_scale_groups_by_inverse_sigma_or_keep_the_least_noised():
    u = [tf.ones([10])]
    d = _whitening_defense([4.0, 1.0])
    w = d.aware_weights(tf.constant([4.0, 1.0]), "whitened").numpy()
    np.testing.assert_allclose(w, [0.25, 1.0])
    np.testing.assert_allclose(d.aware_weights(tf.constant([4.0, 1.0]), "projected").numpy(), [0.0, 1.0])
    np.testing.assert_allclose(d.whiten(u, tf.constant(w))[0].numpy(), [0.25] * 3 + [1.0] * 7)
    # A noise-free group: whitening keeps it alone (the noised group's weight is 0).
    np.testing.assert_allclose(d.aware_weights(tf.constant([2.0, 0.0]), "whitened").numpy(), [0.0, 1.0])


def test_aware_attacker_sees_through_noise_hidden_in_a_subspace(tiny):
    # Subspace noise with the whole budget on a random subspace of the upload: the plain attacker
    # is drowned, the aware one (span(V) projected out) reads the clean complement.
    from tff_radiomap.aggregators import SubspaceNoiseFactory

    cfg, model, samples = tiny
    shapes = tuple(tuple(int(d) for d in v.shape) for v in model.trainable_variables)
    d = sum(int(np.prod(s)) for s in shapes)
    q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(d, 8)))
    sub = G.SubspaceGroups(shapes, (8,), basis=q.astype(np.float32))
    defense = SubspaceNoiseFactory(1e6, 3e-5, sub, share=1.0, seed=0)  # C so large that clipping is the identity; sigma 30.
    collector = attack.TraceCollector(model, tff.learning.optimizers.build_sgdm(0.05), steps=1, defense=defense, local_updates=local_training.local_updates)
    assert collector.variants == ("plain", "whitened", "projected")
    views = collector.collect_views(samples["x"][:4], samples["y"][:4], seed=(1, 0))
    clean = attack.TraceCollector(model, tff.learning.optimizers.build_sgdm(0.05), steps=1, local_updates=local_training.local_updates).collect(
        samples["x"][:4], samples["y"][:4]
    )
    n_signed = d  # The fingerprint starts with the signed first upload.
    v = q.astype(np.float64)
    expected = clean[:, :n_signed] - (clean[:, :n_signed] @ v) @ v.T
    np.testing.assert_allclose(views["projected"][:, :n_signed], expected, atol=1e-3)  # float32 after noise of scale 30.
    assert np.abs(views["plain"][:, :n_signed] - clean[:, :n_signed]).max() > 1.0
    result = attack.run_attack(collector, samples, attack.AttackConfig(steps=1, train_traces=30, test_traces=10))
    assert result.rmse_m == min(result.plain_rmse_m, result.aware_rmse_m)
    assert result.rmse_m <= result.constant_rmse_m + 1e-9


def test_batched_subspace_traces_equal_the_per_sample_ones(tiny):
    # The attack privatizes subspace noise a chunk at a time; the noise, the views and the
    # fingerprints must be those of privatizing and fingerprinting each upload on its own.
    from tff_radiomap.aggregators import SubspaceNoiseFactory

    cfg, model, samples = tiny
    shapes = tuple(tuple(int(d) for d in v.shape) for v in model.trainable_variables)
    d = sum(int(np.prod(s)) for s in shapes)
    q, _ = np.linalg.qr(np.random.default_rng(1).normal(size=(d, 6)))
    defense = SubspaceNoiseFactory(1.0, 0.02, G.SubspaceGroups(shapes, (4, 2), basis=q.astype(np.float32)), share=0.7, seed=0)
    opt = tff.learning.optimizers.build_sgdm(0.05)
    collector = attack.TraceCollector(model, opt, steps=2, defense=defense, local_updates=local_training.local_updates)
    assert collector.batched
    x, y = samples["x"][:3], samples["y"][:3]
    views = collector.collect_views(x, y, chunk=2, seed=(5, 1))
    transposed = attack.transposed_flags(model)
    seeds = np.stack([np.full(3, 5), 1 * 2**20 + 8 * np.arange(3)], axis=1).astype(np.int64)
    for i in range(3):
        uploads = local_training.local_updates(model, opt, x[i : i + 1], y[i : i + 1], 2)
        noised, sigma = zip(*[defense.privatize(u, seed=tf.constant(seeds[i] + [0, s])) for s, u in enumerate(uploads)])
        np.testing.assert_allclose(views["plain"][i], attack.fingerprint(list(noised), transposed).numpy(), rtol=1e-4, atol=1e-5)
        w = defense.aware_weights(sigma[0], "whitened")
        whitened = [defense.whiten(n, w) for n in noised]
        np.testing.assert_allclose(views["whitened"][i], attack.fingerprint(whitened, transposed).numpy(), rtol=1e-4, atol=1e-5)


def test_one_traced_graph_serves_every_chunk_length(tiny):
    # Train, held-out and extra pools and a short last chunk differ in length: one graph for all.
    cfg, model, samples = tiny
    defense = UniformNoiseFactory(1.0, 3.0, groups=G.radiounet_groups(cfg, phases.Phase.STAGE1))
    collector = attack.TraceCollector(model, tff.learning.optimizers.build_sgdm(0.05), steps=1, defense=defense, local_updates=local_training.local_updates)
    x, y = samples["x"], samples["y"]
    whole = collector.collect(x[:5], y[:5], seed=(2, 0))
    np.testing.assert_array_equal(collector.collect(x[:5], y[:5], chunk=3, seed=(2, 0)), whole)
    collector.collect(x[5:7], y[5:7], seed=(2, 1))
    assert sum(f.experimental_get_tracing_count() for f in collector._traced.values()) == 1


def test_the_ridge_attacker_is_scikit_learns_ridge_on_standardized_features():
    # An independent reference for h: scikit-learn's StandardScaler then Ridge (primal, with an
    # intercept), against the attacker's dual ridge with its regularization chosen on validation.
    from sklearn.linear_model import Ridge
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(3)
    coords = rng.uniform(0, 256, size=(160, 2))
    features = coords @ rng.normal(size=(2, 300)) + rng.normal(scale=30.0, size=(160, 300)) + rng.normal(size=300) * 5  # More features than traces.
    train, test = slice(0, 120), slice(120, 160)
    alphas = (10.0, 100.0, 1000.0)
    att = ridge_attacker.LocalizationAttacker(alphas=alphas, seed=1).fit(features[train], coords[train])
    assert att.alpha in alphas  # The signal is there: not the constant guess.
    scaler = StandardScaler().fit(features[train])
    reference = Ridge(alpha=att.alpha).fit(scaler.transform(features[train]), coords[train])
    np.testing.assert_allclose(att.predict(features[test]), reference.predict(scaler.transform(features[test])), rtol=1e-4, atol=1e-3)
    # The choice: the alpha of least validation RMSE, each fitted on the rest of the training traces
    # (standardized over all of them, as the attacker does; no intercept refit on the subset).
    order = np.random.default_rng(1).permutation(120)
    val, tr = order[: int(0.2 * 120)], order[int(0.2 * 120) :]
    z, c = scaler.transform(features[train]), coords[train]

    def val_rmse(alpha):
        fit = Ridge(alpha=alpha, fit_intercept=False).fit(z[tr], c[tr] - c[tr].mean(0))
        return np.sqrt(np.mean(np.sum((fit.predict(z[val]) + c[tr].mean(0) - c[val]) ** 2, 1)))

    assert att.alpha == min(alphas, key=val_rmse)
