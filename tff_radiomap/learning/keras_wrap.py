"""The TFF side of the RadioUNet phase models (`models/phases.py`): client data specs and the
`tff.learning.models.ModelWeights` (trainable, non_trainable) of a phase.

`to_model_weights` / `from_model_weights` convert `phases.NetworkWeights` to and from a phase's
ModelWeights.
"""

from __future__ import annotations

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_radiomap.models import radiounet
from tff_radiomap.models.phases import NetworkWeights, Phase, phase_split


def batch_spec(resolution: int) -> collections.OrderedDict:
    """Element spec of the client data sets: batches of x [N,r,r,2] and y [N,r,r,1]."""
    r = resolution
    return collections.OrderedDict(
        x=tf.TensorSpec([None, r, r, radiounet.INPUT_CHANNELS], tf.float32),
        y=tf.TensorSpec([None, r, r, 1], tf.float32),
    )


def to_model_weights(weights: NetworkWeights, phase: Phase) -> tff.learning.models.ModelWeights:
    """The (trainable, non_trainable) split of `weights` that `phase` trains."""
    return tff.learning.models.ModelWeights(*phase_split(weights, phase))


def from_model_weights(model_weights, phase: Phase, previous: NetworkWeights) -> NetworkWeights:
    """Inverse of `to_model_weights`; the stage `phase` does not hold is taken from `previous`."""
    trainable = tuple(np.asarray(w) for w in model_weights.trainable)
    non_trainable = tuple(np.asarray(w) for w in model_weights.non_trainable)
    if phase == Phase.STAGE1:
        return NetworkWeights(trainable, previous.stage2)
    if phase == Phase.STAGE2:
        return NetworkWeights(non_trainable, trainable)
    n1 = len(previous.stage1)
    return NetworkWeights(trainable[:n1], trainable[n1:])
