"""RadioMapSeer's gray-level encoding of pathloss maps, and the free-space model used with it.

A pixel's gray level g in 0..255 encodes the received gain PL_dB (negative, in dB) as

    g = 255 * max((PL_dB + 147) / (-47.84 + 147), 0),

so gray 0 is -147 dB (and everything weaker, including building interiors) and 255 is -47.84 dB.
"""

from __future__ import annotations

import numpy as np

GAIN_FLOOR_DB = -147.0
GAIN_CEIL_DB = -47.84
_SPAN_DB = GAIN_CEIL_DB - GAIN_FLOOR_DB
SPEED_OF_LIGHT = 299_792_458.0


def gain_db_to_gray(gain_db: np.ndarray) -> np.ndarray:
    """Encodes gains in dB as uint8 gray levels (rounded, clipped to 0..255)."""
    scaled = 255.0 * np.maximum((np.asarray(gain_db, dtype=np.float64) - GAIN_FLOOR_DB) / _SPAN_DB, 0.0)
    return np.clip(np.rint(scaled), 0, 255).astype(np.uint8)


def gray_to_gain_db(gray: np.ndarray) -> np.ndarray:
    """Decodes gray levels (0..255, any dtype) back to gains in dB; gray 0 maps to the floor."""
    return np.asarray(gray, dtype=np.float64) / 255.0 * _SPAN_DB + GAIN_FLOOR_DB


def free_space_loss_db(distance_m: np.ndarray, frequency_hz: float) -> np.ndarray:
    """Friis free-space path loss 20 log10(4 pi d f / c) in dB (positive)."""
    return 20.0 * np.log10(4.0 * np.pi * np.asarray(distance_m) * frequency_hz / SPEED_OF_LIGHT)
