"""The transmitter-localization attack on client uploads (paper 000, Eqs. (7)-(8)).

Threat model. An observer sees individual client uploads. For a sample (k, m, t) it sees the
uploads of S short local steps (S = 3) taken from the current global model on that sample, each
privatized by the defense under test (clip and noise, exactly as a client would). The observer
knows the city maps (building layouts are public) and has labelled traces for other transmitter
positions on them (e.g. simulated by the digital twin itself); it predicts the transmitter
coordinate of held-out traces. Training and held-out traces are disjoint sets of (map,
transmitter) samples.

Fingerprint phi (Eq. (7)): the first upload as it is (every coordinate, signed), then, for each
of the S uploads and each convolution kernel [h, w, in, out] (transposed: [h, w, out, in]), the L2
norm over input channels of every (tap, output channel), and every other tensor (biases) as is.
Position leaks through where in the image the error concentrates: zero padding and stride-2
(transposed) convolutions make a kernel's update depend on it. With an Adam client the first step
is close to lr * sign(gradient), so the norms alone carry little; the signs of the first upload
carry most of what the observer can use (the figures: bench/RESULTS.md, "The
localization attack").

Regressor h: standardization then ridge regression (`ridge_attacker.LocalizationAttacker`); the
observer may add its own simulated traces (`extra` pool in `run_attack`).

This learned attacker is not the strongest the threat model allows: with the twin, the broadcast
model and the defense known, matching the observed upload against every candidate position's
(`matching_attack.py`) localizes far better; a run scores both, and its `attack_rmse_m` is the
stronger (`experiments/privacy_matching.strongest`).

Metric (Eq. (8)): RMSE of ||c_hat - c|| in meters, with the RMSE of the best constant guess (the
mean training position) as the floor every figure should be read against.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf
from tff_radiomap import seeds as seeds_lib
from tff_radiomap.privacy.ridge_attacker import LocalizationAttacker, rmse


@dataclasses.dataclass(frozen=True)
class AttackConfig:
    steps: int = 3  # S local steps observed per sample.
    train_traces: int = 1024
    test_traces: int = 256
    ridge_alphas: tuple[float, ...] = (1.0, 10.0, 100.0, 1000.0, 10000.0)
    validation_fraction: float = 0.2
    seed: int = 0

    def __post_init__(self):
        if self.steps < 1:
            raise ValueError(f"attack steps={self.steps}: expected >= 1")
        if self.train_traces < 10 or self.test_traces < 1:
            raise ValueError(f"train_traces={self.train_traces}, test_traces={self.test_traces}: expected >= 10 and >= 1")


def signed_block(uploads) -> tf.Tensor:
    """The signed part of phi: the first upload of a trace, flattened (the first block of
    `fingerprint` and `fingerprint_batch`, tested equal; also the features of the allocator's
    closed-form proxy, `privacy.allocator`).
    `uploads` is a list of S uploads, each a list of tensors; or a batch [N, S, d] of flattened
    traces, giving [N, d]."""
    if isinstance(uploads, (tf.Tensor, np.ndarray)):
        return tf.convert_to_tensor(uploads)[:, 0, :]
    return tf.concat([tf.reshape(u, [-1]) for u in uploads[0]], axis=0)


def fingerprint(uploads, transposed) -> tf.Tensor:
    """phi: a flat float32 feature vector of a trace (a list of S uploads, each a list of tensors).

    The first upload whole, then per upload the per-(tap, output channel) norms of every kernel
    and every other tensor as is. `transposed[i]` says whether tensor i is a transposed-convolution
    kernel ([h, w, out, in]).
    """
    parts = [tf.reshape(u, [-1]) for u in uploads[0]]
    for upload in uploads:
        for u, is_t in zip(upload, transposed):
            if u.shape.rank == 4:
                axis = 3 if is_t else 2
                parts.append(tf.reshape(tf.sqrt(tf.reduce_sum(tf.square(u), axis=axis) + 1e-20), [-1]))
            else:
                parts.append(tf.reshape(u, [-1]))
    return tf.concat(parts, axis=0)


def fingerprint_batch(uploads, shapes, transposed) -> tf.Tensor:
    """`fingerprint` of N traces at once: `uploads` [N, S, d] holds each trace's S uploads
    flattened (tensors of `shapes` concatenated in order); returns [N, F], row n equal to
    `fingerprint` of trace n."""
    sizes = [int(np.prod(s)) for s in shapes]
    n = tf.shape(uploads)[0]
    parts = [uploads[:, 0, :]]
    for step in range(uploads.shape[1]):
        for t, shape, is_t in zip(tf.split(uploads[:, step, :], sizes, axis=1), shapes, transposed):
            if len(shape) == 4:
                kernel = tf.reshape(t, [n, *shape])
                norms = tf.sqrt(tf.reduce_sum(tf.square(kernel), axis=4 if is_t else 3) + 1e-20)
                parts.append(tf.reshape(norms, [n, -1]))
            else:
                parts.append(t)
    return tf.concat(parts, axis=1)


def transposed_flags(model: tf.keras.Model) -> list[bool]:
    """Per trainable variable of `model`: is it a Conv2DTranspose kernel."""
    names = set()
    stack = [model]
    while stack:
        m = stack.pop()
        for layer in getattr(m, "layers", []):
            if isinstance(layer, tf.keras.Model):
                stack.append(layer)
            elif isinstance(layer, tf.keras.layers.Conv2DTranspose):
                names.add(layer.kernel.name)
    return [v.name in names for v in model.trainable_variables]


class TraceCollector:
    """Runs the S observed local steps on single samples and returns fingerprints of the
    privatized uploads.

    `model` is the Keras model whose trainable weights a client uploads in the current phase
    (`phases.build_phase_model`), already holding the current global weights; `optimizer` the
    client optimizer (`tff.learning.optimizers`); `local_updates(model, optimizer, x, y, steps)`
    the clients' local steps (`learning.local_training.local_updates`: the code the clients run);
    `defense` a `ClientPerturbationFactory` or None (No Defense); `extras` its current state
    extras (allocator parameters, round).
    """

    def __init__(self, model, optimizer, steps: int, defense=None, extras=None, *, local_updates):
        self.model, self.optimizer, self.steps = model, optimizer, steps
        self.local_updates = local_updates
        self.defense, self.extras = defense, extras
        self.transposed = transposed_flags(model)
        # The defense-aware observer's views of the same privatized uploads (none for No Defense).
        self.variants = ("plain",) + (tuple(defense.aware_variants()) if defense is not None else ())
        # A defense whose noise mixes coordinates (a subspace) privatizes a chunk's uploads at once.
        self.batched = hasattr(defense, "privatize_batch")
        self.shapes = [tuple(int(d) for d in v.shape) for v in model.trainable_variables]
        self._impl = self._traces_batched_impl if self.batched else self._traces_impl
        self._traced = {}  # (extras given, seeded) -> tf.function with a batch-free signature.

    def _trace_impl(self, x, y, extras, seed):
        uploads = self.local_updates(self.model, self.optimizer, x, y, self.steps)
        if self.defense is None:
            return fingerprint(uploads, self.transposed)[None]
        privatized, sigma = [], None
        for s, upload in enumerate(uploads):
            noised, sigma = self.defense.privatize(upload, extras, seed=None if seed is None else seed + tf.constant([0, s], tf.int64))
            privatized.append(noised)
        views = [fingerprint(privatized, self.transposed)]
        for variant in self.variants[1:]:
            weights = self.defense.aware_weights(sigma, variant)
            views.append(fingerprint([self.defense.whiten(u, weights) for u in privatized], self.transposed))
        return tf.stack(views)

    def _traces_impl(self, x, y, extras, seeds):
        # One graph for a chunk of samples: a per-sample Python loop costs more than the steps.
        n = tf.shape(x)[0]
        out = tf.TensorArray(tf.float32, size=n)
        for i in tf.range(n):
            out = out.write(i, self._trace_impl(x[i : i + 1], y[i : i + 1], extras, None if seeds is None else seeds[i]))
        return out.stack()

    def _traces_batched_impl(self, x, y, extras, seeds):
        n = tf.shape(x)[0]
        out = tf.TensorArray(tf.float32, size=n)
        for i in tf.range(n):
            uploads = self.local_updates(self.model, self.optimizer, x[i : i + 1], y[i : i + 1], self.steps)
            out = out.write(i, tf.stack([tf.concat([tf.reshape(u, [-1]) for u in upload], 0) for upload in uploads]))
        flat = out.stack()  # [n, S, d]
        d = flat.shape[-1]
        rows = tf.reshape(flat, [-1, d])
        row_seeds = None
        if seeds is not None:  # Sample i, step s: seeds[i] + [0, s], as the per-sample path.
            steps = tf.range(self.steps, dtype=tf.int64)
            row_seeds = tf.reshape(seeds[:, None, :] + tf.stack([tf.zeros_like(steps), steps], axis=1)[None], [-1, 2])
        if hasattr(self.defense, "privatize_views_batch"):  # The views from the privatization's own products.
            views, _ = self.defense.privatize_views_batch(rows, self.variants[1:], row_seeds)
        else:
            noised, sigma = self.defense.privatize_batch(rows, row_seeds)
            views = [noised] + [self.defense.whiten_batch(noised, self.defense.aware_weights(sigma, v)) for v in self.variants[1:]]
        return tf.stack([fingerprint_batch(tf.reshape(v, [n, self.steps, d]), self.shapes, self.transposed) for v in views], axis=1)

    def _traces_fn(self, x, y, extras, seeded: bool):
        """`traces(x, y, extras, seeds)` for chunks of samples: one graph per collector whatever the
        chunk's length (the train, held-out and extra pools and a short last chunk share it)."""
        extras_spec = None if extras is None else tf.nest.map_structure(tf.TensorSpec.from_tensor, extras)
        key = (repr(extras_spec), seeded)  # The extras' layout may differ (initial vs a round's state).
        if key not in self._traced:
            signature = [tf.TensorSpec([None, *x.shape[1:]], tf.float32), tf.TensorSpec([None, *y.shape[1:]], tf.float32)]
            has_extras = extras is not None
            if has_extras:
                signature.append(extras_spec)
            if seeded:
                signature.append(tf.TensorSpec([None, 2], tf.int64))

            def impl(x, y, *rest):
                extras_arg = rest[0] if has_extras else None
                return self._impl(x, y, extras_arg, rest[-1] if seeded else None)

            self._traced[key] = tf.function(impl, input_signature=signature)
        fn = self._traced[key]

        def traces(x, y, extras, seeds):
            return fn(x, y, *[a for a in (extras, seeds) if a is not None])

        return traces

    def collect(self, x: np.ndarray, y: np.ndarray, chunk: int | None = None, seed: tuple[int, int] | None = None) -> np.ndarray:
        """Fingerprints [N, F] of the traces of samples x [N, r, r, 2], y [N, r, r, 1] (the plain view).

        Uses the model's current weights and `self.extras`; neither change retraces. With `seed`
        (a pair of ints) the defense's noise is a function of (seed, sample index, step): the same
        call gives the same fingerprints; without it the noise is fresh each call.
        """
        return self.collect_views(x, y, chunk, seed)["plain"]

    def collect_views(
        self, x: np.ndarray, y: np.ndarray, chunk: int | None = None, seed: tuple[int, int] | None = None, maps: np.ndarray | None = None
    ) -> dict[str, np.ndarray]:
        """{variant: fingerprints [N, F]} of the same privatized traces: 'plain', and the views of a
        defense-aware observer (`ClientPerturbationFactory.aware_variants`). `chunk`: samples per
        traced call (default 256; 64 on the batched path, whose temporaries are [chunk * S, d]).
        `maps` [N]: each sample's map id, needed by a defense whose noise differs by client (it has
        `observe_map`): each sample is privatized as the holder of its map would."""
        chunk = chunk or (64 if self.batched else 256)
        extras = None
        if self.defense is not None:
            extras = tf.nest.map_structure(tf.convert_to_tensor, self.extras if self.extras is not None else self.defense.initial_extras())
        seeds = None
        if seed is not None:
            # Sample i, step s: [seed0, seed1 * 2^20 + 8 i + s] (distinct for up to 131072 samples, 8 steps).
            seeds = np.stack([np.full(len(x), seed[0]), seed[1] * seeds_lib.SAMPLE_STRIDE + 8 * np.arange(len(x))], axis=1).astype(np.int64)
        traces = self._traces_fn(x, y, extras, seeds is not None)
        # Each view's fingerprints [N, F], filled chunk by chunk from TensorFlow's buffers (np.asarray
        # does not copy; `.numpy()`, a concatenation and a per-view slice would copy [N, V, F] thrice).
        out = None

        def collect(rows):
            nonlocal out
            for s in range(0, len(rows), chunk):
                part = np.asarray(
                    traces(
                        tf.constant(x[rows[s : s + chunk]], tf.float32),
                        tf.constant(y[rows[s : s + chunk]], tf.float32),
                        extras,
                        None if seeds is None else tf.constant(seeds[rows[s : s + chunk]]),
                    )
                )
                if out is None:
                    out = [np.empty((len(x), part.shape[-1]), part.dtype) for _ in self.variants]
                for view, values in zip(out, np.moveaxis(part, 1, 0)):
                    view[rows[s : s + chunk]] = values

        if not hasattr(self.defense, "observe_map"):
            collect(np.arange(len(x)))
        else:
            if maps is None or len(maps) != len(x):
                raise ValueError(f"{type(self.defense).__name__} privatizes by client: collect_views needs the map id of each of the {len(x)} samples")
            owners = np.array([self.defense.owner_of(m) for m in maps])
            for owner in np.unique(owners):
                self.defense.observe_owner(int(owner))
                collect(np.flatnonzero(owners == owner))
        return dict(zip(self.variants, out))


