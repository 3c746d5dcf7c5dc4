"""Which candidates the matching attacker traces: every grid cell, or coarse to fine.

The matching attacker (`matching_attack`) costs one trace of S local steps per candidate, and a
dense grid is what makes it strong (a grid twice as coarse errs 1.4-2.5x more, bench/RESULTS.md).
But an observed upload's posterior is concentrated where the noise is small against the signal,
so most cells of the dense grid carry none of it. Coarse to fine with step k:

1. trace every k-th cell of the grid in both directions; each stands for the grid cells nearest to
   it (`cell_counts`: its prior weight, so that the posterior is still over the dense grid's cells);
2. for every observed and calibration sample, take the coarse candidates holding its posterior
   (`likely_candidates`, at the tempering chosen on the calibration samples);
3. trace every cell within k - 1 cells of those too; the prior weights are counted again.

Where the posterior is spread (noise far above the signal), the coarse cells' weights keep the
posterior mean that of the dense grid; where it is concentrated, the cells around its mass are
traced. The tempering and the posterior are chosen afresh over the final candidates (`match`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from tff_radiomap.privacy.matching_attack import MapDistances, log_likelihood, posterior_weights

# The refinement's defaults: for each observed and calibration sample, its REFINE_PER_QUERY most
# probable coarse candidates (until they hold REFINE_MASS of its posterior). With step 2 these trace
# 59-71% of the cells and came nearest to every cell's figures of the settings tried
# (bench/matching_coarse.py, bench/RESULTS.md "Coarse to fine").
REFINE_MASS = 1.0
REFINE_PER_QUERY = 8


def likely_candidates(m: MapDistances, sizes: np.ndarray, mass: float, per_query: int) -> np.ndarray:
    """Sorted indices of the candidates that hold an observed or calibration sample's posterior (at
    the tempering chosen on the calibration samples): for each sample its most probable candidates,
    at most `per_query`, until they hold `mass` of its posterior (always its best one)."""
    variances = m.candidate_sigma**2 + m.tempering(sizes)
    chosen = []
    for distances in (m.observed, m.calibration):
        w = posterior_weights(log_likelihood(distances, variances, sizes), m.candidate_log_prior)
        order = np.argsort(-w, axis=1, kind="stable")[:, :per_query]
        held = np.cumsum(np.take_along_axis(w, order, 1), axis=1)
        needed = np.concatenate([np.ones((len(w), 1), bool), held[:, :-1] < mass], axis=1)
        chosen.append(order[needed])
    return np.unique(np.concatenate(chosen))


def cell_counts(coords: np.ndarray, grid_coords: np.ndarray) -> np.ndarray:
    """[N_q] how many of the grid's cells `grid_coords` [N, 2] are nearest to each candidate at
    `coords` [N_q, 2] (a candidate's own cell among them): the prior weight of a candidate that
    stands for the cells around it not traced themselves (ties to the first candidate)."""
    gap = np.sum((np.asarray(grid_coords, np.float64)[:, None, :] - np.asarray(coords, np.float64)[None]) ** 2, axis=2)
    return np.bincount(np.argmin(gap, axis=1), minlength=len(coords))


def cells_near(cells: np.ndarray, centres: np.ndarray, reach: int) -> np.ndarray:
    """[N] whether each grid cell (`cells` [N, 2], integer grid steps) is within `reach` cells of
    one of `centres` [M, 2] in both directions."""
    if len(centres) == 0:
        return np.zeros(len(cells), bool)
    return np.min(np.max(np.abs(cells[:, None, :] - centres[None]), axis=2), axis=1) <= reach


def coarse_to_fine(
    distances_of: Callable[[np.ndarray], MapDistances],
    cells: np.ndarray,
    coords: np.ndarray,
    step: int,
    sizes: np.ndarray,
    mass: float = REFINE_MASS,
    per_query: int = REFINE_PER_QUERY,
) -> tuple[MapDistances, np.ndarray]:
    """(`MapDistances` over the traced candidates, their indices into the grid) of one map's grid of
    cells `cells` [N, 2] (integer grid steps) at positions `coords` [N, 2]; `distances_of(index)`
    traces the candidates `index` and gives their `MapDistances`. `step` 1: every cell at once;
    k > 1: every k-th cell, then the cells within k - 1 of the likely ones (module docstring). A map
    whose coarse grid is empty is traced whole."""
    cells = np.asarray(cells)
    first = np.flatnonzero(np.all(cells % step == 0, axis=1))
    if step == 1 or len(first) == 0:
        index = np.arange(len(cells))
        return distances_of(index), index
    found = distances_of(first)
    found = dataclasses.replace(found, candidate_log_prior=np.log(cell_counts(coords[first], coords)))
    likely = first[likely_candidates(found, sizes, mass, per_query)]
    near = cells_near(cells, cells[likely], step - 1)
    near[first] = False
    index = np.concatenate([first, np.flatnonzero(near)])
    log_prior = np.log(cell_counts(coords[index], coords))
    if len(index) == len(first):
        return dataclasses.replace(found, candidate_log_prior=log_prior), index
    return found.joined(distances_of(index[len(first) :]), log_prior), index
