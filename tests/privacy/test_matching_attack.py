"""The twin-matching attacker's mathematics against numpy references, and its limits: a linear-
Gaussian toy with a closed-form posterior mean, exact recovery without noise when the truth is a
candidate, and the prior mean when the noise drowns the signal."""

import numpy as np
import pytest

from tff_radiomap.privacy import matching_attack as ma
from tff_radiomap.privacy import matching_uploads


def _coordinate_model(d, groups):
    ids = np.random.default_rng(0).integers(0, groups, d).astype(np.int32)
    return ma.NoiseModel(sizes=np.bincount(ids, minlength=groups), group_of_coordinate=ids)


def _subspace_model(d, blocks):
    basis, _ = np.linalg.qr(np.random.default_rng(1).standard_normal((d, sum(blocks))))
    block_of_column = np.repeat(np.arange(len(blocks)), blocks).astype(np.int32)
    return ma.NoiseModel(sizes=np.array(list(blocks) + [d - sum(blocks)]), basis=basis.astype(np.float32), block_of_column=block_of_column)


def test_group_distances_are_the_projectors_squared_norms():
    rng = np.random.default_rng(2)
    f, c = rng.standard_normal((4, 2, 30)).astype(np.float32), rng.standard_normal((5, 2, 30)).astype(np.float32)
    coordinate = _coordinate_model(30, 3)
    d = ma.group_distances(f, c, coordinate)
    for s in range(2):
        for g in range(3):
            mask = coordinate.group_of_coordinate == g
            ref = np.array([[np.sum((f[o, s, mask] - c[q, s, mask]) ** 2) for q in range(5)] for o in range(4)])
            np.testing.assert_allclose(d[s, g], ref, rtol=1e-6, atol=1e-9)
    subspace = _subspace_model(30, (2, 3))
    d = ma.group_distances(f, c, subspace)
    v = subspace.basis.astype(np.float64)
    projectors = [v[:, :2] @ v[:, :2].T, v[:, 2:] @ v[:, 2:].T, np.eye(30) - v @ v.T]
    for s in range(2):
        for g, p in enumerate(projectors):
            ref = np.array([[(f[o, s] - c[q, s]) @ p @ (f[o, s] - c[q, s]) for q in range(5)] for o in range(4)])
            np.testing.assert_allclose(d[s, g], ref, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("model", ["one group", "coordinate groups", "subspace"])
def test_distances_of_several_upload_sets_are_each_sets_own(model):
    # MapDistances takes the observed and the calibration uploads to the candidates in one pass.
    rng = np.random.default_rng(4)
    noise = {"one group": _coordinate_model(40, 1), "coordinate groups": _coordinate_model(40, 3), "subspace": _subspace_model(40, (2, 3))}[model]
    sets = [rng.standard_normal((n, 3, 40)).astype(np.float32) for n in (4, 2)]
    c = rng.standard_normal((6, 3, 40)).astype(np.float32)
    together = ma.group_distances_of(sets, c, noise)
    assert [t.shape for t in together] == [(3, noise.num_groups, 4, 6), (3, noise.num_groups, 2, 6)]
    for f, d in zip(sets, together):
        np.testing.assert_allclose(d, ma.group_distances(f, c, noise), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.sum(d, axis=1), np.sum((f[:, None].astype(np.float64) - c[None]) ** 2, -1).transpose(2, 0, 1), rtol=1e-6)


def test_given_candidate_projections_give_the_distances_computed_here():
    # An update-dependent defense's candidate scales take the candidates' projections on the
    # basis; the distances then reuse them, to the last bit.
    rng = np.random.default_rng(5)
    noise = _subspace_model(40, (2, 3))
    sets = [rng.standard_normal((n, 3, 40)).astype(np.float32) for n in (4, 2)]
    c = rng.standard_normal((6, 3, 40)).astype(np.float32)
    coef = ma.candidate_projections(c, noise)
    assert coef.shape == (6, 3, 5)
    np.testing.assert_allclose(coef, np.einsum("nsd,dk->nsk", c.astype(np.float64), noise.basis.astype(np.float64)), rtol=1e-5, atol=1e-5)
    for given, computed in zip(ma.group_distances_of(sets, c, noise, coef), ma.group_distances_of(sets, c, noise)):
        np.testing.assert_array_equal(given, computed)


def test_log_likelihood_is_the_gaussian_density_with_the_defense_covariance():
    # Sigma = sum_g sigma_g^2 P_g, a per-candidate sigma (the update-dependent allocator): the
    # differences of the log density between candidates are those of scipy's.
    from scipy import stats

    rng = np.random.default_rng(3)
    subspace = _subspace_model(12, (2,))
    f, c = rng.standard_normal((3, 1, 12)), rng.standard_normal((4, 1, 12))
    sigma2 = rng.uniform(0.2, 2.0, (4, 1, 2))
    ll = ma.log_likelihood(ma.group_distances(f, c, subspace), sigma2, subspace.sizes)
    v = subspace.basis.astype(np.float64)
    for q in range(4):
        cov = sigma2[q, 0, 0] * v @ v.T + sigma2[q, 0, 1] * (np.eye(12) - v @ v.T)
        ref = stats.multivariate_normal(c[q, 0], cov).logpdf(f[:, 0])
        np.testing.assert_allclose(
            ll[:, q] - ll[:, 0],
            ref - stats.multivariate_normal(c[0, 0], sigma2[0, 0, 0] * v @ v.T + sigma2[0, 0, 1] * (np.eye(12) - v @ v.T)).logpdf(f[:, 0]),
            rtol=1e-5,
            atol=1e-6,
        )


def test_posterior_mean_of_a_linear_gaussian_toy_is_the_closed_form():
    # Uploads c(p) = A p, observed f = A p* + N(0, s^2 I), S = 2 steps with independent noise, a flat
    # prior on a grid much finer than the posterior's spread and much wider: the posterior mean is
    # the least-squares solution of both steps, (A^T A)^-1 A^T (f_1 + f_2) / 2.
    rng = np.random.default_rng(4)
    a = rng.standard_normal((40, 2))
    sigma = 5.0  # Posterior sd ~ 0.56: the grid step 0.2 is a third of it.
    axis = np.linspace(-12, 12, 121)
    grid = np.stack(np.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)
    candidates = np.stack([grid @ a.T, grid @ a.T], axis=1)
    truth = rng.uniform(-3, 3, (6, 2))
    observed = np.stack([truth @ a.T + sigma * rng.standard_normal((6, 40)) for _ in range(2)], axis=1)
    noise = ma.NoiseModel(sizes=np.array([40]), group_of_coordinate=np.zeros(40, np.int32))
    ll = ma.log_likelihood(ma.group_distances(observed, candidates, noise), np.full((len(grid), 2, 1), sigma**2), noise.sizes)
    mean, best = ma.posterior(ll, grid)
    closed = np.linalg.solve(a.T @ a, a.T @ observed.mean(axis=1).T).T
    np.testing.assert_allclose(mean, closed, atol=2e-3)
    assert np.max(np.abs(best - closed)) <= 0.1 + 1e-9  # The MAP: the grid point nearest the mode.


def _toy_maps(rng, noise_sd, cells=12, steps=2, d=24, observed=10, calibration=6, on_grid_calibration=True):
    """A map whose candidates are the cells of a grid and whose clean upload is a fixed random
    function of the cell (the truth's cell is a candidate)."""
    coords = np.stack(np.meshgrid(np.arange(cells), np.arange(cells), indexing="ij"), -1).reshape(-1, 2).astype(np.float64) * 8.0 + 4.0
    table = rng.standard_normal((len(coords), steps, d)).astype(np.float32) * 0.1
    pick = rng.choice(len(coords), observed, replace=False)
    cal = rng.choice(len(coords), calibration, replace=False)

    def draw(idx):
        return table[idx] + noise_sd * rng.standard_normal(table[idx].shape).astype(np.float32)

    noise = ma.NoiseModel(sizes=np.array([d]), group_of_coordinate=np.zeros(d, np.int32))
    halves = [(table[:50], np.full((50, steps, 1), noise_sd)), (table[50:], np.full((len(table) - 50, steps, 1), noise_sd))]  # Two chunks.
    return ma.MapDistances.of(draw(pick), coords[pick], draw(cal), coords[cal] + (0.0 if on_grid_calibration else 1.5), halves, coords, noise)


def test_without_noise_and_the_truth_a_candidate_the_attacker_is_exact():
    rng = np.random.default_rng(5)
    maps = [_toy_maps(rng, 0.0), _toy_maps(rng, 0.0)]
    noise = ma.NoiseModel(sizes=np.array([24]), group_of_coordinate=np.zeros(24, np.int32))
    result = ma.match(maps, noise, np.array([48.0, 48.0]))
    assert result.map_rmse_m == 0.0
    assert result.rmse_m < 1e-6
    assert result.nearest_rmse_m == 0.0
    assert result.observed == 20 and result.candidates == 2 * 144
    assert all(t > 0 for t in result.tempering)  # Noise-free coordinates: tau^2 = 0 is never tried.


def test_with_noise_far_above_the_signal_the_estimate_is_the_prior_mean():
    rng = np.random.default_rng(6)
    maps = [_toy_maps(rng, 100.0, observed=40, on_grid_calibration=False) for _ in range(3)]
    noise = ma.NoiseModel(sizes=np.array([24]), group_of_coordinate=np.zeros(24, np.int32))
    result = ma.match(maps, noise, np.array([48.0, 48.0]))
    prior_mean = maps[0].candidate_coords.mean(0)
    assert maps[0].observed.shape == (2, 1, 40, 144) and maps[0].candidate_sigma.shape == (144, 2, 1)
    truth = np.concatenate([m.observed_coords for m in maps])
    prior_rmse = ma.rmse(np.broadcast_to(prior_mean, truth.shape), truth)
    assert result.rmse_m == pytest.approx(prior_rmse, rel=0.02)
    assert result.ratio < 1.05  # Never worse than the constant guess by more than sampling.


def test_tempering_is_chosen_on_the_calibration_samples():
    rng = np.random.default_rng(7)
    distances = rng.uniform(1.0, 2.0, (1, 1, 5, 9))
    coords = rng.uniform(0, 100, (9, 2))
    truth = rng.uniform(0, 100, (5, 2))
    sigma2 = np.full((9, 1, 1), 0.5)
    tau2, err = ma.choose_tempering(distances, sigma2, np.array([10]), coords, truth)
    grid = ma.tempering_grid(distances, np.array([10]), sigma2)
    assert grid[0] == 0.0 and tau2 in grid  # Every coordinate is noised: tau^2 = 0 is tried.
    errors = [ma.rmse(ma.posterior(ma.log_likelihood(distances, sigma2 + t, np.array([10])), coords)[0], truth) for t in grid]
    assert err == pytest.approx(min(errors))
    # A noise-free group (Directed Uniform off its groups) is covered by tau^2 > 0 only.
    bare = np.concatenate([sigma2, np.zeros((9, 1, 1))], axis=2)
    assert 0.0 not in ma.tempering_grid(np.concatenate([distances, distances], axis=1), np.array([10, 10]), bare)


def test_clip_uploads_scales_to_the_clip_norm():
    u = np.array([[[3.0, 4.0]], [[0.3, 0.4]]], np.float32)
    np.testing.assert_allclose(matching_uploads.clip_uploads(u, 1.0), [[[0.6, 0.8]], [[0.3, 0.4]]], rtol=1e-6)
    assert matching_uploads.clip_uploads(u, None) is u
    # Scaled in float64 and rounded once, as the client's clip; within the clip, the same bits.
    rng = np.random.default_rng(5)
    many = rng.standard_normal((5, 3, 1000)).astype(np.float32) * np.array([0.001, 0.1, 1.0], np.float32)[None, :, None]
    norm = np.linalg.norm(many.astype(np.float64), axis=-1, keepdims=True)
    reference = (many * (1.0 / np.maximum(norm, 1.0))).astype(np.float32)
    clipped = matching_uploads.clip_uploads(many, 1.0)
    assert clipped.dtype == np.float32 and np.array_equal(clipped, reference)
    assert np.array_equal(clipped[:, 0], many[:, 0])
