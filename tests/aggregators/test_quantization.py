"""Symmetric quantization: error bounds and levels against numpy, byte counts, the TFF factory."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_radiomap.aggregators import SymmetricQuantizationFactory, quantization


def numpy_quantize(x: np.ndarray, bits: int, max_abs: float):
    levels = 2 ** (bits - 1) - 1
    scale = np.float32(max_abs) / np.float32(levels)
    q = np.clip(np.round(x / scale), -levels, levels) if scale > 0 else np.zeros_like(x)
    return q.astype(np.int64), scale


@pytest.mark.parametrize("bits", [2, 4, 8, 12])
@pytest.mark.parametrize("scope", ["tensor", "upload"])
def test_error_at_most_half_a_step_and_levels_in_range(bits, scope):
    rng = np.random.default_rng(bits)
    leaves = [rng.normal(scale=s, size=shape).astype(np.float32) for s, shape in ((1.0, (30, 7)), (1e-3, (50,)))]
    q, scales = quantization.quantize([tf.constant(t) for t in leaves], bits, scope)
    decoded = quantization.dequantize(q, scales)
    global_max = max(np.abs(t).max() for t in leaves)
    levels = 2 ** (bits - 1) - 1
    for t, qi, s, d in zip(leaves, q, scales, decoded):
        max_abs = global_max if scope == "upload" else np.abs(t).max()
        ref_q, ref_s = numpy_quantize(t, bits, max_abs)
        np.testing.assert_allclose(s.numpy(), ref_s, rtol=1e-6)
        np.testing.assert_array_equal(qi.numpy(), ref_q)
        assert np.abs(qi.numpy()).max() <= levels
        assert np.all(np.abs(d.numpy() - t) <= s.numpy() / 2 * (1 + 1e-5))


def test_zero_stays_zero_and_all_zero_tensor_decodes_to_zeros():
    x = tf.constant([0.0, 0.0, 1.0, -0.25])
    np.testing.assert_array_equal(quantization.quantize_dequantize([x], 8)[0].numpy()[:2], [0.0, 0.0])
    np.testing.assert_array_equal(quantization.quantize_dequantize([tf.zeros([5])], 8)[0].numpy(), np.zeros(5))


def test_byte_counts_follow_the_encoding_formula():
    value_type = tff.types.to_type(collections.OrderedDict(a=tff.TensorType(np.float32, [3, 5]), b=tff.TensorType(np.float32, [7])))
    per_tensor = SymmetricQuantizationFactory(bits=5).byte_counts(value_type)
    assert per_tensor["value_bytes"] == -(-22 * 5 // 8)  # ceil(22 * 5 / 8) = 14
    assert per_tensor["scale_bytes"] == 8 and per_tensor["bytes_per_client"] == 14 + 8
    per_upload = SymmetricQuantizationFactory(bits=8, scale_scope="upload").byte_counts(value_type)
    assert per_upload["value_bytes"] == 22 and per_upload["scale_bytes"] == 4


def test_constructor_rejects_bad_arguments():
    with pytest.raises(ValueError, match="bits=1"):
        SymmetricQuantizationFactory(bits=1)
    with pytest.raises(ValueError, match="scale_scope='layer'"):
        SymmetricQuantizationFactory(scale_scope="layer")


def test_factory_averages_what_the_server_decodes(tff_runtime):
    value_type = tff.types.to_type(collections.OrderedDict(w=tff.TensorType(np.float32, [6])))
    rng = np.random.default_rng(3)
    values = [collections.OrderedDict(w=rng.normal(size=6).astype(np.float32)) for _ in range(3)]
    process = SymmetricQuantizationFactory(bits=4).create(value_type, tff.TensorType(np.float32))
    output = process.next(process.initialize(), values, [1.0, 1.0, 2.0])
    decoded = []
    for v in values:
        q, s = numpy_quantize(v["w"], 4, np.abs(v["w"]).max())
        decoded.append(q * s)
    np.testing.assert_allclose(output.result["w"], (decoded[0] + decoded[1] + 2 * decoded[2]) / 4, rtol=1e-5)
    assert output.measurements["wire"]["bytes_per_client"] == 3 + 4
    assert output.measurements["uplink_bytes"] == 3 * 7
