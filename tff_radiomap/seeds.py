"""Every derived seed of the package, in one place.

Randomness is stateless: a random stream is named by a path of integers (the run's seed, then what
the stream is for: a purpose id, a round, a client, a tensor...), so that a resumed run draws what
an uninterrupted one drew and two purposes never share a stream. numpy streams take the path
directly (`generator`); TensorFlow's stateless ops take a pair of int64, into which a longer path
is folded by fixed strides (`fold_in`).
"""

from __future__ import annotations

import atexit

import numpy as np

# Purpose ids of numpy streams drawn from the run's seed.
CLIENT_SAMPLING, SHUFFLE, CENTRAL_SHUFFLE = 1, 2, 3
ALLOCATOR_BUFFER, NOISE_GRAMS, HARM_PROBES = 14, 20, 21
MATCHING_MAPS = 22  # The matching attacker's observed maps and calibration positions.
DEPLOYMENT_OBSERVER = 23  # The deployment observer's noise, coordinates and calibration positions.

# Strides of `fold_in`: [a, b * stride + i] keeps i's streams apart for i < stride.
TENSOR_STRIDE = 1000003  # The 2 x (number of tensors) noise draws of one upload.
SAMPLE_STRIDE = 2**20  # The attack's samples: [a, b * SAMPLE_STRIDE + 8 i + s] for sample i, step s < 8.
CLIENT_STRIDE = 1000  # Per-client model seeds of EPFL-REMNet: seed * CLIENT_STRIDE + client.


def generator(*path: int) -> np.random.Generator:
    """The numpy stream named by `path` (the run's seed first)."""
    return np.random.default_rng(list(path))


def fold_in(pair, i, stride: int = TENSOR_STRIDE):
    """The stateless TensorFlow seed [a, b * stride + i] of draw i under the pair (a, b)."""
    import tensorflow as tf

    return tf.stack([pair[0], pair[1] * stride + i])


_SEEDED_ROWS = None


def seeded_normal_rows(seeds, i: int, row_shape):
    """Standard normals [N, *row_shape]: row n drawn from the stateless seed fold_in(seeds[n], i),
    the draw a one-upload `privatize(..., seed=seeds[n])` makes. `seeds` [N, 2] int64.

    Traced once for every call (eager `map_fn` ran the rows one Python step at a time: half of the
    attack's privatization time on Adaptive Noise); the values are the eager ones."""
    global _SEEDED_ROWS
    import tensorflow as tf

    if _SEEDED_ROWS is None:

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.int64), tf.TensorSpec([], tf.int64), tf.TensorSpec([None], tf.int32)])
        def draw(seeds, i, row_shape):
            return tf.map_fn(lambda p: tf.random.stateless_normal(row_shape, seed=fold_in(p, i)), seeds, fn_output_signature=tf.float32)

        _SEEDED_ROWS = draw
        atexit.register(_forget_seeded_rows)  # Freed while TensorFlow is alive, not at module teardown (a warning there).
    return _SEEDED_ROWS(tf.cast(seeds, tf.int64), tf.constant(i, tf.int64), tf.constant(list(row_shape), tf.int32))


def _forget_seeded_rows():
    global _SEEDED_ROWS
    _SEEDED_ROWS = None


def client_seed(seed: int, client: int) -> int:
    """A client's own model seed (EPFL-REMNet's private heads), seed * CLIENT_STRIDE + client."""
    return seed * CLIENT_STRIDE + client
