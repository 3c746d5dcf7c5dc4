"""Aligned Noise: each client's noise along its own leak, by the closed-form allocation.

Client k's upload is split into the K directions of its own leakage basis V_k (each direction its
own group) and the residual, the orthogonal complement; group g gets N(0, s_g) noise per
direction with the variances of `privacy.aligned_allocation.aligned_variances`:

    s_g = sqrt( lambda_g / (mu' c_g + kappa) ),   sum_g d_g s_g = B = d (C nu)^2,

lambda_g the variance of the client's twin uploads across positions along g, c_g the validation
loss increase per unit noise energy along g, both measured at each refresh on the client's own maps
(`experiments.basis_refresh.BasisRefresher`), mu' from the `tradeoff` and kappa from the budget.
So the noise sits where the client's uploads tell positions apart, away from where the model
learns, and spends exactly Uniform Noise's budget.

The bases and allocations are per owner (`ClientSubspaceNoiseFactory`): client k reads its basis
and its sigmas (`owner_sigma_path`, float32 [K + 1]) from the refresher's folder inside the
computation; the eager path uses the observed owner's.

Privacy claim: between refreshes each owner's upload is a Gaussian mechanism with fixed covariance
(the allocation reads the twin and the broadcast model, never the client's data); its event
(`client_dp_event`) is that of the owner's least-noised direction under the allocation in force
(none if a direction is bare, which the allocation does only where the twin measured no variance
at all), and the run's accountant records each upload's. `dp_event` is the least-noised direction
over every owner.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from tff_radiomap.aggregators.client_subspace_noise import ClientSubspaceNoiseFactory
from tff_radiomap.aggregators.subspace_noise import write_tensor
from tff_radiomap.privacy.groups import SubspaceGroups


def owner_sigma_path(basis_dir: str, owner: int) -> str:
    """Owner `owner`'s sigmas [G] in `basis_dir` (`write_sigmas` layout)."""
    return os.path.join(basis_dir, f"owner{int(owner)}.sigma")


def write_sigmas(path: str, sigmas: np.ndarray) -> None:
    """Writes an owner's sigmas [G] (float32)."""
    write_tensor(path, sigmas)


def read_sigmas(path) -> tf.Tensor:
    return tf.io.parse_tensor(tf.io.read_file(path), tf.float32)


class AlignedNoiseFactory(ClientSubspaceNoiseFactory):
    """Clip at C, then each client's closed-form allocation over its own basis directions and the
    residual. `groups`: K one-direction blocks and the residual."""

    def __init__(
        self, clip_norm: float, noise_multiplier: float, groups: SubspaceGroups, basis_dir: str, map_owners: Mapping[int, int], inner_factory=None, seed=None
    ):
        if not all(size == 1 for size in groups.block_sizes):
            raise ValueError(f"AlignedNoiseFactory allocates per direction: expected blocks of 1 column, got {groups.block_sizes}")
        super().__init__(clip_norm, noise_multiplier, groups, basis_dir, map_owners, share=0.0, inner_factory=inner_factory, seed=seed)
        self._owner_sigmas: dict[int, np.ndarray] = {}
        self._sigma_var = None

    def set_owner_sigmas(self, sigmas: Mapping[int, np.ndarray]) -> None:
        """Every owner's sigmas [K + 1] for the eager path (the clients read their files)."""
        missing = sorted(set(range(self.num_owners)) - set(int(o) for o in sigmas))
        if missing:
            raise ValueError(f"owner sigmas missing for owners {missing}")
        for o, s in sigmas.items():
            s = np.asarray(s, np.float64)
            if s.shape != (self.groups.num_groups,) or not np.all(np.isfinite(s)) or np.any(s < 0):
                raise ValueError(f"owner {o}'s sigmas {s.shape}: expected {self.groups.num_groups} finite non-negative values")
            spent = float(np.sum(self.groups.sizes * s**2))
            if abs(spent - self.budget()) > 1e-4 * self.budget():
                raise ValueError(f"owner {o}'s sigmas spend {spent:.6g}, the budget is {self.budget():.6g}")
        self._owner_sigmas = {int(o): np.asarray(s, np.float32) for o, s in sigmas.items()}
        if self.observed_owner is not None and self.observed_owner in self._owner_bases:
            self.observe_owner(self.observed_owner)

    def observe_owner(self, owner: int) -> int:
        owner = super().observe_owner(owner)
        if owner in self._owner_sigmas:  # A variable: the traced eager paths read it at every call.
            if self._sigma_var is None:
                self._sigma_var = tf.Variable(self._owner_sigmas[owner], trainable=False, name="aligned_sigmas")
            else:
                self._sigma_var.assign(self._owner_sigmas[owner])
        return owner

    def _eager_sigmas(self):
        if self._sigma_var is None:
            raise ValueError("AlignedNoiseFactory: no observed owner with sigmas (set_owner_sigmas, then observe_map)")
        return self._sigma_var

    def sigmas(self) -> np.ndarray:
        if self.observed_owner is None or self.observed_owner not in self._owner_sigmas:
            raise ValueError("AlignedNoiseFactory: no observed owner with sigmas (set_owner_sigmas, then observe_map)")
        return self._owner_sigmas[self.observed_owner]

    def _client_sigmas(self, extras, clipped_flat, group_ids, groups):
        if self._privatizing:
            return self._eager_sigmas()
        return tf.reshape(read_sigmas(self._owner_file(extras, ".sigma")), [groups.num_groups])

    per_client_events = True

    def dp_event(self):
        """The least-noised direction over every owner (None before the first allocation, or if
        some owner leaves a direction bare)."""
        if len(self._owner_sigmas) < self.num_owners:
            return None
        events = [self.client_dp_event(o) for o in self._owner_sigmas]
        return None if any(e is None for e in events) else min(events, key=lambda e: e.noise_multiplier)

    def client_dp_event(self, client: int):
        """Client `client`'s upload under its current allocation: a Gaussian mechanism of its
        least-noised direction, `GaussianDpEvent(min_g s_g^(1/2) / C)` (the clip bounds the update
        in every direction). The allocation moves at every refresh, so the accountant asks for
        each upload's (`experiments.privacy_accounting.record_round`). None before the owner's
        first allocation, or if it leaves a direction bare."""
        sigmas = self._owner_sigmas.get(int(client))
        return None if sigmas is None else self._least_noised_event(sigmas)
