"""Symmetric uniform quantization of client uploads, as a composable `tff.aggregators` factory.

With b bits and scale s = max|x| / (2^(b-1) - 1) (over one tensor, or over the whole upload),
each value is sent as the integer q = round(x / s) in [-(2^(b-1) - 1), 2^(b-1) - 1] and decoded
as q * s: the error is at most s / 2, half a step, and zero stays exactly zero (so a Top-K
sparse upload stays sparse). An all-zero tensor has s = 0 and decodes to zeros.

Decoding is folded into the client step: the server needs every client's (q, s) to decode
before summing, so the inner factory sees exactly the values the server would reconstruct.

Wire format (exact bytes): the values, bit-packed at b bits, ceil(n * b / 8); one float32 scale
per tensor (4 bytes each) or per upload (4 bytes). Composed under `TopKFactory`, only the K kept
values are sent at b bits (this factory declares its coding through `wire_format`).
Measurements: `wire` (value_bytes, scale_bytes, bytes_per_client for a dense upload),
`uplink_bytes` and `inner`.
"""

from __future__ import annotations

import collections

import tensorflow as tf
import tensorflow_federated as tff

from tff_radiomap.aggregators import encoding, wire

SCALE_SCOPES = ("tensor", "upload")


def max_level(bits: int) -> int:
    """Largest integer level of a symmetric b-bit quantizer: 2^(b-1) - 1."""
    return 2 ** (bits - 1) - 1


def quantize(leaves: list, bits: int, scale_scope: str = "tensor") -> tuple[list, list]:
    """Symmetric b-bit quantization of a list of tensors: (integer levels as int32, scales)."""
    levels = max_level(bits)
    max_abs = [tf.reduce_max(tf.abs(t)) if t.shape.num_elements() else tf.zeros([], t.dtype) for t in leaves]
    if scale_scope == "upload":
        max_abs = [tf.reduce_max(tf.stack(max_abs))] * len(leaves)
    scales = [m / levels for m in max_abs]
    q = [tf.cast(tf.clip_by_value(tf.round(tf.math.divide_no_nan(t, s)), -levels, levels), tf.int32) for t, s in zip(leaves, scales)]
    return q, scales


def dequantize(q: list, scales: list) -> list:
    """Inverse of `quantize`: q * s per tensor."""
    return [tf.cast(qi, s.dtype) * s for qi, s in zip(q, scales)]


def quantize_dequantize(value, bits: int, scale_scope: str = "tensor"):
    """What the server decodes from a client's quantized upload; same structure as `value`."""
    leaves = encoding.flatten(value)
    q, scales = quantize(leaves, bits, scale_scope)
    return encoding.pack_like(value, dequantize(q, scales))


class SymmetricQuantizationFactory(encoding.EncodingStage):
    """Quantizes each client's upload to `bits`-bit symmetric integers before the inner aggregation.

    Args:
      bits: bits per value, 2..16 (default 8).
      scale_scope: 'tensor' (one scale per tensor of the upload) or 'upload' (one scale in all).
      inner_factory: the factory aggregating the decoded values; None: the mean matching the kind
        of `create` (weighted with a weight_type, unweighted without).
    State: the inner factory's state.
    """

    def __init__(self, bits: int = 8, *, scale_scope: str = "tensor", inner_factory=None):
        if not isinstance(bits, int) or not 2 <= bits <= 16:
            raise ValueError(f"bits={bits!r}: expected an integer in 2..16")
        if scale_scope not in SCALE_SCOPES:
            raise ValueError(f"scale_scope={scale_scope!r}: expected one of {SCALE_SCOPES}")
        self._bits, self._scale_scope = bits, scale_scope
        self.inner_factory = encoding.check_inner(inner_factory)

    @property
    def bits(self) -> int:
        return self._bits

    def wire_format(self, value_type) -> wire.WireFormat:
        scales = len(wire.leaf_types(value_type)) if self._scale_scope == "tensor" else 1
        return wire.WireFormat(bits_per_value=self._bits, side_bytes=4 * scales)

    def _client_fn(self, value_type):
        bits, scope = self._bits, self._scale_scope

        @tff.tensorflow.computation(value_type)
        def encode_decode(value):
            return quantize_dequantize(value, bits, scope)

        return encode_decode

    def byte_counts(self, value_type) -> collections.OrderedDict:
        fmt = self.wire_format(value_type)
        counts = collections.OrderedDict(
            value_bytes=wire.packed_bytes(wire.value_count(value_type), self._bits),
            scale_bytes=fmt.side_bytes,
        )
        counts["bytes_per_client"] = counts["value_bytes"] + counts["scale_bytes"]
        return counts
