"""The RadioUNet stages as trainable Keras models, one per training phase, and their weights.

A phase says which parameters a client trains and uploads:
    STAGE1 (1): x -> coarse map; trains and uploads theta_1 (Eq. (1)).
    STAGE2 (2): x -> refined map; trains and uploads theta_2, theta_1 frozen (non-trainable) and
                its prediction used as context (Eq. (2)).
    JOINT  (0): x -> refined map; trains and uploads theta_1 and theta_2 together (FedSGD).

`NetworkWeights` is the phase-independent record of both stages' weights (numpy, in the order of
`stage.weights`); `to_model_weights` / `from_model_weights` convert it to and from the
`tff.learning.models.ModelWeights` (trainable, non_trainable) of a phase.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import enum
import functools

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_radiomap.models import radiounet


class Phase(enum.IntEnum):
    JOINT = 0
    STAGE1 = 1
    STAGE2 = 2


def build_phase_model(config: radiounet.RadioUNetConfig, phase: Phase) -> tf.keras.Model:
    """A fresh Keras model x -> prediction whose trainable weights are those `phase` trains."""
    net = radiounet.build_radiounet(config)
    if phase == Phase.STAGE1:
        return net.stage1
    if phase == Phase.STAGE2:
        net.stage1.trainable = False
    x = net.wnet.input
    return tf.keras.Model(x, net.wnet(x)[1], name=f"radiownet_{phase.name.lower()}")


@contextlib.contextmanager
def keras_graph():
    """A `tf.Graph` to build Keras models in, leaving the eager Keras models usable afterwards.

    Keras swaps the base classes of its layer and model classes between their v1 (graph) and v2
    (eager) versions whenever one is constructed, so building in a graph (as TFF does when it
    traces a computation) breaks eager models built before ("Your Layer or Model is in an invalid
    state"). On exit this builds a tiny network eagerly, which swaps every class back to v2.
    """
    try:
        with tf.Graph().as_default() as graph:
            yield graph
    finally:
        restore_eager_keras()


def restore_eager_keras() -> None:
    """Swaps RadioUNet's Keras classes back to their eager (v2) versions; see `keras_graph`."""
    radiounet.build_radiounet(radiounet.RadioUNetConfig(resolution=8, width=0.1))


def batch_spec(resolution: int) -> collections.OrderedDict:
    """Element spec of the client data sets: batches of x [N,r,r,2] and y [N,r,r,1]."""
    r = resolution
    return collections.OrderedDict(
        x=tf.TensorSpec([None, r, r, radiounet.INPUT_CHANNELS], tf.float32),
        y=tf.TensorSpec([None, r, r, 1], tf.float32),
    )


def mse_loss(y_true, y_pred):
    """Eq. (3): per-sample mean of squared pixel errors, averaged over the batch."""
    return tf.reduce_mean(tf.math.squared_difference(y_pred, y_true))


@dataclasses.dataclass(frozen=True)
class NetworkWeights:
    """Both stages' weights as numpy arrays, in the order of `RadioUNet.stage{1,2}.weights`."""

    stage1: tuple
    stage2: tuple

    @classmethod
    def from_network(cls, net: radiounet.RadioUNet) -> "NetworkWeights":
        return cls(tuple(w.numpy() for w in net.stage1.weights), tuple(w.numpy() for w in net.stage2.weights))

    def assign_to(self, net: radiounet.RadioUNet) -> None:
        for variables, values in ((net.stage1.weights, self.stage1), (net.stage2.weights, self.stage2)):
            if len(variables) != len(values):
                raise ValueError(f"weights hold {len(values)} arrays, the network {len(variables)}")
            for variable, value in zip(variables, values):
                variable.assign(value)


def initial_weights(config: radiounet.RadioUNetConfig, seed: int) -> NetworkWeights:
    """The network's initial weights, a pure function of (config, seed)."""
    tf.keras.utils.set_random_seed(seed)
    return NetworkWeights.from_network(radiounet.build_radiounet(config))


def to_model_weights(weights: NetworkWeights, phase: Phase) -> tff.learning.models.ModelWeights:
    """The (trainable, non_trainable) split of `weights` that `phase` trains."""
    if phase == Phase.STAGE1:
        return tff.learning.models.ModelWeights(list(weights.stage1), [])
    if phase == Phase.STAGE2:
        return tff.learning.models.ModelWeights(list(weights.stage2), list(weights.stage1))
    return tff.learning.models.ModelWeights(list(weights.stage1) + list(weights.stage2), [])


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


def uploaded_layer_names(config: radiounet.RadioUNetConfig, phase: Phase) -> list[str]:
    """Variable names of the uploaded update, in the order of its tensors, for `phase`.

    The update a client uploads in `phase` is a list of tensors shaped like the trainable weights
    of `build_phase_model(config, phase)`; entry i belongs to variable `names[i]`
    (e.g. 's1_input_conv/kernel:0').
    """
    return [name for name, _ in _uploaded_variables(config, Phase(phase))]


def uploaded_shapes(config: radiounet.RadioUNetConfig, phase: Phase) -> tuple[tuple[int, ...], ...]:
    """Shapes of the uploaded update's tensors for `phase`, in upload order."""
    return tuple(shape for _, shape in _uploaded_variables(config, Phase(phase)))


@functools.lru_cache(maxsize=None)
def _uploaded_variables(config: radiounet.RadioUNetConfig, phase: Phase) -> tuple[tuple[str, tuple[int, ...]], ...]:
    # A model is built once per (config, phase) and process: the programs and tests ask often.
    with keras_graph():
        model = build_phase_model(config, phase)
        return tuple((v.name, tuple(int(d) for d in v.shape)) for v in model.trainable_variables)
