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

L_task (our choice; the paper leaves it open): the measured loss increase of the current model when
one upload's noise lands on it, per group, interpolated in sigma and normalised by Uniform Noise's:

    h_g(sigma) = L(theta + N(0, sigma^2) on group g) - L(theta)       probed at sigma_full_g 10^(-k/2), k = 0..10
    L_task = mean over traces of sum_g h_g(sigma_g) / sum_g h_g(C nu)

sigma_full_g = sqrt(B / d_g) is the largest sigma group g can get (all of B). Each round the probes
run once on the picked samples (22 forward passes); h_g between probes is linear in log sigma
(made non-negative and non-decreasing), below the smallest probe it falls as sigma^2. It is
differentiable in eta through sigma_g, and it measures instead of assuming: a second-order
(Fisher) estimate, which we tried first, grows without bound in sigma^2 far outside the range where
it holds (at nu = 3 the noise is ~400x a RadioUNet update) and its ranking of allocations there
means nothing. The measured curves saturate where the damage does. Harm is taken as
additive over groups. L_task = 1 means "hurts the task as much as Uniform Noise".

L_proxy enters Eq. (21) capped at the loss of the best constant guess on the batch: a proxy worse
than guessing the mean position is no attacker, and making it worse still buys no privacy (an
untrained proxy's loss can be 10^3 times the guess's and would drown L_task).

Determinism: the traces picked, the reparameterization noise and the probes' noise are functions of
(seed, round index), and `state()` / `restore()` carry the proxy's weights and both optimizers'
slots, so a run resumed from a checkpoint continues exactly as the uninterrupted one.

Non-finite inputs (a model already destroyed, an overflow in the traces): the round leaves eta as it
is and reports `skipped = 1` rather than writing NaN into the aggregation state.
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


