"""Keyed uploads: a client's update together with its key, for defenses whose noise differs by client.

A factory with `keyed = True` (`ClientSubspaceNoiseFactory`, `AlignedNoiseFactory`) aggregates
values `OrderedDict(update=<the model update>, client=int32)`, the key naming the uploading client
(its index in the federation), and returns the aggregate of the updates alone, so that the
finalizer sees the model's update type as usual. TFF's aggregators see no client identity, hence
the key in the value. This package's learning processes upload keyed values to a keyed factory
(`client_work.build_client_work(keyed=True)` reads the key from the client's data reference,
`InProcessClientsProcess` from its samples); in another TFF pipeline, the client work must do the
same.
"""

from __future__ import annotations

import collections

import numpy as np
import tensorflow_federated as tff

UPDATE, CLIENT = "update", "client"


def is_keyed(factory) -> bool:
    """Whether `factory` aggregates keyed values."""
    return bool(getattr(factory, "keyed", False))


def keyed_type(update_type) -> tff.StructWithPythonType:
    """The TFF type of a keyed value whose update has `update_type`."""
    return tff.StructWithPythonType([(UPDATE, update_type), (CLIENT, tff.TensorType(np.int32))], collections.OrderedDict)


def keyed_value(update, client) -> collections.OrderedDict:
    """A keyed value (Python or TF)."""
    return collections.OrderedDict([(UPDATE, update), (CLIENT, client)])


def update_type(value_type):
    """The update's type in a keyed value type; raises TypeError for another type."""
    names = [name for name, _ in tff.structure.iter_elements(value_type)] if isinstance(value_type, tff.StructType) else []
    if names != [UPDATE, CLIENT] or value_type[CLIENT] != tff.TensorType(np.int32):
        raise TypeError(f"a keyed factory aggregates values <{UPDATE}=..., {CLIENT}=int32>, got {value_type}")
    return value_type[UPDATE]
