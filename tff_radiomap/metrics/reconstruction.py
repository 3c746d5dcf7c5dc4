"""Reconstruction quality of radio maps: MSE (Eq. (3)), MSE in dB (10 log10(MSE)), and the RMSE of
the predicted gain in dB.

The network predicts the normalized gain g = (max(gray/255, t) - t) / (1 - t) (t = 0.2,
`radiomapseer.normalize_gain`), and gray/255 is linear in the gain in dB (`data.encoding`), so one
unit of g is GAIN_DB_PER_UNIT = (1 - t) (-47.84 dB - (-147 dB)) = 79.33 dB. The RMSE of the gain in
dB over all pixels is therefore GAIN_DB_PER_UNIT * sqrt(MSE): -24 dB of MSE is 5.0 dB of gain RMSE,
-27 dB is 3.5 dB, -16 dB is 12.6 dB. The outdoor RMSE is taken over the pixels whose building cover
at the model's resolution is below one half (building interiors sit at the floor, where every
model is right, so the outdoor figure is the larger one).
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import tensorflow as tf

from tff_radiomap.data import encoding, radiomapseer
from tff_radiomap.models.phases import NetworkWeights, Phase
from tff_radiomap.models import radiounet

GAIN_DB_PER_UNIT = (1.0 - radiomapseer.DEFAULT_THRESH) * (encoding.GAIN_CEIL_DB - encoding.GAIN_FLOOR_DB)
OUTDOOR_BELOW = 0.5  # A pixel is outdoor when its building cover is below this.


def mse_db(mse: float) -> float:
    """10 log10(mse); -inf for a perfect reconstruction."""
    if mse < 0:
        raise ValueError(f"mse={mse!r}: expected a non-negative mean squared error")
    return 10.0 * math.log10(mse) if mse > 0 else float("-inf")


def gain_rmse_db(mse: float) -> float:
    """RMSE of the gain in dB for a mean squared error `mse` of the normalized gain."""
    if not mse >= 0:
        raise ValueError(f"mse={mse!r}: expected a non-negative mean squared error")
    return GAIN_DB_PER_UNIT * math.sqrt(mse)


def outdoor_mask(x: np.ndarray) -> np.ndarray:
    """[N,r,r,1] float32: 1 where a pixel of the inputs x [N,r,r,2] is outdoor, else 0."""
    return (np.asarray(x)[..., :1] < OUTDOOR_BELOW).astype(np.float32)


def gain_errors_db(prediction: np.ndarray, y: np.ndarray, x: np.ndarray) -> dict[str, float]:
    """RMSE of the gain in dB of predictions [N,r,r,1] against targets y, over all pixels and over
    the outdoor pixels of inputs x (numpy reference of `Evaluator.scores`)."""
    squared = np.square(np.asarray(prediction, np.float64) - np.asarray(y, np.float64))
    outdoor = outdoor_mask(x).astype(np.float64)
    return {
        "rmse_db": gain_rmse_db(float(squared.mean())),
        "outdoor_rmse_db": gain_rmse_db(float((squared * outdoor).sum() / outdoor.sum())),
    }


class Evaluator:
    """Mean squared error of the network on a fixed set (x [N,r,r,2], y [N,r,r,1]), in batches.

    `mse(weights, phase)` scores the coarse map (stage 1's output) in phase STAGE1 and the refined
    map otherwise: the output of the stage being trained. `scores(weights, phase)` adds the RMSE
    of the gain in dB over all pixels and over the outdoor ones, from the same pass.
    """

    def __init__(self, config: radiounet.RadioUNetConfig, x: np.ndarray, y: np.ndarray, batch_size: int = 128):
        if len(x) == 0:
            raise ValueError("evaluation set is empty")
        self._net = radiounet.build_radiounet(config)
        self._data = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size).cache()
        self._count = len(x)
        self._outdoor_count = float(outdoor_mask(x).sum())
        wnet, stage1 = self._net.wnet, self._net.stage1

        def per_sample(p, y, x):
            """(sum over the batch of per-sample MSEs, sum of squared errors on outdoor pixels)."""
            squared = tf.math.squared_difference(p, y)
            outdoor = tf.cast(x[..., :1] < OUTDOOR_BELOW, squared.dtype)
            return tf.reduce_sum(tf.reduce_mean(squared, axis=[1, 2, 3])), tf.reduce_sum(squared * outdoor)

        @tf.function
        def squared_errors(x, y):
            coarse, refined = wnet(x, training=False)
            return per_sample(coarse, y, x) + per_sample(refined, y, x)

        @tf.function
        def coarse_squared_errors(x, y):  # Stage 1 alone: in STAGE1 the refined map is not scored.
            return per_sample(stage1(x, training=False), y, x)

        @tf.function
        def refined_squared_errors(x, coarse, y):
            return per_sample(self._net.stage2([x, coarse], training=False), y, x)

        self._squared_errors, self._coarse_squared_errors = squared_errors, coarse_squared_errors
        self._refined_squared_errors = refined_squared_errors
        self._stage1 = tf.function(lambda x: stage1(x, training=False))
        self._coarse_cache = (None, None)  # (stage-1 weights' digest, coarse maps per batch)

    def _sum(self, fn, coarse_maps=None) -> np.ndarray:
        """Sums over the set of `fn`'s per-batch outputs (pairs of a per-sample MSE sum and an
        outdoor squared-error sum), as means: [MSE, outdoor MSE] per output pair; float64, in batch
        order. `fn(x, y)`, or `fn(x, coarse, y)` with the batches' `coarse_maps`."""
        total = None
        for i, (x, y) in enumerate(self._data):
            args = (x, y) if coarse_maps is None else (x, coarse_maps[i], y)
            part = np.asarray([float(v) for v in tf.nest.flatten(fn(*args))])
            total = part if total is None else total + part
        return total / np.tile([self._count, self._outdoor_count], len(total) // 2)

    def mse_both(self, weights: NetworkWeights) -> tuple[float, float]:
        """(coarse MSE, refined MSE)."""
        weights.assign_to(self._net)
        coarse, _, refined, _ = self._sum(self._squared_errors)
        return float(coarse), float(refined)

    def mse(self, weights: NetworkWeights, phase: Phase) -> float:
        """The MSE of the output of the stage `phase` trains (`scores`' 'mse')."""
        return self.scores(weights, phase)["mse"]

    def scores(self, weights: NetworkWeights, phase: Phase) -> dict[str, float]:
        """{'mse', 'outdoor_mse', 'rmse_db', 'outdoor_rmse_db'} of the output of the stage `phase`
        trains. Stage 2 trains on a frozen stage 1, so the coarse maps of the set are kept while
        stage 1's weights stay the same (the refined MSE is the same as `mse_both`'s, bit for bit)."""
        weights.assign_to(self._net)
        if phase not in (Phase.STAGE1, Phase.STAGE2):
            mse, outdoor = self._sum(self._squared_errors)[2:]
        elif phase == Phase.STAGE1:
            mse, outdoor = self._sum(self._coarse_squared_errors)
        else:
            digest = hashlib.sha1(b"".join(np.ascontiguousarray(w).tobytes() for w in weights.stage1)).digest()
            if self._coarse_cache[0] != digest:
                self._coarse_cache = (digest, [self._stage1(x) for x, _ in self._data])
            mse, outdoor = self._sum(self._refined_squared_errors, self._coarse_cache[1])
        scores = {"mse": float(mse), "outdoor_mse": float(outdoor)}
        finite = all(math.isfinite(v) and v >= 0 for v in scores.values())
        scores["rmse_db"] = gain_rmse_db(scores["mse"]) if finite else float("nan")
        scores["outdoor_rmse_db"] = gain_rmse_db(scores["outdoor_mse"]) if finite else float("nan")
        return scores
