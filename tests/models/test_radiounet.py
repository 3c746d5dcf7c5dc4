import numpy as np
import pytest
import tensorflow as tf

from tff_radiomap.models import radiounet as ru

# The authors' RadioWNet (RonLevie/RadioUNet, lib/modules.py, inputs=2), as (in, out, kernel) per
# convolution, concatenated channel counts spelled out: an independent check of our wiring.
AUTHORS_STAGE1 = [
    (2, 6, 3),
    (6, 40, 5),
    (40, 50, 5),
    (50, 60, 5),
    (60, 100, 5),
    (100, 100, 3),
    (100, 150, 5),
    (150, 300, 5),
    (300, 500, 5),
    (500, 300, 4),
    (300 + 300, 150, 4),
    (150 + 150, 100, 4),
    (100 + 100, 100, 3),
    (100 + 100, 60, 6),
    (60 + 60, 50, 5),
    (50 + 50, 40, 6),
    (40 + 40, 20, 6),
    (20 + 6 + 2, 20, 5),
    (20 + 2, 1, 5),
]
AUTHORS_STAGE2 = [
    (3, 20, 3),
    (20, 30, 5),
    (30, 40, 5),
    (40, 50, 5),
    (50, 60, 5),
    (60, 70, 3),
    (70, 90, 5),
    (90, 110, 5),
    (110, 150, 5),
    (150, 110, 4),
    (110 + 110, 90, 4),
    (90 + 90, 70, 4),
    (70 + 70, 60, 3),
    (60 + 60, 50, 6),
    (50 + 50, 40, 5),
    (40 + 40, 30, 6),
    (30 + 30, 20, 6),
    (20 + 20 + 3, 20, 5),
    (20 + 3, 1, 5),
]


def _count(table):
    return sum(i * o * k * k + o for i, o, k in table)


def test_paper_scale_is_the_authors_network():
    config = ru.RadioUNetConfig(resolution=256, width=1.0)
    assert config.depth == 6 and config.encoder_layers == 9
    net = ru.build_radiounet(config)
    assert ru.parameter_count(net.stage1) == _count(AUTHORS_STAGE1) == 10_921_405
    assert ru.parameter_count(net.stage2) == _count(AUTHORS_STAGE2) == 2_352_626
    assert net.wnet.output_shape == [(None, 256, 256, 1), (None, 256, 256, 1)]
    assert net.stage1.get_layer("s1_enc8").output_shape == (None, 8, 8, 500)
    assert net.stage1.get_layer("s1_pool8").output_shape == (None, 4, 4, 500)
    assert net.stage2.get_layer("s2_input_conv").input_shape == (None, 256, 256, 3)


def test_cpu_default_drops_the_two_deepest_levels_and_scales_widths():
    config = ru.RadioUNetConfig(resolution=64, width=0.25)
    assert config.depth == 4 and config.encoder_layers == 7
    net = ru.build_radiounet(config)
    names = {layer.name for layer in net.stage1.layers}
    assert "s1_enc6" in names and "s1_enc7" not in names and "s1_dec7" not in names
    assert net.stage1.get_layer("s1_pool6").output_shape == (None, 4, 4, 38)  # 150 * 0.25, rounded
    assert net.stage1.get_layer("s1_dec6").output_shape == (None, 8, 8, 25)  # 100 * 0.25
    assert net.stage1.get_layer("s1_input_conv").output_shape == (None, 64, 64, 2)  # 6 * 0.25 -> 2

    # Independent count of the truncated, scaled table (widths rounded half up).
    def s(c):
        return int(np.floor(c * 0.25 + 0.5))

    e1 = [s(c) for c in (6, 40, 50, 60, 100, 100, 150)]
    d1 = [s(c) for c in (100, 100, 60, 50, 40, 20)]  # dec6..dec1
    k_enc = (3, 5, 5, 5, 5, 3, 5)
    k_dec = (4, 3, 6, 5, 6, 6)

    def stage(e, d, cin):
        table = [(cin, e[0], k_enc[0])] + [(e[i - 1], e[i], k_enc[i]) for i in range(1, 7)]
        h = e[6]
        for j, i in enumerate(range(6, 0, -1)):
            table.append((h, d[j], k_dec[j]))
            h = d[j] + e[i - 1]
        fuse = s(20)
        table += [(h + cin, fuse, 5), (fuse + cin, 1, 5)]
        return _count(table)

    assert ru.parameter_count(net.stage1) == stage(e1, d1, 2) == 125_098
    e2 = [s(c) for c in (20, 30, 40, 50, 60, 70, 90)]
    d2 = [s(c) for c in (70, 60, 50, 40, 30, 20)]
    assert ru.parameter_count(net.stage2) == stage(e2, d2, 3) == 66_696


