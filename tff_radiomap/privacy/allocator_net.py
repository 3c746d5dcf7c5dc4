"""The adaptive allocator's inputs and network (paper 000, Eqs. (12)-(16)).

Summary statistics Psi (Eq. (12)): for each group g, the masked L2 norm ||M_g (.) Delta||, the mean
magnitude, the standard deviation and the size ratio d_g / d; then the global norm, the
normalized round index r / R and the phase indicator. Norms are divided by the clip norm C and the
per-coordinate statistics by C / sqrt(d_g), so that every input is O(1) whatever the model size.
An empty group contributes zeros. For subspace groups (`groups.SubspaceGroups`: blocks V_g of an
orthonormal basis V and the residual, the complement of span(V)) the same four statistics are taken
of the group's coordinates in its own basis: the coefficients V_g^T Delta of a block (d_g of them),
and the projected upload (I - V V^T) Delta for the residual (`summary_statistics_projected`).

The network f_eta is a one-hidden-layer tanh MLP from the summary to G logits (Eq. (13));
softmax weights (Eq. (14)) are taken over the non-empty groups only. Its parameters eta are an
OrderedDict of arrays (w1, b1, w2, b2), so they can live in a TFF aggregation state and be
broadcast to clients.
"""

from __future__ import annotations

import collections

import numpy as np
import tensorflow as tf

from tff_radiomap.privacy import budget as budget_lib


def summary_size(num_groups: int) -> int:
    return 4 * num_groups + 3


def summary_statistics(flat, group_ids, group_sizes, clip_norm: float, round_fraction, phase):
    """s = Psi(Delta) (Eq. (12)) for one upload given as a list of tensors.

    Args:
      flat: list of float tensors (the upload).
      group_ids: list of int32 tensors of the same shapes (group index per coordinate).
      group_sizes: [G] d_g.
      clip_norm: C, used to scale the statistics.
      round_fraction: r / R in [0, 1].
      phase: 0 or 1 (training stage).

    Returns:
      float32 [4G + 3].
    """
    return summary_statistics_batch([tf.expand_dims(x, 0) for x in flat], group_ids, group_sizes, clip_norm, round_fraction, phase)[0]


def summary_statistics_batch(flat, group_ids, group_sizes, clip_norm: float, round_fraction, phase):
    """`summary_statistics` of M uploads at once: each tensor of `flat` has a leading axis M
    (upload m is [t[m] for t in flat]); returns float32 [M, 4G + 3]."""
    sizes = tf.cast(tf.convert_to_tensor(group_sizes), tf.float32)
    g = int(sizes.shape[0])
    m = tf.shape(flat[0])[0]
    sq = absum = total = tf.zeros([g, m])
    for x, ids in zip(flat, group_ids):
        x = tf.transpose(tf.reshape(tf.cast(x, tf.float32), [m, -1]))  # [coordinates, M]
        ids = tf.reshape(ids, [-1])
        sq += tf.math.unsorted_segment_sum(tf.square(x), ids, g)
        absum += tf.math.unsorted_segment_sum(tf.abs(x), ids, g)
        total += tf.math.unsorted_segment_sum(x, ids, g)
    sq, absum, total = tf.transpose(sq), tf.transpose(absum), tf.transpose(total)  # [M, G]
    return _assemble(sq, absum, total, sizes, clip_norm, round_fraction, phase)


def summary_statistics_projected(uploads, basis, block_of_column, group_sizes, clip_norm: float, round_fraction, phase):
    """Psi of M flat uploads [M, d] over subspace groups: blocks of the columns of `basis` V [d, K]
    (`block_of_column` [K]: the block of each column) and the residual (the last group); returns
    float32 [M, 4G + 3], laid out as `summary_statistics_batch`."""
    u = tf.cast(uploads, tf.float32)
    coef = tf.matmul(u, basis)  # [M, K]
    residual = u - tf.matmul(coef, basis, transpose_b=True)
    return summary_statistics_of_parts(u, coef, residual, block_of_column, group_sizes, clip_norm, round_fraction, phase)


def summary_statistics_of_parts(uploads, coef, residual, block_of_column, group_sizes, clip_norm: float, round_fraction, phase):
    """`summary_statistics_projected` from the parts it computes: the uploads [M, d], their
    coefficients V^T u [M, K] and residuals (I - V V^T) u [M, d] (for a caller that needs them too)."""
    sizes = tf.cast(tf.convert_to_tensor(group_sizes), tf.float32)
    g = int(sizes.shape[0])
    u = uploads
    blocks = tf.constant(np.asarray(block_of_column, np.int32))

    def per_block(values):  # [M, K] -> [M, G - 1]
        return tf.transpose(tf.math.unsorted_segment_sum(tf.transpose(values), blocks, g - 1))

    sq_res = tf.maximum(tf.reduce_sum(tf.square(u), axis=1) - tf.reduce_sum(tf.square(coef), axis=1), 0.0)
    sq = tf.concat([per_block(tf.square(coef)), sq_res[:, None]], axis=1)
    absum = tf.concat([per_block(tf.abs(coef)), tf.reduce_sum(tf.abs(residual), axis=1, keepdims=True)], axis=1)
    total = tf.concat([per_block(coef), tf.reduce_sum(residual, axis=1, keepdims=True)], axis=1)
    return _assemble(sq, absum, total, sizes, clip_norm, round_fraction, phase)


