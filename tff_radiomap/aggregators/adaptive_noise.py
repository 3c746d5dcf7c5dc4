"""The proposed adaptive group-wise allocator (paper 000, Eqs. (12)-(19)).

Per upload: s = Psi(clipped update) (Eq. (12)), a = f_eta(s) (Eq. (13)), w = softmax(a) over the
non-empty groups (Eq. (14)), E_g = B w_g (Eq. (15)), sigma_g = sqrt(E_g / d_g) (Eq. (16)), and
N(0, sigma_g^2) on group g. eta lives in the aggregation state (`extras['eta']`) and is broadcast
to clients every round, so the factory runs in any TFF pipeline. Without an `eta`, it starts at
Directed Uniform's allocation when the groups have a non-empty transmitter-sensitive one
(`allocator_net.init_params(init='directed')`: a share of 1e-9 of B on the other groups), else at
Uniform Noise's (`init='proportional'`); `init=` chooses (why Directed by default: bench/RESULTS.md,
"Table I at the paper's budget (nu = 3)"). The allocator training of
Eqs. (20)-(21) (`tff_radiomap.privacy.allocator`) replaces eta between rounds with
`client_perturbation.replace_extras(state, eta=...)`. The state also holds the round index r (it
advances every round; the summary uses r / total_rounds) and the phase indicator.

Noise floor (beyond the paper): with `sigma_min` > 0 every coordinate gets at least sigma_min, and
the allocation is computed from an already-noised copy, so that the guarantee is real:
  1. y1 = clip(Delta) + N(0, sigma_min^2 I): a Gaussian mechanism with noise multiplier
     sigma_min / C;
  2. s = Psi(y1), w = softmax(f_eta(s)), E_g = d_g sigma_min^2 + (B - d sigma_min^2) w_g;
  3. upload y1 + N(0, (sigma_g^2 - sigma_min^2) I) on group g.
Steps 2-3 only post-process y1, so each upload is (at least) the Gaussian mechanism of step 1 and
`dp_event()` returns it. The total variance per group is still sigma_g^2 and sum_g E_g = B.
Without the floor no epsilon is reported: the noise scales depend on the private update itself
(through Psi), so the upload is not a Gaussian mechanism with a data-independent scale.

Over subspace groups (`AdaptiveSubspaceNoiseFactory`, `groups.SubspaceGroups`: blocks V_g of a
leakage basis and the residual) the same allocation decides the scales of Subspace Noise's noise,
sum_g sigma_g V_g z_g + sigma_res (I - V V^T) z, with Psi taken of the projections V_g^T Delta
(`allocator_net.summary_statistics_projected`); it starts at Uniform Noise's allocation.
"""

from __future__ import annotations

import collections

import dp_accounting
import numpy as np
import tensorflow as tf

from tff_radiomap import seeds as seeds_lib
from tff_radiomap.aggregators.client_perturbation import ClientPerturbationFactory
from tff_radiomap.aggregators.subspace_noise import SubspaceNoiseFactory
from tff_radiomap.privacy import allocator_net
from tff_radiomap.privacy.groups import SubspaceGroups


