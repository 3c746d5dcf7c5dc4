"""Uniform Noise: clip at C, then N(0, (C nu)^2) on every coordinate of every upload.

The TF-Privacy baseline of paper 000: the client step is TF-Privacy's `GaussianSumQuery` applied
to the single record that is the client's own update (clip with `preprocess_record`, noise with
`get_noised_result`), i.e. a local Gaussian mechanism per upload. Its `DpEvent` is
`GaussianDpEvent(nu)`; `tff_radiomap.privacy.accounting.PerClientAccountant` composes them over
the rounds a client took part in.

Threat model: the noise is on each upload, so it protects against an observer of individual
uploads (the localization attacker of paper 000). For central DP (trusted server, noise on the
sum, protection of the released model only), use `central_gaussian_factory` below, which is TFF's
`DifferentiallyPrivateFactory.gaussian_fixed`.
"""

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp

from tff_radiomap.aggregators.client_perturbation import ClientPerturbationFactory


class UniformNoiseFactory(ClientPerturbationFactory):
    """Per-upload Gaussian mechanism with noise multiplier `noise_multiplier` (sigma = C nu)."""

    def __init__(self, clip_norm: float, noise_multiplier: float = 3.0, groups=None, inner_factory=None, seed=None):
        super().__init__(clip_norm, noise_multiplier, groups=groups, inner_factory=inner_factory, seed=seed)
        self.query = tfp.GaussianSumQuery(l2_norm_clip=self.clip_norm, stddev=self.clip_norm * self.noise_multiplier)

    def dp_event(self) -> dp_accounting.DpEvent:
        """The event of one upload (add/remove-one adjacency of the client's update)."""
        return dp_accounting.GaussianDpEvent(self.noise_multiplier)

    def fixed_sigmas(self):
        groups = self.groups.num_groups if self.groups is not None else 1
        return np.full(groups, self.clip_norm * self.noise_multiplier, np.float64)

    def aware_variants(self):
        return ()  # The same sigma on every coordinate: whitening changes nothing.

    def _clip(self, flat):
        params = self.query.derive_sample_params(self.query.initial_global_state())
        clipped, norm = self.query.preprocess_record_impl(params, flat)
        return clipped, norm

    def _noise(self, shape, sigma, seed):
        if seed is not None:
            return super()._noise(shape, sigma, seed)
        # TF-Privacy's own noise: get_noised_result on a zero sum adds N(0, stddev^2).
        noise, _, _ = self.query.get_noised_result(tf.zeros(shape), self.query.initial_global_state())
        return noise

    def _client_sigmas(self, extras, clipped_flat, group_ids, groups):
        return tf.fill([groups.num_groups], tf.constant(self.clip_norm * self.noise_multiplier, tf.float32))


def central_gaussian_factory(noise_multiplier: float, clients_per_round: int, clip_norm: float):
    """Central DP (TFF's `DifferentiallyPrivateFactory.gaussian_fixed`): clip on clients, noise on
    the server after summation. Protects the released model against a downstream observer; it
    does not protect individual uploads from whoever sees them (the server, an eavesdropper).
    Round events: `tff.aggregators.differential_privacy.extract_dp_event_from_state`.
    """
    return tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(noise_multiplier=noise_multiplier, clients_per_round=clients_per_round, clip=clip_norm)
