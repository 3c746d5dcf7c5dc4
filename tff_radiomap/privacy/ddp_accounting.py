"""Privacy accounting for TFF's distributed DP with secure aggregation (`DistributedDpSumFactory`).

TFF 0.87's `tensorflow_federated/python/aggregators/distributed_dp.py` has each client clip its
(rotated) update to L2 norm C, multiply it by a scale s = 1/gamma, stochastically round it to the
integer grid, add a local share of discrete noise, wrap it modulo 2^bits and secure-sum it. Its
queries report `UnsupportedDpEvent`; this module gives each round an RDP curve and composes rounds.

Mechanisms, in integer units (after scaling and rounding), for one coordinate-wise noise of central
variance mu = n * sigma_local^2 (the sum of the n clients' shares):
- Distributed Skellam (Agarwal, Kairouz, Liu, "The Skellam Mechanism for Differentially Private
  Federated Learning", NeurIPS 2021, the multi-dimensional Skellam RDP bound). The sum of Skellam
  shares is Skellam of variance mu, so n plays no part:
      eps(a) = a D2^2 / (2 mu) + min(((2a - 1) D2^2 + 6 D1) / (4 mu^2), 3 D1 / (2 mu)).
- Distributed discrete Gaussian (Kairouz, Liu, Steinke, "The Distributed Discrete Gaussian
  Mechanism for Federated Learning with Secure Aggregation", ICML 2021, Theorem 1 / Proposition 14),
  n shares N_Z(0, sigma^2) each, sigma >= 1/2, in d dimensions; the sum is not a discrete Gaussian
  and tau measures how far it is from one:
      tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 sigma^2 k / (k + 1)),
      eps(a) = min(a D2^2 / (2 mu) + tau d,
                   a/2 (D2^2 / mu + 2 D1 tau / sqrt(mu) + tau^2 d),
                   a/2 (D2 / sqrt(mu) + tau sqrt(d))^2).
D1, D2 are the L1 and L2 sensitivities of one client's scaled-and-rounded vector. The formulas are
those of google-research/federated `distributed_dp/accounting_utils.py` (`_skellam_rdp`,
`compute_rdp_dgaussian`), written here in integer units. Like that code (which floors every order)
we use integer orders only: the Skellam bound is quoted for integer a > 1, and a grid of fewer
orders can only raise epsilon.
Epsilon at delta comes from dp_accounting's RDP conversion (`rdp_privacy_accountant.compute_epsilon`,
Proposition 12 of Canonne, Kamath, Steinke 2020).

`tff_ddp_calibration` reproduces what `DistributedDpSumFactory.create` sets (fixed clip only):
local stddev z C / sqrt(n), the scale of `_heuristic_scale_factor` capped at 1e6, the L2 bound
inflated by rounding (`discretization.inflated_l2_norm_bound`) plus TFF's 1e-5 leeway, times s,
and D1 = ceil(D2 min(sqrt(d), D2)); d is the padded dimension ('hd': next power of 2, 'dft': even).
Here z (`noise_multiplier`) is central stddev / C with C the clip *before* rounding, so the
effective Gaussian multiplier of a round is z C s / D2, slightly below z.

Neighbouring relation: add/remove one client, as TFF and TF-Privacy count it: the two rounds differ
in one client's clipped update being in the sum or not (its vector zeroed), the noise being the sum
of the expected n shares in both; sensitivities D1, D2 of one update. `DdpRdpAccountant` built with
`NeighboringRelation.REPLACE_ONE` doubles them.

What epsilon guarantees, against whom: the server (and whoever sees what it sees, the released
models included: they are post-processing) sees only the secure sum modulo 2^bits of the noisy
integer vectors, never one upload. Against it each client's participation in a round is
(eps, delta)-DP as above; a client's user-level guarantee composes the rounds it took part in,
with no amplification by sampling (the server knows who took part): `per_client_epsilon`.
Assumptions: the other clients add their shares honestly and do not collude with the server
(t colluders who reveal their shares leave variance (n - t) mu / n), the round has the n expected
shares (with m < n clients pass `participants=m`), and secure aggregation is real: TFF's test
context replaces it by a plain sum, under which an observer sees each upload, protected only by its
own share mu / n. Adaptive clipping (`auto_l2_clip`) is not covered.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Mapping, Sequence

import dp_accounting
import numpy as np
from scipy import special

MECHANISMS = ("distributed_skellam", "distributed_dgauss")
ROTATIONS = ("dft", "hd")
MAX_SCALE_FACTOR = 1e6  # distributed_dp.MAX_SCALE_FACTOR in TFF 0.87.
NORM_LEEWAY = 1e-5  # Added by TFF to the inflated L2 bound before scaling.
DDP_ORDERS = tuple(range(2, 257)) + (320, 384, 448, 512, 768, 1024)

NeighborRel = dp_accounting.NeighboringRelation


def _integer_orders(orders) -> np.ndarray:
    a = np.asarray(orders, dtype=np.float64)
    if a.ndim != 1 or a.size == 0 or np.any(a < 2) or np.any(a != np.round(a)):
        raise ValueError(f"orders={orders!r}: expected integer RDP orders >= 2 (the bounds are stated for integer orders)")
    return a


def skellam_rdp(orders, l1_sensitivity: float, l2_sensitivity: float, variance: float) -> np.ndarray:
    """RDP at `orders` of one release of an integer vector plus Skellam noise of total variance
    `variance` per coordinate (Agarwal et al. 2021); D1, D2 in the same integer units."""
    a = _integer_orders(orders)
    if variance <= 0:
        return np.full_like(a, np.inf)
    d1, d2sq, mu = float(l1_sensitivity), float(l2_sensitivity) ** 2, float(variance)
    correction = np.minimum(((2 * a - 1) * d2sq + 6 * d1) / (4 * mu**2), 3 * d1 / (2 * mu))
    return a * d2sq / (2 * mu) + correction


def dgauss_tau(local_variance: float, num_clients: int) -> float:
    """KLS21's tau: how far the sum of `num_clients` N_Z(0, local_variance) is from a discrete Gaussian."""
    k = np.arange(1, num_clients, dtype=np.float64)
    return float(10 * np.sum(np.exp(-2 * math.pi**2 * local_variance * k / (k + 1))))


