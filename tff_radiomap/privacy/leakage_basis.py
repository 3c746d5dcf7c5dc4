"""Where the uploads reveal the transmitter: a basis of the leakage subspace, from the defender's twin.

An upload's dependence on the transmitter position is low-dimensional and tied to the building
map (bench/RESULTS.md, "The leakage audit: where the transmitter leaks"): on one map, the single-sample uploads of the
current global model vary with the position along a few directions, and those directions differ
from map to map. So the defender, on every public building map, simulates uploads at positions of
its own (`data.twin`), centres them per map, and keeps each map's top `k_per_map` principal
directions; their union, orthonormalized and ordered by the within-map variance it explains, is
V [d, K] with K = maps * k_per_map (`leakage_basis`). Noise along V is where an observer would read
the position (`aggregators.SubspaceNoiseFactory`).

The uploads are the first local step on one sample (the signed first upload of the attack's
fingerprint, Eq. (7)), from the phase's uploaded model at the current global weights.

Cost: maps * positions single-sample steps and one [d, K] QR per refresh; V is K * d float32
(K = 384, d = 125098 at the CPU default: 192 MB), written to a file the clients read inside the
TFF computation. For full-size models (d ~ 10^7) per-layer blocks or a randomized sketch would be
needed; see docs/privacy.md, "Defenses".
"""

from __future__ import annotations

import numpy as np
from absl import logging
import tensorflow as tf


class UploadCollector:
    """First-step single-sample uploads [N, d] of `model` (the phase's uploaded Keras model, holding
    the current global weights) with the client `optimizer` and the clients' `local_updates(model,
    optimizer, x, y, steps)` (`learning.local_training.local_updates`); one traced graph per chunk."""

    def __init__(self, model, optimizer, local_updates):
        self.model, self.optimizer, self.local_updates = model, optimizer, local_updates
        self._uploads = tf.function(self._uploads_impl)

    def _one(self, x, y):
        update = self.local_updates(self.model, self.optimizer, x, y, 1)[0]
        return tf.concat([tf.reshape(u, [-1]) for u in update], 0)

    def _uploads_impl(self, x, y):
        out = tf.TensorArray(tf.float32, size=tf.shape(x)[0])
        for i in tf.range(tf.shape(x)[0]):
            out = out.write(i, self._one(x[i : i + 1], y[i : i + 1]))
        return out.stack()

    def collect(self, x: np.ndarray, y: np.ndarray, chunk: int = 256) -> np.ndarray:
        out = None  # Filled from TensorFlow's buffers (np.asarray does not copy; .numpy() and a concatenation would).
        for s in range(0, len(x), chunk):
            part = np.asarray(self._uploads(tf.constant(x[s : s + chunk], tf.float32), tf.constant(y[s : s + chunk], tf.float32)))
            if out is None:
                out = np.empty((len(x), part.shape[1]), part.dtype)
            out[s : s + len(part)] = part
        if out is None:
            raise ValueError("UploadCollector.collect: no samples")
        return out


def per_map_directions(uploads: np.ndarray, k: int) -> np.ndarray:
    """[d, k'] the top principal directions (k' = min(k, N - 1)) of one map's uploads [N, d],
    centred on their mean, from the N x N Gram matrix (N << d)."""
    z = uploads.astype(np.float64) - uploads.mean(0, dtype=np.float64)
    eigval, eigvec = np.linalg.eigh(z @ z.T)
    order = np.argsort(eigval)[::-1][: min(k, len(z) - 1)]
    eigval, eigvec = eigval[order], eigvec[:, order]
    keep = eigval > 1e-12 * max(float(eigval[0]) if len(eigval) else 0.0, 1e-300)
    return (z.T @ (eigvec[:, keep] / np.sqrt(eigval[keep]))).astype(np.float32)


