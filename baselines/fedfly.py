"""FedFly (Ullah et al., 2022): split learning at the edge, FedAvg of the whole model.

The REMNet is cut after the first backbone layer: the device runs `backbone_dense_1` and
`backbone_norm_1`, the edge server the rest (two backbone layers and a shared head). Every local
step the device sends the batch's cut activations and labels up, the edge computes the loss and
sends the activations' gradient back, and the device finishes backpropagation
(`split_step`). After E local epochs the device uploads its front layers and the edge its part;
the server averages both (weighted by examples), as FedAvg.

Uplink counted (device to edge, float32): activations and labels of every local step, plus the
front layers' delta once a round. The edge's own upload to the server and the gradients sent
down are not device uplink.

Simplifications against the paper: FedFly's subject is migrating a device's training between
edge servers when it moves; our clients do not move, so no migration happens and its cost is
absent. The edge keeps one server-side copy per device (no shared edge model updated
sequentially), which makes the training equal to FedAvg on the whole model; only the uplink
differs.
"""

import dataclasses

import tensorflow as tf

from tff_radiomap.learning import local_model
from tff_radiomap.learning.epfl_remnet import EpflRemnetConfig
from tff_radiomap.learning.rem_runner import Method
from tff_radiomap.models import remnet

NAME = "fedfly"
CUT_LAYERS = ("backbone_dense_1", "backbone_norm_1")  # The device-side part.


def _parts(model):
    """(device layers, edge layers) of a `build_remnet` model, each a chain applied in order."""
    backbone, head = model.get_layer("backbone"), model.get_layer("head")
    layers = backbone.layers[1:] + head.layers[1:]
    device = [layer for layer in layers if layer.name in CUT_LAYERS]
    return device, [layer for layer in layers if layer.name not in CUT_LAYERS]


def _chain(layers, x, training):
    for layer in layers:
        x = layer(x, training=training)
    return x


def device_variables(model) -> list:
    return [v for layer in _parts(model)[0] for v in layer.trainable_weights]


def split_step(config: remnet.RemNetConfig):
    """One local step as the split protocol runs it; side bytes = activations + labels sent up."""
    loss_fn = remnet.huber_loss(config)

    def step(model, x, y):
        device, edge = _parts(model)
        device_vars = [v for layer in device for v in layer.trainable_weights]
        edge_vars = [v for layer in edge for v in layer.trainable_weights]
        with tf.GradientTape() as device_tape:
            activations = _chain(device, x, training=True)
        sent = tf.identity(activations)  # Device -> edge.
        with tf.GradientTape() as edge_tape:
            edge_tape.watch(sent)
            loss = loss_fn(y, _chain(edge, sent, training=True))
        edge_grads, activation_grad = edge_tape.gradient(loss, [edge_vars, sent])
        device_grads = device_tape.gradient(activations, device_vars, output_gradients=activation_grad)  # Edge -> device.
        side_bytes = 4 * tf.cast(tf.size(sent) + tf.size(y), tf.int64)
        return loss, list(device_grads) + list(edge_grads), side_bytes

    return step


def fedfly(base: EpflRemnetConfig) -> Method:
    config = dataclasses.replace(base, split_head=False, k_fraction=None, bits=None, sync_period=1, ema_decay=0.0, client_weighting="num_examples")
    whole = local_model.remnet_local_model(config.model, split_head=False)
    local = dataclasses.replace(whole, step=split_step(config.model), device_shared=device_variables, name="remnet_split")
    return Method(NAME, config, local)
