"""The keys, shapes and initial values of a REM model's shared and private parameters, read once
from an eagerly built model: what EPFL-REMNet's TFF process (`epfl_remnet`) and the stacked
clients (`epfl_stacked`) build their types and initial states from."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_radiomap.learning import local_model as local_lib


@dataclasses.dataclass(frozen=True)
class ModelLayout:
    """Keys, shapes and initial values of the shared and private parameters."""

    shared_keys: list[str]
    private_keys: list[str]
    initial_shared: list[np.ndarray]
    initial_private: list[np.ndarray]
    uploaded_keys: list[str]  # Shared keys the device itself uploads (all but FedFly's edge part).

    @property
    def shared_type(self):
        return _struct_type(self.shared_keys, self.initial_shared)

    @property
    def private_type(self):
        return _struct_type(self.private_keys, self.initial_private)

    @property
    def uploaded_type(self):
        shapes = dict(zip(self.shared_keys, self.initial_shared))
        return _struct_type(self.uploaded_keys, [shapes[k] for k in self.uploaded_keys])


def _struct_type(keys, values):
    return tff.types.to_type(collections.OrderedDict((k, tff.TensorType(np.float32, v.shape)) for k, v in zip(keys, values)))


def model_layout(local: local_lib.LocalModel, seed: int = 0) -> ModelLayout:
    """Builds the model once, eagerly, with Keras' seed set: keys and initial values."""
    tf.keras.utils.set_random_seed(seed)
    model = local.build()
    keys = dict(zip((id(v) for v in model.trainable_variables), _keys(model)))
    shared, private = local.shared(model), local.private(model)
    uploaded = local.device_shared(model) if local.device_shared else shared
    return ModelLayout(
        shared_keys=[keys[id(v)] for v in shared],
        private_keys=[keys[id(v)] for v in private],
        initial_shared=[v.numpy() for v in shared],
        initial_private=[v.numpy() for v in private],
        uploaded_keys=[keys[id(v)] for v in uploaded],
    )


def _keys(model: tf.keras.Model) -> list[str]:
    """'layer.weight' keys of model.trainable_variables, through nested sub-models."""
    keys = []
    for layer in model.layers:
        if isinstance(layer, tf.keras.Model):
            keys += _keys(layer)
        else:
            keys += [f"{layer.name}.{w.name.split('/')[-1].split(':')[0]}" for w in layer.trainable_weights]
    return keys
