"""Subspace Noise: a fixed share of the budget in a leakage subspace, the rest uniform on the residual.

With `SubspaceGroups` (an orthonormal basis V [d, K] of the directions along which uploads reveal
the transmitter, split into blocks, and the residual, its orthogonal complement), the client clips
its update at C (Eq. (17)) and adds

    V z_s + (I - V V^T) z_r,   z_s ~ N(0, sigma_s^2 I_K),  z_r ~ N(0, sigma_r^2 I_d),

with K sigma_s^2 = share * B and (d - K) sigma_r^2 = (1 - share) * B, B = d (C nu)^2 (Eqs. (9),
(15), (16) over projector groups). share = K / d is Uniform Noise; share = 1 puts every unit of
budget in the subspace (the Directed Uniform of these groups).

The basis is either held by the groups (`groups.basis`, embedded in the computation; fine for small
uploads) or read at every call from `basis_path` (a `write_basis` file of V: float32 [d, K], raw),
so that a driver can refresh it between rounds without rebuilding the process; the
clients must see that file (true for workers on this machine).

The noise is fixed (the basis comes from the twin, public, not from the client's data) and covers
every direction when 0 < share < 1, so each upload is a Gaussian mechanism with covariance
V diag(sigma_s^2) V^T + sigma_r^2 (I - V V^T): `dp_event()` is that of its least-noised direction,
`GaussianDpEvent(min(sigma_s, sigma_r) / C)` (the base class's rule; share 0 or 1 leaves a
direction bare and claims none). With unequal noise that epsilon is larger than Uniform Noise's
at the same budget: the guarantee is the weakest direction's.
"""

from __future__ import annotations


import numpy as np
import tensorflow as tf

from tff_radiomap import seeds as seeds_lib
from tff_radiomap.aggregators.client_perturbation import ClientPerturbationFactory
from tff_radiomap.privacy.groups import SubspaceGroups
from tff_radiomap.runtime.atomic import atomic_write


def write_tensor(path: str, array: np.ndarray) -> None:
    """Writes a float32 array as a `tf.io.serialize_tensor` file, atomically (the clients may read
    it at any time)."""
    data = tf.io.serialize_tensor(tf.constant(np.asarray(array, np.float32))).numpy()
    with atomic_write(path, "wb") as f:
        f.write(data)


def write_basis(path: str, basis: np.ndarray) -> None:
    """Writes V for `basis_path`, atomically: its float32 values in C order and nothing else, so
    that a client reads it without parsing (`read_basis`; the reader knows d and K). A parsed
    `tf.io.serialize_tensor` file, this package's earlier layout, cost a client twice the read."""
    with atomic_write(path, "wb") as f:
        np.ascontiguousarray(basis, np.float32).tofile(f)


def read_basis(path, shape) -> tf.Tensor:
    """V [d, K] = `shape` from a `write_basis` file, as a float32 tensor (also inside TFF
    computations). A file of the earlier layout (a serialized tensor, from runs written before it
    changed) is parsed; one of another size fails there, naming the shapes."""
    d, k = (int(n) for n in shape)
    content = tf.io.read_file(path)

    def raw():
        return tf.reshape(tf.io.decode_raw(content, tf.float32), [d, k])

    def serialized():
        return tf.ensure_shape(tf.io.parse_tensor(content, tf.float32), [d, k])

    return tf.cond(tf.equal(tf.strings.length(content), 4 * d * k), raw, serialized)


def subspace_sigmas(groups: SubspaceGroups, budget: float, share: float) -> np.ndarray:
    """[J + 1] sigmas: share * B spread uniformly over the K subspace directions, the rest over
    the d - K residual ones."""
    sizes = groups.sizes.astype(np.float64)
    k, rest = sizes[:-1].sum(), sizes[-1]
    sigma_s, sigma_r = np.sqrt(share * budget / k), np.sqrt((1.0 - share) * budget / rest)
    return np.array([sigma_s] * (len(sizes) - 1) + [sigma_r], np.float32)


