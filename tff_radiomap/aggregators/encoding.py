"""Plumbing shared by the encoding factories: a client-side transform in front of an inner factory.

An encoding stage (Top-K, quantization) changes what each client transmits and hands the decoded
values to an inner factory for the actual aggregation. As `client_perturbation`'s factories, one
object serves both kinds of TFF pipeline: `create(value_type)` builds an unweighted process,
`create(value_type, weight_type)` a weighted one (e.g. as `model_aggregator` of
`build_weighted_fed_avg`); the inner factory defaults to the matching mean. The math lives in the
concrete modules; this file holds only the federated wiring.
"""

from __future__ import annotations

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_radiomap.aggregators import weighting

_Weighted = tff.aggregators.WeightedAggregationFactory
_Unweighted = tff.aggregators.UnweightedAggregationFactory


def flatten(value) -> list:
    """Leaves of a value as a TFF computation receives it (tensor, Python container or Struct)."""
    if isinstance(value, tff.structure.Struct):
        return tff.structure.flatten(value)
    return tf.nest.flatten(value)


def pack_like(value, leaves: list):
    """Inverse of `flatten`: `leaves` in the structure of `value`."""
    if isinstance(value, tff.structure.Struct):
        return tff.structure.pack_sequence_as(value, leaves)
    return tf.nest.pack_sequence_as(value, leaves)


def check_inner(inner_factory):
    """`inner_factory` if it is a tff.aggregators factory (or None); raises TypeError otherwise."""
    if inner_factory is not None and not isinstance(inner_factory, (_Weighted, _Unweighted)):
        raise TypeError(f"inner_factory={inner_factory!r}: expected a tff.aggregators factory or None")
    return inner_factory


class EncodingStage(_Unweighted, _Weighted):
    """Base of the encoding factories; subclasses implement `_client_fn` and `byte_counts`.

    `_client_fn(value_type)` returns the `tff.tensorflow.computation` a client applies to its
    value: it returns what the server decodes. `byte_counts(value_type)` returns an OrderedDict
    of Python ints, the exact bytes one client transmits, with a `bytes_per_client` entry.
    """

    inner_factory = None  # Set by subclasses; None: the mean matching the kind of `create`.

    def create(self, value_type, weight_type=None) -> tff.templates.AggregationProcess:
        value_type = tff.types.to_type(value_type)
        if not tff.types.is_structure_of_floats(value_type):
            raise TypeError(f"value_type={value_type}: expected a structure of floating tensors")
        inner = weighting.inner_process(self, self.inner_factory, value_type, weight_type)
        client_fn = self._client_fn(value_type)
        counts = self.byte_counts(value_type)
        if "bytes_per_client" not in counts:
            raise ValueError(f"{type(self).__name__}.byte_counts must report bytes_per_client, got {list(counts)}")

        @tff.tensorflow.computation
        def static_counts():
            return collections.OrderedDict((k, tf.constant(v, tf.int64)) for k, v in counts.items())

        @tff.tensorflow.computation(np.int32)
        def uplink_bytes(clients):
            return tf.cast(clients, tf.int64) * counts["bytes_per_client"]

        def next_impl(state, value, weight=None):
            # Client: encode the value and decode it as the server will (the transmitted content).
            decoded = tff.federated_map(client_fn, value)
            # Inner aggregation of the decoded values.
            inner_output = weighting.inner_next(inner, state, decoded, weight)
            # Server: what each client and all clients together transmitted this round.
            clients = tff.federated_sum(tff.federated_value(1, tff.CLIENTS))
            measurements = collections.OrderedDict(
                inner=inner_output.measurements,
                wire=tff.federated_eval(static_counts, tff.SERVER),
                uplink_bytes=tff.federated_map(uplink_bytes, clients),
            )
            return tff.templates.MeasuredProcessOutput(state=inner_output.state, result=inner_output.result, measurements=tff.federated_zip(measurements))

        next_fn = weighting.next_computation(next_impl, inner.initialize.type_signature.result, value_type, weight_type)
        return tff.templates.AggregationProcess(inner.initialize, next_fn)
