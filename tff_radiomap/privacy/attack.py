"""The transmitter-localization attack on client uploads (paper 000, Eqs. (7)-(8)).

Threat model. An observer sees individual client uploads. For a sample (k, m, t) it sees the
uploads of S short local steps (S = 3) taken from the current global model on that sample, each
privatized by the defense under test (clip and noise, exactly as a client would). The observer
knows the city maps (building layouts are public) and has labelled traces for other transmitter
positions on them (e.g. simulated by the digital twin itself); it predicts the transmitter
coordinate of held-out traces. Training and held-out traces are disjoint sets of (map,
transmitter) samples.

Fingerprint phi (Eq. (7)): for each of the S uploads and each convolution kernel
[h, w, in, out] (transposed: [h, w, out, in]), the L2 norm over input channels of every
(tap, output channel); every other tensor (biases) as is. The spatial tap pattern of a kernel's
update is where position leaks: zero padding and stride-2 (transposed) convolutions make it
depend on where in the image the error concentrates. The transmitter-sensitive groups are
included whole (their norms over one input channel are their own absolute values).

Regressor h: standardization then ridge regression (a one-layer linear network fitted in closed
form), its regularization chosen on a validation split of the training traces. On our synthetic
data a one-hidden-layer MLP on the same features generalized worse than ridge with ~10^3 traces.

Metric (Eq. (8)): RMSE of ||c_hat - c|| in meters, with the RMSE of the best constant guess (the
mean training position) as the floor every figure should be read against.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from tff_radiomap.learning import local_training


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


def fingerprint(uploads, transposed) -> tf.Tensor:
    """phi: a flat float32 feature vector of a trace (a list of S uploads, each a list of tensors).

    `transposed[i]` says whether tensor i is a transposed-convolution kernel ([h, w, out, in]).
    """
    parts = []
    for upload in uploads:
        for u, is_t in zip(upload, transposed):
            if u.shape.rank == 4:
                axis = 3 if is_t else 2
                parts.append(tf.reshape(tf.sqrt(tf.reduce_sum(tf.square(u), axis=axis) + 1e-20), [-1]))
            else:
                parts.append(tf.reshape(u, [-1]))
    return tf.concat(parts, axis=0)


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
    (`keras_wrap.build_phase_model`), already holding the current global weights; `optimizer` the
    client optimizer (`tff.learning.optimizers`); `defense` a `ClientPerturbationFactory` or None
    (No Defense); `extras` its current state extras (allocator parameters, round).
    """

    def __init__(self, model, optimizer, steps: int, defense=None, extras=None):
        self.model, self.optimizer, self.steps = model, optimizer, steps
        self.defense, self.extras = defense, extras
        self.transposed = transposed_flags(model)
        self._trace = tf.function(self._trace_impl)

    def _trace_impl(self, x, y):
        uploads = local_training.local_updates(self.model, self.optimizer, x, y, self.steps)
        if self.defense is not None:
            privatized = []
            for upload in uploads:
                noised, _ = self.defense.privatize(upload, self.extras)
                privatized.append(noised)
            uploads = privatized
        return fingerprint(uploads, self.transposed)

    def collect(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Fingerprints [N, F] of the traces of samples x [N, r, r, 2], y [N, r, r, 1]."""
        x, y = tf.constant(x, tf.float32), tf.constant(y, tf.float32)
        out = [self._trace(x[i : i + 1], y[i : i + 1]).numpy() for i in range(len(x))]
        return np.stack(out).astype(np.float64)


class LocalizationAttacker:
    """h: standardization + ridge regression from fingerprints to (x, y) in meters."""

    def __init__(self, alphas=(1.0, 10.0, 100.0, 1000.0, 10000.0), validation_fraction: float = 0.2, seed: int = 0):
        self.alphas, self.validation_fraction, self.seed = alphas, validation_fraction, seed

    def _standardize(self, features):
        z = (features[:, self._keep] - self._mu) / self._sd
        return np.clip(z, -10.0, 10.0)

    def fit(self, features: np.ndarray, coords: np.ndarray) -> "LocalizationAttacker":
        mu, sd = features.mean(0), features.std(0)
        self._keep = sd > 1e-12 * (1.0 + np.abs(mu))
        self._mu, self._sd = mu[self._keep], sd[self._keep]
        z = self._standardize(features)
        order = np.random.default_rng(self.seed).permutation(len(z))
        n_val = max(1, int(self.validation_fraction * len(z)))
        val, tr = order[:n_val], order[n_val:]
        errors = [_rmse(self._solve(z[tr], coords[tr], a)(z[val]), coords[val]) for a in self.alphas]
        self.alpha = self.alphas[int(np.argmin(errors))]
        self._predict = self._solve(z, coords, self.alpha)
        return self

    @staticmethod
    def _solve(z, c, alpha):
        mean_c = c.mean(0)
        # Dual form: z has fewer rows than columns.
        gram = z @ z.T
        coef = np.linalg.solve(gram + alpha * np.eye(len(z)), c - mean_c)
        w = z.T @ coef
        return lambda q: q @ w + mean_c

    def predict(self, features: np.ndarray) -> np.ndarray:
        return self._predict(self._standardize(features))


def _rmse(pred, coords) -> float:
    return float(np.sqrt(np.mean(np.sum((pred - coords) ** 2, axis=1))))


@dataclasses.dataclass(frozen=True)
class AttackResult:
    rmse_m: float
    constant_rmse_m: float
    train_traces: int
    test_traces: int
    alpha: float

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


def run_attack(collector: TraceCollector, samples: dict, config: AttackConfig) -> AttackResult:
    """Collects traces for the samples of `samples` (x, y, coords_m), fits h, scores held-out."""
    train, test = split_traces(len(samples["x"]), config)
    f_train = collector.collect(samples["x"][train], samples["y"][train])
    f_test = collector.collect(samples["x"][test], samples["y"][test])
    if not (np.all(np.isfinite(f_train)) and np.all(np.isfinite(f_test))):
        raise FloatingPointError("attack traces are not finite: the global model's local steps diverged")
    c_train, c_test = samples["coords_m"][train].astype(np.float64), samples["coords_m"][test].astype(np.float64)
    attacker = LocalizationAttacker(config.ridge_alphas, config.validation_fraction, config.seed).fit(f_train, c_train)
    constant = np.broadcast_to(c_train.mean(0), c_test.shape)
    return AttackResult(
        rmse_m=_rmse(attacker.predict(f_test), c_test),
        constant_rmse_m=_rmse(constant, c_test),
        train_traces=len(train),
        test_traces=len(test),
        alpha=attacker.alpha,
    )
