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

The proxy. Features are the signed first upload u [d] of each trace, clipped at C
(`attack.signed_block`, the block of the scoring attack's fingerprint that carries most of its
signal). A buffer of N labelled samples (a fixed, seeded draw from the defender's samples, split
once into N_tr training and N_te held-out traces) is kept across rounds; its traces are
recomputed at every round's global model, because the leak follows the model (the leakage basis
of an earlier model captures little of a later one's), and recomputing costs N single-sample
steps, about what a stale buffer would save. The groups are projectors P_g summing to the
identity (mask groups: coordinates; subspace blocks V_g; the residual I - V V^T), and group g's
noise on trace i is sigma_gi E_gi, E_gi ~ N(0, P_g), with sigma_gi that trace's own allocation.
The privatized Gram matrix is then, exactly, a quadratic in the sigmas:

  (x_i . x_j) = sum_g  K_g,ij + sigma_gj M_g,ij + sigma_gi M_g,ji + sigma_gi sigma_gj Q_g,ij
  K_g = U P_g U^T,  M_g,ij = u_i . E_gj,  Q_g,ij = E_gi . E_gj.

K_g is computed from the traces once a round; (M_g, Q_g) are one joint draw of their exact
distribution given K_g (`sample_noise_grams`: with K_g = F F^T of rank r, M_g = F xi^T and
Q_g = xi xi^T + Wishart_N(d_g - r), xi ~ N(0, 1)^{N x r}), costing O(G N^3) instead of the
O(N^2 d) of drawing d-dimensional noise. This is the realized ridge the scoring attack fits, not
its expectation: a ridge on E[noisy Gram] (noise as an extra penalty N sigma_g^2 per direction) is
the N >> d_g limit, right for a small subspace block but not for the residual (d_g ~ 10^5 >> N),
whose noise enters the dual as a near-isotropic ridge tr(Sigma); an expected-noise proxy there is
far stronger than any attacker with N traces, and would steer the allocation by a threat that
does not exist.

The attackers (Eq. (20)): features centred on the training mean; dual ridge
A = (X X^T + alpha I)^{-1} (Y - mean Y) on the N_tr training traces, held-out prediction
X_te X^T A + mean Y, Y the transmitter coordinates over the map side. Views as the scoring attack
takes them (`ClientPerturbationFactory.aware_weights`): plain; whitened (group g of trace i scaled
by min_h sigma_hi / sigma_gi, the noise covariance's inverse square root); projected (only the
least-noised groups). Scaling a group's features scales its K, M, Q blocks, so every view is the
same quadratic. alpha runs over `ridge_scales` times the mean training diagonal of the view's
Gram, and alpha = inf is the constant guess. L_proxy = min over views and alphas of the held-out
MSE over the constant guess's: L_proxy <= 1 by construction, with no cap. Its gradient is the
soft minimum's (temperature `proxy_temperature`), so that where the constant guess is the best
attacker the ridge attackers close above it still say where noise hides the leak.

Left out of the proxy, against the scoring attack: the kernel-norm features of all S uploads,
the per-feature standardization (which for mask groups acts much like the whitened view), the
choice of alpha on a validation split (the proxy picks it on its held-out traces: slightly
optimistic for the attacker), and the attack's larger trace count (1024 + extras): the ridge's
strength grows with N against the dual ridge tr(Sigma) = B that Uniform's noise adds, so a proxy
of N_tr = 288 traces is weaker than the attack where the leak is barely readable (see
bench/RESULTS.md, "Issue 14"). Whether the first upload or all S signed uploads match the attack's
signal better was not measured: the attack's signed block is the first upload, so that is used.

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
import copy
import dataclasses
import time

import numpy as np
import tensorflow as tf

from tff_radiomap.privacy import allocator_net
from tff_radiomap.privacy import budget as budget_lib
from tff_radiomap.privacy import leakage_basis
from tff_radiomap.privacy.groups import SubspaceGroups

VIEWS = ("plain", "whitened", "projected")


@dataclasses.dataclass(frozen=True)
class AllocatorConfig:
    lambda_p: float = 1.0
    lambda_h: float = 0.01
    buffer_traces: int = 384  # N: training and held-out traces of the proxy.
    heldout_fraction: float = 0.25
    steps: int = 20  # Allocator steps (Eq. (21)) a round.
    eta_learning_rate: float = 1.0  # Gradient descent; with max_gradient_norm 1, a step moves eta by at most 1.
    ridge_scales: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)
    proxy_temperature: float = 0.02  # Soft minimum over the attackers, for the gradient only.
    max_gradient_norm: float = 1.0
    harm_samples: int = 64
    map_size_m: float = 256.0
    seed: int = 0


