"""Scoring a set of estimates per map (`privacy.set_scoring`): one-to-one matching, the fallback of
transmitters without an estimate, the figures, and the prior set."""

import numpy as np
import pytest

from tff_radiomap.privacy import set_scoring


def test_matching_is_one_to_one():
    truth = np.array([[0.0, 0.0], [10.0, 0.0]])
    # Both estimates are nearest to the first transmitter; one to one, the second gets the far one.
    distances = set_scoring.matched_distances(np.array([[1.0, 0.0], [2.0, 0.0]]), truth, fallback=np.array([50.0, 50.0]))
    assert sorted(distances.round(6)) == [1.0, 8.0]
    # The total squared distance is least: (0,0)->(1,0) and (10,0)->(2,0), not (0,0)->(2,0) and (10,0)->(1,0).
    np.testing.assert_allclose(distances, [1.0, 8.0])


def test_transmitters_without_an_estimate_fall_back_to_the_constant_guess_and_extra_estimates_are_dropped():
    truth = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 30.0]])
    fallback = np.array([0.0, 10.0])
    distances = set_scoring.matched_distances(np.array([[10.0, 1.0]]), truth, fallback)
    np.testing.assert_allclose(distances, [10.0, 1.0, 20.0])
    many = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 30.0], [99.0, 99.0]])
    np.testing.assert_allclose(set_scoring.matched_distances(many, truth, fallback), 0.0)
    np.testing.assert_allclose(set_scoring.matched_distances(np.zeros((0, 2)), truth, fallback), [10.0, np.hypot(10, 10), 20.0])


def test_score_sets_pools_maps_and_reads_against_each_maps_constant_guess():
    truth = {1: np.array([[0.0, 0.0], [4.0, 0.0]]), 2: np.array([[100.0, 100.0]])}
    constants = {1: np.array([2.0, 0.0]), 2: np.array([100.0, 120.0])}
    score = set_scoring.score_sets({1: np.array([[0.0, 3.0], [4.0, 0.0]]), 2: np.array([[100.0, 112.0]])}, truth, constants)
    assert score.transmitters == 3
    assert score.rmse_m == pytest.approx(np.sqrt((9 + 0 + 144) / 3))
    assert score.constant_rmse_m == pytest.approx(np.sqrt((4 + 4 + 400) / 3))
    assert score.within_share == pytest.approx(2 / 3) and score.ratio == pytest.approx(score.rmse_m / score.constant_rmse_m)
    assert set_scoring.score_sets({}, truth, constants).ratio == pytest.approx(1.0)  # No estimates: the constant guess.
    both = set_scoring.pooled([score, set_scoring.score_sets({}, truth, constants)])
    assert both.transmitters == 6 and both.rmse_m == pytest.approx(np.sqrt((153 + 408) / 6))


def test_the_prior_set_spreads_its_guesses_over_the_outdoor_cells():
    cells = np.stack(np.meshgrid(np.arange(0.5, 64), np.arange(0.5, 64)), -1).reshape(-1, 2)
    prior = set_scoring.prior_sets(cells, 16, seed=0)
    assert prior.shape == (16, 2) and len(np.unique(prior.round(3), axis=0)) == 16
    rng = np.random.default_rng(1)
    truth = {0: cells[rng.choice(len(cells), 16, replace=False)]}
    constants = {0: set_scoring.constant_guess(cells)}
    # Read nothing, spread the guesses: one-to-one matching scores them well below the constant guess.
    assert set_scoring.score_sets({0: prior}, truth, constants).ratio < 0.7