def distributed_dgauss_rdp(orders, l1_sensitivity: float, l2_sensitivity: float, variance: float, num_clients: int, dim: int) -> np.ndarray:
    """RDP at `orders` of the sum of `num_clients` discrete Gaussian shares, each N_Z(0, variance /
    num_clients) per coordinate in `dim` coordinates (Kairouz et al. 2021, Proposition 14)."""
    a = _integer_orders(orders)
    if variance <= 0:
        return np.full_like(a, np.inf)
    local_variance = variance / num_clients
    if local_variance < 0.25:
        raise ValueError(f"local variance {local_variance} = {variance} / {num_clients}: the bound needs sigma >= 1/2, i.e. >= 0.25")
    tau = dgauss_tau(local_variance, num_clients)
    l2_ratio_sq = float(l2_sensitivity) ** 2 / variance  # D2^2 / (n sigma^2)
    l1_ratio = float(l1_sensitivity) / math.sqrt(variance)
    term_1 = a / 2 * l2_ratio_sq + tau * dim
    term_2 = a / 2 * (l2_ratio_sq + 2 * l1_ratio * tau + tau**2 * dim)
    term_3 = a / 2 * (math.sqrt(l2_ratio_sq) + tau * math.sqrt(dim)) ** 2
    return np.minimum(np.minimum(term_1, term_2), term_3)


