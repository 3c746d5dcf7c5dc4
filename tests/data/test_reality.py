"""A reality the twin lacks: correlated shadow fading and per-map losses, against numpy references."""

import numpy as np
import pytest

from tff_radiomap.data import encoding, propagation, reality


def _statistics(fields: np.ndarray, lag: int) -> tuple[float, float]:
    """(std, correlation at `lag` pixels along both axes) of zero-mean fields [N, S, S]."""
    std = np.sqrt(np.mean(fields**2))
    along_x = np.mean(fields[:, :, :-lag] * fields[:, :, lag:])
    along_y = np.mean(fields[:, :-lag, :] * fields[:, lag:, :])
    return std, (along_x + along_y) / 2 / std**2


@pytest.mark.parametrize("decorrelation_px", [10, 13])
def test_the_field_has_unit_variance_and_correlation_one_over_e_at_the_decorrelation_distance(decorrelation_px):
    rng = np.random.default_rng(0)
    fields = np.stack([reality.correlated_field(rng, 96, decorrelation_px) for _ in range(40)])
    std, at_d = _statistics(fields, decorrelation_px)
    assert abs(std - 1.0) < 0.06
    assert abs(at_d - np.exp(-1.0)) < 0.05
    _, at_3d = _statistics(fields, 3 * decorrelation_px)
    assert abs(at_3d - np.exp(-3.0)) < 0.05  # Exponential, not Gaussian (exp(-9) ~ 0) decay.
    assert abs(_statistics(fields, 1)[1] - np.exp(-1.0 / decorrelation_px)) < 0.03


def test_shadowing_takes_the_los_figures_in_line_of_sight_and_the_nlos_ones_elsewhere():
    los = np.zeros((96, 96), bool)
    los[:, :48] = True
    shadowed = reality.ShadowedReality()
    rng = np.random.default_rng(1)
    shadow = np.stack([reality.shadowing_db(rng, los, shadowed) for _ in range(40)])
    assert abs(np.sqrt(np.mean(shadow[:, los] ** 2)) - 4.0) < 0.3
    assert abs(np.sqrt(np.mean(shadow[:, ~los] ** 2)) - 7.82) < 0.6
    # Each state has its own decorrelation distance (10 m vs 13 m at 1 m per pixel).
    _, los_at_10 = _statistics(shadow[:, :, :48] / 4.0, 10)
    _, nlos_at_13 = _statistics(shadow[:, :, 48:] / 7.82, 13)
    assert abs(los_at_10 - np.exp(-1)) < 0.06 and abs(nlos_at_13 - np.exp(-1)) < 0.06
    # Half a metre per pixel: the same 10 m is 20 pixels.
    _, at_20px = _statistics(np.stack([reality.shadowing_db(rng, np.ones((96, 96), bool), shadowed, 0.5) for _ in range(40)]) / 4.0, 20)
    assert abs(at_20px - np.exp(-1)) < 0.06


def test_losses_are_drawn_around_the_twins_with_the_stated_spread_and_stay_positive():
    twin = propagation.PropagationConfig()
    rng = np.random.default_rng(2)
    draws = np.array([reality.draw_losses(rng, reality.ShadowedReality(), twin) for _ in range(4000)])
    np.testing.assert_allclose(draws.mean(0), [twin.corner_loss_db, twin.wall_loss_db], atol=0.3)
    np.testing.assert_allclose(draws.std(0), [3.0, 5.0], atol=0.2)
    wide = np.array([reality.draw_losses(rng, reality.ShadowedReality(corner_loss_spread_db=30.0), twin) for _ in range(400)])
    assert wide[:, 0].min() == reality.MIN_LOSS_DB
    assert reality.draw_losses(rng, reality.ShadowedReality(corner_loss_spread_db=0.0, wall_loss_spread_db=0.0), twin) == (12.0, 15.0)


def test_a_shadowed_map_is_the_model_with_its_losses_plus_its_shadowing_and_the_floor_indoors():
    buildings = np.zeros((64, 64), bool)
    buildings[20:40, 30:34] = True
    model = propagation.MapPropagation(buildings)
    paths = model.paths((30, 10))
    np.testing.assert_array_equal(paths.gain_db(12.0, 15.0), model.gain_db((30, 10)))
    assert paths.line_of_sight[30, 20] and not paths.line_of_sight[30, 50] and not paths.line_of_sight[30, 31]
    seed = np.random.SeedSequence([5, 0])
    real = reality.ShadowedMap(reality.ShadowedReality(), model.config, seed, transmitters=2)
    again = reality.ShadowedMap(reality.ShadowedReality(), model.config, seed, transmitters=2)
    np.testing.assert_array_equal(real.gain_db(1, paths), again.gain_db(1, paths))
    assert not np.array_equal(real.gain_db(0, paths), real.gain_db(1, paths))
    outdoor = ~buildings
    shadow = real.gain_db(0, paths)[outdoor] - paths.gain_db(real.corner_loss_db, real.wall_loss_db)[outdoor]
    assert np.all(np.isneginf(real.gain_db(0, paths)[buildings]))
    assert 1.0 < np.std(shadow) < 12.0


def test_the_squared_error_is_over_outdoor_pixels_of_decoded_gains():
    a = np.full((2, 4, 4), 100, np.uint8)
    b = a.copy()
    b[:, 0, 0] = 0  # Indoors: not counted.
    b[:, 1, 1] = 110
    outdoor = np.ones((4, 4), bool)
    outdoor[0, 0] = False
    total, count = reality.squared_error_db(a, b, outdoor)
    step = encoding.gray_to_gain_db(110) - encoding.gray_to_gain_db(100)
    assert count == 30 and total == pytest.approx(2 * step**2)
    assert reality.pooled_rmse_db([(total, count), (0.0, 30)]) == pytest.approx(np.sqrt(2 * step**2 / 60))


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("shadow_std_los_db", -1.0, "shadow_std_los_db=-1.0: expected a finite number >= 0"),
        ("decorrelation_nlos_m", 0.0, "decorrelation_nlos_m=0.0: expected a finite number > 0"),
        ("wall_loss_spread_db", float("inf"), "wall_loss_spread_db=inf: expected a finite number >= 0"),
        ("corner_loss_spread_db", "3", "corner_loss_spread_db='3': expected a finite number >= 0"),
    ],
)
def test_bad_figures_are_refused_naming_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        reality.ShadowedReality(**{field: value})
