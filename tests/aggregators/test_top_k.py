"""Top-K: the pure math against numpy, the byte formula, and the factory inside TFF pipelines."""

import collections
import math

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_radiomap.aggregators import SymmetricQuantizationFactory, TopKFactory, top_k, wire
from tff_radiomap.learning import epfl_steps


def numpy_top_k(flat: np.ndarray, k: int) -> np.ndarray:
    """Reference: the k largest |x|, ties by lowest position."""
    order = np.lexsort((np.arange(len(flat)), -np.abs(flat)))
    out = np.zeros_like(flat)
    out[order[:k]] = flat[order[:k]]
    return out


@pytest.mark.parametrize("n,k", [(1, 1), (10, 3), (1000, 50), (1000, 1000)])
def test_top_k_flat_keeps_exactly_the_k_largest_magnitudes(n, k):
    rng = np.random.default_rng(n + k)
    flat = rng.normal(size=n).astype(np.float32)
    flat[rng.choice(n, size=n // 4, replace=False)] = 0.5  # Ties, some at the K-th magnitude.
    got = top_k.top_k_flat(tf.constant(flat), k).numpy()
    np.testing.assert_array_equal(got, numpy_top_k(flat, k))
    assert np.count_nonzero(got) == min(k, np.count_nonzero(flat))


def test_top_k_of_all_zeros_is_all_zeros():
    np.testing.assert_array_equal(top_k.top_k_flat(tf.zeros([7]), 3).numpy(), np.zeros(7))


def test_top_k_of_an_already_sparse_upload_is_itself():
    rng = np.random.default_rng(3)
    flat = rng.normal(size=50).astype(np.float32)
    flat[rng.choice(50, size=47, replace=False)] = 0.0  # 3 nonzero entries, k = 5: T_K keeps them all.
    np.testing.assert_array_equal(top_k.top_k_flat(tf.constant(flat), 5).numpy(), flat)
    dense = rng.normal(size=50).astype(np.float32)
    once = top_k.top_k_flat(tf.constant(dense), 5)
    np.testing.assert_array_equal(top_k.top_k_flat(once, 5).numpy(), numpy_top_k(dense, 5))  # T_K(T_K(u)) = T_K(u).


@pytest.mark.parametrize("shape,k", [((40,), 7), ((3, 40), 7), ((4, 9), 9)])
def test_top_k_split_gives_kept_and_residual_of_each_row(shape, k):
    rng = np.random.default_rng(k)
    u = rng.normal(size=shape).astype(np.float32)
    u.reshape(-1)[rng.choice(u.size, size=u.size // 5, replace=False)] = -0.25  # Ties.
    kept, residual = (t.numpy() for t in top_k.top_k_split(tf.constant(u), k))
    expected = numpy_top_k(u, k) if u.ndim == 1 else np.stack([numpy_top_k(row, k) for row in u])
    np.testing.assert_array_equal(kept, expected)
    np.testing.assert_array_equal(residual, u - expected)
    np.testing.assert_array_equal(kept + residual, u)  # Disjoint supports: exact, entry by entry.


@pytest.mark.parametrize("batch_dims", [0, 1])
def test_concat_and_split_entries_are_inverse(batch_dims):
    rng = np.random.default_rng(4)
    lead = (3,) if batch_dims else ()
    leaves = [tf.constant(rng.normal(size=lead + s).astype(np.float32)) for s in [(2, 3), (4,), (1, 1, 2)]]
    flat = top_k.concat_entries(leaves, batch_dims)
    expected = np.concatenate([t.numpy().reshape(lead + (-1,)) for t in leaves], axis=batch_dims)
    np.testing.assert_array_equal(flat.numpy(), expected)
    for got, want in zip(top_k.split_entries(flat, leaves, batch_dims), leaves):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_top_k_sparsify_ranks_the_whole_structure_and_residual_is_exact():
    rng = np.random.default_rng(0)
    value = collections.OrderedDict(a=rng.normal(size=(4, 5)).astype(np.float32), b=rng.normal(size=(7,)).astype(np.float32))
    sent = top_k.top_k_sparsify(tf.nest.map_structure(tf.constant, value), 6)
    flat = np.concatenate([value["a"].ravel(), value["b"]])
    expected = numpy_top_k(flat, 6)
    np.testing.assert_array_equal(np.concatenate([sent["a"].numpy().ravel(), sent["b"].numpy()]), expected)
    # The package's own residual of the same structure (Algorithm 1's "Cache error", no residual yet):
    # the numpy reference's u - T_K(u), zero where an entry was sent.
    kept, residual = epfl_steps.sparsify_with_error_feedback([tf.constant(v) for v in value.values()], [tf.zeros_like(v) for v in value.values()], 6)
    for key, k_part, e_part in zip(value, kept, residual):
        np.testing.assert_array_equal(k_part.numpy(), sent[key].numpy())
        reference = {"a": expected[:20].reshape(4, 5), "b": expected[20:]}[key]
        np.testing.assert_array_equal(e_part.numpy(), value[key] - reference)
        assert np.all((k_part.numpy() == 0) | (e_part.numpy() == 0))


def test_error_feedback_over_rounds_matches_numpy_and_loses_nothing():
    """Rounds of u = Delta + e, send T_K(u), keep e = u - T_K(u) (Eqs. (9)-(10)): the package's
    residuals equal a numpy loop's, and what was sent plus the last residual is every update."""
    rng = np.random.default_rng(7)
    deltas = [[rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=(5,)).astype(np.float32)] for _ in range(4)]
    error = [tf.zeros((3, 4)), tf.zeros((5,))]
    ref_error = np.zeros(17, np.float32)
    total_sent = np.zeros(17, np.float64)
    for delta in deltas:
        sent, error = epfl_steps.sparsify_with_error_feedback([tf.constant(d) for d in delta], error, k=3)
        u = np.concatenate([d.ravel() for d in delta]) + ref_error
        ref_sent = numpy_top_k(u, 3)
        ref_error = u - ref_sent
        np.testing.assert_array_equal(np.concatenate([t.numpy().ravel() for t in sent]), ref_sent)
        np.testing.assert_array_equal(np.concatenate([t.numpy().ravel() for t in error]), ref_error)
        total_sent += ref_sent
    updates = np.sum([np.concatenate([d.ravel() for d in delta]) for delta in deltas], axis=0, dtype=np.float64)
    np.testing.assert_allclose(total_sent + np.concatenate([t.numpy().ravel() for t in error]), updates, atol=1e-5)


@pytest.mark.parametrize(
    "n,k,expected",
    [
        (10, 3, min(2, math.ceil(3 * 4 / 8))),  # bitmap 2 B, indices 3 x 4 bits = 2 B
        (100_000, 100, math.ceil(100 * 17 / 8)),  # sparse: packed 17-bit indices
        (100_000, 50_000, math.ceil(100_000 / 8)),  # dense: the bitmap is smaller
        (1, 1, 0),
    ],
)
def test_index_bytes_is_the_smaller_encoding(n, k, expected):
    assert top_k.index_bytes(n, k) == expected


def test_num_kept_from_k_or_fraction():
    assert top_k.num_kept(1000, k=10) == 10
    assert top_k.num_kept(1000, k_fraction=0.05) == 50
    assert top_k.num_kept(10, k_fraction=0.001) == 1
    with pytest.raises(ValueError, match="k=2000"):
        top_k.num_kept(1000, k=2000)


def test_constructor_rejects_bad_arguments():
    with pytest.raises(ValueError, match="exactly one"):
        TopKFactory()
    with pytest.raises(ValueError, match="k_fraction=1.5"):
        TopKFactory(k_fraction=1.5)
    with pytest.raises(TypeError, match="inner_factory"):
        TopKFactory(k=1, inner_factory="mean")


VALUE_TYPE = tff.types.to_type(collections.OrderedDict(a=tff.TensorType(np.float32, [2, 3]), b=tff.TensorType(np.float32, [4])))


def _client_values(count, seed=0):
    rng = np.random.default_rng(seed)
    return [collections.OrderedDict(a=rng.normal(size=(2, 3)).astype(np.float32), b=rng.normal(size=(4,)).astype(np.float32)) for _ in range(count)]


def _sparse(value, k):
    flat = numpy_top_k(np.concatenate([value["a"].ravel(), value["b"]]), k)
    return collections.OrderedDict(a=flat[:6].reshape(2, 3), b=flat[6:])


def test_weighted_factory_averages_the_sparse_uploads_and_counts_bytes(tff_runtime):
    process = TopKFactory(k=3).create(VALUE_TYPE, tff.TensorType(np.float32))
    values, weights = _client_values(3), [1.0, 2.0, 3.0]
    output = process.next(process.initialize(), values, weights)
    for key in ("a", "b"):
        expected = sum(w * _sparse(v, 3)[key] for v, w in zip(values, weights)) / sum(weights)
        np.testing.assert_allclose(output.result[key], expected, rtol=1e-6)
    wire_counts = output.measurements["wire"]
    # 10 entries, 3 kept: 2 B of positions (bitmap), 3 float32 values.
    assert wire_counts["index_bytes"] == 2 and wire_counts["value_bytes"] == 12 and wire_counts["side_bytes"] == 0
    assert wire_counts["bytes_per_client"] == 14
    assert output.measurements["uplink_bytes"] == 3 * 14


def test_unweighted_factory_with_a_sum_inside(tff_runtime):
    process = TopKFactory(k_fraction=0.5, inner_factory=tff.aggregators.SumFactory()).create(VALUE_TYPE)
    values = _client_values(2, seed=1)
    output = process.next(process.initialize(), values)
    np.testing.assert_allclose(output.result["b"], sum(_sparse(v, 5)["b"] for v in values), rtol=1e-6)


def test_top_k_around_quantization_counts_packed_values_and_scales(tff_runtime):
    factory = TopKFactory(k=4, inner_factory=SymmetricQuantizationFactory(bits=8))
    counts = factory.byte_counts(VALUE_TYPE)
    # 10 entries, 4 kept: positions min(2, ceil(4 * 4 / 8)) = 2 B; 4 values at 8 bits; 2 scales.
    assert dict(counts) == {"kept": 4, "index_bytes": 2, "value_bytes": 4, "side_bytes": 8, "bytes_per_client": 14}
    process = factory.create(VALUE_TYPE, tff.TensorType(np.float32))
    output = process.next(process.initialize(), _client_values(2), [1.0, 1.0])
    assert output.measurements["wire"]["bytes_per_client"] == 14
    assert output.measurements["inner"]["wire"]["value_bytes"] == wire.packed_bytes(10, 8)


def test_usable_as_model_aggregator_of_build_weighted_fed_avg(tff_runtime):
    def model_fn():
        keras_model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,))])
        return tff.learning.models.from_keras_model(
            keras_model,
            loss=tf.keras.losses.MeanSquaredError(),
            input_spec=collections.OrderedDict(x=tf.TensorSpec([None, 3], tf.float32), y=tf.TensorSpec([None, 2], tf.float32)),
        )

    process = tff.learning.algorithms.build_weighted_fed_avg(
        model_fn,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
        model_aggregator=TopKFactory(k=2, inner_factory=SymmetricQuantizationFactory(bits=8)),
    )
    data = tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=np.ones((4, 3), np.float32), y=np.zeros((4, 2), np.float32))).batch(2)
    state = process.initialize()
    before = [np.asarray(w) for w in process.get_model_weights(state).trainable]
    output = process.next(state, [data, data])
    after = [np.asarray(w) for w in process.get_model_weights(output.state).trainable]
    changed = sum(int(np.count_nonzero(a != b)) for a, b in zip(after, before))
    assert changed == 2  # Both clients' updates have the same top-2 positions: 2 entries move.
    measured = output.metrics["aggregator"]
    assert measured["wire"]["kept"] == 2