class SubspaceNoiseFactory(ClientPerturbationFactory):
    """Clip at C, then `share` of B = d (C nu)^2 in span(V), the rest on its orthogonal complement."""

    def __init__(
        self,
        clip_norm: float,
        noise_multiplier: float,
        groups: SubspaceGroups,
        share: float = 0.5,
        basis_path: str | None = None,
        inner_factory=None,
        seed=None,
    ):
        if not isinstance(groups, SubspaceGroups):
            raise TypeError(f"SubspaceNoiseFactory needs SubspaceGroups, got {type(groups).__name__}")
        if not (np.isfinite(share) and 0.0 <= share <= 1.0):
            raise ValueError(f"share={share}: expected a number in [0, 1]")
        if groups.basis is None and basis_path is None:
            raise ValueError("SubspaceNoiseFactory needs a basis: groups with one, or basis_path")
        super().__init__(clip_norm, noise_multiplier, groups=groups, inner_factory=inner_factory, seed=seed)
        self.share = float(share)
        self.basis_path = basis_path
        self._privatizing = False
        # The eager path (privatize, the attack) reads V from this variable; `set_basis` refreshes it.
        self._basis_var = None if groups.basis is None else tf.Variable(groups.basis, trainable=False, name="subspace_basis")

    def set_basis(self, basis: np.ndarray) -> None:
        """Replaces V for `privatize` (eager); the TFF process reads `basis_path` instead."""
        self.groups = self.groups.with_basis(basis)
        if self._basis_var is None or tuple(self._basis_var.shape) != basis.shape:
            self._basis_var = tf.Variable(self.groups.basis, trainable=False, name="subspace_basis")
        else:
            self._basis_var.assign(self.groups.basis)

    def sigmas(self) -> np.ndarray:
        return subspace_sigmas(self.groups, self.budget(), self.share)

    def fixed_sigmas(self):
        return self.sigmas().astype(np.float64)

    def _client_sigmas(self, extras, clipped_flat, group_ids, groups):
        return tf.constant(subspace_sigmas(groups, self.budget(groups), self.share))

    def _basis(self, extras=None):
        """V: the variable on the eager path (`privatize`), else the file or the embedded constant
        (`extras`: the client's, for a subclass whose basis differs by client)."""
        if self._privatizing:
            return self._eager_basis()
        if self.basis_path is not None:
            return read_basis(self.basis_path, self._basis_shape())
        return tf.constant(self.groups.basis)

    def _eager_basis(self):
        return self._basis_var if self._basis_var is not None else read_basis(self.basis_path, self._basis_shape())

    def _basis_shape(self) -> tuple[int, int]:
        return self.groups.num_coordinates, self.groups.rank

    def _eager_sigmas(self):
        """The sigmas of the eager batched path (a subclass whose sigmas change between calls of
        one traced function returns a variable)."""
        return tf.constant(self.sigmas())

    def privatize(self, flat, extras=None, seed=None):
        self._privatizing = True  # Outside TFF (the attack traces it in its own tf.function).
        try:
            return super().privatize(flat, extras, seed)
        finally:
            self._privatizing = False

    def whiten(self, flat, weights):
        """w_r u + V ((w_col - w_r) * V^T u): each block scaled by its weight, the residual by its own."""
        u = tf.concat([tf.reshape(c, [-1]) for c in flat], 0)
        return self._unflatten(self.whiten_batch(u[None], weights)[0], flat)

    # -- batched, outside TFF: the attack privatizes thousands of uploads -----------------------
    def privatize_batch(self, uploads, seeds=None):
        """Clip and perturb N flat uploads [N, d] at once (eager TF, float32), exactly as `privatize`
        does one by one: row n with seed pair `seeds[n]` gets the noise `privatize(..., seed=seeds[n])`
        would give it. Batched, V is read once for all rows (one upload at a time, every matvec
        reads all of V). Returns (noised [N, d], sigma [G])."""
        sigma = self._eager_sigmas()
        basis = self._eager_basis()
        norm = tf.norm(uploads, axis=1, keepdims=True)
        clipped = uploads * (self.clip_norm / tf.maximum(norm, self.clip_norm))
        k, d = self.groups.rank, self.groups.num_coordinates
        column_sigma = tf.gather(sigma, self.groups.block_of_column())
        if seeds is None:
            z_s = tf.random.normal([tf.shape(uploads)[0], k]) * column_sigma
            z_r = tf.random.normal(tf.shape(uploads)) * sigma[-1]
        else:  # The per-tensor seeds of `privatize`: seeds.fold_in((a, b), i), i = 0 (z_s) and 1 (z_r).
            seeds = tf.cast(seeds, tf.int64)
            z_s = seeds_lib.seeded_normal_rows(seeds, 0, [k]) * column_sigma
            z_r = seeds_lib.seeded_normal_rows(seeds, 1, [d]) * sigma[-1]
        residual = z_r - tf.matmul(tf.matmul(z_r, basis), basis, transpose_b=True)
        return clipped + tf.matmul(z_s, basis, transpose_b=True) + residual, sigma

    def whiten_batch(self, uploads, weights):
        """`whiten` of N flat uploads [N, d] at once."""
        basis = self._eager_basis()
        w_col = tf.gather(weights, self.groups.block_of_column())
        w_r = weights[-1]
        return w_r * uploads + tf.matmul(tf.matmul(uploads, basis) * (w_col - w_r), basis, transpose_b=True)

    def _unflatten(self, vector, like):
        parts = tf.split(vector, [int(np.prod(s)) for s in self.groups.shapes])
        return [tf.reshape(p, tf.shape(c)) for p, c in zip(parts, like)]

    def _perturb(self, extras, clipped, group_ids, groups, seeds):
        sigma = self._client_sigmas(extras, clipped, group_ids, groups)
        basis = self._basis(extras)
        flat = tf.concat([tf.reshape(c, [-1]) for c in clipped], 0)
        k, d = groups.rank, groups.num_coordinates
        column_sigma = tf.gather(sigma, groups.block_of_column())
        z_s = self._noise([k], column_sigma, seeds[0] if seeds else None)
        z_r = self._noise([d], sigma[-1], seeds[1] if seeds else None)
        residual = z_r - tf.linalg.matvec(basis, tf.linalg.matvec(basis, z_r, transpose_a=True))
        noised = flat + tf.linalg.matvec(basis, z_s) + residual
        return self._unflatten(noised, clipped), sigma
