"""The proposed adaptive group-wise allocator (paper 000, Eqs. (12)-(19)).

Per upload: s = Psi(clipped update) (Eq. (12)), a = f_eta(s) (Eq. (13)), w = softmax(a) over the
non-empty groups (Eq. (14)), E_g = B w_g (Eq. (15)), sigma_g = sqrt(E_g / d_g) (Eq. (16)), and
N(0, sigma_g^2) on group g. eta lives in the aggregation state (`extras['eta']`) and is broadcast
to clients every round, so the factory runs in any TFF pipeline. Without an `eta`, it starts at
Directed Uniform's allocation when the groups have a non-empty transmitter-sensitive one
(`allocator_net.init_params(init='directed')`: a share of 1e-9 of B on the other groups), else at
Uniform Noise's (`init='proportional'`); `init=` chooses. At nu = 3 Uniform Noise's allocation
destroys a RadioUNet in one round (noise ~400x the update), and an allocator started there
learns from a broken model (at nu = 3 Directed Uniform's allocation also ends at a collapsed
model on the default data; see bench/RESULTS.md). The allocator training of
Eqs. (20)-(21) (`tff_radiomap.privacy.allocator`) replaces eta between rounds with
`client_perturbation.with_extras(state, eta=...)`. The state also holds the round index r (it
advances every round; the summary uses r / total_rounds) and the phase indicator.

Noise floor (beyond the paper): with `sigma_min` > 0 every coordinate gets at least sigma_min, and
the allocation is computed from an already-noised copy, so that the guarantee is real:
  1. y1 = clip(Delta) + N(0, sigma_min^2 I): a Gaussian mechanism with noise multiplier
     sigma_min / C;
  2. s = Psi(y1), w = softmax(f_eta(s)), E_g = d_g sigma_min^2 + (B - d sigma_min^2) w_g;
  3. upload y1 + N(0, (sigma_g^2 - sigma_min^2) I) on group g.
Steps 2-3 only post-process y1, so each upload is (at least) the Gaussian mechanism of step 1 and
`dp_event()` returns it. The total variance per group is still sigma_g^2 and sum_g E_g = B.
Without the floor no epsilon is reported: the noise scales depend on the private update itself
(through Psi), so the upload is not a Gaussian mechanism with a data-independent scale.
"""

from __future__ import annotations

import collections

import dp_accounting
import numpy as np
import tensorflow as tf

from tff_radiomap.aggregators.client_perturbation import ClientPerturbationFactory
from tff_radiomap.privacy import allocator_net
from tff_radiomap.privacy import budget as budget_lib


class AdaptiveGroupNoiseFactory(ClientPerturbationFactory):
    """Clip at C, then split B = d (C nu)^2 over groups by the learned allocator f_eta."""

    def __init__(
        self,
        clip_norm: float,
        noise_multiplier: float,
        groups,
        total_rounds: int = 50,
        phase: int = 0,
        sigma_min: float = 0.0,
        eta=None,
        hidden: int = 16,
        inner_factory=None,
        seed=None,
        init: str | None = None,
    ):
        if groups is None:
            raise ValueError("AdaptiveGroupNoiseFactory needs parameter groups")
        super().__init__(clip_norm, noise_multiplier, groups=groups, inner_factory=inner_factory, seed=seed)
        if total_rounds < 1:
            raise ValueError(f"total_rounds={total_rounds}: expected >= 1")
        if not np.isfinite(sigma_min) or sigma_min < 0:
            raise ValueError(f"sigma_min={sigma_min}: expected a non-negative finite number")
        floor_energy = groups.num_coordinates * sigma_min**2
        if floor_energy > self.budget(groups) * (1 + 1e-6):
            raise ValueError(
                f"sigma_min={sigma_min}: the floor alone spends d sigma_min^2 = {floor_energy:.4g}, more than the budget "
                f"B = d (C nu)^2 = {self.budget(groups):.4g}; expected sigma_min <= C nu = {clip_norm * noise_multiplier}"
            )
        self.total_rounds = int(total_rounds)
        self.phase = int(phase)
        self.sigma_min = float(sigma_min)
        if eta is None:
            has_sensitive = any(s and d > 0 for s, d in zip(groups.sensitive, groups.sizes))
            init = init or ("directed" if has_sensitive else "proportional")
            eta = allocator_net.init_params(groups.num_groups, groups.sizes, hidden, init=init, sensitive=groups.sensitive)
        self.eta = eta

    def dp_event(self) -> dp_accounting.DpEvent | None:
        """Per-upload event guaranteed by the floor; None without one (see module docstring)."""
        if self.sigma_min <= 0:
            return None
        return dp_accounting.GaussianDpEvent(self.sigma_min / self.clip_norm)

    def _initial_extras(self, groups):
        return collections.OrderedDict(
            eta=collections.OrderedDict((k, np.asarray(v, np.float32)) for k, v in self.eta.items()),
            round_index=np.int32(0),
            phase=np.int32(self.phase),
        )

    def _update_extras(self, extras):
        new = collections.OrderedDict(extras)
        new["round_index"] = extras["round_index"] + 1
        return new

    def allocation(self, extras, summary, groups):
        """(weights [G], energy [G], sigma [G]) for a summary vector (Eqs. (13)-(16))."""
        w = budget_lib.masked_softmax(allocator_net.logits(extras["eta"], summary), groups.sizes)
        energy, sigma = budget_lib.allocate(w, self.budget(groups), groups.sizes, self.sigma_min)
        return w, energy, sigma

    def _summary(self, extras, flat, group_ids, groups):
        fraction = tf.minimum(tf.cast(extras["round_index"], tf.float32) / self.total_rounds, 1.0)
        return allocator_net.summary_statistics(flat, group_ids, groups.sizes, self.clip_norm, fraction, extras["phase"])

    def _client_sigmas(self, extras, clipped_flat, group_ids, groups):
        return self.allocation(extras, self._summary(extras, clipped_flat, group_ids, groups), groups)[2]

    def _perturb(self, extras, clipped, group_ids, groups, seeds):
        if self.sigma_min <= 0:
            return super()._perturb(extras, clipped, group_ids, groups, seeds)
        seeds = seeds or [None] * (2 * len(clipped))
        n = len(clipped)
        # 1. The floor: a Gaussian mechanism with noise multiplier sigma_min / C.
        y1 = [c + self._noise(tf.shape(c), tf.constant(self.sigma_min, tf.float32), seeds[i]) for i, c in enumerate(clipped)]
        # 2. Allocation from the noised copy only (post-processing).
        sigma = self.allocation(extras, self._summary(extras, y1, group_ids, groups), groups)[2]
        extra = tf.sqrt(tf.maximum(tf.square(sigma) - self.sigma_min**2, 0.0))
        # 3. The rest of each group's energy.
        noised = [y + self._noise(tf.shape(y), tf.gather(extra, ids), seeds[n + i]) for i, (y, ids) in enumerate(zip(y1, group_ids))]
        return noised, sigma