class AdaptiveGroupNoiseFactory(ClientPerturbationFactory):
    """Clip at C, then split B = d (C nu)^2 over groups by the learned allocator f_eta."""

    def __init__(
        self,
        clip_norm: float,
        noise_multiplier: float,
        groups,
        total_rounds: int = 50,
        phase: int = 0,
        sigma_min: float = 0.0,
        eta=None,
        hidden: int = 16,
        inner_factory=None,
        seed=None,
        init: str | None = None,
    ):
        if groups is None:
            raise ValueError("AdaptiveGroupNoiseFactory needs parameter groups")
        super().__init__(clip_norm, noise_multiplier, groups=groups, inner_factory=inner_factory, seed=seed)
        if total_rounds < 1:
            raise ValueError(f"total_rounds={total_rounds}: expected >= 1")
        if not np.isfinite(sigma_min) or sigma_min < 0:
            raise ValueError(f"sigma_min={sigma_min}: expected a non-negative finite number")
        floor_energy = groups.num_coordinates * sigma_min**2
        if floor_energy > self.budget(groups) * (1 + 1e-6):
            raise ValueError(
                f"sigma_min={sigma_min}: the floor alone spends d sigma_min^2 = {floor_energy:.4g}, more than the budget "
                f"B = d (C nu)^2 = {self.budget(groups):.4g}; expected sigma_min <= C nu = {clip_norm * noise_multiplier}"
            )
        self.total_rounds = int(total_rounds)
        self.phase = int(phase)
        self.sigma_min = float(sigma_min)
        if eta is None:
            has_sensitive = any(s and d > 0 for s, d in zip(groups.sensitive, groups.sizes))
            init = init or ("directed" if has_sensitive else "proportional")
            eta = allocator_net.init_params(groups.num_groups, groups.sizes, hidden, init=init, sensitive=groups.sensitive)
        self.eta = eta

    def dp_event(self) -> dp_accounting.DpEvent | None:
        """Per-upload event guaranteed by the floor; None without one (see module docstring)."""
        if self.sigma_min <= 0:
            return None
        return dp_accounting.GaussianDpEvent(self.sigma_min / self.clip_norm)

    def _initial_extras(self, groups):
        return collections.OrderedDict(
            eta=collections.OrderedDict((k, np.asarray(v, np.float32)) for k, v in self.eta.items()),
            round_index=np.int32(0),
            phase=np.int32(self.phase),
        )

    def _update_extras(self, extras):
        new = collections.OrderedDict(extras)
        new["round_index"] = extras["round_index"] + 1
        return new

    def allocation(self, extras, summary, groups):
        """(weights [G], energy [G], sigma [G]) for a summary vector (Eqs. (13)-(16))."""
        return allocator_net.allocation(extras["eta"], summary, groups.sizes, self.budget(groups), self.sigma_min)

    def _summary(self, extras, flat, group_ids, groups):
        fraction = tf.minimum(tf.cast(extras["round_index"], tf.float32) / self.total_rounds, 1.0)
        return allocator_net.summary_statistics(flat, group_ids, groups.sizes, self.clip_norm, fraction, extras["phase"])

    def _client_sigmas(self, extras, clipped_flat, group_ids, groups):
        return self.allocation(extras, self._summary(extras, clipped_flat, group_ids, groups), groups)[2]

    def _perturb(self, extras, clipped, group_ids, groups, seeds):
        if self.sigma_min <= 0:
            return super()._perturb(extras, clipped, group_ids, groups, seeds)
        seeds = seeds or [None] * (2 * len(clipped))
        n = len(clipped)
        # 1. The floor: a Gaussian mechanism with noise multiplier sigma_min / C.
        y1 = [c + self._noise(tf.shape(c), tf.constant(self.sigma_min, tf.float32), seeds[i]) for i, c in enumerate(clipped)]
        # 2. Allocation from the noised copy only (post-processing).
        sigma = self.allocation(extras, self._summary(extras, y1, group_ids, groups), groups)[2]
        extra = tf.sqrt(tf.maximum(tf.square(sigma) - self.sigma_min**2, 0.0))
        # 3. The rest of each group's energy.
        noised = [y + self._noise(tf.shape(y), tf.gather(extra, ids), seeds[n + i]) for i, (y, ids) in enumerate(zip(y1, group_ids))]
        return noised, sigma


