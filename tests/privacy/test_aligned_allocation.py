import itertools

import numpy as np
import pytest

from tff_radiomap.privacy import aligned_allocation as aa


def _brute_force(lam, cost, sizes, budget, tradeoff, steps=400):
    """The best allocation of a 3-group problem on a grid of budget shares (numpy reference)."""
    best, best_s = np.inf, None
    shares = np.linspace(0.0, 1.0, steps + 1)[1:-1]
    for a, b in itertools.product(shares, shares):
        if a + b >= 1.0:
            continue
        energy = np.array([a, b, 1.0 - a - b]) * budget
        s = energy / sizes
        value = aa.objective(lam, cost, sizes, s, budget, tradeoff)
        if value < best:
            best, best_s = value, s
    return best, best_s


@pytest.mark.parametrize("tradeoff", [0.0, 0.3, 1.0, 5.0])
def test_closed_form_matches_a_brute_force_search(tradeoff):
    lam = np.array([4.0, 0.5, 0.01])
    cost = np.array([30.0, 2.0, 0.1])
    sizes = np.array([3.0, 5.0, 40.0])
    budget = 2.0
    s = aa.aligned_variances(lam, cost, sizes, budget, tradeoff)
    best, _ = _brute_force(lam, cost, sizes, budget, tradeoff)
    closed = aa.objective(lam, cost, sizes, s, budget, tradeoff)
    assert closed <= best + 1e-9  # No grid point beats the closed form ...
    assert closed >= best - 0.01 * best  # ... and the grid's best is near it.


def test_closed_form_is_a_local_optimum_on_the_budget_plane():
    rng = np.random.default_rng(0)
    lam, cost, sizes = rng.uniform(0.1, 3.0, 6), rng.uniform(0.0, 10.0, 6), rng.integers(1, 50, 6).astype(float)
    budget, tradeoff = 7.0, 0.8
    s = aa.aligned_variances(lam, cost, sizes, budget, tradeoff)
    best = aa.objective(lam, cost, sizes, s, budget, tradeoff)
    for _ in range(200):  # Moves that keep sum d_g s_g = B: energy from one group to another.
        i, j = rng.choice(6, 2, replace=False)
        moved = s.copy()
        e = rng.uniform(-0.05, 0.05) * min(sizes[i] * s[i], sizes[j] * s[j])
        moved[i] += e / sizes[i]
        moved[j] -= e / sizes[j]
        assert aa.objective(lam, cost, sizes, moved, budget, tradeoff) >= best - 1e-12


@pytest.mark.parametrize("tradeoff", [0.0, 1.0, 100.0])
def test_budget_is_spent_to_float_precision(tradeoff):
    rng = np.random.default_rng(1)
    for _ in range(20):
        g = rng.integers(2, 9)
        lam = rng.lognormal(0.0, 3.0, g)
        cost = rng.lognormal(0.0, 3.0, g)
        sizes = rng.integers(1, 100000, g).astype(float)
        budget = float(rng.lognormal(0.0, 5.0))
        s = aa.aligned_variances(lam, cost, sizes, budget, tradeoff)
        assert np.all(s > 0)
        assert np.sum(sizes * s) == pytest.approx(budget, rel=1e-12)


def test_constant_cost_gives_variances_proportional_to_the_root_of_lambda():
    lam = np.array([9.0, 4.0, 1.0, 0.25])
    sizes = np.array([2.0, 3.0, 7.0, 100.0])
    for cost in (np.zeros(4), np.full(4, 3.5)):
        for tradeoff in (0.0, 1.0, 10.0):
            s = aa.aligned_variances(lam, cost, sizes, 10.0, tradeoff)
            np.testing.assert_allclose(s / s[0], np.sqrt(lam) / 3.0, rtol=1e-12)


def test_cost_moves_noise_away_from_where_the_model_learns():
    lam = np.ones(2)
    sizes = np.ones(2)
    s = aa.aligned_variances(lam, np.array([10.0, 0.1]), sizes, 2.0, tradeoff=1.0)
    assert s[0] < 1.0 < s[1]
    # The larger the tradeoff, the further.
    s_more = aa.aligned_variances(lam, np.array([10.0, 0.1]), sizes, 2.0, tradeoff=10.0)
    assert s_more[0] < s[0]


def test_a_group_that_leaks_nothing_gets_no_noise():
    s = aa.aligned_variances(np.array([1.0, 0.0, 0.5]), np.ones(3), np.array([4.0, 10.0, 6.0]), 3.0)
    assert s[1] == 0.0 and np.sum(np.array([4.0, 10.0, 6.0]) * s) == pytest.approx(3.0, rel=1e-12)


def test_uniform_is_the_answer_when_lambda_and_cost_are_flat():
    s = aa.aligned_variances(np.full(3, 2.0), np.full(3, 5.0), np.array([1.0, 10.0, 100.0]), 111.0)
    np.testing.assert_allclose(s, 1.0, rtol=1e-12)
    assert aa.objective(np.full(3, 2.0), np.full(3, 5.0), np.array([1.0, 10.0, 100.0]), s, 111.0, 1.0) == pytest.approx(2.0)


@pytest.mark.parametrize(
    "lam,cost,sizes,budget,tradeoff,message",
    [
        ([1.0], [1.0, 2.0], [1.0], 1.0, 1.0, "equal 1-D shapes"),
        ([-1.0, 1.0], [1.0, 1.0], [1.0, 1.0], 1.0, 1.0, "lambda"),
        ([1.0, np.nan], [1.0, 1.0], [1.0, 1.0], 1.0, 1.0, "lambda"),
        ([0.0, 0.0], [1.0, 1.0], [1.0, 1.0], 1.0, 1.0, "positive variance"),
        ([1.0, 1.0], [1.0, 1.0], [1.0, 1.0], 0.0, 1.0, "budget"),
        ([1.0, 1.0], [1.0, 1.0], [1.0, 1.0], 1.0, -1.0, "tradeoff"),
    ],
)
def test_bad_input_is_named(lam, cost, sizes, budget, tradeoff, message):
    with pytest.raises(ValueError, match=message):
        aa.aligned_variances(np.array(lam), np.array(cost), np.array(sizes), budget, tradeoff)