def leakage_basis(uploads: np.ndarray, map_of: np.ndarray, k_per_map: int) -> tuple[np.ndarray, np.ndarray]:
    """(V [d, K], variance [K]): the union of every map's top `k_per_map` directions, orthonormal,
    ordered by the within-map variance of the uploads along each column (largest first).

    `uploads` [N, d] are single-sample uploads, `map_of` [N] the map of each. Raises ValueError if a
    map has fewer than 2 uploads.

    K is always maps * k_per_map (the subspace groups are sized by it). Where the uploads span
    fewer directions (a map whose uploads vary in fewer than k_per_map directions, e.g. a dead
    stage whose uploads are all zero, or directions shared between maps), the span found is
    completed by fixed-seed orthonormal directions orthogonal to it (ordered with the rest by the
    within-map variance, ~0 for them), and a warning says how many.
    """
    if k_per_map < 1:
        raise ValueError(f"k_per_map={k_per_map}: expected >= 1")
    maps = np.unique(map_of)
    directions, centred = [], []
    for m in maps:
        u = uploads[map_of == m]
        if len(u) < 2:
            raise ValueError(f"map {m}: {len(u)} upload(s), at least 2 needed for a direction")
        directions.append(per_map_directions(u, k_per_map))
        centred.append(u - u.mean(0))
    rank = len(maps) * k_per_map
    q, r = np.linalg.qr(np.concatenate(directions, axis=1, dtype=np.float64))
    if q.shape[1] < rank or np.min(np.abs(np.diag(r))) < 1e-6 * np.max(np.abs(np.diag(r))):
        q = _completed_span(np.concatenate(directions, axis=1).astype(np.float64), rank)
    # Rotate within span(V) so that the columns come in order of the within-map variance (the
    # projections in float32: the refresh's largest product, N x d x K; the rotation in float64).
    coef = (np.concatenate(centred).astype(np.float32, copy=False) @ q.astype(np.float32)).astype(np.float64)
    eigval, eigvec = np.linalg.eigh(coef.T @ coef)
    order = np.argsort(eigval)[::-1]
    basis = (q @ eigvec[:, order]).astype(np.float32)
    return basis, (eigval[order] / len(coef)).astype(np.float64)


def owner_basis(uploads: np.ndarray, map_of: np.ndarray, rank: int, per_map: int | None = None, seed: int = 0) -> tuple[np.ndarray, np.ndarray, float]:
    """(V [d, rank], variance [rank], residual variance per direction) of one owner's maps.

    V: each map's top `per_map` directions (default ceil(rank / maps): a client with fewer maps
    takes more from each), the first `rank` of their union by within-map variance
    (`leakage_basis`); where per_map x maps < rank, completed by fixed-seed orthonormal directions
    orthogonal to them (a map no client holds stands for a client holding it among others: its own
    directions, and directions that carry none of its leak). variance: the within-map variance of
    the uploads along each column; the residual's is the within-map variance outside span(V) over
    d - rank. A client's basis in Subspace Noise with client scope and in Aligned Noise: every
    owner's has the same rank."""
    maps = np.unique(map_of)
    per_map = per_map or -(-rank // len(maps))
    basis, _ = leakage_basis(uploads, map_of, per_map)
    basis = basis[:, :rank]
    if basis.shape[1] < rank:
        extra = np.random.default_rng(seed).standard_normal((basis.shape[0], rank - basis.shape[1]))
        extra -= basis.astype(np.float64) @ (basis.T.astype(np.float64) @ extra)
        basis = np.concatenate([basis, np.linalg.qr(extra)[0].astype(np.float32)], axis=1)
    centred = np.concatenate([uploads[map_of == m] - uploads[map_of == m].mean(0) for m in maps])
    coef = (centred.astype(np.float32) @ basis).astype(np.float64)
    variance = np.sum(coef**2, axis=0) / len(centred)
    total = float(np.sum(np.square(centred, dtype=np.float64))) / len(centred)
    residual = max(total - float(np.sum(variance)), 0.0) / (uploads.shape[1] - rank)
    return basis, variance, residual


def _completed_span(directions: np.ndarray, rank: int, seed: int = 0) -> np.ndarray:
    """[d, rank] orthonormal: span(directions) (its numerical rank r), then rank - r fixed-seed
    directions orthogonal to it."""
    d = directions.shape[0]
    if rank > d:
        raise ValueError(f"a basis of rank {rank} in {d} coordinates")
    found = np.zeros((d, 0))
    if directions.shape[1]:
        u, sv, _ = np.linalg.svd(directions, full_matrices=False)
        found = u[:, sv > 1e-6 * max(float(sv[0]), 1e-300)]
    missing = rank - found.shape[1]
    logging.warning("leakage basis: the uploads span %d of %d directions; %d completed by fixed-seed orthogonal ones", found.shape[1], rank, missing)
    extra = np.random.default_rng(seed).standard_normal((d, missing))
    extra -= found @ (found.T @ extra)
    return np.concatenate([found, np.linalg.qr(extra)[0]], axis=1)


def block_sizes(rank: int, blocks: int) -> tuple[int, ...]:
    """`blocks` near-equal consecutive blocks of the K ordered columns (the first the strongest)."""
    if not 1 <= blocks <= rank:
        raise ValueError(f"blocks={blocks}: expected 1..{rank}")
    return tuple(int(len(part)) for part in np.array_split(np.arange(rank), blocks))


def captured_share(uploads: np.ndarray, map_of: np.ndarray, basis: np.ndarray) -> float:
    """Share of the uploads' within-map variance that lies in span(basis) (1: all of it)."""
    total, inside = 0.0, 0.0
    for m in np.unique(map_of):
        z = uploads[map_of == m].astype(np.float64)
        z -= z.mean(0)
        total += float(np.sum(z**2))
        inside += float(np.sum((z @ basis.astype(np.float64)) ** 2))
    return inside / total if total > 0 else 0.0
