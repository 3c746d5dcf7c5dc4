"""The adaptive allocator's proxy attacker (paper 000, Eq. (20)), fitted in closed form.

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
bench/RESULTS.md, "Adaptive (the proposed allocator)"). Whether the first upload or all S signed uploads match the attack's
signal better was not measured: the attack's signed block is the first upload, so that is used.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import tensorflow as tf

from tff_radiomap.privacy.groups import SubspaceGroups

VIEWS = ("plain", "whitened", "projected")
RIDGE_SCALES = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)  # alpha over the mean training diagonal of a view's Gram.


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
        per_group = (
            self._t["grams"] + self._t["cross"] * s_t + tf.transpose(self._t["cross"] * s_t, [0, 2, 1]) + self._t["noise"] * s_t * tf.transpose(s_t, [0, 2, 1])
        )
        return tf.reduce_sum(per_group * t_t[:, :, None] * t_t[:, None, :], axis=0)

    def tensors(self) -> dict:
        """The round's inputs as tensors (`with_tensors` puts them back): what changes between
        rounds of one trainer, whose buffer split, group sizes and shapes stay the same."""
        return dict(
            self._t, y_train=self._y_train, y_test=self._y_test, y_mean=tf.constant(self._y_mean), constant_mse=tf.constant(self.constant_mse, tf.float64)
        )

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


def proxy_step(problem: ProxyProblem, sigma, ridge_scales=RIDGE_SCALES, views=VIEWS, temperature: float = 0.02):
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


def proxy_ratios(problem: ProxyProblem, sigma, ridge_scales=RIDGE_SCALES, views=VIEWS):
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


def proxy_choice(ratios, alphas, ridge_scales=RIDGE_SCALES, views=VIEWS) -> tuple[str, float]:
    """(view, alpha) of the best attacker of `proxy_ratios`."""
    best = int(np.argmin(np.asarray(ratios)))
    return ("constant", np.inf) if best == 0 else (views[(best - 1) // len(ridge_scales)], float(np.asarray(alphas)[best]))
