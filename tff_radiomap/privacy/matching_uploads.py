"""The uploads the matching attacker simulates (`matching_attack`): for samples of the twin, the S
uploads of single-sample local steps from the broadcast model, flat, clean (`UploadTraces.clean`),
clipped as a client clips them (`clip_uploads`, Eq. (17)), and privatized by the defense with
each upload's noise scales (`UploadTraces.privatize`, `UploadTraces.sigmas`).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tff_radiomap import seeds as seeds_lib


class UploadTraces:
    """The S uploads of single-sample local steps, flat: clean [N, S, d], or privatized by a defense
    as a client would (clip, then its noise), with each upload's sigma [N, S, G].

    `model` holds the broadcast weights of the phase (`phases.build_phase_model`), `optimizer` the
    client optimizer, `local_updates(model, optimizer, x, y, steps)` the clients' own local steps
    (`learning.local_training.local_updates`); one traced graph serves every chunk."""

    def __init__(self, model, optimizer, steps: int, *, local_updates):
        self.model, self.optimizer, self.steps, self.local_updates = model, optimizer, steps, local_updates
        self.shapes = [tuple(int(d) for d in v.shape) for v in model.trainable_variables]
        signature = [tf.TensorSpec([None, *model.input_shape[1:]], tf.float32), tf.TensorSpec([None, *model.output_shape[1:]], tf.float32)]
        self._clean = tf.function(self._clean_impl, input_signature=signature)
        self._private = {}

    def _clean_impl(self, x, y):
        out = tf.TensorArray(tf.float32, size=tf.shape(x)[0])
        for i in tf.range(tf.shape(x)[0]):
            uploads = self.local_updates(self.model, self.optimizer, x[i : i + 1], y[i : i + 1], self.steps)
            out = out.write(i, tf.stack([tf.concat([tf.reshape(u, [-1]) for u in upload], 0) for upload in uploads]))
        return out.stack()

    def clean(self, x: np.ndarray, y: np.ndarray, chunk: int = 64) -> np.ndarray:
        """Unclipped uploads [N, S, d] (float32)."""
        parts = [self._clean(tf.constant(x[s : s + chunk], tf.float32), tf.constant(y[s : s + chunk], tf.float32)).numpy() for s in range(0, len(x), chunk)]
        return np.concatenate(parts) if parts else np.zeros((0, self.steps, sum(int(np.prod(s)) for s in self.shapes)), np.float32)

    def privatize(self, uploads: np.ndarray, defense, extras, seed: tuple[int, int] | None, chunk: int = 64) -> tuple[np.ndarray, np.ndarray]:
        """(privatized uploads [N, S, d], sigma [N, S, G]) of clean uploads [N, S, d]: row n, step s
        gets the defense's noise for the seed pair [seed0, seed1 * SAMPLE_STRIDE + 8 n + s] (the
        attack's per-sample streams, `attack.TraceCollector`); without `seed`, fresh noise."""
        n, steps, d = uploads.shape
        rows = uploads.reshape(n * steps, d)
        seeds = None if seed is None else self._row_seeds(seed, n, steps)
        noised, sigma = [], []
        for s in range(0, n * steps, chunk):
            part = tf.constant(rows[s : s + chunk])
            part_seeds = None if seeds is None else tf.constant(seeds[s : s + chunk])
            if hasattr(defense, "privatize_batch"):
                out, sg = defense.privatize_batch(part, part_seeds)
            else:
                out, sg = self._privatize_rows(defense, extras, part, part_seeds)
            noised.append(out.numpy())
            sg = sg.numpy()
            sigma.append(np.broadcast_to(sg, (len(out), sg.shape[-1])) if sg.ndim == 1 else sg)
        return np.concatenate(noised).reshape(n, steps, d), np.concatenate(sigma).reshape(n, steps, -1).astype(np.float64)

    def sigmas(self, uploads: np.ndarray, defense, extras, seed: tuple[int, int] | None, chunk: int = 64, coef: np.ndarray | None = None) -> np.ndarray:
        """sigma [N, S, G] that `privatize` gives the same uploads and seed, without the noise
        where the defense can say its scales alone (`sigmas_batch`); the same rows in the same
        chunks, so the scales are `privatize`'s to the last bit. `coef` [N, S, K]: the clipped
        uploads' projections on the defense's basis where the caller has them (the defense then
        skips that product; the scales agree with `privatize`'s to float rounding)."""
        if not hasattr(defense, "sigmas_batch"):
            return self.privatize(uploads, defense, extras, seed, chunk)[1]
        n, steps, d = uploads.shape
        rows = uploads.reshape(n * steps, d)
        coef = None if coef is None else coef.reshape(n * steps, -1)
        seeds = None if seed is None else self._row_seeds(seed, n, steps)
        sigma = []
        for s in range(0, n * steps, chunk):
            given = {} if coef is None else {"coef": tf.constant(coef[s : s + chunk])}
            sg = defense.sigmas_batch(tf.constant(rows[s : s + chunk]), None if seeds is None else tf.constant(seeds[s : s + chunk]), **given).numpy()
            sigma.append(np.broadcast_to(sg, (min(chunk, n * steps - s), sg.shape[-1])) if sg.ndim == 1 else sg)
        return np.concatenate(sigma).reshape(n, steps, -1).astype(np.float64)

    @staticmethod
    def _row_seeds(seed: tuple[int, int], n: int, steps: int) -> np.ndarray:
        """[N S, 2] the seed pair of each (sample, step) row (`privatize`)."""
        index = 8 * np.repeat(np.arange(n), steps) + np.tile(np.arange(steps), n)
        return np.stack([np.full(n * steps, seed[0]), seed[1] * seeds_lib.SAMPLE_STRIDE + index], 1).astype(np.int64)

    def _privatize_rows(self, defense, extras, rows, seeds):
        key = (id(defense), seeds is not None)
        if key not in self._private:
            sizes = [int(np.prod(s)) for s in self.shapes]

            def impl(rows, extras, seeds):
                out_rows = tf.TensorArray(tf.float32, size=tf.shape(rows)[0])
                out_sigma = tf.TensorArray(tf.float32, size=tf.shape(rows)[0])
                for i in tf.range(tf.shape(rows)[0]):
                    flat = [tf.reshape(t, s) for t, s in zip(tf.split(rows[i], sizes), self.shapes)]
                    noised, sigma = defense.privatize(flat, extras, seed=None if seeds is None else seeds[i])
                    out_rows = out_rows.write(i, tf.concat([tf.reshape(u, [-1]) for u in noised], 0))
                    out_sigma = out_sigma.write(i, sigma)
                return out_rows.stack(), out_sigma.stack()

            self._private[key] = tf.function(impl)
        extras = tf.nest.map_structure(tf.convert_to_tensor, extras if extras is not None else defense.initial_extras())
        return self._private[key](rows, extras, seeds)


def clip_uploads(uploads: np.ndarray, clip_norm: float | None) -> np.ndarray:
    """Each upload [.., d] scaled to L2 norm at most `clip_norm` (Eq. (17)); None: as it is.

    Norms and scaling in float64 one upload at a time (a chunk of candidates in float64 would be
    hundreds of MB); an upload within the clip is copied unchanged."""
    if clip_norm is None:
        return uploads
    rows = uploads.reshape(-1, uploads.shape[-1])
    out = np.array(rows, np.float32)
    for i, row in enumerate(rows):
        norm = np.sqrt(np.sum(np.square(row, dtype=np.float64)))
        if norm > clip_norm:
            out[i] = row.astype(np.float64) * (clip_norm / norm)
    return out.reshape(uploads.shape)
