"""Coarse-to-fine candidate search of the matching attacker (`privacy.matching_search`): the prior
weights count the grid's cells, the refinement traces the cells around the likely coarse ones, and
it finds the truth a coarse grid misses, at a fraction of the dense grid's traces."""

import numpy as np
import pytest

from tff_radiomap.privacy import matching_attack as ma
from tff_radiomap.privacy import matching_search as ms


def _grid(n):
    cells = np.stack(np.meshgrid(np.arange(n), np.arange(n), indexing="ij"), -1).reshape(-1, 2)
    return cells, cells.astype(np.float64) * 8.0 + 4.0


def test_cell_counts_split_the_grid_among_the_nearest_candidates():
    cells, coords = _grid(6)
    coarse = np.flatnonzero(np.all(cells % 2 == 0, axis=1))
    counts = ms.cell_counts(coords[coarse], coords)
    assert counts.sum() == 36 and np.all(counts >= 1)
    # Ties go to the first candidate: the corner candidate (0, 0) takes its own cell and three
    # more; the candidates of the far edges (row or column 4) take what lies beyond them too.
    assert counts[0] == 4 and counts[-1] == 4
    np.testing.assert_array_equal(ms.cell_counts(coords, coords), np.ones(36, int))


def test_cells_near_reaches_that_many_cells_in_both_directions():
    cells, _ = _grid(6)
    near = ms.cells_near(cells, np.array([[2, 2]]), 1)
    assert sorted(map(tuple, cells[near])) == [(r, c) for r in (1, 2, 3) for c in (1, 2, 3)]
    assert not ms.cells_near(cells, np.zeros((0, 2), int), 1).any()


def _table_map(rng, n=16, steps=2, d=24, observed=12, calibration=8, noise_sd=0.0):
    """A map of n x n cells whose clean upload varies smoothly with the position (so that a coarse
    candidate is nearer to its neighbours' uploads than to far cells'), observed samples at cells off
    the coarse grid, and `distances_of(index)` as the matching observer's."""
    cells, coords = _grid(n)
    freqs = rng.uniform(0.005, 0.03, (steps, d, 2))  # Radians a meter: 0.04-0.24 a cell.
    phases = rng.uniform(0, 2 * np.pi, (steps, d))
    table = np.sin(np.einsum("pk,sdk->psd", coords, freqs) + phases).astype(np.float32)
    odd = np.flatnonzero(np.any(cells % 2 == 1, axis=1))
    pick = rng.choice(odd, observed, replace=False)
    cal = rng.choice(odd, calibration, replace=False)

    def draw(idx):
        return table[idx] + noise_sd * rng.standard_normal(table[idx].shape).astype(np.float32)

    noise = ma.NoiseModel(sizes=np.array([d]), group_of_coordinate=np.zeros(d, np.int32))
    obs, calib = draw(pick), draw(cal)
    traced = []

    def distances_of(index):
        traced.append(len(index))
        return ma.MapDistances.of(obs, coords[pick], calib, coords[cal], [(table[index], np.full((len(index), steps, 1), noise_sd))], coords[index], noise)

    return cells, coords, noise, distances_of, traced


def test_without_noise_coarse_to_fine_finds_cells_off_the_coarse_grid_exactly():
    rng = np.random.default_rng(3)
    cells, coords, noise, distances_of, traced = _table_map(rng, n=24, observed=10, calibration=6)
    constant = np.array([96.0, 96.0])
    coarse_only = ma.match([distances_of(np.flatnonzero(np.all(cells % 2 == 0, axis=1)))], noise, constant)
    assert coarse_only.map_rmse_m > 4.0  # Every observed cell is off the coarse grid.
    found, index = ms.coarse_to_fine(distances_of, cells, coords, 2, noise.sizes, mass=0.99, per_query=2)
    result = ma.match([found], noise, constant)
    assert result.map_rmse_m == 0.0 and result.rmse_m < 1e-3
    assert len(index) == len(np.unique(index)) < 0.6 * len(cells)  # Fewer traces than the dense grid.
    assert traced[-2:] == [144, len(index) - 144]
    assert np.exp(found.candidate_log_prior).sum() == pytest.approx(len(cells))


def test_with_noise_far_above_the_signal_coarse_to_fine_keeps_the_dense_grids_prior_mean():
    rng = np.random.default_rng(4)
    cells, coords, noise, distances_of, _ = _table_map(rng, noise_sd=1e3, observed=30)
    dense = ma.match([distances_of(np.arange(len(cells)))], noise, np.array([64.0, 64.0]))
    found, _ = ms.coarse_to_fine(distances_of, cells, coords, 2, noise.sizes)
    refined = ma.match([found], noise, np.array([64.0, 64.0]))
    assert refined.rmse_m == pytest.approx(dense.rmse_m, rel=0.02)  # The weighted coarse grid's mean is the dense grid's.


def test_step_one_traces_every_cell_at_once():
    rng = np.random.default_rng(5)
    cells, coords, noise, distances_of, traced = _table_map(rng, n=6, observed=4, calibration=3)
    found, index = ms.coarse_to_fine(distances_of, cells, coords, 1, noise.sizes)
    np.testing.assert_array_equal(index, np.arange(36))
    assert traced == [36] and found.candidate_log_prior is None


def test_likely_candidates_hold_each_samples_posterior_mass():
    rng = np.random.default_rng(6)
    cells, coords, noise, distances_of, _ = _table_map(rng, n=8, observed=5, calibration=4)
    m = distances_of(np.arange(len(cells)))
    likely = ms.likely_candidates(m, noise.sizes, mass=0.99, per_query=4)
    # Noise-free, the truth is a candidate: each sample's posterior sits on its own cell.
    truths = np.concatenate([m.observed_coords, m.calibration_coords])
    expected = np.unique([np.flatnonzero(np.all(coords == t, axis=1))[0] for t in truths])
    np.testing.assert_array_equal(likely, expected)
    assert len(ms.likely_candidates(m, noise.sizes, mass=1.0, per_query=3)) <= 3 * len(truths)
