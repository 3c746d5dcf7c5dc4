"""FedFly: the split step computes the full model's gradients and counts what crosses the cut."""

import numpy as np
import tensorflow as tf

from baselines import fedfly
from tests.rem_tiny import tiny_config
from tff_radiomap.models import remnet


def test_split_step_equals_full_backprop_and_counts_activations():
    config = tiny_config().model
    tf.keras.utils.set_random_seed(0)
    model = remnet.build_remnet(config)
    x = tf.random.uniform([5, config.input_dim])
    y = tf.random.normal([5, config.outputs])
    loss, grads, side_bytes = fedfly.split_step(config)(model, x, y)
    with tf.GradientTape() as tape:
        full_loss = remnet.huber_loss(config)(y, model(x, training=True))
    full_grads = tape.gradient(full_loss, model.trainable_variables)
    np.testing.assert_allclose(loss, full_loss, rtol=1e-6)
    for g, f in zip(grads, full_grads):
        np.testing.assert_allclose(g, f, rtol=1e-5, atol=1e-7)
    assert int(side_bytes) == 4 * 5 * (config.backbone_units[0] + config.outputs)
    device = fedfly.device_variables(model)
    assert [v.name.split("/")[0] for v in device] == ["backbone_dense_1"] * 2 + ["backbone_norm_1"] * 2
