import numpy as np

from tff_radiomap.data import encoding


def test_every_gray_level_round_trips():
    gray = np.arange(256, dtype=np.uint8)
    np.testing.assert_array_equal(encoding.gain_db_to_gray(encoding.gray_to_gain_db(gray)), gray)


def test_endpoints_and_clipping():
    assert encoding.gain_db_to_gray(np.array([-147.0]))[0] == 0
    assert encoding.gain_db_to_gray(np.array([-47.84]))[0] == 255
    assert encoding.gain_db_to_gray(np.array([-200.0, -np.inf]))[0] == 0
    assert encoding.gain_db_to_gray(np.array([-10.0]))[0] == 255


def test_decode_error_is_at_most_half_a_level():
    gain = np.linspace(-147.0, -47.84, 1001)
    back = encoding.gray_to_gain_db(encoding.gain_db_to_gray(gain))
    step = (147 - 47.84) / 255
    assert np.max(np.abs(back - gain)) <= step / 2 + 1e-9


def test_formula_matches_radiomapseer_mapping():
    gain = np.array([-100.0])
    expected = 255 * (-100.0 + 147) / (-47.84 + 147)
    assert encoding.gain_db_to_gray(gain)[0] == int(np.rint(expected))


def test_free_space_loss_at_5_9_ghz():
    # 20 log10(4 pi f / c) = 47.86 dB at 1 m; +20 dB per decade.
    loss = encoding.free_space_loss_db(np.array([1.0, 10.0, 100.0]), 5.9e9)
    np.testing.assert_allclose(loss, [47.866, 67.866, 87.866], atol=0.01)