# ---------------------------------------------------------------------------------------------
# The proxy's Gram blocks (numpy, once a round).
def group_grams(uploads: np.ndarray, groups, basis: np.ndarray | None = None) -> np.ndarray:
    """K_g = U P_g U^T [G, N, N] (float64) of flat uploads U [N, d]: mask groups (`ParameterGroups`)
    or subspace groups (`SubspaceGroups` with `basis` V [d, K]). The largest group is the total
    minus the others (one N x N x d product in all)."""
    u = np.ascontiguousarray(uploads, np.float32)
    total = (u @ u.T).astype(np.float64)
    sizes = np.asarray(groups.sizes)
    grams = np.zeros((len(sizes), len(u), len(u)))
    if isinstance(groups, SubspaceGroups):
        if basis is None:
            raise ValueError("subspace groups need their basis V for the proxy's Gram matrices")
        coef = (u @ np.asarray(basis, np.float32)).astype(np.float64)
        ends = np.cumsum((0,) + tuple(groups.block_sizes))
        for g, (a, b) in enumerate(zip(ends[:-1], ends[1:])):
            grams[g] = coef[:, a:b] @ coef[:, a:b].T
        grams[-1] = total - coef @ coef.T
        return grams
    ids = np.concatenate([a.ravel() for a in groups.ids])
    largest = int(np.argmax(sizes))
    for g in range(len(sizes)):
        if g != largest and sizes[g] > 0:
            part = u[:, ids == g]
            grams[g] = (part @ part.T).astype(np.float64)
    grams[largest] = total - grams.sum(axis=0)
    return grams


