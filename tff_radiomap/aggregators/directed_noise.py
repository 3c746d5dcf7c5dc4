"""Directed Uniform: the whole budget B, uniformly, on the transmitter-sensitive groups only.

sigma = sqrt(B / d_sensitive) on every sensitive coordinate, 0 on the residual group, with
B = d (C nu)^2 (paper 000, Section IV). No (epsilon, delta) is reported: the residual coordinates
are released after clipping only, so the upload as a whole is not a DP mechanism.
"""

import tensorflow as tf

from tff_radiomap.aggregators.client_perturbation import ClientPerturbationFactory
from tff_radiomap.privacy import budget as budget_lib


class DirectedNoiseFactory(ClientPerturbationFactory):
    """Clip at C, then spend B = d (C nu)^2 on the sensitive groups of `groups` only."""

    def __init__(self, clip_norm: float, noise_multiplier: float, groups, inner_factory=None, seed=None):
        if groups is None or not any(groups.sensitive):
            raise ValueError("DirectedNoiseFactory needs parameter groups with at least one transmitter-sensitive group")
        super().__init__(clip_norm, noise_multiplier, groups=groups, inner_factory=inner_factory, seed=seed)

    def dp_event(self):
        return None  # The residual group is released after clipping only (module docstring).

    def aware_variants(self):
        return ("whitened",)  # Noise-free groups exist: whitening is the projection.

    def fixed_sigmas(self):
        return budget_lib.directed_sigmas(self.groups.sizes, self.groups.sensitive, self.budget(self.groups))

    def _client_sigmas(self, extras, clipped_flat, group_ids, groups):
        sigmas = budget_lib.directed_sigmas(groups.sizes, groups.sensitive, self.budget(groups))
        return tf.constant(sigmas)