@dataclasses.dataclass(frozen=True)
class AttackResult:
    """The stronger (lower-RMSE) of the plain and the defense-aware attacker, and each of them."""

    rmse_m: float
    constant_rmse_m: float
    train_traces: int
    test_traces: int
    alpha: float
    plain_rmse_m: float = float("nan")
    aware_rmse_m: float = float("nan")  # The best aware view; nan without a defense.
    view: str = "plain"  # Which view gave rmse_m.

    @property
    def ratio(self) -> float:
        return self.rmse_m / self.constant_rmse_m


def split_traces(num_samples: int, config: AttackConfig) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint (train, test) sample indices, seeded."""
    need = config.train_traces + config.test_traces
    if need > num_samples:
        raise ValueError(f"attack needs {need} samples (train_traces + test_traces), the pool holds {num_samples}")
    order = np.random.default_rng(config.seed).permutation(num_samples)
    return order[: config.train_traces], order[config.train_traces : need]


def _sample_keys(samples: dict) -> list:
    """(building map, transmitter position) of each sample, to recognise the same sample elsewhere."""
    buildings = samples["x"][..., 0]
    return [(hash(buildings[i].tobytes()), tuple(np.round(samples["coords_m"][i], 3))) for i in range(len(buildings))]


def drop_held_out(extra: dict, held_out: dict) -> dict:
    """`extra` without the samples that are held-out samples (same map, same transmitter position):
    an observer simulating the public maps may hit a position it is then scored on, which would be
    the answer by another path."""
    seen = set(_sample_keys(held_out))
    keep = np.array([k not in seen for k in _sample_keys(extra)], bool)
    return {k: v[keep] for k, v in extra.items()}


def run_attack(collector: TraceCollector, samples: dict, config: AttackConfig, extra: dict | None = None) -> AttackResult:
    """Collects traces for the samples of `samples` (x, y, coords_m, and map_id where the defense
    differs by client), fits h, scores held-out.

    The observer knows the defense: its training traces are privatized by it, and besides the
    plain fingerprints it fits one attacker per defense-aware view (features whitened by the noise
    covariance, `TraceCollector.collect_views`); the stronger scores. `extra` (x, y, coords_m):
    more labelled samples the observer simulated itself; their traces join the training traces
    (never the held-out ones).
    """
    train, test = split_traces(len(samples["x"]), config)
    # The noise of the train, held-out and extra traces: three seeded streams (reproducible attacks).
    maps = samples.get("map_id")

    def map_ids(rows):
        return None if maps is None else maps[rows]

    v_train = collector.collect_views(samples["x"][train], samples["y"][train], seed=(config.seed, 0), maps=map_ids(train))
    v_test = collector.collect_views(samples["x"][test], samples["y"][test], seed=(config.seed, 1), maps=map_ids(test))
    c_train, c_test = samples["coords_m"][train].astype(np.float64), samples["coords_m"][test].astype(np.float64)
    if extra is not None:
        extra = drop_held_out(extra, {k: v[test] for k, v in samples.items()})
    if extra is not None and len(extra["x"]):
        v_extra = collector.collect_views(extra["x"], extra["y"], seed=(config.seed, 2), maps=extra.get("map_id"))
        v_train = {k: np.concatenate([v, v_extra[k]]) for k, v in v_train.items()}
        c_train = np.concatenate([c_train, extra["coords_m"].astype(np.float64)])
    constant = rmse(np.broadcast_to(c_train.mean(0), c_test.shape), c_test)
    scores = {}
    for view in list(v_train):
        f_train, f_test = v_train.pop(view), v_test.pop(view)  # Free each view once fitted.
        if not (np.all(np.isfinite(f_train)) and np.all(np.isfinite(f_test))):
            raise FloatingPointError("attack traces are not finite: the global model's local steps diverged")
        attacker = LocalizationAttacker(config.ridge_alphas, config.validation_fraction, config.seed).fit(f_train, c_train)
        scores[view] = (rmse(attacker.predict(f_test), c_test), attacker.alpha)
        del f_train, f_test, attacker
    best = min(scores, key=lambda v: scores[v][0])
    aware = [r for v, (r, _) in scores.items() if v != "plain"]
    return AttackResult(
        rmse_m=scores[best][0],
        constant_rmse_m=constant,
        train_traces=len(c_train),
        test_traces=len(test),
        alpha=scores[best][1],
        plain_rmse_m=scores["plain"][0],
        aware_rmse_m=min(aware) if aware else float("nan"),
        view=best,
    )
