"""Aligned Noise's allocation: noise where the leak is, away from where the model learns, at one budget.

The observer tells transmitter positions apart by the whitened differences of their clean uploads
(the matching attacker, `matching_attack`). Along a direction i the clean uploads vary across
positions with variance lambda_i (measured on the defender's twin); with noise of variance s_i along
i, the observer's summed discriminability is

    D(s) = sum_g d_g lambda_g / s_g                              (discriminability)

over groups g of d_g directions that share lambda_g and s_g (the blocks of a client's leakage basis,
and the residual). Noise costs the model where it learns: with c_g the loss increase per unit noise
energy along g's directions (`leakage.loss_per_energy`), the utility cost is

    U(s) = sum_g d_g c_g s_g                                     (utility cost)

and every allocation spends the budget of paper 000, sum_g d_g s_g = B = d (C nu)^2 (Eq. (9)).
Minimizing D / D_0 + mu U / U_0 (D_0, U_0: Uniform Noise's, s_g = B / d, so that both terms are
relative to the baseline and mu, the `tradeoff`, is unit-free) under the budget gives, from the
Lagrangian's stationarity -lambda_g / s_g^2 + mu' c_g + kappa = 0 per direction,

    s_g = sqrt( lambda_g / (mu' c_g + kappa) ),  mu' = mu D_0 / U_0,

with kappa the budget's multiplier, set so that the budget is spent exactly (`aligned_variances`;
kappa > -mu' min_g c_g keeps every s_g positive and the spent budget decreases in kappa, so it has
one root). With c constant, s_g is proportional to sqrt(lambda_g); a group with lambda_g = 0 gets no
noise (and the upload no DP guarantee along it: `ClientPerturbationFactory.dp_event`).

Pure numpy (float64): the refresh computes the allocation between rounds, the clients only read it.
"""

from __future__ import annotations

import numpy as np


def _check(lam, cost, sizes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lam, cost, sizes = (np.asarray(a, np.float64) for a in (lam, cost, sizes))
    if not (lam.shape == cost.shape == sizes.shape and lam.ndim == 1 and len(lam)):
        raise ValueError(f"lambda {lam.shape}, cost {cost.shape}, sizes {sizes.shape}: expected three equal 1-D shapes")
    for name, a in (("lambda", lam), ("cost", cost), ("sizes", sizes)):
        if not np.all(np.isfinite(a)) or np.any(a < 0):
            raise ValueError(f"{name}={a}: expected finite non-negative values")
    if not np.any((lam > 0) & (sizes > 0)):
        raise ValueError(f"lambda={lam}: expected a positive variance in at least one non-empty group")
    return lam, cost, sizes


def discriminability(lam, sizes, variances) -> float:
    """D(s) = sum_g d_g lambda_g / s_g over the groups with lambda_g > 0 (inf if such a group has
    no noise)."""
    lam, sizes, s = (np.asarray(a, np.float64) for a in (lam, sizes, variances))
    leak = (lam > 0) & (sizes > 0)
    if np.any(s[leak] <= 0):
        return float("inf")
    return float(np.sum(sizes[leak] * lam[leak] / s[leak]))


def utility_cost(cost, sizes, variances) -> float:
    """U(s) = sum_g d_g c_g s_g."""
    return float(np.sum(np.asarray(sizes, np.float64) * np.asarray(cost, np.float64) * np.asarray(variances, np.float64)))


def objective(lam, cost, sizes, variances, budget: float, tradeoff: float) -> float:
    """D / D_0 + tradeoff * U / U_0, D_0 and U_0 those of the uniform allocation (U / U_0 = 0 when
    U_0 = 0, i.e. c = 0 on every group)."""
    uniform = np.full(len(np.asarray(sizes)), budget / float(np.sum(sizes)))
    u0 = utility_cost(cost, sizes, uniform)
    cost_term = utility_cost(cost, sizes, variances) / u0 if u0 > 0 else 0.0
    return discriminability(lam, sizes, variances) / discriminability(lam, sizes, uniform) + tradeoff * cost_term


def aligned_variances(lam, cost, sizes, budget: float, tradeoff: float = 1.0, rtol: float = 1e-13) -> np.ndarray:
    """[G] noise variances s_g per direction minimizing `objective` with sum_g d_g s_g = budget.

    lam [G]: the clean uploads' variance per direction of group g across positions; cost [G]: loss
    increase per unit noise energy along g; sizes [G]: d_g. Empty groups get 0. Raises ValueError
    for a non-positive budget, a negative tradeoff or no leaking group.
    """
    lam, cost, sizes = _check(lam, cost, sizes)
    if not (np.isfinite(budget) and budget > 0):
        raise ValueError(f"budget={budget}: expected a positive number")
    if not (np.isfinite(tradeoff) and tradeoff >= 0):
        raise ValueError(f"tradeoff={tradeoff}: expected a non-negative number")
    uniform = np.full(len(sizes), budget / float(np.sum(sizes)))
    u0 = utility_cost(cost, sizes, uniform)
    weight = tradeoff * discriminability(lam, sizes, uniform) / u0 if u0 > 0 else 0.0  # mu'
    live = (lam > 0) & (sizes > 0)
    root_lam = np.sqrt(lam[live])
    a = weight * cost[live]  # s_g = sqrt(lambda_g / (a_g + kappa)).

    def spent(kappa):
        return float(np.sum(sizes[live] * root_lam / np.sqrt(a + kappa)))

    if weight == 0.0 or np.all(a == a[0]):  # Constant denominators: s_g = t sqrt(lambda_g), t from the budget.
        t = budget / float(np.sum(sizes[live] * root_lam))
        s_live = t * root_lam
    else:
        kappa = _budget_root(spent, float(-np.min(a)), budget, rtol)
        s_live = root_lam / np.sqrt(a + kappa)
        s_live *= budget / float(np.sum(sizes[live] * s_live))  # The last rounding of the root, onto the budget.
    out = np.zeros(len(sizes))
    out[live] = s_live
    return out


def _budget_root(spent, lower: float, budget: float, rtol: float) -> float:
    """kappa in (lower, inf) with spent(kappa) = budget; spent decreases from +inf (at lower) to 0.
    Bisection on the gap kappa - lower in log space (the root may sit very near lower)."""
    hi = max(abs(lower), 1.0)
    while spent(lower + hi) > budget:
        hi *= 4.0
    lo = hi
    while spent(lower + lo) <= budget:
        lo /= 4.0
    for _ in range(2000):
        mid = np.sqrt(lo * hi)
        if spent(lower + mid) > budget:
            lo = mid
        else:
            hi = mid
        if hi - lo <= rtol * hi:
            break
    return lower + 0.5 * (lo + hi)
