"""Subspace Noise with each client's own basis, and Aligned Noise: keyed uploads inside a TFF
aggregation, each client's noise in its own basis, the observer's eager path per map."""

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_radiomap.aggregators import AlignedNoiseFactory, ClientSubspaceNoiseFactory, keyed
from tff_radiomap.aggregators.aligned_noise import owner_sigma_path, write_sigmas
from tff_radiomap.aggregators.client_subspace_noise import owner_basis_path
from tff_radiomap.aggregators.subspace_noise import write_basis
from tff_radiomap.privacy import budget as budget_lib
from tff_radiomap.privacy.groups import SubspaceGroups

SHAPES = [(30, 20), (400,)]
D = 1000
K = 6
UPDATE_TYPE = tff.to_type([tff.TensorType(np.float32, s) for s in SHAPES])
MAP_OWNERS = {10: 0, 11: 0, 12: 1, 13: 2}  # Clients 0 and 1; map 13 is held by no client (owner 2).


def _bases():
    rng = np.random.default_rng(0)
    return {o: np.linalg.qr(rng.normal(size=(D, K)))[0].astype(np.float32) for o in range(3)}


def _value(scale=0.01):
    rng = np.random.default_rng(5)
    return [(scale * rng.normal(size=s)).astype(np.float32) for s in SHAPES]


def _flat(tensors):
    return np.concatenate([np.asarray(t, np.float64).ravel() for t in tensors])


def _outside(noise, basis):
    v = basis.astype(np.float64)
    return np.linalg.norm(noise - v @ (v.T @ noise)) / np.linalg.norm(noise)


@pytest.fixture
def basis_dir(tmp_path):
    for o, v in _bases().items():
        write_basis(owner_basis_path(str(tmp_path), o), v)
    return str(tmp_path)


def _client_factory(basis_dir, share=1.0):
    return ClientSubspaceNoiseFactory(1.0, 0.05, SubspaceGroups(tuple(SHAPES), (K,)), basis_dir, MAP_OWNERS, share=share, seed=3)


def test_each_client_noises_in_its_own_basis_inside_tff(tff_runtime, basis_dir):
    factory = _client_factory(basis_dir)
    process = factory.create(keyed.keyed_type(UPDATE_TYPE))
    value, bases = _value(), _bases()
    for client in (0, 1):
        out = process.next(process.initialize(), [keyed.keyed_value(value, np.int32(client))])
        noise = _flat(out.result) - _flat(value)
        assert _outside(noise, bases[client]) < 1e-4  # share 1: all of it in the client's own span ...
        assert _outside(noise, bases[1 - client]) > 0.9  # ... none of it in the other client's.
        m = out.measurements["defense"]
        assert float(m["budget_spent"]) == pytest.approx(float(m["budget"]), rel=1e-5)


def test_a_keyed_factory_refuses_plain_uploads(basis_dir):
    with pytest.raises(TypeError, match="keyed factory aggregates values <update=..., client=int32>"):
        _client_factory(basis_dir).create(UPDATE_TYPE)


def test_the_observer_privatizes_as_the_holder_of_the_map(basis_dir):
    factory = _client_factory(basis_dir)
    bases = _bases()
    factory.set_owner_bases(bases)
    value = tf.constant(np.tile(_flat(_value()).astype(np.float32), (4, 1)))
    for map_id, owner in MAP_OWNERS.items():
        assert factory.observe_map(map_id) == owner
        noised, _ = factory.privatize_batch(value, tf.constant([[1, i] for i in range(4)], tf.int64))
        noise = (noised - value).numpy().astype(np.float64)
        assert max(_outside(n, bases[owner]) for n in noise) < 1e-4
    with pytest.raises(KeyError, match="map 99 has no owner"):
        factory.observe_map(99)
    with pytest.raises(ValueError, match="owner bases missing for owners \\[2\\]"):
        factory.set_owner_bases({0: bases[0], 1: bases[1]})


def _aligned_sigmas(budget, seed):
    """K + 1 sigmas spending `budget` (the residual has D - K coordinates)."""
    rng = np.random.default_rng(seed)
    s = rng.uniform(0.5, 2.0, K + 1)
    sizes = np.array([1] * K + [D - K], np.float64)
    return np.sqrt(s * budget / np.sum(sizes * s))


