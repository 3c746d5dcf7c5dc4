"""A reality the twin lacks: what a synthetic set's gains may hold beyond the twin's propagation model.

By default (`synthetic.DatasetSpec.reality` None, "twin") the data are the propagation model itself
(`propagation.py`), the twin's model: the worst case for privacy. `ShadowedReality` ("shadowed")
adds what a model of the city does not know:

  - shadow fading: a spatially correlated log-normal field added in dB to every outdoor pixel's
    gain, with 3GPP TR 38.901's UMi street-canyon figures: standard deviation 4 dB in line of sight
    and 7.82 dB out of it (Table 7.4.1-1), decorrelation distance 10 m and 13 m (Table 7.5-6).
    Each transmitter map draws two unit fields, one per state with its own distance; a pixel takes
    the line-of-sight field (times 4 dB) where the model's straight path to it crosses no wall
    (`propagation.Paths.line_of_sight`), the other (times 7.82 dB) elsewhere;
  - per-map propagation constants: each map's `corner_loss_db` and `wall_loss_db` drawn normal
    around the twin's (12 and 15 dB by default) with spreads `corner_loss_spread_db` and
    `wall_loss_spread_db`, clipped to at least `MIN_LOSS_DB`.

Buildings keep the floor value, as in RadioMapSeer. Everything is drawn from the map's seed
sequence (`synthetic.map_seed`), so the same seed gives the same files.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
from scipy import fft

from tff_radiomap.data import encoding
from tff_radiomap.data.propagation import Paths, PropagationConfig

REALITIES = ("twin", "shadowed")
MIN_LOSS_DB = 1.0  # Drawn losses are clipped here: a corner or a wall never amplifies.
PAD_DECORRELATIONS = 10  # Field grid padding: wrapped-around correlation below exp(-10).


@dataclasses.dataclass(frozen=True)
class ShadowedReality:
    """Shadow fading (3GPP TR 38.901 UMi street canyon) and per-map loss constants; see the module."""

    shadow_std_los_db: float = 4.0
    shadow_std_nlos_db: float = 7.82
    decorrelation_los_m: float = 10.0
    decorrelation_nlos_m: float = 13.0
    corner_loss_spread_db: float = 3.0  # Per-map corner_loss_db ~ N(twin's, spread^2).
    wall_loss_spread_db: float = 5.0  # Per-map wall_loss_db ~ N(twin's, spread^2).

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            positive = field.name.startswith("decorrelation")
            if not (isinstance(value, (int, float)) and math.isfinite(value) and (value > 0 if positive else value >= 0)):
                raise ValueError(f"{field.name}={value!r}: expected a finite number {'> 0' if positive else '>= 0'}")


# ---------------------------------------------------------------------------------------------
# Correlated fields.
@functools.lru_cache(maxsize=8)
def _spectrum_root(size: int, decorrelation_px: float) -> np.ndarray:
    """sqrt of the power spectrum (rfft2 half) of exp(-d / decorrelation_px) on an n x n torus."""
    n = fft.next_fast_len(size + math.ceil(PAD_DECORRELATIONS * decorrelation_px))
    lag = np.minimum(np.arange(n), n - np.arange(n))
    correlation = np.exp(-np.hypot(lag[:, None], lag[None, :]) / decorrelation_px)
    return np.sqrt(np.maximum(fft.rfft2(correlation).real, 0.0))


def correlated_field(rng: np.random.Generator, size: int, decorrelation_px: float) -> np.ndarray:
    """A [size, size] zero-mean, unit-variance Gaussian field with autocorrelation exp(-d / decorrelation_px).

    FFT method (circulant embedding): white Gaussian noise on a periodic grid padded by
    `PAD_DECORRELATIONS` decorrelation distances is filtered by the square root of the
    autocorrelation's power spectrum; the top-left [size, size] is kept. Exact up to the clipped
    (negligible) negative part of the spectrum and the wrap-around correlation below exp(-10).
    """
    root = _spectrum_root(size, float(decorrelation_px))
    n = root.shape[0]
    field = fft.irfft2(fft.rfft2(rng.standard_normal((n, n))) * root, s=(n, n))
    return field[:size, :size]


def shadowing_db(rng: np.random.Generator, line_of_sight: np.ndarray, reality: ShadowedReality, meters_per_pixel: float = 1.0) -> np.ndarray:
    """Shadow fading in dB [S, S]: the line-of-sight field where `line_of_sight`, the other elsewhere."""
    size = line_of_sight.shape[0]
    los = correlated_field(rng, size, reality.decorrelation_los_m / meters_per_pixel)
    nlos = correlated_field(rng, size, reality.decorrelation_nlos_m / meters_per_pixel)
    return np.where(line_of_sight, reality.shadow_std_los_db * los, reality.shadow_std_nlos_db * nlos)


def draw_losses(rng: np.random.Generator, reality: ShadowedReality, twin: PropagationConfig) -> tuple[float, float]:
    """(corner_loss_db, wall_loss_db) of one map: normal around the twin's, clipped to >= MIN_LOSS_DB."""
    corner = rng.normal(twin.corner_loss_db, reality.corner_loss_spread_db)
    wall = rng.normal(twin.wall_loss_db, reality.wall_loss_spread_db)
    return max(float(corner), MIN_LOSS_DB), max(float(wall), MIN_LOSS_DB)


class ShadowedMap:
    """One map of a shadowed reality: its losses, drawn once, and a fresh shadowing per transmitter.

    `seed` is the map's own seed sequence: the losses come from its child 0 and transmitter t's
    shadowing from its child t + 1 (`seed` itself is left as it is), so a transmitter map depends
    on (seed, map, t) only.
    """

    def __init__(self, reality: ShadowedReality, twin: PropagationConfig, seed: np.random.SeedSequence, transmitters: int):
        self.reality, self.twin = reality, twin
        children = [np.random.SeedSequence(seed.entropy, spawn_key=(*seed.spawn_key, i), pool_size=seed.pool_size) for i in range(1 + transmitters)]
        losses_seq, *self._transmitter_seqs = children
        self.corner_loss_db, self.wall_loss_db = draw_losses(np.random.default_rng(losses_seq), reality, twin)

    def gain_db(self, t: int, paths: Paths) -> np.ndarray:
        """Transmitter t's gain in dB: the model with this map's losses, plus shadow fading outdoors."""
        shadow = shadowing_db(np.random.default_rng(self._transmitter_seqs[t]), paths.line_of_sight, self.reality, self.twin.meters_per_pixel)
        return paths.gain_db(self.corner_loss_db, self.wall_loss_db) + shadow  # -inf (indoors) stays -inf.


# ---------------------------------------------------------------------------------------------
# The twin's mismatch.
def squared_error_db(gray: np.ndarray, other: np.ndarray, outdoor: np.ndarray) -> tuple[float, int]:
    """(sum of squared differences in dB, pixel count) between two gray-level gain stacks [..., S, S]
    over the `outdoor` [S, S] pixels, both decoded (`encoding.gray_to_gain_db`)."""
    difference = encoding.gray_to_gain_db(gray)[..., outdoor] - encoding.gray_to_gain_db(other)[..., outdoor]
    return float(np.sum(difference**2)), int(difference.size)


def pooled_rmse_db(terms) -> float:
    """The RMSE of (sum of squares, count) pairs pooled: sqrt(sum of sums / sum of counts)."""
    total, count = map(sum, zip(*terms)) if terms else (0.0, 0)
    return math.sqrt(total / count) if count else float("nan")
