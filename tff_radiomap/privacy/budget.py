"""The fixed perturbation budget and its split over parameter groups (paper 000, Eqs. (9)-(19)).

All defenses spend one total second-moment budget per upload,

    B = d * (C * nu)^2,                                   (the uniform Gaussian baseline)

where d is the number of uploaded coordinates, C the L2 clipping norm and nu the noise multiplier.
A split assigns energy E_g >= 0 to group g with sum_g E_g = B (Eq. (9)); group g, with d_g
coordinates, then receives i.i.d. N(0, sigma_g^2) noise with sigma_g = sqrt(E_g / d_g) (Eq. (16)),
so that sum_g d_g sigma_g^2 = B.

The functions take and return TensorFlow tensors (they run inside TFF computations) and accept
numpy input; tests compare them with numpy references.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def total_budget(num_coordinates: int, clip_norm: float, noise_multiplier: float) -> float:
    """B = d (C nu)^2."""
    return float(num_coordinates) * (float(clip_norm) * float(noise_multiplier)) ** 2


def sigmas_from_energy(energy, group_sizes):
    """sigma_g = sqrt(E_g / d_g) (Eq. (16)); 0 for an empty group."""
    energy = tf.convert_to_tensor(energy, tf.float32)
    sizes = tf.cast(tf.convert_to_tensor(group_sizes), tf.float32)
    # The floor inside the sqrt keeps the gradient finite for empty groups (E_g = 0), whose
    # branch tf.where discards but still differentiates.
    return tf.where(sizes > 0, tf.sqrt(tf.maximum(energy, 1e-30) / tf.maximum(sizes, 1.0)), 0.0)


def masked_softmax(logits, group_sizes):
    """Softmax over the non-empty groups (an empty group could not spend its share)."""
    logits = tf.convert_to_tensor(logits, tf.float32)
    present = tf.cast(tf.convert_to_tensor(group_sizes), tf.float32) > 0
    masked = tf.where(present, logits, tf.fill(tf.shape(logits), tf.constant(-1e30, tf.float32)))
    return tf.nn.softmax(masked, axis=-1) * tf.cast(present, tf.float32)


def allocate(weights, budget: float, group_sizes, sigma_min: float = 0.0):
    """Energies and sigmas for softmax weights w (Eqs. (14)-(16)), with an optional noise floor.

    Without a floor: E_g = B w_g. With `sigma_min` > 0 every non-empty group first receives the
    floor energy d_g sigma_min^2 and the remainder B - sum_g d_g sigma_min^2 is split by w, so the
    budget identity still holds. Raises (in eager mode) if the floor alone exceeds B.

    Returns (energy [G], sigma [G]).
    """
    weights = tf.convert_to_tensor(weights, tf.float32)
    sizes = tf.cast(tf.convert_to_tensor(group_sizes), tf.float32)
    floor = sizes * float(sigma_min) ** 2
    remainder = tf.cast(budget, tf.float32) - tf.reduce_sum(floor)
    energy = floor + remainder * weights
    return energy, sigmas_from_energy(energy, sizes)


def directed_sigmas(group_sizes, sensitive, budget: float):
    """Directed Uniform: the whole budget, uniformly, on the sensitive groups only.

    sigma = sqrt(B / d_sensitive) on every sensitive coordinate, 0 elsewhere.
    """
    sizes = np.asarray(group_sizes, dtype=np.float64)
    sensitive = np.asarray(sensitive, dtype=bool)
    d_sensitive = float(sizes[sensitive].sum())
    if d_sensitive <= 0:
        raise ValueError("Directed noise needs at least one non-empty transmitter-sensitive group")
    return np.where(sensitive & (sizes > 0), np.sqrt(budget / d_sensitive), 0.0).astype(np.float32)


def spent_budget(sigmas, group_sizes):
    """sum_g d_g sigma_g^2: the second-moment budget actually spent."""
    sigmas = tf.convert_to_tensor(sigmas, tf.float32)
    sizes = tf.cast(tf.convert_to_tensor(group_sizes), tf.float32)
    return tf.reduce_sum(sizes * tf.square(sigmas))


def entropy(weights):
    """H(w) = -sum w log w (0 log 0 = 0), the regulariser of Eq. (21)."""
    w = tf.convert_to_tensor(weights, tf.float32)
    return -tf.reduce_sum(tf.where(w > 0, w * tf.math.log(tf.maximum(w, 1e-30)), 0.0), axis=-1)
