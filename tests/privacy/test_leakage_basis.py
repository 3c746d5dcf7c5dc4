"""The leakage basis against numpy: per-map principal directions, their orthonormal union."""

import numpy as np
import pytest

from tff_radiomap.privacy import leakage_basis


def _uploads(rng, maps=3, per_map=12, d=200, k_true=2):
    """Uploads whose within-map variation lies in a map-specific k_true-dimensional subspace."""
    u, map_of, spans = [], [], []
    for m in range(maps):
        span = np.linalg.qr(rng.normal(size=(d, k_true)))[0]
        coef = rng.normal(size=(per_map, k_true)) * [5.0, 2.0][:k_true]
        u.append(rng.normal(size=d) + coef @ span.T + 0.01 * rng.normal(size=(per_map, d)))
        map_of += [m] * per_map
        spans.append(span)
    return np.concatenate(u).astype(np.float32), np.array(map_of), spans


def test_basis_spans_each_maps_leak_is_orthonormal_and_ordered():
    rng = np.random.default_rng(0)
    u, map_of, spans = _uploads(rng)
    basis, variance = leakage_basis.leakage_basis(u, map_of, k_per_map=2)
    assert basis.shape == (200, 6)
    np.testing.assert_allclose(basis.T @ basis, np.eye(6), atol=1e-5)
    assert np.all(np.diff(variance) <= 1e-9)
    for span in spans:  # Each map's leak subspace lies in span(V).
        inside = basis.astype(np.float64) @ (basis.T.astype(np.float64) @ span)
        assert np.linalg.norm(inside - span) < 0.05 * np.linalg.norm(span)
    assert leakage_basis.captured_share(u, map_of, basis) > 0.99
    one, _ = leakage_basis.leakage_basis(u, map_of, k_per_map=1)
    assert 0.3 < leakage_basis.captured_share(u, map_of, one) < 0.95


def test_per_map_directions_match_numpy_svd():
    rng = np.random.default_rng(1)
    u = rng.normal(size=(10, 50)).astype(np.float32)
    got = leakage_basis.per_map_directions(u, 3).astype(np.float64)
    _, _, vt = np.linalg.svd(u - u.mean(0), full_matrices=False)
    np.testing.assert_allclose(np.abs(got.T @ vt[:3].T), np.eye(3), atol=1e-4)


def test_bad_inputs_are_named():
    rng = np.random.default_rng(2)
    u, map_of, _ = _uploads(rng, maps=2, per_map=3)
    with pytest.raises(ValueError, match="k_per_map"):
        leakage_basis.leakage_basis(u, map_of, 0)
    with pytest.raises(ValueError, match="map 1"):
        leakage_basis.leakage_basis(u[:4], map_of[:4], 1)
    assert leakage_basis.block_sizes(10, 3) == (4, 3, 3)
    with pytest.raises(ValueError, match="blocks"):
        leakage_basis.block_sizes(3, 4)


def test_a_map_without_variation_is_completed_to_the_full_rank():
    # A dead stage uploads zeros on every sample: its map spans no direction, yet the subspace
    # groups are sized maps * k_per_map, so the basis keeps that many orthonormal columns.
    rng = np.random.default_rng(3)
    u, map_of, spans = _uploads(rng, maps=3, per_map=12)
    u[map_of == 1] = 0.0
    basis, variance = leakage_basis.leakage_basis(u, map_of, k_per_map=2)
    assert basis.shape == (200, 6)
    np.testing.assert_allclose(basis.T @ basis, np.eye(6), atol=1e-5)
    for m in (0, 2):  # The live maps' leaks are still inside.
        inside = basis.astype(np.float64) @ (basis.T.astype(np.float64) @ spans[m])
        assert np.linalg.norm(inside - spans[m]) < 0.05 * np.linalg.norm(spans[m])
    assert np.all(variance[-2:] < 1e-3 * variance[0])  # Only the live maps' small residual variation.
    again, _ = leakage_basis.leakage_basis(u, map_of, k_per_map=2)
    np.testing.assert_array_equal(again, basis)  # The completion is fixed-seed.


def test_owner_basis_takes_each_maps_share_and_splits_the_variance():
    rng = np.random.default_rng(3)
    u, map_of, spans = _uploads(rng, maps=2)
    basis, variance, residual = leakage_basis.owner_basis(u, map_of, rank=4)  # 2 directions from each of 2 maps.
    np.testing.assert_allclose(basis.T @ basis, np.eye(4), atol=1e-5)
    for span in spans:
        inside = basis.astype(np.float64) @ (basis.T.astype(np.float64) @ span)
        assert np.linalg.norm(inside - span) < 0.05 * np.linalg.norm(span)
    centred = np.concatenate([u[map_of == m] - u[map_of == m].mean(0) for m in (0, 1)]).astype(np.float64)
    np.testing.assert_allclose(variance, np.sum((centred @ basis) ** 2, 0) / len(centred), rtol=1e-4)
    total = np.sum(centred**2) / len(centred)
    assert residual == pytest.approx((total - variance.sum()) / (200 - 4), rel=1e-4)
    # One map, one direction of its own: completed to the rank by directions orthogonal to it.
    one = map_of == 0
    basis, variance, _ = leakage_basis.owner_basis(u[one], map_of[one], rank=4, per_map=1)
    np.testing.assert_allclose(basis.T @ basis, np.eye(4), atol=1e-5)
    assert variance[0] > 100 * variance[1:].max()  # The map's strongest direction, then ones that carry none of its leak.


def _householder_reference(u, map_of, k_per_map):
    """The basis by numpy's Householder QR of the per-map directions, rotated to the within-map
    variance order (what `leakage_basis` computes, by another factorization)."""
    maps = np.unique(map_of)
    d_all = np.concatenate([leakage_basis.per_map_directions(u[map_of == m], k_per_map) for m in maps], axis=1).astype(np.float64)
    q = np.linalg.qr(d_all)[0]
    centred = np.concatenate([u[map_of == m] - u[map_of == m].mean(0) for m in maps]).astype(np.float64)
    coef = centred @ q
    eigval, eigvec = np.linalg.eigh(coef.T @ coef)
    order = np.argsort(eigval)[::-1]
    return q @ eigvec[:, order], eigval[order] / len(coef)


@pytest.mark.parametrize("copied", [False, True])
def test_basis_matches_a_householder_reference_whether_or_not_the_maps_share_directions(copied):
    # Against numpy's QR and eigh taken independently; with map 2 a copy of map 0 to 3e-5 too
    # (directions nearly shared: condition number ~9e4). The same columns, up to sign.
    rng = np.random.default_rng(4)
    u, map_of, spans = _uploads(rng, maps=3, per_map=12)
    if copied:
        u[map_of == 2] = u[map_of == 0] + 3e-5 * rng.normal(size=u[map_of == 0].shape).astype(np.float32)
    basis, variance = leakage_basis.leakage_basis(u, map_of, k_per_map=2)
    reference, ref_variance = _householder_reference(u, map_of, 2)
    np.testing.assert_allclose(basis.T @ basis, np.eye(6), atol=1e-5)
    np.testing.assert_allclose(variance, ref_variance, rtol=1e-4, atol=1e-9 * ref_variance[0])
    top = ref_variance > 1e-3 * ref_variance[0]  # Distinct, well-separated variances: columns defined up to sign.
    np.testing.assert_allclose(np.abs(np.sum(basis[:, top] * reference[:, top], axis=0)), 1.0, atol=1e-4)
