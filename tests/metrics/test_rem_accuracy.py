"""Micro and macro accuracy in dB against a direct numpy computation."""

import numpy as np
import pytest

from tff_radiomap.metrics.rem_accuracy import rem_accuracy


def test_micro_macro_and_per_base_station_against_numpy():
    rng = np.random.default_rng(0)
    targets = [rng.normal(size=(n, 4)) for n in (3, 7, 12)]
    predictions = [t + rng.normal(scale=s, size=t.shape) for t, s in zip(targets, (0.5, 1.0, 3.0))]
    acc = rem_accuracy(predictions, targets)
    errors = [p - t for p, t in zip(predictions, targets)]
    pooled = np.concatenate(errors)
    assert acc.micro_rmse == pytest.approx(np.sqrt((pooled**2).mean()))
    assert acc.macro_rmse == pytest.approx(np.mean([np.sqrt((e**2).mean()) for e in errors]))
    assert acc.macro_mae == pytest.approx(np.mean([np.abs(e).mean() for e in errors]))
    assert acc.micro_mae == pytest.approx(np.abs(pooled).mean())
    np.testing.assert_allclose(acc.per_bs_rmse, np.sqrt((pooled**2).mean(axis=0)))
    assert len(acc.per_client_rmse) == 3 and acc.per_client_rmse[2] > acc.per_client_rmse[0]
    # Unequal client sizes: micro and macro differ.
    assert acc.micro_mae != pytest.approx(acc.macro_mae)
    assert set(acc.row()) >= {"macro_rmse", "rmse_bs3"}


def test_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="client 1"):
        rem_accuracy([np.zeros((2, 4)), np.zeros((3, 4))], [np.zeros((2, 4)), np.zeros((2, 4))])
    with pytest.raises(ValueError, match="0 prediction arrays"):
        rem_accuracy([], [])


def test_worst_fraction_is_the_mean_of_the_worst_clients():
    from tff_radiomap.metrics.rem_accuracy import worst_fraction_rmse

    values = [1.0, 9.0, 3.0, 7.0, 5.0, 2.0, 4.0, 6.0, 8.0, 10.0, 0.5]
    assert worst_fraction_rmse(values, 0.1) == pytest.approx((10.0 + 9.0) / 2)  # ceil(1.1) = 2 clients.
    assert worst_fraction_rmse(values[:3], 0.1) == 9.0
    with pytest.raises(ValueError):
        worst_fraction_rmse(values, 0.0)
