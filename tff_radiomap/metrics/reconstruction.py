"""Reconstruction quality of radio maps: MSE (Eq. (3)) and MSE in dB, 10 log10(MSE)."""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from tff_radiomap.learning.keras_wrap import NetworkWeights, Phase
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
        wnet = self._net.wnet

        @tf.function
        def squared_errors(x, y):
            coarse, refined = wnet(x, training=False)
            per_sample = lambda p: tf.reduce_sum(tf.reduce_mean(tf.math.squared_difference(p, y), axis=[1, 2, 3]))
            return per_sample(coarse), per_sample(refined)

        self._squared_errors = squared_errors

    def mse_both(self, weights: NetworkWeights) -> tuple[float, float]:
        """(coarse MSE, refined MSE)."""
        weights.assign_to(self._net)
        coarse = refined = 0.0
        for x, y in self._data:
            c, r = self._squared_errors(x, y)
            coarse, refined = coarse + float(c), refined + float(r)
        return coarse / self._count, refined / self._count

    def mse(self, weights: NetworkWeights, phase: Phase) -> float:
        coarse, refined = self.mse_both(weights)
        return coarse if phase == Phase.STAGE1 else refined
