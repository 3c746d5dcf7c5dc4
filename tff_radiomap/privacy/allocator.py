"""Training the adaptive allocator against a closed-form proxy attacker (paper 000, Eqs. (20)-(21)).

Between federated rounds the defender simulates what an observer would see (single-sample local
steps from the current global model on labelled samples it holds) and moves the allocator's
parameters eta so that the budget B = d (C nu)^2 goes where the observer reads the transmitter,
at a bounded cost to the task:

  proxy step (Eq. (20)):      the attacker is the best of a family of ridge regressions fitted in
                              closed form to the privatized traces of the current allocation;
  allocator step (Eq. (21)):  eta <- eta - lr grad_eta [L_task - lambda_p L_proxy - lambda_h H(w)],
                              plain gradient descent with the step's norm capped at
                              `max_gradient_norm` (Adam's per-parameter normalization turned the
                              entropy term alone, when the proxy had no gradient, into full steps
                              that threw the allocation about), `steps` times a round.

The proxy (Eq. (20)) is `proxy.py`: ridge attackers fitted in closed form to the privatized
traces of a buffer kept across rounds, in which the noise scales enter differentiably.

L_task (our choice; the paper leaves it open): per group, the loss increase per unit of noise
energy when one upload's noise lands on the model, measured once a round at the current allocation
(antithetic: ((L(theta + n_g) + L(theta - n_g)) / 2 - L(theta)) / E_g, n_g group g's noise at the
round's mean energy E_g, floored at 1% of Uniform's), then L_task = sum_g c_g E_g / sum_g c_g
E_g^uniform averaged over the buffer (1: Uniform's harm). 1 + 2G forward passes of `harm_samples`
samples a round, against the 11 G of the earlier interpolated harm curves: a secant re-measured
each round where the allocation is, not a curve, so it cannot model saturation far from it.

Determinism: the buffer is a function of the seed, the noise grams and the harm probes' noise of
(seed, round index); `state()` / `restore()` carry eta's optimizer slots, so a resumed run continues
exactly. Non-finite inputs (a destroyed model, an overflow in the traces or a gradient) leave eta
as it is and report `skipped = 1`.
"""

from __future__ import annotations

import collections
import dataclasses
import time

import numpy as np
import tensorflow as tf

from tff_radiomap.privacy import allocator_net
from tff_radiomap.privacy import budget as budget_lib
from tff_radiomap.privacy import leakage_basis, proxy
from tff_radiomap.privacy.groups import SubspaceGroups
from tff_radiomap import seeds as seeds_lib


@dataclasses.dataclass(frozen=True)
class AllocatorConfig:
    lambda_p: float = 1.0
    lambda_h: float = 0.01
    buffer_traces: int = 384  # N: training and held-out traces of the proxy.
    heldout_fraction: float = 0.25
    steps: int = 20  # Allocator steps (Eq. (21)) a round.
    eta_learning_rate: float = 1.0  # Gradient descent; with max_gradient_norm 1, a step moves eta by at most 1.
    ridge_scales: tuple[float, ...] = proxy.RIDGE_SCALES
    proxy_temperature: float = 0.02  # Soft minimum over the attackers, for the gradient only.
    max_gradient_norm: float = 1.0
    harm_samples: int = 64
    map_size_m: float = 256.0
    seed: int = 0


def task_loss(energy, harm_per_energy, uniform_energy):
    """L_task: mean over rows of energy [N, G] of sum_g c_g E_g over Uniform's sum_g c_g E_g (0
    where Uniform's is not positive)."""
    c = tf.maximum(tf.cast(harm_per_energy, tf.float32), 0.0)
    reference = tf.reduce_sum(c * tf.cast(uniform_energy, tf.float32))
    ratio = tf.reduce_mean(tf.reduce_sum(tf.cast(energy, tf.float32) * c, axis=1)) / tf.where(reference > 0, reference, 1.0)
    return tf.where(reference > 0, ratio, 0.0)


def allocator_step(eta: dict, optimizer, loss_fn):
    """Eq. (21): one gradient step on eta of `loss_fn(eta)` (a scalar tensor and its parts).

    Returns (loss, parts) or None, leaving eta as it was, when a gradient is not finite."""
    variables = list(eta.values())
    with tf.GradientTape() as tape:
        loss, parts = loss_fn(eta)
    grads = tape.gradient(loss, variables)
    if not all(g is not None and np.all(np.isfinite(g.numpy())) for g in grads):
        return None
    optimizer.apply_gradients(zip(grads, variables))
    return loss, parts


