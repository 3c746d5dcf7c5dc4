"""Steps of EPFL-REMNet's Algorithm 1 (paper 003) as pure functions of tensors.

A client's round t uploads iff `is_sync_round`. Then u = `error_feedback`(Delta, e), and one Top-K
split of u (`top_k.top_k_split`, shared with `TopKFactory`) gives the uploaded T_K(u, K) and the
cached e: `sparsify_with_error_feedback` does the three over a whole upload. T_K(u, K) is then
quantized and sent. The server averages the decoded uploads into theta^(t+1) and, optionally,
keeps `ema_update` of it. The TFF clients (`epfl_remnet`) and the stacked clients
(`epfl_stacked`) both call these.
"""

from __future__ import annotations

import tensorflow as tf

from tff_radiomap.aggregators import top_k


def is_sync_round(round_num, sync_period: int):
    """Algorithm 1, "if t mod R == 0", for 0-based rounds: the R-th, 2R-th, ... round uploads.

    A bool tensor for a tensor round, a Python bool for a Python (or numpy) integer.
    """
    if tf.is_tensor(round_num):
        return tf.equal((round_num + 1) % sync_period, 0)
    return (round_num + 1) % sync_period == 0


def error_feedback(delta, error):
    """Algorithm 1, "Error feedback": u_i^t = Delta_i^t + e_i^(t-1), entry by entry.

    `delta` (this round's update) and `error` (the residual cached at the last sync) are tensors
    or matching structures of tensors; returns u in the same structure.
    """
    return tf.nest.map_structure(lambda d, e: d + e, delta, error)


def sparsify_with_error_feedback(delta: list, error: list, k: int, batch_dims: int = 0) -> tuple[list, list]:
    """Algorithm 1's sync step before quantization: "Error feedback", "Sparsification" and "Cache
    error" over a whole upload (a list of tensors, ranked together; with `batch_dims=1`, tensors
    [C, ...] of C clients, each row ranked on its own).

    Returns (T_K(u, K), e = u - T_K(u, K)) with u = Delta + e_prev, both shaped as `delta`.
    """
    u = error_feedback(delta, error)
    kept, residual = top_k.top_k_split(top_k.concat_entries(u, batch_dims), k)
    return top_k.split_entries(kept, u, batch_dims), top_k.split_entries(residual, u, batch_dims)


def ema_update(ema, theta, decay: float):
    """The server's optional EMA after Algorithm 1's aggregation (Sec. III, "Server Aggregation"):
    decay * ema + (1 - decay) * theta^(t+1), entry by entry, for matching structures of tensors."""
    return tf.nest.map_structure(lambda a, t: decay * a + (1 - decay) * t, ema, theta)
