"""pFedGP (Achituve et al., 2021): a shared deep kernel, a Gaussian-process head per client.

The backbone f_theta (the same MLP as EPFL-REMNet's) and the kernel's hyperparameters are shared
and trained federatedly (FedAvg, full-precision uploads); each client's predictor is the exact GP
regression posterior mean on its own training data,

    k(z, z') = s^2 exp(-||z - z'||^2 / (2 l^2)),   mu(x) = k(z, Z) (K + sigma^2 I)^-1 Y,

with z = f_theta(x), one GP per base station sharing the kernel, zero prior mean (labels are
z-scored per client). Local training maximizes the GP marginal likelihood of each minibatch
(the negative log marginal likelihood per label is the loss).

Simplifications against the paper: pFedGP is built for classification (Polya-Gamma augmented GP
classifiers over a class tree, with inducing points for large clients); this is its regression
counterpart with exact GPs, which our clients' ~100 training points allow. The marginal
likelihood is taken over minibatches rather than the client's whole data set.
"""

import dataclasses
import math

import tensorflow as tf

from tff_radiomap.learning import local_model
from tff_radiomap.learning.epfl_remnet import EpflRemnetConfig
from tff_radiomap.learning.rem_runner import Method
from tff_radiomap.learning.stacked_local import JITTER
from tff_radiomap.models import remnet

NAME = "pfedgp"


class GPKernel(tf.keras.layers.Layer):
    """Holds log l, log s, log sigma of the shared RBF kernel; passes z through unchanged."""

    def __init__(self, representation_dim: int, **kwargs):
        super().__init__(**kwargs)
        self.representation_dim = representation_dim

    def build(self, input_shape):
        init = tf.keras.initializers.Constant
        self.log_lengthscale = self.add_weight(name="log_lengthscale", shape=(), initializer=init(0.5 * math.log(self.representation_dim)))
        self.log_signal = self.add_weight(name="log_signal", shape=(), initializer=init(0.0))
        self.log_noise = self.add_weight(name="log_noise", shape=(), initializer=init(math.log(0.3)))

    def call(self, z):
        return z

    def kernel(self, a, b):
        sq = tf.reduce_sum(a**2, 1)[:, None] + tf.reduce_sum(b**2, 1)[None, :] - 2.0 * tf.matmul(a, b, transpose_b=True)
        return tf.exp(2.0 * self.log_signal) * tf.exp(-tf.maximum(sq, 0.0) / (2.0 * tf.exp(2.0 * self.log_lengthscale)))

    def noisy_gram(self, z):
        n = tf.shape(z)[0]
        return self.kernel(z, z) + (tf.exp(2.0 * self.log_noise) + JITTER) * tf.eye(n)


def build_deep_kernel(config: remnet.RemNetConfig) -> tf.keras.Model:
    inputs = tf.keras.Input(shape=(config.input_dim,), name="input")
    z = remnet.build_backbone(config)(inputs)
    return tf.keras.Model(inputs, GPKernel(config.representation_dim, name="gp_kernel")(z), name="deep_kernel")


def gp_nll(kernel: GPKernel, z, y):
    """Negative log marginal likelihood of the M columns of y under the GP, per label entry."""
    chol = tf.linalg.cholesky(kernel.noisy_gram(z))
    alpha = tf.linalg.cholesky_solve(chol, y)
    n, m = tf.cast(tf.shape(y)[0], tf.float32), tf.cast(tf.shape(y)[1], tf.float32)
    nll = 0.5 * tf.reduce_sum(y * alpha) + m * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(chol))) + 0.5 * n * m * math.log(2 * math.pi)
    return nll / (n * m)


def gp_posterior_mean(kernel: GPKernel, z_train, y_train, z):
    chol = tf.linalg.cholesky(kernel.noisy_gram(z_train))
    return tf.matmul(kernel.kernel(z, z_train), tf.linalg.cholesky_solve(chol, y_train))


def pfedgp_local_model(config: remnet.RemNetConfig) -> local_model.LocalModel:
    def step(model, x, y):
        with tf.GradientTape() as tape:
            loss = gp_nll(model.get_layer("gp_kernel"), model(x, training=True), y)
        return loss, tape.gradient(loss, model.trainable_variables), tf.constant(0, tf.int64)

    def predict(model, x_train, y_train, x):
        return gp_posterior_mean(model.get_layer("gp_kernel"), model(x_train), tf.constant(y_train), model(x))

    return local_model.LocalModel(
        build=lambda: build_deep_kernel(config),
        shared=lambda m: m.trainable_variables,
        private=lambda m: [],
        step=step,
        predict=predict,
        name="deep_kernel_gp",
    )


def pfedgp(base: EpflRemnetConfig) -> Method:
    config = dataclasses.replace(base, split_head=False, k_fraction=None, bits=None, sync_period=1, ema_decay=0.0, client_weighting="num_examples")
    return Method(NAME, config, pfedgp_local_model(config.model))