# ---------------------------------------------------------------------------------------------
class AllocatorTrainer:
    """Updates eta once per round against the closed-form proxy (module docstring)."""

    def __init__(self, factory, config: AllocatorConfig = AllocatorConfig(), *, local_updates, collector_for=None):
        """`local_updates(model, optimizer, x, y, steps)`: the clients' local steps
        (`learning.local_training.local_updates`), which simulate the observer's traces;
        `collector_for(model, optimizer)`: the `leakage_basis.UploadCollector` of first uploads on
        `model` (default: a new one, traced for this trainer; a caller that keeps one per model
        passes it here)."""
        self.factory = factory
        self.collector_for = collector_for or (lambda model, optimizer: leakage_basis.UploadCollector(model, optimizer, local_updates))
        self.groups = factory.groups
        self.config = config
        self.sizes = np.asarray(self.groups.sizes)
        self.budget = float(factory.budget(self.groups))
        self.subspace = isinstance(self.groups, SubspaceGroups)
        self._eta = None
        self._collector, self._collector_model = None, None
        self._loss_fn = None
        self._objective = None  # The traced objective and its gradient (`_objective_fn`).
        # Plain gradient descent (Eq. (21)), the step's norm capped: Adam's per-parameter
        # normalization turns a vanishing gradient (a proxy at the constant guess, the entropy term
        # alone) into full-size steps.
        self.eta_optimizer = tf.keras.optimizers.SGD(config.eta_learning_rate, global_clipnorm=config.max_gradient_norm)

    # -- data ---------------------------------------------------------------------------------
    def buffer(self, num_samples: int) -> tuple[np.ndarray, np.ndarray]:
        """(train, held-out) sample indices of the proxy's buffer: fixed by the seed, every round."""
        n = min(self.config.buffer_traces, num_samples)
        pick = seeds_lib.generator(self.config.seed, seeds_lib.ALLOCATOR_BUFFER).permutation(num_samples)[:n]
        n_te = max(1, int(round(self.config.heldout_fraction * n)))
        return np.sort(pick[n_te:]), np.sort(pick[:n_te])

    def _uploads(self, model, optimizer, x, y) -> np.ndarray:
        """Clipped signed first uploads [N, d] of `model` on the samples."""
        if self._collector_model is not model:  # Traced once per model (the run keeps one a phase).
            self._collector, self._collector_model = self.collector_for(model, optimizer), model
            if self._collector.model is not model:
                raise ValueError("collector_for gave a collector of another model")
        u = self._collector.collect(x, y)
        # Row norms in float64, 64 rows at a time (each row's sum as over the whole array, without a
        # float64 copy of it and numpy's two temporaries of that size).
        norm = np.concatenate([np.linalg.norm(u[s : s + 64].astype(np.float64), axis=1, keepdims=True) for s in range(0, len(u), 64)])
        return (u * (self.factory.clip_norm / np.maximum(norm, self.factory.clip_norm))).astype(np.float32)

    def _basis(self):
        return self.factory.basis_array() if self.subspace else None

    def summaries(self, uploads: np.ndarray, fraction: float, phase) -> tf.Tensor:
        """Psi (Eq. (12)) of flat uploads [N, d] over the factory's groups."""
        c = self.factory.clip_norm
        if self.subspace:
            basis = tf.constant(self._basis())
            return allocator_net.summary_statistics_projected(uploads, basis, self.groups.block_of_column(), self.sizes, c, fraction, phase)
        ends = np.cumsum([0] + [a.size for a in self.groups.ids])
        flat = [tf.reshape(uploads[:, a:b], (len(uploads),) + ids.shape) for a, b, ids in zip(ends[:-1], ends[1:], self.groups.ids)]
        return allocator_net.summary_statistics_batch(flat, [tf.constant(a) for a in self.groups.ids], self.sizes, c, fraction, phase)

    def weight_noise(self, rng: np.random.Generator, g: int, energy: float) -> np.ndarray:
        """[d] group g's noise with E||n||^2 = energy (sigma^2 = energy / d_g)."""
        d = self.groups.num_coordinates
        sigma = np.sqrt(energy / max(int(self.sizes[g]), 1))
        if not self.subspace:
            ids = np.concatenate([a.ravel() for a in self.groups.ids])
            n = np.zeros(d, np.float32)
            n[ids == g] = rng.normal(0.0, sigma, int(self.sizes[g]))
            return n
        basis = self._basis()
        if g < len(self.groups.block_sizes):
            ends = np.cumsum((0,) + tuple(self.groups.block_sizes))
            return (basis[:, ends[g] : ends[g + 1]] @ rng.normal(0.0, sigma, int(self.sizes[g])).astype(np.float32)).astype(np.float32)
        z = rng.normal(0.0, sigma, d).astype(np.float32)
        return z - basis @ (basis.T @ z)

    def harm_per_energy(self, model, x, y, energies, seed) -> np.ndarray:
        """c_g [G]: the antithetic loss increase per unit of noise energy on each group, at `energies`."""
        variables = model.trainable_variables
        start = [v.numpy() for v in variables]
        offsets = np.cumsum([0] + [w.size for w in start])
        if self._loss_fn is None or self._loss_fn[0] is not model:

            @tf.function
            def mse(x, y):
                return tf.reduce_mean(tf.square(model(x, training=False) - y))

            self._loss_fn = (model, mse)

        def loss():
            return float(self._loss_fn[1](x, y))

        rng = np.random.default_rng(seed)
        clean = loss()
        c = np.zeros(len(self.sizes))
        try:
            for g, energy in enumerate(energies):
                if self.sizes[g] <= 0:
                    continue
                n = self.weight_noise(rng, g, float(energy))
                pair = []
                for sign in (1.0, -1.0):
                    for v, w, a, b in zip(variables, start, offsets[:-1], offsets[1:]):
                        v.assign(w + sign * n[a:b].reshape(w.shape))
                    pair.append(loss())
                c[g] = (0.5 * (pair[0] + pair[1]) - clean) / float(energy)
        finally:
            for v, w in zip(variables, start):
                v.assign(w)
        return np.where(np.isfinite(c), c, 0.0)

    def _eta_variables(self, eta_values) -> collections.OrderedDict:
        if self._eta is None:
            self._eta = collections.OrderedDict((k, tf.Variable(np.asarray(v, np.float32))) for k, v in eta_values.items())
        for k, v in eta_values.items():
            self._eta[k].assign(np.asarray(v, np.float32))
        return self._eta

    def allocation(self, eta, summaries):
        """(w [N, G], energy [N, G], sigma [N, G]) of Eqs. (13)-(16)."""
        return allocator_net.allocation(eta, summaries, self.sizes, self.budget, self.factory.sigma_min)

    def prepare(self, model, optimizer, samples: dict, round_index: int):
        """(proxy.ProxyProblem, uploads [N, d]) of the round, or None when the traces are not finite."""
        train, test = self.buffer(len(samples["x"]))
        order = np.concatenate([train, test])
        uploads = self._uploads(model, optimizer, samples["x"][order], samples["y"][order])
        if not np.all(np.isfinite(uploads)):
            return None
        grams = proxy.group_grams(uploads, self.groups, self._basis())
        cross, noise = proxy.sample_noise_grams(grams, self.sizes, seeds_lib.generator(self.config.seed, round_index, seeds_lib.NOISE_GRAMS))
        targets = samples["coords_m"][order] / self.config.map_size_m
        n_tr = len(train)
        problem = proxy.ProxyProblem(grams, cross, noise, targets, np.arange(n_tr), np.arange(n_tr, len(order)), self.sizes)
        return problem, uploads, order

    def round(self, model, optimizer, samples: dict, extras, steps: int = 3) -> tuple[collections.OrderedDict, dict]:
        """One round of allocator steps; returns (new eta, measurements).

        `model` holds the current global weights of the phase's uploaded model; `samples` has
        x, y, coords_m (labelled traces the defender may use); `extras` the aggregator extras
        (eta, round_index, phase). `steps` (the observed local steps) is unused: the proxy reads
        the first upload only. A round whose inputs are not finite returns eta unchanged with
        `skipped` = 1.
        """
        del steps
        cfg = self.config
        t0 = time.monotonic()
        round_index = int(extras["round_index"])
        unchanged = collections.OrderedDict((k, np.asarray(v, np.float32)) for k, v in extras["eta"].items())
        prepared = self.prepare(model, optimizer, samples, round_index)
        if prepared is None:
            return unchanged, {"skipped": 1.0}
        problem, uploads, order = prepared
        t_prepared = time.monotonic()
        fraction = min(round_index / self.factory.total_rounds, 1.0)
        summaries = self.summaries(uploads, fraction, extras["phase"])
        eta = self._eta_variables(extras["eta"])
        _, energy0, _ = self.allocation(eta, summaries)
        uniform_energy = self.budget * self.sizes / self.sizes.sum()
        probe_energy = np.maximum(np.mean(energy0.numpy(), axis=0), 0.01 * uniform_energy)
        h = order[: cfg.harm_samples]
        harm = self.harm_per_energy(
            model, tf.constant(samples["x"][h]), tf.constant(samples["y"][h]), probe_energy, [cfg.seed, round_index, seeds_lib.HARM_PROBES]
        )

        t_harm = time.monotonic()

        variables = list(eta.values())
        args = (summaries, problem.tensors(), tf.constant(harm, tf.float32), tf.constant(uniform_energy, tf.float32))
        step_fn = self._objective_fn(problem)
        history = []
        for _ in range(cfg.steps):
            parts, grads = step_fn(*args)
            if not (np.isfinite(float(parts["alloc_loss"])) and all(g is not None and np.all(np.isfinite(g.numpy())) for g in grads)):
                for k, v in unchanged.items():
                    eta[k].assign(v)
                return unchanged, {"skipped": 1.0}
            self.eta_optimizer.apply_gradients(zip(grads, variables))  # Eq. (21).
            history.append(parts)
        parts, _ = step_fn(*args)  # Where the round leaves the allocation.
        w, _, _ = self.allocation(eta, summaries)
        view, alpha = proxy.proxy_choice(parts.pop("ratios"), parts.pop("alphas"), cfg.ridge_scales)
        measurements = {k: float(v) for k, v in parts.items()}
        measurements.update(
            skipped=0.0,
            constant_guess_loss=problem.constant_mse,
            proxy_loss_start=float(history[0]["proxy_loss"]) if history else measurements["proxy_loss"],
            proxy_view=float(proxy.VIEWS.index(view)) if view in proxy.VIEWS else -1.0,
        )
        # Timings stay out of the measurements (which a resumed run must reproduce exactly).
        self.last_seconds = dict(total=time.monotonic() - t0, traces=t_prepared - t0, harm=t_harm - t_prepared)
        measurements.update({f"harm_per_energy_{name}": float(c) for name, c in zip(self.groups.names, harm)})
        measurements.update({f"weight_{name}": float(m) for name, m in zip(self.groups.names, tf.reduce_mean(w, 0).numpy())})
        return collections.OrderedDict((k, v.numpy()) for k, v in eta.items()), measurements

    def _objective_fn(self, problem: proxy.ProxyProblem):
        """(parts, gradients of eta) of Eq. (21)'s objective, L_task - lambda_p L_proxy - lambda_h H,
        at the current eta: traced once per trainer (the round's inputs are its arguments; the
        buffer's split and the groups, read from `problem`, are the same every round)."""
        if self._objective is None:
            cfg = self.config
            template = problem

            def objective(summaries, tensors, harm, uniform_energy):
                round_problem = template.with_tensors(tensors)
                variables = list(self._eta.values())
                with tf.GradientTape() as tape:
                    w, energy, sigma = self.allocation(self._eta, summaries)
                    ratios, alphas = proxy.proxy_ratios(round_problem, sigma, cfg.ridge_scales)
                    l_proxy = proxy.proxy_loss(ratios, cfg.proxy_temperature)
                    l_task = task_loss(energy, harm, uniform_energy)
                    entropy = tf.reduce_mean(budget_lib.entropy(w))
                    loss = l_task - cfg.lambda_p * tf.cast(l_proxy, tf.float32) - cfg.lambda_h * entropy
                parts = dict(proxy_loss=l_proxy, task_loss=l_task, entropy=entropy, alloc_loss=loss, ratios=ratios, alphas=alphas)
                return parts, tape.gradient(loss, variables)

            self._objective = tf.function(objective)
        return self._objective

    # -- checkpoints --------------------------------------------------------------------------
    def state(self) -> dict:
        """Arrays that `restore` needs to continue exactly: eta and its optimizer's slots."""
        if self._eta is None:
            return {}
        out = {f"eta/{k}": v.numpy() for k, v in self._eta.items()}
        out.update({f"eta_opt/{i}": v.numpy() for i, v in enumerate(self.eta_optimizer.variables)})
        return out

    def restore(self, state: dict) -> None:
        """Undoes `state()` on a fresh trainer of the same factory and config."""
        if not state:
            return
        eta = {k[len("eta/") :]: v for k, v in state.items() if k.startswith("eta/")}
        self._eta_variables(collections.OrderedDict((k, eta[k]) for k in self.factory.eta))
        if len([k for k in state if k.startswith("eta_opt/")]) != len(self.eta_optimizer.variables):  # Not built while every round was skipped.
            self.eta_optimizer.build(list(self._eta.values()))
        _assign_all(self.eta_optimizer.variables, state, "eta_opt")


def _assign_all(variables, state: dict, prefix: str) -> None:
    count = len([k for k in state if k.startswith(prefix + "/")])
    if count != len(variables):
        raise ValueError(f"allocator checkpoint: {count} {prefix} arrays for {len(variables)} variables")
    for i, v in enumerate(variables):
        v.assign(state[f"{prefix}/{i}"])
