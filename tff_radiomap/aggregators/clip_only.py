"""Clip Only: L2 clipping of every upload at C, no noise (paper 000, Section IV)."""

import numpy as np
import tensorflow as tf

from tff_radiomap.aggregators.client_perturbation import ClientPerturbationFactory


class ClipOnlyFactory(ClientPerturbationFactory):
    """Clips each client update to L2 norm `clip_norm` before upload; adds no noise.

    Its measured `budget` is 0: it spends none of the perturbation budget.
    """

    def __init__(self, clip_norm: float, groups=None, inner_factory=None):
        super().__init__(clip_norm, noise_multiplier=0.0, groups=groups, inner_factory=inner_factory)

    def dp_event(self):
        return None  # No noise: the clipped update is released as it is.

    def aware_variants(self):
        return ()  # No noise: nothing to whiten.

    def fixed_sigmas(self):
        return np.zeros(self.groups.num_groups if self.groups is not None else 1)

    def _client_sigmas(self, extras, clipped_flat, group_ids, groups):
        return tf.zeros([groups.num_groups], tf.float32)