def test_aligned_clients_read_their_own_sigmas(tff_runtime, basis_dir):
    groups = SubspaceGroups(tuple(SHAPES), (1,) * K)
    factory = AlignedNoiseFactory(1.0, 0.05, groups, basis_dir, MAP_OWNERS, seed=3)
    budget = budget_lib.total_budget(D, 1.0, 0.05)
    sigmas = {o: _aligned_sigmas(budget, o) for o in range(3)}
    for o, s in sigmas.items():
        write_sigmas(owner_sigma_path(basis_dir, o), s)
    process = factory.create(keyed.keyed_type(UPDATE_TYPE))
    for client in (0, 1):
        out = process.next(process.initialize(), [keyed.keyed_value(_value(), np.int32(client))])
        m = out.measurements["defense"]
        np.testing.assert_allclose(m["sigma"], sigmas[client], rtol=1e-6)
        assert float(m["budget_spent"]) == pytest.approx(budget, rel=1e-5)
    # The observer's view, and the claim: the least-noised direction over every owner.
    assert factory.dp_event() is None  # No allocation set yet.
    factory.set_owner_sigmas(sigmas)
    factory.set_owner_bases(_bases())
    factory.observe_map(12)
    np.testing.assert_allclose(factory.sigmas(), sigmas[1], rtol=1e-6)
    least = min(float(np.min(s)) for s in sigmas.values())
    assert factory.dp_event() == dp_accounting.GaussianDpEvent(pytest.approx(least, rel=1e-6))
    # Each client's own upload: its own least-noised direction under the allocation in force.
    assert factory.per_client_events
    for o, s in sigmas.items():
        assert factory.client_dp_event(o) == dp_accounting.GaussianDpEvent(pytest.approx(float(np.min(s)), rel=1e-6))
    assert len({factory.client_dp_event(o).noise_multiplier for o in sigmas}) == 3
    assert factory.client_dp_event(99) is None  # No allocation for it.
    bad = {**sigmas, 2: sigmas[2] * 1.1}
    with pytest.raises(ValueError, match="owner 2's sigmas spend"):
        factory.set_owner_sigmas(bad)


def test_aligned_eager_sigmas_follow_the_observed_map(basis_dir):
    """The traced batched path reads the observed owner's sigmas at every call, not at tracing."""
    groups = SubspaceGroups(tuple(SHAPES), (1,) * K)
    factory = AlignedNoiseFactory(1.0, 0.05, groups, basis_dir, MAP_OWNERS, seed=3)
    budget = budget_lib.total_budget(D, 1.0, 0.05)
    sigmas = {o: _aligned_sigmas(budget, o) for o in range(3)}
    factory.set_owner_sigmas(sigmas)
    factory.set_owner_bases(_bases())
    traced = tf.function(lambda rows: factory.privatize_batch(rows)[1])
    rows = tf.zeros([2, D])
    for map_id in (10, 12, 13):
        factory.observe_map(map_id)
        np.testing.assert_allclose(traced(rows).numpy(), sigmas[MAP_OWNERS[map_id]], rtol=1e-6)


def test_aligned_needs_one_direction_blocks(basis_dir):
    with pytest.raises(ValueError, match="blocks of 1 column"):
        AlignedNoiseFactory(1.0, 0.05, SubspaceGroups(tuple(SHAPES), (K,)), basis_dir, MAP_OWNERS)


@pytest.mark.parametrize("clip_norm", [0.5, 1.0, 2.5])
def test_aligned_epsilon_is_the_least_noised_direction_in_units_of_the_clip(basis_dir, clip_norm):
    # Eq.: an upload clipped at C with noise sigma_g on direction g is a Gaussian mechanism of noise
    # multiplier min_g sigma_g / C. The allocations below are one allocation scaled with C (each
    # spends B = d (C nu)^2), so the multiplier, hence epsilon, must not depend on C.
    nu = 0.05
    factory = AlignedNoiseFactory(clip_norm, nu, SubspaceGroups(tuple(SHAPES), (1,) * K), basis_dir, MAP_OWNERS, seed=3)
    unit = {o: _aligned_sigmas(budget_lib.total_budget(D, 1.0, nu), o) for o in range(3)}  # At C = 1.
    factory.set_owner_sigmas({o: clip_norm * s for o, s in unit.items()})
    for o, s in unit.items():
        assert factory.client_dp_event(o).noise_multiplier == pytest.approx(float(np.min(s)), rel=1e-5)
    assert factory.dp_event().noise_multiplier == pytest.approx(min(float(np.min(s)) for s in unit.values()), rel=1e-5)


@pytest.mark.parametrize("clip_norm", [0.5, 1.0, 2.5])
def test_client_subspace_epsilon_does_not_depend_on_the_clip(basis_dir, clip_norm):
    nu, share = 0.05, 0.25
    factory = ClientSubspaceNoiseFactory(clip_norm, nu, SubspaceGroups(tuple(SHAPES), (K,)), basis_dir, MAP_OWNERS, share=share, seed=3)
    # sigma_s = sqrt(share B / K), sigma_r = sqrt((1 - share) B / (d - K)) with B = d (C nu)^2: over C,
    # nu sqrt(share d / K) and nu sqrt((1 - share) d / (d - K)).
    expected = nu * min(np.sqrt(share * D / K), np.sqrt((1 - share) * D / (D - K)))
    assert factory.dp_event().noise_multiplier == pytest.approx(expected, rel=1e-5)
