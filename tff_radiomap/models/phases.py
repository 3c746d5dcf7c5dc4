"""The RadioUNet stages as trainable Keras models, one per training phase, and their weights.

A phase says which parameters a client trains and uploads:
    STAGE1 (1): x -> coarse map; trains and uploads theta_1 (Eq. (1)).
    STAGE2 (2): x -> refined map; trains and uploads theta_2, theta_1 frozen (non-trainable) and
                its prediction used as context (Eq. (2)).
    JOINT  (0): x -> refined map; trains and uploads theta_1 and theta_2 together (FedSGD).

`NetworkWeights` is the phase-independent record of both stages' weights (numpy, in the order of
`stage.weights`); `phase_split` gives the (trainable, non-trainable) part a phase holds.
Plain Keras: the TFF side (`tff.learning.models.ModelWeights`) is `learning/keras_wrap.py`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools

import tensorflow as tf

from tff_radiomap.models import radiounet


class Phase(enum.IntEnum):
    JOINT = 0
    STAGE1 = 1
    STAGE2 = 2


def build_phase_model(config: radiounet.RadioUNetConfig, phase: Phase) -> tf.keras.Model:
    """A fresh Keras model x -> prediction whose trainable weights are those `phase` trains."""
    if phase == Phase.STAGE1:
        return radiounet.build_stage1(config)
    net = radiounet.build_radiounet(config)
    if phase == Phase.STAGE2:
        net.stage1.trainable = False
    x = net.wnet.input
    return tf.keras.Model(x, net.wnet(x)[1], name=f"radiownet_{phase.name.lower()}")


def mse_loss(y_true, y_pred):
    """Eq. (3): per-sample mean of squared pixel errors, averaged over the batch."""
    return tf.reduce_mean(tf.math.squared_difference(y_pred, y_true))


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
    """Swaps RadioUNet's Keras classes back to their eager (v2) versions; see `keras_graph`.

    Keras swaps a class when one of its instances is made, so one of each class RadioUNet uses
    (input, Conv2D, MaxPool2D, Conv2DTranspose, Concatenate, a functional model called inside
    another) suffices: a few layers instead of a whole network."""
    x = tf.keras.Input((4, 4, 1))
    h = tf.keras.layers.Conv2D(1, 1)(x)
    h = tf.keras.layers.MaxPool2D(2)(h)
    h = tf.keras.layers.Conv2DTranspose(1, 2, strides=2)(h)
    inner = tf.keras.Model(x, tf.keras.layers.Concatenate()([h, x]))
    outer_x = tf.keras.Input((4, 4, 1))
    tf.keras.Model(outer_x, inner(outer_x))


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


def phase_split(weights: NetworkWeights, phase: Phase) -> tuple[list, list]:
    """(trainable, non_trainable) arrays of `weights` as `build_phase_model(config, phase)` holds them."""
    if phase == Phase.STAGE1:
        return list(weights.stage1), []
    if phase == Phase.STAGE2:
        return list(weights.stage2), list(weights.stage1)
    return list(weights.stage1) + list(weights.stage2), []


def set_phase_weights(model: tf.keras.Model, weights: NetworkWeights, phase: Phase) -> None:
    """Assigns `weights` to `model`, a `build_phase_model(config, phase)`."""
    trainable, non_trainable = phase_split(weights, phase)
    for variables, values in ((model.trainable_variables, trainable), (model.non_trainable_variables, non_trainable)):
        for variable, value in zip(variables, values):
            variable.assign(value)


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