HARM_PROBES = 11  # sigma_full 10^(-k/2), k = 0..10: five decades.
OVERFLOW_HARM = 1e6  # A probe whose loss overflowed.


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

    def _harm_curves(self, model, x, y, seed):
        """(log sigma [G, L] ascending, harm [G, L]): the probes of L_task (module docstring)."""
        variables = model.trainable_variables
        start = [tf.identity(v) for v in variables]

        def loss():
            return float(tf.reduce_mean(tf.square(model(x, training=False) - y)))

        levels = 10.0 ** (-np.arange(HARM_PROBES)[::-1] / 2.0)  # Ascending, up to 1.
        g_count = len(self.groups.names)
        log_sigma = np.zeros((g_count, HARM_PROBES), np.float32)
        harm = np.zeros((g_count, HARM_PROBES), np.float32)
        clean = loss()
        try:
            for g, d_g in enumerate(self.groups.sizes):
                full = np.sqrt(self.budget / max(d_g, 1))
                log_sigma[g] = np.log(full * levels)
                if d_g <= 0:
                    continue
                for k, level in enumerate(levels):
                    for j, (v, s, ids) in enumerate(zip(variables, start, self.ids)):
                        noise = tf.random.stateless_normal(tf.shape(s), seed=[seed[0], (seed[1] * 1009 + g * 101 + k) * 1009 + j])
                        v.assign(s + tf.where(ids == g, noise * float(full * level), 0.0))
                    harm[g, k] = loss() - clean
        finally:
            for v, s in zip(variables, start):
                v.assign(s)
        harm = np.where(np.isfinite(harm), harm, OVERFLOW_HARM)
        return log_sigma, np.maximum.accumulate(np.maximum(harm, 0.0), axis=1)

    # -- the differentiable pipeline ----------------------------------------------------------
    def _features(self, stacked, sigma, transposed, seed):
        """phi of the privatized traces: stacked[j] is [N, S, ...]; sigma [N*S, G] -> [N, F]."""
        n = stacked[0].shape[0]
        feats = []
        for j, (u, ids) in enumerate(zip(stacked, self.ids)):
            s = u.shape[1]
            sig = tf.reshape(tf.gather(sigma, ids, axis=1), [n, s] + ids.shape.as_list())
            noisy = u + sig * tf.random.stateless_normal(tf.shape(u), seed=[seed[0], seed[1] * 1009 + j])
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

    def _eta_variables(self, eta_values) -> collections.OrderedDict:
        if self._eta is None:
            self._eta = collections.OrderedDict((k, tf.Variable(np.asarray(v, np.float32))) for k, v in eta_values.items())
        for k, v in eta_values.items():
            self._eta[k].assign(np.asarray(v, np.float32))
        return self._eta

    @staticmethod
    def _task_harm(sigma, log_sigma, harm):
        """sum_g h_g(sigma_g) per row of sigma [N, G]: the probed curves, interpolated."""
        x = tf.math.log(tf.maximum(tf.cast(sigma, tf.float32), 1e-30))
        log_sigma, harm = tf.cast(log_sigma, tf.float32), tf.cast(harm, tf.float32)
        total = tf.zeros(tf.shape(x)[:1])
        for g in range(log_sigma.shape[0]):
            xs, hs, xg = log_sigma[g], harm[g], x[:, g]
            i = tf.clip_by_value(tf.searchsorted(xs, xg), 1, len(xs) - 1)
            x0, x1, h0, h1 = tf.gather(xs, i - 1), tf.gather(xs, i), tf.gather(hs, i - 1), tf.gather(hs, i)
            inside = h0 + tf.clip_by_value((xg - x0) / (x1 - x0), 0.0, 1.0) * (h1 - h0)
            below = hs[0] * tf.exp(2.0 * tf.minimum(xg - xs[0], 0.0))
            total += tf.where(xg < xs[0], below, inside)
        return total

    def round(self, model, optimizer, samples: dict, extras, steps: int = 3) -> tuple[collections.OrderedDict, dict]:
        """One round of alternating updates; returns (new eta, measurements).

        `model` holds the current global weights of the phase's uploaded model; `samples` has
        x, y, coords_m (labelled traces the defender may use); `extras` the aggregator extras
        (eta, round_index, phase). A round whose inputs are not finite returns eta unchanged
        with `skipped` = 1.
        """
        cfg = self.config
        round_index = int(extras["round_index"])
        rng = np.random.default_rng([cfg.seed, round_index])
        pick = np.sort(rng.choice(len(samples["x"]), size=min(cfg.traces_per_round, len(samples["x"])), replace=False))
        x, y = samples["x"][pick], samples["y"][pick]
        target = tf.constant(samples["coords_m"][pick] / cfg.map_size_m, tf.float32)
        eta = self._eta_variables(extras["eta"])
        unchanged = collections.OrderedDict((k, np.asarray(v, np.float32)) for k, v in extras["eta"].items())
        stacked = self._clean_traces(model, optimizer, x, y, steps)
        if not all(np.isfinite(u.numpy()).all() for u in stacked):
            return unchanged, {"skipped": 1.0}
        log_sigma, harm = (tf.constant(a) for a in self._harm_curves(model, tf.constant(x), tf.constant(y), (cfg.seed, 2 * round_index + 1)))
        uniform_sigma = tf.fill([1, len(self.groups.names)], float(self.factory.clip_norm * self.factory.noise_multiplier))
        uniform_task = float(self._task_harm(uniform_sigma, log_sigma, harm)[0]) + 1e-30
        constant_guess = float(tf.reduce_mean(tf.reduce_sum(tf.square(target - tf.reduce_mean(target, 0)), axis=1)))
        transposed = transposed_flags(model)
        n = len(pick)
        fraction = min(round_index / self.factory.total_rounds, 1.0)
        # Trace i, step s is row i * S + s.
        flat = [tf.reshape(u, [n * steps] + u.shape.as_list()[2:]) for u in stacked]
        summaries = allocator_net.summary_statistics_batch(flat, self.ids, self.groups.sizes, self.factory.clip_norm, fraction, extras["phase"])

        def allocation():
            w = budget_lib.masked_softmax(allocator_net.logits(eta, summaries), self.groups.sizes)
            _, sigma = budget_lib.allocate(w, self.budget, self.groups.sizes, self.factory.sigma_min)
            return w, sigma

        w, sigma = allocation()
        first = self._features(stacked, sigma, transposed, (cfg.seed, 2 * round_index * 1000))
        mu = tf.reduce_mean(first, 0)
        sd = tf.math.reduce_std(first, 0) + 1e-6
        if self.proxy is None or self.proxy.input_shape[-1] != first.shape[-1]:
            self._build_proxy(int(first.shape[-1]))

        def proxy_loss(feats):
            return tf.reduce_mean(tf.reduce_sum(tf.square(self.proxy(feats) - target), axis=1))

        history = collections.defaultdict(list)
        for step in range(cfg.steps):
            seed = (cfg.seed, 2 * round_index * 1000 + 1 + step)  # One noise draw per step, shared by both updates.
            with tf.GradientTape() as tape:
                w, sigma = allocation()
                feats = tf.clip_by_value((self._features(stacked, sigma, transposed, seed) - mu) / sd, -10, 10)
                # Proxy step (Eq. (20)): the attacker adapts to the current allocation (eta fixed:
                # the same privatized features, outside the allocator's gradient).
                with tape.stop_recording():
                    with tf.GradientTape() as proxy_tape:
                        l_proxy = proxy_loss(tf.stop_gradient(feats))
                    grads = proxy_tape.gradient(l_proxy, self.proxy.trainable_variables)
                    self.psi_optimizer.apply_gradients(zip(grads, self.proxy.trainable_variables))
                # Allocator step (Eq. (21)), against the updated proxy.
                l_task = tf.reduce_mean(self._task_harm(sigma, log_sigma, harm)) / uniform_task
                l_adv = tf.minimum(proxy_loss(feats), constant_guess)
                entropy = tf.reduce_mean(budget_lib.entropy(w))
                loss = l_task - cfg.lambda_p * l_adv - cfg.lambda_h * entropy
            grads = tape.gradient(loss, list(eta.values()))
            if not all(np.isfinite(g.numpy()).all() for g in grads):
                for k, v in unchanged.items():
                    eta[k].assign(v)
                return unchanged, {"skipped": 1.0}
            self.eta_optimizer.apply_gradients(zip(grads, list(eta.values())))
            for k, v in (("proxy_loss", l_proxy), ("task_loss", l_task), ("entropy", entropy), ("alloc_loss", loss)):
                history[k].append(float(v))
        w, _ = allocation()
        measurements = {k: v[-1] for k, v in history.items()}
        measurements.update(skipped=0.0, constant_guess_loss=constant_guess)
        measurements.update({f"weight_{name}": float(m) for name, m in zip(self.groups.names, tf.reduce_mean(w, 0).numpy())})
        return collections.OrderedDict((k, v.numpy()) for k, v in eta.items()), measurements

    # -- checkpoints --------------------------------------------------------------------------
    def state(self) -> dict:
        """Arrays that `restore` needs to continue exactly: the proxy and both optimizers."""
        if self.proxy is None:
            return {}
        out = {f"proxy/{i}": v.numpy() for i, v in enumerate(self.proxy.weights)}
        out.update({f"psi_opt/{i}": v.numpy() for i, v in enumerate(self.psi_optimizer.variables)})
        out.update({f"eta/{k}": v.numpy() for k, v in self._eta.items()})
        out.update({f"eta_opt/{i}": v.numpy() for i, v in enumerate(self.eta_optimizer.variables)})
        return out

    def restore(self, state: dict) -> None:
        """Undoes `state()` on a fresh trainer of the same factory and config."""
        if not state:
            return
        n_proxy = len([k for k in state if k.startswith("proxy/")])
        self._build_proxy(int(state["proxy/0"].shape[0]))
        self.proxy.set_weights([state[f"proxy/{i}"] for i in range(n_proxy)])
        self.psi_optimizer.build(self.proxy.trainable_variables)
        _assign_all(self.psi_optimizer.variables, state, "psi_opt")
        eta = {k[len("eta/") :]: v for k, v in state.items() if k.startswith("eta/")}
        self._eta_variables(collections.OrderedDict((k, eta[k]) for k in self.factory.eta))
        if len([k for k in state if k.startswith("eta_opt/")]) > 1:  # Not built while every round was skipped.
            self.eta_optimizer.build(list(self._eta.values()))
        _assign_all(self.eta_optimizer.variables, state, "eta_opt")


def _assign_all(variables, state: dict, prefix: str) -> None:
    count = len([k for k in state if k.startswith(prefix + "/")])
    if count != len(variables):
        raise ValueError(f"allocator checkpoint: {count} {prefix} arrays for {len(variables)} variables")
    for i, v in enumerate(variables):
        v.assign(state[f"{prefix}/{i}"])
