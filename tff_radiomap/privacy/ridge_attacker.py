"""The observer's regressor h of the localization attack (paper 000, Eq. (8); `attack.py`).

Regressor h: standardization then ridge regression (a one-layer linear network fitted in closed
form, in the dual since features outnumber traces), its regularization chosen on a validation
split of the training traces. Kernel ridge (RBF), k-nearest neighbours, gradient boosting and
small MLPs on the same features all did worse than linear ridge with ~10^3 traces; what helps is
more labelled traces (bench/RESULTS.md, "The localization attack"), which is why the observer
may add its own simulated traces (the `extra` pool of `attack.run_attack`).
"""

from __future__ import annotations

import numpy as np


class LocalizationAttacker:
    """h: standardization + ridge regression from fingerprints to (x, y) in meters."""

    def __init__(self, alphas=(1.0, 10.0, 100.0, 1000.0, 10000.0), validation_fraction: float = 0.2, seed: int = 0):
        self.alphas, self.validation_fraction, self.seed = alphas, validation_fraction, seed

    def _standardize(self, features):
        # float32 and in place: with ~10^4 traces of ~10^5 features this is the attack's peak memory.
        z = features[:, self._keep].astype(np.float32)
        z -= self._mu.astype(np.float32)
        z /= self._sd.astype(np.float32)
        return np.clip(z, -10.0, 10.0, out=z)

    def fit(self, features: np.ndarray, coords: np.ndarray) -> "LocalizationAttacker":
        # The standard deviation 4096 features at a time: each feature's as over the whole array, without
        # numpy's float64 temporary of its size (1 GB at 1024 traces of the CPU default's 125098 features).
        mu = features.mean(0, dtype=np.float64)
        sd = np.concatenate([features[:, a : a + 4096].std(0, dtype=np.float64) for a in range(0, features.shape[1], 4096)])
        self._keep = sd > 1e-12 * (1.0 + np.abs(mu))
        self._mu, self._sd = mu[self._keep], sd[self._keep]
        z = self._standardize(features)
        gram = (z @ z.T).astype(np.float64)  # Dual form: traces are fewer than features. Once for every alpha.
        order = np.random.default_rng(self.seed).permutation(len(z))
        n_val = max(1, int(self.validation_fraction * len(z)))
        val, tr = order[:n_val], order[n_val:]
        fit_tr = _DualRidge(gram[np.ix_(tr, tr)], coords[tr])
        # alpha = inf is the constant predictor (the mean training position): the grid reaches it, so
        # an attacker whose features carry nothing falls back to the constant guess, not below it.
        alphas = tuple(self.alphas) + (np.inf,)
        errors = [rmse((gram[np.ix_(val, tr)] @ fit_tr.coef(a) if np.isfinite(a) else 0.0) + fit_tr.mean, coords[val]) for a in alphas]
        self.alpha = alphas[int(np.argmin(errors))]
        full = _DualRidge(gram, coords)
        coef = full.coef(self.alpha) if np.isfinite(self.alpha) else np.zeros_like(coords, dtype=np.float64)
        self._w, self._mean = z.T @ coef.astype(np.float32), full.mean
        return self

    def predict(self, features: np.ndarray) -> np.ndarray:
        return (self._standardize(features) @ self._w).astype(np.float64) + self._mean


class _DualRidge:
    """Ridge regression in the dual from a Gram matrix, for many regularizations at one
    eigendecomposition: coef(alpha) = (G + alpha I)^-1 (c - mean c)."""

    def __init__(self, gram: np.ndarray, coords: np.ndarray):
        self.mean = coords.mean(0)
        self._eigval, self._eigvec = np.linalg.eigh(gram)
        self._proj = self._eigvec.T @ (coords - self.mean)

    def coef(self, alpha: float) -> np.ndarray:
        return self._eigvec @ (self._proj / (self._eigval + alpha)[:, None])


def rmse(pred, coords) -> float:
    """Root mean squared Euclidean error of predicted coordinates [N, 2] against the true ones."""
    return float(np.sqrt(np.mean(np.sum((pred - coords) ** 2, axis=1))))