def sample_noise_grams(grams: np.ndarray, sizes, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One joint draw of (M_g, Q_g) [G, N, N] given K_g (module docstring), for standard noise
    E_gi ~ N(0, P_g) on every trace: M_g,ij = u_i . E_gj, Q_g,ij = E_gi . E_gj."""
    g_count, n = grams.shape[:2]
    cross, noise = np.zeros_like(grams), np.zeros_like(grams)
    for g in range(g_count):
        d_g = int(sizes[g])
        if d_g <= 0:
            continue
        eigval, eigvec = np.linalg.eigh(grams[g])
        keep = eigval > 1e-10 * max(float(eigval[-1]), 1e-300)
        keep[: max(0, len(keep) - d_g)] = False  # Rank <= d_g.
        f = eigvec[:, keep] * np.sqrt(eigval[keep])  # K_g = F F^T
        xi = rng.standard_normal((n, f.shape[1]))  # The noise's coordinates in the traces' span.
        cross[g] = f @ xi.T
        noise[g] = xi @ xi.T + _wishart(n, d_g - f.shape[1], rng)
    return cross, noise


def _wishart(n: int, dof: int, rng: np.random.Generator) -> np.ndarray:
    """Z Z^T for Z ~ N(0, 1)^{n x dof} (Bartlett's decomposition when dof >= n)."""
    if dof <= 0:
        return np.zeros((n, n))
    if dof < n:
        z = rng.standard_normal((n, dof))
        return z @ z.T
    a = np.tril(rng.standard_normal((n, n)), -1)
    a[np.diag_indices(n)] = np.sqrt(rng.chisquare(dof - np.arange(n)))
    return a @ a.T


@dataclasses.dataclass
class ProxyProblem:
    """What the proxy attacker is fitted on in one round: the Gram blocks [G, N, N] of the buffer
    (training traces `train`, held-out `test`), the targets [N, 2] and the groups' sizes."""

    grams: np.ndarray
    cross: np.ndarray
    noise: np.ndarray
    targets: np.ndarray
    train: np.ndarray
    test: np.ndarray
    sizes: np.ndarray

    def __post_init__(self):
        self._t = {k: tf.constant(getattr(self, k), tf.float64) for k in ("grams", "cross", "noise")}
        y = np.asarray(self.targets, np.float64)
        self._y_mean = y[self.train].mean(0)
        self._y_train = tf.constant(y[self.train] - self._y_mean)
        self._y_test = tf.constant(y[self.test])
        self.constant_mse = float(np.mean(np.sum((y[self.test] - self._y_mean) ** 2, axis=1)))

    def noisy_gram(self, sigma, scale=None):
        """[N, N] Gram of the privatized (and per view scaled) traces; sigma, scale [N, G]."""
        sigma = tf.cast(sigma, tf.float64)
        scale = tf.ones_like(sigma) if scale is None else tf.cast(scale, tf.float64)
        s_t, t_t = tf.transpose(sigma)[:, None, :], tf.transpose(scale)  # [G, 1, N], [G, N]
        per_group = self._t["grams"] + self._t["cross"] * s_t + tf.transpose(self._t["cross"] * s_t, [0, 2, 1]) + self._t["noise"] * s_t * tf.transpose(s_t, [0, 2, 1])
        return tf.reduce_sum(per_group * t_t[:, :, None] * t_t[:, None, :], axis=0)

    def tensors(self) -> dict:
        """The round's inputs as tensors (`with_tensors` puts them back): what changes between
        rounds of one trainer, whose buffer split, group sizes and shapes stay the same."""
        return dict(self._t, y_train=self._y_train, y_test=self._y_test, y_mean=tf.constant(self._y_mean), constant_mse=tf.constant(self.constant_mse, tf.float64))

    def with_tensors(self, tensors: dict) -> "ProxyProblem":
        """A copy reading `tensors` (of `tensors()`'s layout) instead of its own: inside a traced
        function, the round's arguments."""
        other = copy.copy(self)
        other._t = {k: tensors[k] for k in ("grams", "cross", "noise")}
        other._y_train, other._y_test, other._y_mean = tensors["y_train"], tensors["y_test"], tensors["y_mean"]
        other.constant_mse = tensors["constant_mse"]
        return other

    def heldout_mse(self, gram, alpha):
        """Held-out MSE of the dual ridge with regularization `alpha` (inf: the constant guess),
        features centred on the training mean."""
        if isinstance(alpha, (int, float)) and not np.isfinite(alpha):
            return tf.constant(self.constant_mse, tf.float64)
        gc = self.centred(gram)
        g_tr = tf.gather(tf.gather(gc, self.train), self.train, axis=1)
        g_te = tf.gather(tf.gather(gc, self.test), self.train, axis=1)
        n_tr = len(self.train)
        a = tf.linalg.cholesky_solve(tf.linalg.cholesky(g_tr + alpha * tf.eye(n_tr, dtype=tf.float64)), self._y_train)
        pred = tf.matmul(g_te, a) + self._y_mean
        return tf.reduce_mean(tf.reduce_sum(tf.square(self._y_test - pred), axis=1))

    def centred(self, gram):
        """The Gram of features minus their training mean."""
        n = gram.shape[0]
        p = np.zeros(n)
        p[self.train] = 1.0 / len(self.train)
        p = tf.constant(p[:, None])
        gp = tf.matmul(gram, p)  # [N, 1]
        return gram - gp - tf.transpose(gp) + tf.matmul(p, gp, transpose_a=True)

    def train_diagonal(self, gram):
        """The mean training diagonal of the centred Gram (the alphas' unit), held constant in the
        gradient."""
        return tf.stop_gradient(tf.reduce_mean(tf.gather(tf.linalg.diag_part(self.centred(gram)), self.train)))


def view_scales(sigma, sizes, view: str):
    """Per trace and group [N, G] the feature scale of an observer's view (see
    `ClientPerturbationFactory.aware_weights`, row by row)."""
    sigma = tf.cast(sigma, tf.float64)
    present = tf.constant(np.asarray(sizes) > 0)[None, :]
    if view == "plain":
        return tf.ones_like(sigma)
    s_min = tf.reduce_min(tf.where(present, sigma, tf.constant(np.inf, tf.float64)), axis=1, keepdims=True)
    least = tf.cast(present & (sigma <= s_min * (1.0 + 1e-6)), tf.float64)
    if view == "projected":
        return least
    if view == "whitened":
        return tf.where(present, tf.where(s_min > 0, s_min / tf.maximum(sigma, 1e-300), least), 0.0)
    raise ValueError(f"view {view!r}: expected one of {VIEWS}")


def proxy_step(problem: ProxyProblem, sigma, ridge_scales=AllocatorConfig.ridge_scales, views=VIEWS, temperature: float = 0.02):
    """Eq. (20): the proxy attacker for noise scales sigma [N, G], fitted in closed form.

    Returns (L_proxy, (view, alpha)): the smallest held-out MSE over the views and the alphas
    (alpha = inf, the constant guess, included), over the constant guess's. Its gradient in sigma is
    that of the soft minimum -T log sum_i exp(-L_i / T) (T = `temperature`; 0: the hard minimum's),
    so that attackers within a few T of the best share it: where the best is the constant guess,
    the hard minimum has no gradient, and the ridge attackers just above it say where the noise
    would have to go.
    """
    ratios, alphas = proxy_ratios(problem, sigma, ridge_scales, views)
    return proxy_loss(ratios, temperature), proxy_choice(ratios, alphas, ridge_scales, views)


def proxy_ratios(problem: ProxyProblem, sigma, ridge_scales=AllocatorConfig.ridge_scales, views=VIEWS):
    """(ratios, alphas) [1 + V * A]: every attacker's held-out MSE over the constant guess's, and
    its alpha; entry 0 is the constant guess (1, alpha = inf), then each view's alphas in order."""
    ratios, alphas = [tf.constant(1.0, tf.float64)], [tf.constant(np.inf, tf.float64)]
    for view in views:
        gram = problem.noisy_gram(sigma, view_scales(sigma, problem.sizes, view))
        scale = problem.train_diagonal(gram)
        for s in ridge_scales:
            ratios.append(problem.heldout_mse(gram, s * scale) / problem.constant_mse)
            alphas.append(s * scale)
    return tf.stack(ratios), tf.stack(alphas)


def proxy_loss(ratios, temperature: float):
    """L_proxy: the smallest ratio, with the soft minimum's gradient (`proxy_step`)."""
    hard = tf.gather(ratios, tf.argmin(ratios))  # The first minimum takes the hard gradient.
    if temperature <= 0:
        return hard
    soft = -temperature * tf.reduce_logsumexp(-ratios / temperature)
    return hard + (soft - tf.stop_gradient(soft))


def proxy_choice(ratios, alphas, ridge_scales=AllocatorConfig.ridge_scales, views=VIEWS) -> tuple[str, float]:
    """(view, alpha) of the best attacker of `proxy_ratios`."""
    best = int(np.argmin(np.asarray(ratios)))
    return ("constant", np.inf) if best == 0 else (views[(best - 1) // len(ridge_scales)], float(np.asarray(alphas)[best]))


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

    def __init__(self, factory, config: AllocatorConfig = AllocatorConfig(), *, local_updates):
        """`local_updates(model, optimizer, x, y, steps)`: the clients' local steps
        (`learning.local_training.local_updates`), which simulate the observer's traces."""
        self.factory = factory
        self.local_updates = local_updates
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
        pick = np.random.default_rng([self.config.seed, 14]).permutation(num_samples)[:n]
        n_te = max(1, int(round(self.config.heldout_fraction * n)))
        return np.sort(pick[n_te:]), np.sort(pick[:n_te])

    def _uploads(self, model, optimizer, x, y) -> np.ndarray:
        """Clipped signed first uploads [N, d] of `model` on the samples."""
        if self._collector_model is not model:  # Traced once per model (the run keeps one a phase).
            self._collector, self._collector_model = leakage_basis.UploadCollector(model, optimizer, self.local_updates), model
        u = self._collector.collect(x, y)
        norm = np.linalg.norm(u.astype(np.float64), axis=1, keepdims=True)
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
        w = budget_lib.masked_softmax(allocator_net.logits(eta, summaries), self.sizes)
        energy, sigma = budget_lib.allocate(w, self.budget, self.sizes, self.factory.sigma_min)
        return w, energy, sigma

    def prepare(self, model, optimizer, samples: dict, round_index: int):
        """(ProxyProblem, uploads [N, d]) of the round, or None when the traces are not finite."""
        train, test = self.buffer(len(samples["x"]))
        order = np.concatenate([train, test])
        uploads = self._uploads(model, optimizer, samples["x"][order], samples["y"][order])
        if not np.all(np.isfinite(uploads)):
            return None
        grams = group_grams(uploads, self.groups, self._basis())
        cross, noise = sample_noise_grams(grams, self.sizes, np.random.default_rng([self.config.seed, round_index, 20]))
        targets = samples["coords_m"][order] / self.config.map_size_m
        n_tr = len(train)
        problem = ProxyProblem(grams, cross, noise, targets, np.arange(n_tr), np.arange(n_tr, len(order)), self.sizes)
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
        harm = self.harm_per_energy(model, tf.constant(samples["x"][h]), tf.constant(samples["y"][h]), probe_energy, [cfg.seed, round_index, 21])

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
        view, alpha = proxy_choice(parts.pop("ratios"), parts.pop("alphas"), cfg.ridge_scales)
        measurements = {k: float(v) for k, v in parts.items()}
        measurements.update(
            skipped=0.0,
            constant_guess_loss=problem.constant_mse,
            proxy_loss_start=float(history[0]["proxy_loss"]) if history else measurements["proxy_loss"],
            proxy_view=float(VIEWS.index(view)) if view in VIEWS else -1.0,
        )
        # Timings stay out of the measurements (which a resumed run must reproduce exactly).
        self.last_seconds = dict(total=time.monotonic() - t0, traces=t_prepared - t0, harm=t_harm - t_prepared)
        measurements.update({f"harm_per_energy_{name}": float(c) for name, c in zip(self.groups.names, harm)})
        measurements.update({f"weight_{name}": float(m) for name, m in zip(self.groups.names, tf.reduce_mean(w, 0).numpy())})
        return collections.OrderedDict((k, v.numpy()) for k, v in eta.items()), measurements

    def _objective_fn(self, problem: ProxyProblem):
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
                    ratios, alphas = proxy_ratios(round_problem, sigma, cfg.ridge_scales)
                    l_proxy = proxy_loss(ratios, cfg.proxy_temperature)
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
