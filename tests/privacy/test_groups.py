import numpy as np
import pytest
import tensorflow as tf

from tff_radiomap.privacy import groups as G


def _unet_like():
    x = tf.keras.Input((16, 16, 2), name="x")
    h = tf.keras.layers.Conv2D(4, 3, padding="same", name="enc0")(x)
    h2 = tf.keras.layers.Conv2D(6, 3, padding="same", name="enc1")(h)
    up = tf.keras.layers.Conv2DTranspose(5, 2, padding="same", name="dec_t")(tf.keras.layers.Concatenate(name="cat_t")([h2, x]))
    cat = tf.keras.layers.Concatenate(name="cat_raw")([up, h, x])
    out = tf.keras.layers.Conv2D(1, 3, padding="same", name="out")(cat)
    return tf.keras.Model(x, out)


def test_finds_every_kernel_reading_the_raw_transmitter_channel():
    m = _unet_like()
    slices = G.transmitter_channel_slices(m)
    names = {m.get_layer(n).kernel.name: n for n in ["enc0", "enc1", "dec_t", "out"]}
    found = {names[k]: v for k, v in slices.items()}
    assert found == {"enc0": (-2, [1]), "dec_t": (-1, [6 + 1]), "out": (-2, [5 + 4 + 1])}


def test_groups_over_variables_and_masks():
    m = _unet_like()
    slices = G.transmitter_channel_slices(m)
    groups = G.groups_for_variables(m.trainable_variables, slices, {k: "stage1_transmitter" for k in slices})
    assert groups.names == ("stage1_transmitter", G.RESIDUAL) and groups.sensitive == (True, False)
    d = sum(int(np.prod(v.shape)) for v in m.trainable_variables)
    assert groups.num_coordinates == d
    expected_sensitive = 3 * 3 * 1 * 4 + 2 * 2 * 5 * 1 + 3 * 3 * 1 * 1
    np.testing.assert_array_equal(groups.sizes, [expected_sensitive, d - expected_sensitive])
    masks = groups.masks()
    total = sum(np.sum(mk) for g in masks for mk in g)
    assert total == d  # The masks partition the upload (Eq. (11)).
    k_enc0 = [i for i, v in enumerate(m.trainable_variables) if v.name == m.get_layer("enc0").kernel.name][0]
    assert np.all(masks[0][k_enc0][:, :, 1, :] == 1) and np.all(masks[0][k_enc0][:, :, 0, :] == 0)


def test_shape_mismatch_is_named():
    g = G.ParameterGroups.single([(3, 2), (4,)])
    with pytest.raises(ValueError, match=r"upload tensor 1 has shape \(5,\), the parameter groups expect \(4,\)"):
        g.check_shapes([(3, 2), (5,)])
    with pytest.raises(ValueError, match="upload has 1 tensors"):
        g.check_shapes([(3, 2)])


def test_radiounet_groups_per_phase():
    from tff_radiomap.models.phases import Phase, uploaded_layer_names
    from tff_radiomap.models.radiounet import RadioUNetConfig

    cfg = RadioUNetConfig(resolution=32, width=0.25)
    g1 = G.radiounet_groups(cfg, Phase.STAGE1)
    g2 = G.radiounet_groups(cfg, Phase.STAGE2)
    gj = G.radiounet_groups(cfg, Phase.JOINT)
    assert g1.names == ("stage1_transmitter", "stage2_transmitter", G.RESIDUAL)
    assert g1.sizes[0] > 0 and g1.sizes[1] == 0
    assert g2.sizes[0] == 0 and g2.sizes[1] > 0
    np.testing.assert_array_equal(gj.sizes[:2], [g1.sizes[0], g2.sizes[1]])
    assert gj.num_coordinates == g1.num_coordinates + g2.num_coordinates
    names = uploaded_layer_names(cfg, Phase.STAGE2)
    assert len(names) == len(g2.ids)
    # Stage 2 reads [coarse, buildings, transmitter]: the transmitter is input channel 2.
    k = names.index("s2_input_conv/kernel:0")
    assert np.all(g2.ids[k][:, :, 2, :] == 1) and np.all(g2.ids[k][:, :, :2, :] == 2)
    fuse = names.index("s2_input_fuse_conv/kernel:0")
    assert np.sum(g2.ids[fuse] == 1) == g2.ids[fuse].shape[0] * g2.ids[fuse].shape[1] * g2.ids[fuse].shape[3]
