"""The gradients of single samples at the broadcast model, flat: the first-order contributions of
the deployment observer's candidates (`upload_observer`).

g_q = d loss(x_q, y_q) / d theta at the model's current weights, one sample at a time (Eq. (3)'s
loss on a batch of one), flattened in the order of the model's trainable variables (the order of
an upload). One traced graph serves every chunk; `coordinates` keeps a subset of the d coordinates
(the observer's cost knob: memory and search time scale with it).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tff_radiomap.models import phases


class CandidateGradients:
    """Per-sample gradients [N, d] (float32) of `model` (a `phases.build_phase_model`, holding the
    broadcast weights when called)."""

    def __init__(self, model: tf.keras.Model):
        self.model = model
        self.size = int(sum(int(np.prod(v.shape)) for v in model.trainable_variables))
        signature = [tf.TensorSpec([None, *model.input_shape[1:]], tf.float32), tf.TensorSpec([None, *model.output_shape[1:]], tf.float32)]
        self._gradients = tf.function(self._impl, input_signature=signature)

    def _impl(self, x, y):
        out = tf.TensorArray(tf.float32, size=tf.shape(x)[0])
        for i in tf.range(tf.shape(x)[0]):
            with tf.GradientTape() as tape:
                loss = phases.mse_loss(y[i : i + 1], self.model(x[i : i + 1], training=True))
            grads = tape.gradient(loss, self.model.trainable_variables)
            out = out.write(i, tf.concat([tf.reshape(g, [-1]) for g in grads], 0))
        return out.stack()

    def __call__(self, x: np.ndarray, y: np.ndarray, coordinates: np.ndarray | None = None, chunk: int = 64) -> np.ndarray:
        """[N, d'] the gradients of samples x [N, r, r, c], y [N, r, r, 1], at `coordinates` (None: all d)."""
        width = self.size if coordinates is None else len(coordinates)
        out = np.empty((len(x), width), np.float32)
        for a in range(0, len(x), chunk):
            g = self._gradients(tf.constant(x[a : a + chunk], tf.float32), tf.constant(y[a : a + chunk], tf.float32)).numpy()
            out[a : a + chunk] = g if coordinates is None else g[:, coordinates]
        return out
