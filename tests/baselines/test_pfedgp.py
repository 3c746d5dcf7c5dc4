"""pFedGP: the GP marginal likelihood and posterior mean against numpy."""

import numpy as np
import tensorflow as tf

from baselines import pfedgp


def _numpy_kernel(a, b, lengthscale, signal):
    sq = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    return signal**2 * np.exp(-sq / (2 * lengthscale**2))


def test_nll_and_posterior_mean_match_numpy():
    layer = pfedgp.GPKernel(representation_dim=3)
    layer.build(None)
    layer.log_lengthscale.assign(np.log(1.3))
    layer.log_signal.assign(np.log(0.8))
    layer.log_noise.assign(np.log(0.2))
    rng = np.random.default_rng(0)
    z, y, zs = rng.normal(size=(6, 3)), rng.normal(size=(6, 2)), rng.normal(size=(4, 3))
    k = _numpy_kernel(z, z, 1.3, 0.8) + (0.2**2 + pfedgp.JITTER) * np.eye(6)
    alpha = np.linalg.solve(k, y)
    nll = 0.5 * (y * alpha).sum() + 2 * 0.5 * np.linalg.slogdet(k)[1] + 0.5 * 6 * 2 * np.log(2 * np.pi)
    got = pfedgp.gp_nll(layer, tf.constant(z, tf.float32), tf.constant(y, tf.float32))
    np.testing.assert_allclose(got, nll / 12, rtol=1e-4)
    mean = pfedgp.gp_posterior_mean(layer, tf.constant(z, tf.float32), tf.constant(y, tf.float32), tf.constant(zs, tf.float32))
    np.testing.assert_allclose(mean, _numpy_kernel(zs, z, 1.3, 0.8) @ alpha, rtol=1e-4, atol=1e-5)
