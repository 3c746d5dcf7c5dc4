"""Reconstruction quality of radio maps: MSE (Eq. (3)) and MSE in dB, 10 log10(MSE)."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import tensorflow as tf

from tff_radiomap.models.phases import NetworkWeights, Phase
from tff_radiomap.models import radiounet


def mse_db(mse: float) -> float:
    """10 log10(mse); -inf for a perfect reconstruction."""
    if mse < 0:
        raise ValueError(f"mse={mse!r}: expected a non-negative mean squared error")
    return 10.0 * math.log10(mse) if mse > 0 else float("-inf")


class Evaluator:
    """Mean squared error of the network on a fixed set (x [N,r,r,2], y [N,r,r,1]), in batches.

    `mse(weights, phase)` scores the coarse map (stage 1's output) in phase STAGE1 and the refined
    map otherwise: the output of the stage being trained.
    """

    def __init__(self, config: radiounet.RadioUNetConfig, x: np.ndarray, y: np.ndarray, batch_size: int = 128):
        if len(x) == 0:
            raise ValueError("evaluation set is empty")
        self._net = radiounet.build_radiounet(config)
        self._data = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size).cache()
        self._count = len(x)
        wnet, stage1 = self._net.wnet, self._net.stage1

        def per_sample(p, y):
            return tf.reduce_sum(tf.reduce_mean(tf.math.squared_difference(p, y), axis=[1, 2, 3]))

        @tf.function
        def squared_errors(x, y):
            coarse, refined = wnet(x, training=False)
            return per_sample(coarse, y), per_sample(refined, y)

        @tf.function
        def coarse_squared_errors(x, y):  # Stage 1 alone: in STAGE1 the refined map is not scored.
            return per_sample(stage1(x, training=False), y)

        @tf.function
        def refined_squared_errors(x, coarse, y):
            return per_sample(self._net.stage2([x, coarse], training=False), y)

        self._squared_errors, self._coarse_squared_errors = squared_errors, coarse_squared_errors
        self._refined_squared_errors = refined_squared_errors
        self._stage1 = tf.function(lambda x: stage1(x, training=False))
        self._coarse_cache = (None, None)  # (stage-1 weights' digest, coarse maps per batch)

    def _sum(self, fn, coarse_maps=None) -> np.ndarray:
        """Mean over the set of `fn`'s per-batch sums of squared errors, one entry per output of
        `fn(x, y)`, or of `fn(x, coarse, y)` with the batches' `coarse_maps`; float64, in batch order."""
        total = None
        for i, (x, y) in enumerate(self._data):
            args = (x, y) if coarse_maps is None else (x, coarse_maps[i], y)
            part = np.asarray([float(v) for v in tf.nest.flatten(fn(*args))])
            total = part if total is None else total + part
        return total / self._count

    def mse_both(self, weights: NetworkWeights) -> tuple[float, float]:
        """(coarse MSE, refined MSE)."""
        weights.assign_to(self._net)
        coarse, refined = self._sum(self._squared_errors)
        return float(coarse), float(refined)

    def mse(self, weights: NetworkWeights, phase: Phase) -> float:
        """The MSE of the output of the stage `phase` trains. Stage 2 trains on a frozen stage 1, so
        the coarse maps of the set are kept while stage 1's weights stay the same (the refined MSE
        is the same as `mse_both`'s, bit for bit)."""
        if phase not in (Phase.STAGE1, Phase.STAGE2):
            return self.mse_both(weights)[1]
        weights.assign_to(self._net)
        if phase == Phase.STAGE1:
            return float(self._sum(self._coarse_squared_errors)[0])
        digest = hashlib.sha1(b"".join(np.ascontiguousarray(w).tobytes() for w in weights.stage1)).digest()
        if self._coarse_cache[0] != digest:
            self._coarse_cache = (digest, [self._stage1(x) for x, _ in self._data])
        return float(self._sum(self._refined_squared_errors, self._coarse_cache[1])[0])