@dataclasses.dataclass(frozen=True)
class DistributedDpEvent(dp_accounting.DpEvent):
    """One round of a distributed DP sum, in integer units: a `DpEvent` that `DdpRdpAccountant`
    composes (alone, self-composed, or with dp_accounting's own events).

    `variance` is the central (summed) noise variance per coordinate, for the discrete Gaussian
    `num_clients` times the square of each share's sigma; `dim` the (padded) dimension.
    """

    mechanism: str
    l1_sensitivity: float
    l2_sensitivity: float
    variance: float
    num_clients: int
    dim: int

    def __post_init__(self):
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"mechanism={self.mechanism!r}: expected one of {MECHANISMS}")
        if self.num_clients < 1 or self.dim < 1 or self.variance < 0 or self.l2_sensitivity < 0 or self.l1_sensitivity < 0:
            raise ValueError(f"{self}: expected num_clients, dim >= 1 and nonnegative variance and sensitivities")

    def rdp(self, orders=DDP_ORDERS, sensitivity_factor: float = 1.0) -> np.ndarray:
        """The round's RDP curve; `sensitivity_factor=2` for replace-one neighbours."""
        l1, l2 = sensitivity_factor * self.l1_sensitivity, sensitivity_factor * self.l2_sensitivity
        if self.mechanism == "distributed_skellam":
            return skellam_rdp(orders, l1, l2, self.variance)
        return distributed_dgauss_rdp(orders, l1, l2, self.variance, self.num_clients, self.dim)

    def epsilon(self, rounds: int, delta: float, orders=DDP_ORDERS) -> float:
        """Epsilon at `delta` of `rounds` rounds (no sampling amplification)."""
        if rounds == 0:
            return 0.0
        return DdpRdpAccountant(orders).compose(self, rounds).get_epsilon(delta)


class DdpRdpAccountant(dp_accounting.rdp.RdpAccountant):
    """dp_accounting's RDP accountant that also composes `DistributedDpEvent`s (integer orders)."""

    def __init__(self, orders: Sequence[float] = DDP_ORDERS, neighboring_relation: NeighborRel = NeighborRel.ADD_OR_REMOVE_ONE):
        super().__init__(list(orders), neighboring_relation)

    def _maybe_compose(self, event, count, do_compose):
        if not isinstance(event, DistributedDpEvent):
            return super()._maybe_compose(event, count, do_compose)
        if self.neighboring_relation not in (NeighborRel.ADD_OR_REMOVE_ONE, NeighborRel.REPLACE_ONE):
            return self.CompositionErrorDetails(
                invalid_event=event, error_message=f"neighboring_relation {self.neighboring_relation} is not supported for DistributedDpEvent"
            )
        if do_compose:
            factor = 2.0 if self.neighboring_relation is NeighborRel.REPLACE_ONE else 1.0
            self._rdp += count * event.rdp(self._orders, factor)
        return None


def per_client_epsilon(event: dp_accounting.DpEvent, rounds_by_client: Mapping[Hashable, int], delta: float, orders=DDP_ORDERS) -> dict:
    """User-level epsilon of each client: the composition of the `rounds_by_client[k]` rounds client
    k took part in (all under `event`), without sampling amplification."""
    cache: dict[int, float] = {}
    for rounds in set(rounds_by_client.values()):
        cache[rounds] = 0.0 if rounds == 0 else DdpRdpAccountant(orders).compose(event, int(rounds)).get_epsilon(delta)
    return {k: cache[r] for k, r in rounds_by_client.items()}


@dataclasses.dataclass(frozen=True)
class TffDdpCalibration:
    """What `DistributedDpSumFactory.create` sets for a value of `dim` coordinates (fixed clip).

    `scale` = 1/gamma; `inflated_l2_clip` the rounded vector's L2 bound before scaling (leeway not
    included); `local_stddev` the scaled local noise stddev given to the DP query (the discrete
    Gaussian sampler rounds it up to an integer sigma); `event` one round, in integer units.
    """

    padded_dim: int
    k_stddevs: float
    scale: float
    inflated_l2_clip: float
    local_stddev: float
    event: DistributedDpEvent

    def rdp(self, orders=DDP_ORDERS) -> np.ndarray:
        return self.event.rdp(orders)

    def epsilon(self, rounds: int, delta: float, orders=DDP_ORDERS) -> float:
        return self.event.epsilon(rounds, delta, orders)


