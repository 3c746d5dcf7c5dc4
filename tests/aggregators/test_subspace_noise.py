"""Subspace groups and Subspace Noise against numpy references, and inside a TFF aggregation."""

import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff
from scipy import stats

from tff_radiomap.aggregators import SubspaceNoiseFactory
from tff_radiomap.aggregators.subspace_noise import subspace_sigmas, write_basis
from tff_radiomap.privacy import budget as budget_lib
from tff_radiomap.privacy.groups import SubspaceGroups

SHAPES = [(30, 20), (400,)]
D = 1000
VALUE_TYPE = tff.to_type([tff.TensorType(np.float32, s) for s in SHAPES])


def _basis(k, seed=0):
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(D, k)))
    return q.astype(np.float32)


def _groups(blocks=(30, 10), seed=0):
    return SubspaceGroups(tuple(SHAPES), blocks, basis=_basis(sum(blocks), seed))


def _flat(tensors):
    return np.concatenate([np.asarray(t, np.float64).ravel() for t in tensors])


def _value(scale=0.01):
    rng = np.random.default_rng(5)
    return [(scale * rng.normal(size=s)).astype(np.float32) for s in SHAPES]


def _chi2_ok(sum_sq, dof, sigma):
    stat = sum_sq / sigma**2
    return 2 * min(stats.chi2.cdf(stat, dof), stats.chi2.sf(stat, dof)) > 1e-4


def test_sizes_are_projector_ranks_and_the_budget_identity_holds():
    g = _groups()
    assert list(g.sizes) == [30, 10, D - 40]
    assert g.names == ("leak0", "leak1", "residual") and g.sensitive == (True, True, False)
    for share in (0.0, 0.3, 1.0):
        budget = budget_lib.total_budget(D, 1.0, 0.5)
        sigma = subspace_sigmas(g, budget, share)
        assert float(budget_lib.spent_budget(sigma, g.sizes)) == pytest.approx(budget, rel=1e-5)
        assert float(np.sum(g.sizes[:-1] * sigma[:-1] ** 2)) == pytest.approx(share * budget, rel=1e-5, abs=1e-9)


def test_uniform_share_gives_uniform_sigma():
    g = _groups()
    sigma = subspace_sigmas(g, budget_lib.total_budget(D, 2.0, 0.1), share=40 / D)
    np.testing.assert_allclose(sigma, 0.2, rtol=1e-5)


def test_noise_per_group_has_its_variance_and_full_share_stays_in_the_span():
    g = _groups()
    v = g.basis.astype(np.float64)
    value = _value()
    for share in (0.5, 1.0):
        f = SubspaceNoiseFactory(1.0, 0.05, g, share=share)
        noised, sigma = f.privatize(value, seed=7)
        noise = _flat(noised) - _flat(value)  # The value is inside the clip ball: clipping is the identity.
        coef = v.T @ noise
        for j, cols in enumerate((slice(0, 30), slice(30, 40))):
            assert _chi2_ok(np.sum(coef[cols] ** 2), 30 if j == 0 else 10, float(sigma[j]))
        residual = noise - v @ coef
        if share == 1.0:
            assert float(sigma[-1]) == 0.0
            assert np.max(np.abs(residual)) < 1e-5
        else:
            # (I - V V^T) z: chi-square with d - K degrees of freedom.
            assert _chi2_ok(np.sum(residual**2), D - 40, float(sigma[-1]))


def test_non_orthonormal_basis_is_refused():
    b = _basis(40)
    b[:, 0] *= 1.5
    with pytest.raises(ValueError, match="not orthonormal"):
        SubspaceGroups(tuple(SHAPES), (40,), basis=b)
    with pytest.raises(ValueError, match="shape"):
        SubspaceGroups(tuple(SHAPES), (40,), basis=_basis(39))
    with pytest.raises(ValueError, match="share"):
        SubspaceNoiseFactory(1.0, 1.0, _groups(), share=1.5)


def test_tff_process_reads_the_basis_file_and_matches_privatize(tff_runtime, tmp_path):
    g = _groups()
    path = str(tmp_path / "basis.bin")
    write_basis(path, g.basis)
    value = _value()
    embedded = SubspaceNoiseFactory(1.0, 0.05, g, share=1.0, seed=3)
    from_file = SubspaceNoiseFactory(1.0, 0.05, SubspaceGroups(tuple(SHAPES), (30, 10)), share=1.0, basis_path=path, seed=3)
    outs = []
    for f in (embedded, from_file):
        process = f.create(VALUE_TYPE)
        state = process.initialize()
        out = process.next(state, [value, value])
        outs.append(_flat(out.result))
        m = out.measurements["defense"]
        assert float(m["budget_spent"]) == pytest.approx(float(m["budget"]), rel=1e-5)
    np.testing.assert_allclose(outs[0], outs[1], atol=1e-6)  # Same seed, same V: the same draw.
    noise = outs[1] - _flat(value)
    assert np.linalg.norm(noise) > 0
    v = g.basis.astype(np.float64)
    assert np.max(np.abs(noise - v @ (v.T @ noise))) < 1e-5  # share 1: all of it in span(V).
    # A refreshed file changes the noise's span without rebuilding the process (the server reads
    # it once a round for all the round's clients).
    other = _basis(40, seed=1)
    write_basis(path, other)
    noise = _flat(process.next(state, [value, value]).result) - _flat(value)
    w = other.astype(np.float64)
    assert np.max(np.abs(noise - w @ (w.T @ noise))) < 1e-5


def test_basis_file_is_raw_float32_and_the_earlier_serialized_layout_still_reads(tmp_path):
    from tff_radiomap.aggregators.subspace_noise import read_basis, write_tensor

    v = _basis(40)
    path = str(tmp_path / "basis.bin")
    write_basis(path, v)
    assert os.path.getsize(path) == 4 * v.size  # The values and nothing else.
    np.testing.assert_array_equal(read_basis(path, v.shape).numpy(), v)
    np.testing.assert_array_equal(tf.function(lambda: read_basis(path, v.shape))().numpy(), v)  # Traced, as the clients read it.
    old = str(tmp_path / "old.bin")
    write_tensor(old, v)  # Runs written before the raw layout.
    np.testing.assert_array_equal(read_basis(old, v.shape).numpy(), v)
    with pytest.raises(tf.errors.InvalidArgumentError):
        read_basis(path, (v.shape[0], v.shape[1] - 1))  # Neither layout of that shape.


@pytest.mark.parametrize("clip_norm", [0.5, 1.0, 2.5])
@pytest.mark.parametrize("share", [0.1, 0.9])
def test_subspace_epsilon_is_the_least_noised_direction_in_units_of_the_clip(clip_norm, share):
    # One upload clipped at C with noise sigma_s on span(V) (K directions) and sigma_r on the rest:
    # a Gaussian mechanism of noise multiplier min(sigma_s, sigma_r) / C. With B = d (C nu)^2,
    # sigma_s / C = nu sqrt(share d / K) and sigma_r / C = nu sqrt((1 - share) d / (d - K)): not C's.
    nu, groups = 2.0, _groups()
    k = int(np.sum(groups.sizes[:-1]))
    factory = SubspaceNoiseFactory(clip_norm, nu, groups, share=share)
    expected = nu * min(np.sqrt(share * D / k), np.sqrt((1 - share) * D / (D - k)))
    assert factory.dp_event().noise_multiplier == pytest.approx(expected, rel=1e-5)
