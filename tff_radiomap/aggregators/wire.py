"""What a client puts on the wire: the per-value coding an encoding factory declares.

A factory that changes how each value of an upload is coded (a quantizer) implements
`wire_format(value_type) -> WireFormat`. An outer stage that decides *which* values are sent (a
sparsifier) asks its inner factory for that format through `wire_format(factory, value_type)`, so
its byte count stays exact whatever the inner coding is. A factory without the method (TFF's
`MeanFactory`, `SumFactory`) sends every value at its dtype's width and nothing else.

Counts cover the model update only (indices, values, scales); the scalar aggregation weight a
weighted mean also needs is not included.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import tensorflow_federated as tff


@dataclasses.dataclass(frozen=True)
class WireFormat:
    """bits_per_value: bits of each transmitted value; side_bytes: fixed bytes per upload (scales)."""

    bits_per_value: int
    side_bytes: int = 0


def leaf_types(value_type) -> list:
    """The tensor types of `value_type` (a TensorType or a structure of them), in flatten order."""
    value_type = tff.types.to_type(value_type)
    if isinstance(value_type, tff.TensorType):
        return [value_type]
    return [leaf for _, leaf in tff.structure.iter_elements(value_type) for leaf in leaf_types(leaf)]


def value_count(value_type) -> int:
    """Number of scalar entries in `value_type`."""
    return sum(int(np.prod(t.shape, dtype=np.int64)) for t in leaf_types(value_type))


def dtype_bits(value_type) -> int:
    """Bit width of the (single) floating dtype of `value_type`; raises on mixed or non-float dtypes."""
    dtypes = {np.dtype(t.dtype) for t in leaf_types(value_type)}
    if len(dtypes) != 1 or not np.issubdtype(next(iter(dtypes)), np.floating):
        raise TypeError(f"expected tensors of one floating dtype, got {sorted(str(d) for d in dtypes)} in {value_type}")
    return next(iter(dtypes)).itemsize * 8


def wire_format(factory, value_type) -> WireFormat:
    """The coding `factory` applies to each value of `value_type` (dtype width if it declares none)."""
    declared = getattr(factory, "wire_format", None)
    if declared is not None:
        return declared(value_type)
    return WireFormat(bits_per_value=dtype_bits(value_type), side_bytes=0)


def packed_bytes(count: int, bits: int) -> int:
    """Bytes of `count` values of `bits` bits each, bit-packed back to back."""
    return math.ceil(count * bits / 8)


def dense_bytes(factory, value_type) -> int:
    """Bytes of one client's upload of every entry of `value_type` through `factory`."""
    fmt = wire_format(factory, value_type)
    return packed_bytes(value_count(value_type), fmt.bits_per_value) + fmt.side_bytes