def padded_dim(dim: int, rotation_type: str) -> int:
    """The dimension after TFF's rotation: 'hd' pads to a power of 2, 'dft' to an even number."""
    dim = max(1, int(dim))
    if rotation_type == "hd":
        return 2 ** math.ceil(math.log2(dim))
    if rotation_type == "dft":
        return math.ceil(dim / 2) * 2
    raise ValueError(f"rotation_type={rotation_type!r}: expected one of {ROTATIONS}")


def inflated_l2_norm_bound(l2_clip: float, gamma: float, beta: float, dim: int) -> float:
    """L2 bound of a vector of norm <= l2_clip after (conditional, beta > 0) stochastic rounding to
    the grid gamma Z^dim (KLS21 Theorem 1 / Sec. 4.1; TFF's `discretization.inflated_l2_norm_bound`)."""
    bound = l2_clip + gamma * math.sqrt(dim)
    if beta > 0:
        spread = gamma * math.sqrt(dim)
        squared = l2_clip**2 + 0.25 * spread**2 + math.sqrt(2 * math.log(1 / beta)) * gamma * (l2_clip + 0.5 * spread)
        bound = min(bound, math.sqrt(squared))
    return bound


def tff_ddp_calibration(
    noise_multiplier: float,
    expected_clients_per_round: int,
    bits: int,
    l2_clip: float,
    dim: int,
    *,
    modclip_prob: float = 1e-4,
    beta: float = 0.0,
    mechanism: str = "distributed_skellam",
    rotation_type: str = "dft",
    participants: int | None = None,
) -> TffDdpCalibration:
    """TFF 0.87's scale and sensitivities for these `DistributedDpSumFactory` arguments, and the
    round's event; `participants` (default `expected_clients_per_round`) clients add a share."""
    n = int(expected_clients_per_round)
    if mechanism not in MECHANISMS:
        raise ValueError(f"mechanism={mechanism!r}: expected one of {MECHANISMS}")
    if noise_multiplier < 0 or n < 1 or l2_clip <= 0 or not 1 <= bits <= 22 or not 0 < modclip_prob < 1 or not 0 <= beta < 1:
        raise ValueError(
            f"noise_multiplier={noise_multiplier}, expected_clients_per_round={n}, bits={bits}, l2_clip={l2_clip}, "
            f"modclip_prob={modclip_prob}, beta={beta}: expected z >= 0, n >= 1, C > 0, 1 <= bits <= 22, 0 < modclip_prob < 1, 0 <= beta < 1"
        )
    k_stddevs = math.sqrt(2) * float(special.erfcinv(modclip_prob))
    if bits < math.log2(n) or 2 ** (2 * bits) < n * k_stddevs**2:
        raise ValueError(f"bits={bits} is too small for {n} clients and modclip_prob={modclip_prob} (TFF refuses it)")
    d = padded_dim(dim, rotation_type)
    local_stddev = noise_multiplier * l2_clip / math.sqrt(n)
    # _heuristic_scale_factor: 2^b = 2k sqrt(C^2 n^2 / d + n (gamma^2 / 4 + sigma^2)) / gamma, solved for 1/gamma.
    scale = math.sqrt(2 ** (2 * bits) - n * k_stddevs**2) / (2 * k_stddevs * math.sqrt(l2_clip**2 * n**2 / d + n * local_stddev**2))
    scale = min(scale, MAX_SCALE_FACTOR)
    inflated = inflated_l2_norm_bound(l2_clip, 1.0 / scale, beta, d)
    l2_sensitivity = (inflated + NORM_LEEWAY) * scale
    l1_sensitivity = math.ceil(l2_sensitivity * min(math.sqrt(d), l2_sensitivity))
    share = local_stddev * scale
    if mechanism == "distributed_dgauss":
        share = math.ceil(share)  # The discrete Gaussian sampler takes an integer sigma, rounded up.
    m = n if participants is None else int(participants)
    event = DistributedDpEvent(mechanism, float(l1_sensitivity), l2_sensitivity, m * share**2, m, d)
    return TffDdpCalibration(d, k_stddevs, scale, inflated, local_stddev * scale, event)