def test_stages_compose_and_output_one_channel():
    net = ru.build_radiounet(ru.RadioUNetConfig(resolution=32, width=0.25))
    x = tf.random.uniform([3, 32, 32, 2])
    coarse, refined = net.wnet(x)
    np.testing.assert_allclose(coarse, net.stage1(x), rtol=1e-6)
    np.testing.assert_allclose(refined, net.stage2([x, coarse]), rtol=1e-6)
    assert refined.shape == (3, 32, 32, 1) and float(tf.reduce_min(refined)) >= 0.0  # ReLU output


def test_a_linear_stage2_output_changes_only_stage2s_last_activation():
    relu = ru.build_radiounet(ru.RadioUNetConfig(resolution=32, width=0.25))
    tf.keras.utils.set_random_seed(3)
    linear = ru.build_radiounet(ru.RadioUNetConfig(resolution=32, width=0.25, stage2_output="linear"))
    for a, b in zip(linear.wnet.weights, relu.wnet.weights):
        assert a.shape == b.shape and a.name == b.name
    relu.wnet.set_weights(linear.wnet.get_weights())
    with tf.init_scope():
        bias = linear.stage2.get_layer("s2_output_conv").bias
        bias.assign(bias - 10.0)  # Every pre-activation negative: the dead state of a ReLU output.
        relu.stage2.get_layer("s2_output_conv").bias.assign(bias)
    x = tf.random.uniform([2, 32, 32, 2])
    (c_lin, r_lin), (c_relu, r_relu) = linear.wnet(x), relu.wnet(x)
    np.testing.assert_array_equal(c_lin, c_relu)  # Stage 1 is the same network.
    assert float(tf.reduce_max(r_relu)) == 0.0 and float(tf.reduce_max(r_lin)) < 0.0
    np.testing.assert_allclose(r_relu, tf.nn.relu(r_lin), atol=1e-6)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(linear.stage2([x, c_lin]) - 0.5))
    grads = tape.gradient(loss, linear.stage2.trainable_variables)
    assert all(float(tf.norm(g)) > 0 for g in grads[-2:])  # The output conv still learns.
    with pytest.raises(ValueError, match="stage2_output='tanh': expected one of"):
        ru.RadioUNetConfig(stage2_output="tanh")


def test_transmitter_sensitive_layers_read_the_raw_input():
    net = ru.build_radiounet(ru.RadioUNetConfig(resolution=32, width=0.25))
    assert ru.TRANSMITTER_SENSITIVE_LAYERS == ru.transmitter_sensitive_layers(1) + ru.transmitter_sensitive_layers(2)
    for stage, model, raw_channels in ((1, net.stage1, 2), (2, net.stage2, 3)):
        for name in ru.transmitter_sensitive_layers(stage):
            kernel = model.get_layer(name).kernel
            assert kernel.shape[2] >= raw_channels, name
        # The raw input is the last channels of the fuse and output convolutions' input.
        for name in (f"s{stage}_input_skip1", f"s{stage}_input_skip0"):
            assert model.get_layer(name).output_shape[-1] > raw_channels
    with pytest.raises(ValueError, match="stage=3"):
        ru.transmitter_sensitive_layers(3)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(resolution=4), "resolution=4: expected an integer >= 8"),
        (dict(resolution=36), "resolution=36: expected a multiple of 2\\*\\*depth = 8"),
        (dict(width=0.0), "width=0.0: expected a positive width multiplier"),
    ],
)
def test_bad_configs_name_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ru.RadioUNetConfig(**kwargs)


def test_stage1_alone_is_the_networks_stage1():
    """`build_stage1` (a stage-1 phase model) has the layers, weight shapes and order, and the
    function of `build_radiounet`'s stage 1."""
    from tff_radiomap.models import phases

    config = ru.RadioUNetConfig(resolution=32, width=0.25)
    full, alone = ru.build_radiounet(config).stage1, phases.build_phase_model(config, phases.Phase.STAGE1)
    assert [layer.name for layer in alone.layers] == [layer.name for layer in full.layers]
    assert [w.shape for w in alone.weights] == [w.shape for w in full.weights]
    alone.set_weights(full.get_weights())
    x = np.random.default_rng(0).random((2, 32, 32, ru.INPUT_CHANNELS)).astype(np.float32)
    np.testing.assert_array_equal(alone(x).numpy(), full(x).numpy())


def test_eager_models_work_again_after_models_were_built_in_a_graph():
    """Building in a graph swaps Keras' classes to their v1 versions; `keras_graph`'s exit swaps
    every class RadioUNet uses back, so a model built before runs eagerly."""
    from tff_radiomap.models import phases

    config = ru.RadioUNetConfig(resolution=16, width=0.25)
    before = ru.build_radiounet(config)
    with phases.keras_graph():
        ru.build_radiounet(config)
    x = np.zeros((1, 16, 16, ru.INPUT_CHANNELS), np.float32)
    coarse, refined = before.wnet(x)
    assert refined.shape == (1, 16, 16, 1) and np.all(np.isfinite(coarse.numpy()))
    before.wnet.predict(x, verbose=0)
