import numpy as np
import pytest
import tensorflow as tf

from tff_radiomap.privacy import allocator_net
from tff_radiomap.privacy import budget as b


def test_total_budget():
    assert b.total_budget(1000, 0.5, 3.0) == pytest.approx(1000 * 1.5**2)


def test_allocation_spends_exactly_the_budget():
    rng = np.random.default_rng(0)
    sizes = np.array([37, 0, 120, 100000])
    for _ in range(20):
        logits = rng.normal(size=4) * 3
        w = b.masked_softmax(logits, sizes).numpy()
        assert w[1] == 0 and abs(w.sum() - 1) < 1e-6
        budget = b.total_budget(sizes.sum(), 1.0, 3.0)
        energy, sigma = b.allocate(w, budget, sizes)
        ref_sigma = np.sqrt(budget * w / np.maximum(sizes, 1))
        ref_sigma[sizes == 0] = 0
        np.testing.assert_allclose(sigma.numpy(), ref_sigma, rtol=1e-5)
        assert abs(float(b.spent_budget(sigma, sizes)) - budget) <= 1e-5 * budget


def test_floor_keeps_the_identity_and_every_sigma_above_it():
    sizes = np.array([10, 50, 1000])
    budget = b.total_budget(sizes.sum(), 1.0, 3.0)
    w = np.array([0.0, 0.0, 1.0], np.float32)
    energy, sigma = b.allocate(w, budget, sizes, sigma_min=1.5)
    assert np.all(sigma.numpy() >= 1.5 - 1e-6)
    assert float(b.spent_budget(sigma, sizes)) == pytest.approx(budget, rel=1e-5)


def test_directed_sigmas():
    sizes = np.array([30, 70, 900])
    budget = 1000 * 9.0
    s = b.directed_sigmas(sizes, [True, True, False], budget)
    np.testing.assert_allclose(s, [np.sqrt(budget / 100)] * 2 + [0.0], rtol=1e-6)
    assert float(b.spent_budget(s, sizes)) == pytest.approx(budget, rel=1e-5)
    with pytest.raises(ValueError, match="sensitive"):
        b.directed_sigmas(sizes, [False, False, False], budget)


def test_entropy():
    assert float(b.entropy([0.5, 0.5])) == pytest.approx(np.log(2))
    assert float(b.entropy([1.0, 0.0])) == pytest.approx(0.0)


def test_summary_statistics_match_numpy():
    rng = np.random.default_rng(1)
    flat = [rng.normal(size=(4, 5)).astype(np.float32), rng.normal(size=7).astype(np.float32)]
    ids = [np.zeros((4, 5), np.int32), np.array([0, 1, 1, 1, 2, 2, 2], np.int32)]
    ids[0][0, :] = 1
    sizes = np.array([15 + 1, 5 + 3, 3])
    s = allocator_net.summary_statistics(flat, ids, sizes, 2.0, 0.3, 1).numpy()
    allv = np.concatenate([f.ravel() for f in flat])
    alli = np.concatenate([i.ravel() for i in ids])
    expected = []
    for g in range(3):
        x = allv[alli == g]
        scale = 2.0 / np.sqrt(len(x))
        expected.append([np.linalg.norm(x) / 2.0, np.abs(x).mean() / scale, x.std() / scale, len(x) / len(allv)])
    expected = np.concatenate([np.ravel(expected), [np.linalg.norm(allv) / 2.0, 0.3, 1.0]])
    np.testing.assert_allclose(s, expected, rtol=1e-5, atol=1e-6)
    assert s.shape == (allocator_net.summary_size(3),)


def test_proportional_init_is_uniform_noise():
    sizes = np.array([10, 90, 900])
    eta = allocator_net.init_params(3, sizes)
    s = np.zeros(allocator_net.summary_size(3), np.float32)
    eta["w2"][:] = 0
    w = b.masked_softmax(allocator_net.logits(eta, s), sizes).numpy()
    np.testing.assert_allclose(w, sizes / sizes.sum(), rtol=1e-5)


def test_batched_summaries_equal_the_summary_of_each_upload():
    rng = np.random.default_rng(3)
    shapes = [(4, 5), (7,), (2, 3, 2)]
    ids = [tf.constant(rng.integers(0, 3, size=s), tf.int32) for s in shapes]
    sizes = np.bincount(np.concatenate([i.numpy().ravel() for i in ids]), minlength=3)
    uploads = [[tf.constant(rng.normal(size=s), tf.float32) for s in shapes] for _ in range(5)]
    batch = allocator_net.summary_statistics_batch([tf.stack(t) for t in zip(*uploads)], ids, sizes, 2.0, 0.4, 1).numpy()
    assert batch.shape == (5, allocator_net.summary_size(3))
    for m, upload in enumerate(uploads):
        np.testing.assert_allclose(batch[m], allocator_net.summary_statistics(upload, ids, sizes, 2.0, 0.4, 1).numpy(), rtol=1e-6)