class AdaptiveSubspaceNoiseFactory(AdaptiveGroupNoiseFactory):
    """The adaptive allocator over `SubspaceGroups`: sigma_g from f_eta, noise in span(V_g) per
    block and on the complement of span(V) for the residual (module docstring).

    V is held by the groups or read at every call from `basis_path`, as for
    `SubspaceNoiseFactory` (whose basis handling this class shares); `set_basis` refreshes the
    eager copy. `observe(extras)` sets the defense parameters the batched eager path
    (`privatize_batch`, used by the attack) privatizes with when it is not given them.
    """

    def __init__(self, clip_norm: float, noise_multiplier: float, groups: SubspaceGroups, basis_path: str | None = None, init: str = "proportional", **kwargs):
        if not isinstance(groups, SubspaceGroups):
            raise TypeError(f"AdaptiveSubspaceNoiseFactory needs SubspaceGroups, got {type(groups).__name__}")
        if groups.basis is None and basis_path is None:
            raise ValueError("AdaptiveSubspaceNoiseFactory needs a basis: groups with one, or basis_path")
        super().__init__(clip_norm, noise_multiplier, groups, init=init, **kwargs)
        self.basis_path = basis_path
        self._privatizing = False
        self._basis_var = None if groups.basis is None else tf.Variable(groups.basis, trainable=False, name="subspace_basis")
        self._observed = None
        self.observe(self.initial_extras())

    # The basis: read as Subspace Noise reads it.
    set_basis = SubspaceNoiseFactory.set_basis
    _basis = SubspaceNoiseFactory._basis
    _eager_basis = SubspaceNoiseFactory._eager_basis
    _basis_shape = SubspaceNoiseFactory._basis_shape
    _unflatten = SubspaceNoiseFactory._unflatten

    def basis_array(self) -> np.ndarray:
        """V [d, K] as numpy, read-only: the groups' (the array the eager copy was set from, not a
        copy: V is 192 MB at the CPU default, wanted several times a round), else the file's."""
        if self.groups.basis is None:
            return np.asarray(self._eager_basis().numpy(), np.float32)
        view = self.groups.basis.view()
        view.flags.writeable = False
        return view

    def observe(self, extras) -> None:
        """The extras `privatize_batch` uses by default (eta, round index, phase): held in variables,
        so that a traced caller sees new values without tracing again. Other entries of a round's
        extras (the noise seed of a seeded factory) are not defense parameters and are ignored."""
        if self._observed is None:
            self._observed = tf.nest.map_structure(lambda v: tf.Variable(np.asarray(v), trainable=False), extras)
            return
        missing = sorted(set(self._observed) - set(extras))
        if missing:
            raise ValueError(f"observe: the extras lack {missing} (got {sorted(extras)})")
        for key, variables in self._observed.items():
            tf.nest.map_structure(lambda var, v: var.assign(np.asarray(v)), variables, extras[key])

    def _sigmas(self, extras, rows, basis, coef=None):
        """[M, G] sigma of flat clipped uploads [M, d] (rows; with the floor, already noised);
        `coef`: their projections V^T u where the caller has them."""
        coef = tf.matmul(rows, basis) if coef is None else coef
        return self._allocate(extras, rows, coef, tf.matmul(coef, basis, transpose_b=True))

    def _allocate(self, extras, rows, coef, inside):
        """[M, G] sigma (Eqs. (12)-(16)) of rows [M, d] from their coefficients V^T u [M, K] and
        their part in span(V) [M, d]."""
        summaries = allocator_net.summary_statistics_of_parts(
            rows, coef, rows - inside, self.groups.block_of_column(), self.groups.sizes, self.clip_norm, self._fraction(extras), extras["phase"]
        )
        return allocator_net.allocation(extras["eta"], summaries, self.groups.sizes, self.budget(self.groups), self.sigma_min)[2]

    def _privatize_rows(self, extras, rows, basis, draw, variants=()):
        """(noised [M, d], sigma [M, G]) of clipped rows, plus the defense-aware `views` of the
        noised rows when `variants` are given (`_views`); draw(i, shape) gives standard normals
        (i = 0: block coefficients, 1: the residual's, 2: the floor's)."""
        k, d = self.groups.rank, self.groups.num_coordinates
        m = tf.shape(rows)[0]
        if self.sigma_min > 0:
            # The floor first, then the allocation from the noised copy only (post-processing).
            rows = rows + self.sigma_min * draw(2, [m, d])
        coef = tf.matmul(rows, basis)
        inside = tf.matmul(coef, basis, transpose_b=True)  # The rows' part in span(V).
        sigma = self._allocate(extras, rows, coef, inside)
        scale = sigma if self.sigma_min <= 0 else tf.sqrt(tf.maximum(tf.square(sigma) - self.sigma_min**2, 0.0))
        z_s = draw(0, [m, k])
        column_scale = tf.gather(scale, self.groups.block_of_column(), axis=1)
        spanned = tf.matmul(z_s * column_scale, basis, transpose_b=True)  # The noise in span(V).
        residual = z_r = draw(1, [m, d]) * scale[:, -1:]
        residual -= tf.matmul(tf.matmul(z_r, basis), basis, transpose_b=True)
        noised = rows + (spanned + residual)
        if not variants:
            return noised, sigma
        return noised, sigma, self._views(variants, sigma, noised, coef + z_s * column_scale, inside + spanned, basis)

    def _views(self, variants, sigma, noised, coef, inside, basis):
        """`whiten_batch(noised, aware_weights(sigma, v))` for each variant v, from the noised rows'
        coefficients V^T noised (`coef`, [M, K]) and part in span(V) (`inside`, [M, d]), which the
        privatization has at hand: in exact arithmetic V^T V = I and V^T (I - V V^T) = 0, so they
        are the clipped rows' plus the noise's in span(V). With one block a view is then a sum of
        noised and inside, no product; with J blocks, one [M, K] x [K, d] product."""
        views = []
        for variant in variants:
            weights = self.aware_weights(sigma, variant)
            if len(self.groups.block_sizes) == 1:
                w_r = weights[..., -1:]
                views.append(w_r * noised + (weights[..., :1] - w_r) * inside)
            else:
                views.append(self._whitened(noised, coef, weights, basis))
        return views

    def _fraction(self, extras):
        return tf.minimum(tf.cast(extras["round_index"], tf.float32) / self.total_rounds, 1.0)

    def _perturb(self, extras, clipped, group_ids, groups, seeds):
        flat = tf.concat([tf.reshape(c, [-1]) for c in clipped], 0)[None]

        def draw(i, shape):
            if not seeds:
                return tf.random.normal(shape)
            seed = seeds[i] if i < 2 else seeds[1] + tf.constant([0, 1], seeds[1].dtype)  # [a, b * 1000003 + i]
            return tf.random.stateless_normal(shape, seed=seed)

        noised, sigma = self._privatize_rows(extras, flat, self._basis(), draw)
        return self._unflatten(noised[0], clipped), sigma[0]

    # -- outside TFF ---------------------------------------------------------------------------
    def privatize(self, flat, extras=None, seed=None):
        self._privatizing = True  # The eager basis (the attack traces it in its own tf.function).
        try:
            return super().privatize(flat, extras, seed)
        finally:
            self._privatizing = False

    def privatize_batch(self, uploads, seeds=None, extras=None):
        """Clip and perturb N flat uploads [N, d] at once (eager TF): row n with seed pair seeds[n]
        gets the noise `privatize(..., seed=seeds[n])` gives it. `extras` default: those of the last
        `observe`, else the initial ones. Returns (noised [N, d], sigma [N, G])."""
        extras, rows, draw = self._batch_inputs(uploads, seeds, extras)
        return self._privatize_rows(extras, rows, self._eager_basis(), draw)

    def privatize_views_batch(self, uploads, variants, seeds=None, extras=None):
        """(views, sigma [N, G]): `privatize_batch`'s noised rows (views[0], the same values) and
        `whiten_batch` of them for each aware view in `variants`, equal to float rounding
        (`_views`: with one block no d x K product at all, where `whiten_batch` takes two a view)."""
        extras, rows, draw = self._batch_inputs(uploads, seeds, extras)
        noised, sigma, views = self._privatize_rows(extras, rows, self._eager_basis(), draw, tuple(variants))
        return [noised] + views, sigma

    def sigmas_batch(self, uploads, seeds=None, extras=None, coef=None):
        """sigma [N, G] that `privatize_batch(uploads, seeds, extras)` gives, without drawing the
        noise it would add (the matching attacker needs only its candidates' scales). With the
        floor the allocation reads the floor-noised copy, so the floor's draw (seeded as there)
        is still made. `coef` [N, K]: the clipped uploads' projections V^T u where the caller has
        them (used without the floor; one d x K product of the two saved, the scales then equal
        to float rounding)."""
        extras, rows, draw = self._batch_inputs(uploads, seeds, extras)
        if self.sigma_min > 0:  # The projections of the floor-noised copy are not the caller's.
            rows, coef = rows + self.sigma_min * draw(2, [tf.shape(rows)[0], self.groups.num_coordinates]), None
        return self._sigmas(extras, rows, self._eager_basis(), None if coef is None else tf.convert_to_tensor(coef, tf.float32))

    def _batch_inputs(self, uploads, seeds, extras):
        """(extras, clipped rows [N, d], draw) of the batched eager path."""
        if extras is None:
            extras = self._observed if self._observed is not None else tf.nest.map_structure(tf.convert_to_tensor, self.initial_extras())
        norm = tf.norm(uploads, axis=1, keepdims=True)
        rows = uploads * (self.clip_norm / tf.maximum(norm, self.clip_norm))
        if seeds is not None:
            seeds = tf.cast(seeds, tf.int64)

        def draw(i, shape):
            if seeds is None:
                return tf.random.normal(shape)
            return seeds_lib.seeded_normal_rows(seeds, i, shape[1:])

        return extras, rows, draw

    def whiten_batch(self, uploads, weights):
        """Rows of uploads [N, d] with block g scaled by weights[..., g], the residual by the last."""
        basis = self._eager_basis()
        return self._whitened(uploads, tf.matmul(uploads, basis), weights, basis)

    def _whitened(self, uploads, coef, weights, basis):
        """w_r u + V ((w_col - w_r) * V^T u) of rows u [N, d] with coefficients V^T u = `coef`."""
        w_col = tf.gather(weights, self.groups.block_of_column(), axis=-1)
        w_r = weights[..., -1:]
        return w_r * uploads + tf.matmul(coef * (w_col - w_r), basis, transpose_b=True)

    def whiten(self, flat, weights):
        u = tf.concat([tf.reshape(c, [-1]) for c in flat], 0)
        return self._unflatten(self.whiten_batch(u[None], weights)[0], flat)
