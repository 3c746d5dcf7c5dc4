"""Algorithm 1's steps (epfl_steps) against numpy references."""

import numpy as np
import pytest
import tensorflow as tf

from tests.aggregators.test_top_k import numpy_top_k
from tff_radiomap.learning import epfl_steps


def _tensors(arrays):
    return [tf.constant(a) for a in arrays]


def test_is_sync_round_is_every_r_th_round():
    assert [epfl_steps.is_sync_round(t, 3) for t in range(7)] == [False, False, True, False, False, True, False]
    assert [bool(epfl_steps.is_sync_round(tf.constant(t), 3)) for t in range(7)] == [False, False, True, False, False, True, False]
    assert all(epfl_steps.is_sync_round(t, 1) for t in range(4))


def test_error_feedback_adds_the_cached_residual():
    rng = np.random.default_rng(0)
    delta = [rng.normal(size=(2, 3)).astype(np.float32), rng.normal(size=(4,)).astype(np.float32)]
    error = [rng.normal(size=(2, 3)).astype(np.float32), rng.normal(size=(4,)).astype(np.float32)]
    for got, d, e in zip(epfl_steps.error_feedback(_tensors(delta), _tensors(error)), delta, error):
        np.testing.assert_array_equal(got.numpy(), d + e)


@pytest.mark.parametrize("decay", [0.0, 0.5, 0.9])
def test_ema_update_by_key(decay):
    rng = np.random.default_rng(1)
    ema = {"a": rng.normal(size=(3,)).astype(np.float32), "b": rng.normal(size=(2, 2)).astype(np.float32)}
    theta = {k: rng.normal(size=v.shape).astype(np.float32) for k, v in ema.items()}
    got = epfl_steps.ema_update({k: tf.constant(v) for k, v in ema.items()}, {k: tf.constant(v) for k, v in theta.items()}, decay)
    for key in ema:
        np.testing.assert_allclose(got[key].numpy(), decay * ema[key] + (1 - decay) * theta[key], rtol=1e-6)


def test_sparsify_with_error_feedback_ranks_the_whole_upload_once():
    rng = np.random.default_rng(2)
    delta = [rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=(5,)).astype(np.float32)]
    error = [0.1 * rng.normal(size=(3, 4)).astype(np.float32), 0.1 * rng.normal(size=(5,)).astype(np.float32)]
    sent, new_error = epfl_steps.sparsify_with_error_feedback(_tensors(delta), _tensors(error), k=4)
    u = np.concatenate([(d + e).ravel() for d, e in zip(delta, error)])
    kept = numpy_top_k(u, 4)
    np.testing.assert_array_equal(np.concatenate([t.numpy().ravel() for t in sent]), kept)
    np.testing.assert_array_equal(np.concatenate([t.numpy().ravel() for t in new_error]), u - kept)
    assert [tuple(t.shape) for t in sent] == [tuple(t.shape) for t in new_error] == [(3, 4), (5,)]


def test_sparsify_with_error_feedback_per_client_row():
    rng = np.random.default_rng(3)
    delta = [rng.normal(size=(2, 3, 2)).astype(np.float32), rng.normal(size=(2, 4)).astype(np.float32)]  # C = 2 clients.
    error = [np.zeros_like(d) for d in delta]
    sent, new_error = epfl_steps.sparsify_with_error_feedback(_tensors(delta), _tensors(error), k=3, batch_dims=1)
    for c in range(2):
        u = np.concatenate([d[c].ravel() for d in delta])
        np.testing.assert_array_equal(np.concatenate([t.numpy()[c].ravel() for t in sent]), numpy_top_k(u, 3))
        np.testing.assert_array_equal(np.concatenate([t.numpy()[c].ravel() for t in new_error]), u - numpy_top_k(u, 3))
