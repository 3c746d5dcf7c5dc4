import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_radiomap.aggregators import AdaptiveGroupNoiseFactory, UniformNoiseFactory
from tff_radiomap.learning import keras_wrap
from tff_radiomap.models import radiounet
from tff_radiomap.privacy import allocator, attack
from tff_radiomap.privacy import groups as G


def test_attacker_recovers_a_leaky_feature_and_not_noise():
    rng = np.random.default_rng(0)
    coords = rng.uniform(0, 256, size=(400, 2))
    mix = rng.normal(size=(2, 50))
    leaky = coords @ mix + rng.normal(scale=1.0, size=(400, 50))
    att = attack.LocalizationAttacker().fit(leaky[:300], coords[:300])
    err = np.sqrt(np.mean(np.sum((att.predict(leaky[300:]) - coords[300:]) ** 2, 1)))
    assert err < 5.0
    noise = rng.normal(size=(400, 50))
    att = attack.LocalizationAttacker().fit(noise[:300], coords[:300])
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
    model = keras_wrap.build_phase_model(cfg, keras_wrap.Phase.STAGE1)
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
    groups = G.radiounet_groups(cfg, keras_wrap.Phase.STAGE1)
    opt = tff.learning.optimizers.build_sgdm(0.05)
    defense = UniformNoiseFactory(1.0, 3.0, groups=groups)
    collector = attack.TraceCollector(model, opt, steps=2, defense=defense, extras=defense.initial_extras())
    result = attack.run_attack(collector, samples, attack.AttackConfig(steps=2, train_traces=30, test_traces=10))
    assert np.isfinite(result.rmse_m) and result.constant_rmse_m > 0 and result.test_traces == 10
    clean = attack.TraceCollector(model, opt, steps=2).collect(samples["x"][:2], samples["y"][:2])
    noisy = collector.collect(samples["x"][:2], samples["y"][:2])
    assert clean.shape == noisy.shape and not np.allclose(clean, noisy)


def test_allocator_round_updates_eta_and_keeps_the_budget(tiny):
    cfg, model, samples = tiny
    groups = G.radiounet_groups(cfg, keras_wrap.Phase.STAGE1)
    factory = AdaptiveGroupNoiseFactory(1.0, 3.0, groups=groups, total_rounds=10)
    trainer = allocator.AllocatorTrainer(factory, allocator.AllocatorConfig(traces_per_round=8, steps=3, map_size_m=256.0))
    extras = factory.initial_extras()
    eta, m = trainer.round(model, tff.learning.optimizers.build_sgdm(0.05), samples, extras, steps=2)
    assert set(eta) == set(extras["eta"])
    assert any(not np.allclose(eta[k], extras["eta"][k]) for k in eta)
    assert all(np.isfinite(v) for v in m.values())
    weights = [m[f"weight_{n}"] for n in groups.names]
    assert sum(weights) == pytest.approx(1.0, abs=1e-5)
    assert m["weight_stage2_transmitter"] == 0.0  # Not uploaded in stage 1: no share of B.


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