def _assemble(sq, absum, total, sizes, clip_norm, round_fraction, phase):
    """[M, 4G + 3] from the per-group sums of squares, of magnitudes and of values [M, G]."""
    g = int(sizes.shape[0])
    m = tf.shape(sq)[0]
    safe = tf.maximum(sizes, 1.0)
    norm_g = tf.sqrt(sq)
    mean_abs = absum / safe
    mean = total / safe
    std = tf.sqrt(tf.maximum(sq / safe - tf.square(mean), 0.0))
    per_coord_scale = clip_norm / tf.sqrt(safe)
    d = tf.reduce_sum(sizes)
    present = tf.cast(sizes > 0, tf.float32)
    per_group = tf.stack([norm_g / clip_norm, mean_abs / per_coord_scale, std / per_coord_scale, tf.broadcast_to(sizes / d, tf.shape(sq))], axis=2)
    per_group *= present[None, :, None]
    global_norm = tf.sqrt(tf.reduce_sum(sq, axis=1)) / clip_norm
    ones = tf.ones_like(global_norm)
    tail = tf.stack([global_norm, ones * tf.cast(round_fraction, tf.float32), ones * tf.cast(phase, tf.float32)], axis=1)
    return tf.concat([tf.reshape(per_group, [m, 4 * g]), tail], axis=1)


def init_params(
    num_groups: int,
    group_sizes,
    hidden: int = 16,
    seed: int = 0,
    init: str = "proportional",
    sensitive=None,
    residual_share: float = 1e-9,
) -> collections.OrderedDict:
    """Initial eta: the first layer random, the output layer ~0, so the start is set by b2.

    `init='proportional'` starts at w_g = d_g / d (i.e. Uniform Noise); `init='uniform'` at
    w_g = 1 / G; `init='directed'` at Directed Uniform's allocation (w_g = d_g / d_sensitive on the
    `sensitive` groups) except for a `residual_share` of B spread over the other groups in
    proportion to their size, so that every group has a finite logit the allocator can move.
    """
    rng = np.random.default_rng(seed)
    n_in = summary_size(num_groups)
    sizes = np.maximum(np.asarray(group_sizes, np.float64), 0.0)
    if init == "proportional":
        b2 = np.log(np.maximum(sizes, 1.0) / max(sizes.sum(), 1.0))
    elif init == "uniform":
        b2 = np.zeros(num_groups)
    elif init == "directed":
        if sensitive is None:
            raise ValueError("init='directed' needs the groups' `sensitive` flags")
        sensitive = np.asarray(sensitive, bool)
        d_sensitive, d_rest = sizes[sensitive].sum(), sizes[~sensitive].sum()
        if d_sensitive <= 0:
            raise ValueError("init='directed' needs at least one non-empty transmitter-sensitive group")
        if not 0.0 < residual_share < 1.0:
            raise ValueError(f"residual_share={residual_share}: expected a number in (0, 1)")
        share = np.where(sensitive, (1.0 - residual_share) * sizes / d_sensitive, residual_share * sizes / max(d_rest, 1.0))
        b2 = np.log(np.maximum(share, 1e-30))
    else:
        raise ValueError(f"init={init!r}: expected 'proportional', 'uniform' or 'directed'")
    return collections.OrderedDict(
        w1=(rng.standard_normal((n_in, hidden)) / np.sqrt(n_in)).astype(np.float32),
        b1=np.zeros(hidden, np.float32),
        w2=(0.01 * rng.standard_normal((hidden, num_groups))).astype(np.float32),
        b2=b2.astype(np.float32),
    )


def logits(eta, summary):
    """a = f_eta(s) (Eq. (13)); `summary` is [4G+3] or [N, 4G+3]."""
    s = tf.convert_to_tensor(summary, tf.float32)
    squeeze = s.shape.rank == 1
    if squeeze:
        s = s[None, :]
    h = tf.tanh(tf.matmul(s, eta["w1"]) + eta["b1"])
    out = tf.matmul(h, eta["w2"]) + eta["b2"]
    return out[0] if squeeze else out


def allocation(eta, summary, group_sizes, budget: float, sigma_min: float = 0.0):
    """Eqs. (13)-(16): logits a = f_eta(s), weights w = softmax over the non-empty groups, energies
    E_g = B w_g (above the floor d_g sigma_min^2) and sigma_g = sqrt(E_g / d_g). Returns
    (w, energy, sigma), each [G] for a summary [4G+3] or [N, G] for [N, 4G+3]."""
    w = budget_lib.masked_softmax(logits(eta, summary), group_sizes)
    energy, sigma = budget_lib.allocate(w, budget, group_sizes, sigma_min)
    return w, energy, sigma
