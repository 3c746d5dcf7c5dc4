"""Top-K sparsification of client uploads, as a composable `tff.aggregators` factory.

Each client keeps the K entries of largest magnitude of its whole upload (all tensors flattened
and concatenated, as the vector u of EPFL-REMNet's T_K(u, K)) and zeroes the rest; the inner
factory aggregates the sparse values. Ties at the K-th magnitude are broken by position, lowest
first, so exactly K entries are kept.

Wire format of one upload of n entries with K kept (all counts exact, in bytes):
  - positions: the smaller of a bitmap over the n entries, ceil(n / 8), and the K positions as
    unsigned integers of ceil(log2 n) bits each, bit-packed, ceil(K * ceil(log2 n) / 8). The
    server knows n (from the value type) and K (from the configuration), so it knows which of
    the two was sent: no header;
  - values: K values at the inner factory's bits per value, bit-packed (32 for float32 through a
    plain `MeanFactory`, 8 through `SymmetricQuantizationFactory(bits=8)`);
  - the inner factory's side information (e.g. quantization scales).
Measurements: `wire` (index_bytes, value_bytes, side_bytes, kept, bytes_per_client),
`uplink_bytes` (all clients of the round) and `inner` (the inner factory's measurements).
"""

from __future__ import annotations

import collections
import math

import tensorflow as tf
import tensorflow_federated as tff

from tff_radiomap.aggregators import encoding, wire


def num_kept(num_entries: int, k: int | None = None, k_fraction: float | None = None) -> int:
    """K for an upload of `num_entries`: `k` itself, or round(k_fraction * n) and at least 1."""
    if (k is None) == (k_fraction is None):
        raise ValueError(f"k={k}, k_fraction={k_fraction}: expected exactly one of them")
    if k is not None:
        if not 1 <= k <= num_entries:
            raise ValueError(f"k={k}: expected 1..{num_entries} (the entries of the upload)")
        return int(k)
    return max(1, min(num_entries, int(round(k_fraction * num_entries))))


def index_bytes(num_entries: int, kept: int) -> int:
    """Bytes of the positions of `kept` entries among `num_entries` (bitmap or packed indices)."""
    bits_per_index = math.ceil(math.log2(num_entries)) if num_entries > 1 else 0
    return min(math.ceil(num_entries / 8), wire.packed_bytes(kept, bits_per_index))


def concat_entries(leaves: list, batch_dims: int = 0) -> tf.Tensor:
    """The vector u of T_K(u, K): every tensor flattened, concatenated in order ([n]); with
    `batch_dims=1`, tensors [C, ...] of C clients give one row per client ([C, n])."""
    return tf.concat([tf.reshape(t, [-1] if batch_dims == 0 else [t.shape[0], -1]) for t in leaves], axis=batch_dims)


def split_entries(flat: tf.Tensor, like: list, batch_dims: int = 0) -> list:
    """Inverse of `concat_entries`: `flat` cut into tensors of the shapes of `like`."""
    sizes = [int(t.shape[batch_dims:].num_elements()) for t in like]
    parts = tf.split(flat, sizes, axis=batch_dims) if len(sizes) > 1 else [flat]
    return [tf.reshape(p, t.shape) for p, t in zip(parts, like)]


def top_k_rows(rows: tf.Tensor, k: int) -> tf.Tensor:
    """T_K of each row of `rows` [C, n]: its k largest-magnitude entries kept, the others zeroed."""
    positions = tf.math.top_k(tf.abs(rows), k=k, sorted=False).indices
    batch = tf.broadcast_to(tf.range(tf.shape(rows)[0])[:, None], tf.shape(positions))
    return tf.scatter_nd(tf.stack([batch, positions], -1), tf.gather(rows, positions, batch_dims=1), tf.shape(rows))


def top_k_flat(flat: tf.Tensor, k: int) -> tf.Tensor:
    """T_K: keeps the k largest-magnitude entries of a 1-D tensor, zeroes the others.

    An input with at most k nonzero entries, all finite, is its own T_K and is returned as is,
    without the sort: a client with nothing to send, or an upload its client has already split
    with `top_k_split` (as EPFL-REMNet's clients do), so that T_K is computed once per upload.
    """
    already_sparse = tf.logical_and(tf.reduce_all(tf.math.is_finite(flat)), tf.math.count_nonzero(flat) <= k)
    return tf.cond(already_sparse, lambda: flat, lambda: top_k_rows(flat[None], k)[0])


def top_k_split(u: tf.Tensor, k: int) -> tuple[tf.Tensor, tf.Tensor]:
    """Algorithm 1 of EPFL-REMNet (paper 003), "Sparsification" and "Cache error": the kept part
    T_K(u, K) and the residual e = u - T_K(u, K), from one ranking of |u|. `u` is a flat upload [n]
    (`concat_entries`), or one per row [C, n], each row split on its own."""
    kept = top_k_flat(u, k) if u.shape.rank == 1 else top_k_rows(u, k)
    return kept, u - kept


def top_k_sparsify(value, k: int):
    """T_K over a whole structure of tensors (flattened and concatenated); same structure back."""
    leaves = encoding.flatten(value)
    return encoding.pack_like(value, split_entries(top_k_flat(concat_entries(leaves), k), leaves))


class TopKFactory(encoding.EncodingStage):
    """Keeps the K largest-magnitude entries of each client's upload before the inner aggregation.

    Args:
      k: number of entries kept per upload, or
      k_fraction: fraction of the upload's entries kept (K = round(k_fraction * n), at least 1).
      inner_factory: the factory aggregating the sparse values; None: the mean matching the kind
        of `create` (weighted with a weight_type, unweighted without).
    State: the inner factory's state.
    """

    def __init__(self, k: int | None = None, *, k_fraction: float | None = None, inner_factory=None):
        if (k is None) == (k_fraction is None):
            raise ValueError(f"TopKFactory(k={k}, k_fraction={k_fraction}): expected exactly one of k, k_fraction")
        if k is not None and (not isinstance(k, int) or k < 1):
            raise ValueError(f"k={k!r}: expected an integer >= 1")
        if k_fraction is not None and not 0.0 < k_fraction <= 1.0:
            raise ValueError(f"k_fraction={k_fraction!r}: expected a fraction in (0, 1]")
        self._k, self._k_fraction = k, k_fraction
        self.inner_factory = encoding.check_inner(inner_factory)

    def kept(self, value_type) -> int:
        return num_kept(wire.value_count(value_type), self._k, self._k_fraction)

    def _client_fn(self, value_type):
        k = self.kept(value_type)

        @tff.tensorflow.computation(value_type)
        def sparsify(value):
            return top_k_sparsify(value, k)

        return sparsify

    def byte_counts(self, value_type) -> collections.OrderedDict:
        n, k = wire.value_count(value_type), self.kept(value_type)
        inner_format = wire.wire_format(self.inner_factory, value_type)
        counts = collections.OrderedDict(
            kept=k,
            index_bytes=index_bytes(n, k),
            value_bytes=wire.packed_bytes(k, inner_format.bits_per_value),
            side_bytes=inner_format.side_bytes,
        )
        counts["bytes_per_client"] = counts["index_bytes"] + counts["value_bytes"] + counts["side_bytes"]
        return counts
