"""Training the adaptive allocator against a proxy attacker (paper 000, Eqs. (20)-(21)).

Between federated rounds, on a small batch of labelled traces (single-sample local steps from the
current global model, as the observer would see them before privatization):

  proxy step:      psi <- psi - lr_psi grad_psi L_proxy                          (Eq. (20))
  allocator step:  eta <- eta - lr_eta grad_eta [L_task - lambda_p L_proxy - lambda_h H(w)]  (Eq. (21))

alternating `steps` times per round. The noise is reparameterized (n = sigma_g(eta) * eps, eps
fixed per step), so both losses are differentiable in eta.

L_proxy: mean squared error of q_psi(phi(privatized trace)) against the transmitter coordinate,
in units of the map side; q_psi is a one-hidden-layer MLP on standardized fingerprints (the
attack's phi).

L_task (our choice; the paper leaves it open): the expected increase of the training loss caused by
the noise, to second order, with the Hessian diagonal replaced by the empirical Fisher,

    E[L(theta + n)] - L(theta) ~= 1/2 sum_g sigma_g^2 F_g,   F_g = sum_{i in g} (dL/dtheta_i)^2,

divided by its value under Uniform Noise (sigma_g = C nu for all g), so L_task = 1 means "hurts
the task as much as Uniform Noise". It is cheap (one gradient per round), differentiable, and
says that noise on coordinates the loss is flat in is nearly free.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import tensorflow as tf

from tff_radiomap.learning import local_training
from tff_radiomap.privacy import allocator_net
from tff_radiomap.privacy import budget as budget_lib
from tff_radiomap.privacy.attack import transposed_flags


@dataclasses.dataclass(frozen=True)
class AllocatorConfig:
    lambda_p: float = 1.0
    lambda_h: float = 0.01
    traces_per_round: int = 48
    steps: int = 10
    eta_learning_rate: float = 0.05
    psi_learning_rate: float = 3e-3
    proxy_hidden: int = 64
    map_size_m: float = 256.0
    seed: int = 0


class AllocatorTrainer:
    """Holds the proxy attacker q_psi and updates eta once per round."""

    def __init__(self, factory, config: AllocatorConfig = AllocatorConfig()):
        self.factory = factory
        self.groups = factory.groups
        self.config = config
        self.ids = [tf.constant(a) for a in self.groups.ids]
        self.sizes = tf.constant(self.groups.sizes, tf.float32)
        self.budget = float(factory.budget(self.groups))
        self.rng = np.random.default_rng(config.seed)
        self.proxy = None
        self._eta = None
        self._trace_fn, self._trace_key = None, None
        self.psi_optimizer = tf.keras.optimizers.Adam(config.psi_learning_rate)
        self.eta_optimizer = tf.keras.optimizers.Adam(config.eta_learning_rate)

    # -- data ---------------------------------------------------------------------------------
    def _clean_traces(self, model, optimizer, x, y, steps):
        """Clipped uploads of each sample's S local steps, stacked: per tensor [N, S, ...]."""
        key = (id(model), steps)
        if self._trace_key != key:  # Traced once per model (the run keeps one a phase).

            def one(xi, yi):
                uploads = local_training.local_updates(model, optimizer, xi, yi, steps)
                return [self.factory._clip(u)[0] for u in uploads]

            self._trace_fn, self._trace_key = tf.function(one), key
        traces = [self._trace_fn(tf.constant(x[i : i + 1]), tf.constant(y[i : i + 1])) for i in range(len(x))]
        return [tf.stack([tf.stack([t[s][j] for s in range(steps)]) for t in traces]) for j in range(len(self.ids))]

    def _fisher(self, model, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        g = len(self.groups.names)
        fisher = tf.zeros([g])
        for grad, ids in zip(grads, self.ids):
            fisher += tf.math.unsorted_segment_sum(tf.reshape(tf.square(grad), [-1]), tf.reshape(ids, [-1]), g)
        return fisher

    # -- the differentiable pipeline ----------------------------------------------------------
    def _features(self, stacked, sigma, transposed):
        """phi of the privatized traces: stacked[j] is [N, S, ...]; sigma [N*S, G] -> [N, F]."""
        n = stacked[0].shape[0]
        feats = []
        for j, (u, ids) in enumerate(zip(stacked, self.ids)):
            s = u.shape[1]
            sig = tf.reshape(tf.gather(sigma, ids, axis=1), [n, s] + ids.shape.as_list())
            noisy = u + sig * tf.random.normal(tf.shape(u))
            if u.shape.rank == 6:  # [N, S, h, w, in, out] (or [.., out, in] transposed)
                axis = 5 if transposed[j] else 4
                noisy = tf.sqrt(tf.reduce_sum(tf.square(noisy), axis=axis) + 1e-20)
            feats.append(tf.reshape(noisy, [n, -1]))
        return tf.concat(feats, axis=1)

    def _build_proxy(self, dim):
        tf.keras.utils.set_random_seed(self.config.seed)
        self.proxy = tf.keras.Sequential(
            [tf.keras.layers.InputLayer((dim,)), tf.keras.layers.Dense(self.config.proxy_hidden, activation="relu"), tf.keras.layers.Dense(2)]
        )

    def round(self, model, optimizer, samples: dict, extras, steps: int = 3) -> tuple[collections.OrderedDict, dict]:
        """One round of alternating updates; returns (new eta, measurements).

        `model` holds the current global weights of the phase's uploaded model; `samples` has
        x, y, coords_m (labelled traces the defender may use); `extras` the aggregator extras
        (eta, round_index, phase).
        """
        cfg = self.config
        pick = self.rng.choice(len(samples["x"]), size=min(cfg.traces_per_round, len(samples["x"])), replace=False)
        x, y = samples["x"][pick], samples["y"][pick]
        target = tf.constant(samples["coords_m"][pick] / cfg.map_size_m, tf.float32)
        stacked = self._clean_traces(model, optimizer, x, y, steps)
        fisher = self._fisher(model, tf.constant(x), tf.constant(y))
        uniform_task = float((self.factory.clip_norm * self.factory.noise_multiplier) ** 2 * tf.reduce_sum(fisher)) + 1e-30
        transposed = transposed_flags(model)
        n = len(pick)
        fraction = min(float(extras["round_index"]) / self.factory.total_rounds, 1.0)
        summaries = tf.stack(
            [
                allocator_net.summary_statistics([u[i, s] for u in stacked], self.ids, self.groups.sizes, self.factory.clip_norm, fraction, extras["phase"])
                for i in range(n)
                for s in range(steps)
            ]
        )
        if self._eta is None:
            self._eta = collections.OrderedDict((k, tf.Variable(np.asarray(v, np.float32))) for k, v in extras["eta"].items())
        for k, v in extras["eta"].items():
            self._eta[k].assign(np.asarray(v, np.float32))
        eta = self._eta

        def allocation():
            w = budget_lib.masked_softmax(allocator_net.logits(eta, summaries), self.groups.sizes)
            _, sigma = budget_lib.allocate(w, self.budget, self.groups.sizes, self.factory.sigma_min)
            return w, sigma

        w, sigma = allocation()
        first = self._features(stacked, sigma, transposed)
        mu = tf.reduce_mean(first, 0)
        sd = tf.math.reduce_std(first, 0) + 1e-6
        if self.proxy is None or self.proxy.input_shape[-1] != first.shape[-1]:
            self._build_proxy(int(first.shape[-1]))

        def proxy_loss(sigma):
            feats = (self._features(stacked, sigma, transposed) - mu) / sd
            return tf.reduce_mean(tf.reduce_sum(tf.square(self.proxy(tf.clip_by_value(feats, -10, 10)) - target), axis=1))

        history = collections.defaultdict(list)
        for _ in range(cfg.steps):
            # Proxy step (Eq. (20)): the attacker adapts to the current allocation.
            _, sigma = allocation()
            with tf.GradientTape() as tape:
                l_proxy = proxy_loss(tf.stop_gradient(sigma))
            grads = tape.gradient(l_proxy, self.proxy.trainable_variables)
            self.psi_optimizer.apply_gradients(zip(grads, self.proxy.trainable_variables))
            # Allocator step (Eq. (21)).
            with tf.GradientTape() as tape:
                w, sigma = allocation()
                l_task = tf.reduce_mean(tf.reduce_sum(tf.square(sigma) * fisher, axis=1)) / uniform_task
                l_adv = proxy_loss(sigma)
                entropy = tf.reduce_mean(budget_lib.entropy(w))
                loss = l_task - cfg.lambda_p * l_adv - cfg.lambda_h * entropy
            grads = tape.gradient(loss, list(eta.values()))
            self.eta_optimizer.apply_gradients(zip(grads, list(eta.values())))
            for k, v in (("proxy_loss", l_adv), ("task_loss", l_task), ("entropy", entropy), ("alloc_loss", loss)):
                history[k].append(float(v))
        w, _ = allocation()
        measurements = {k: v[-1] for k, v in history.items()}
        measurements.update({f"weight_{name}": float(m) for name, m in zip(self.groups.names, tf.reduce_mean(w, 0).numpy())})
        return collections.OrderedDict((k, v.numpy()) for k, v in eta.items()), measurements
