"""The NaN-update test hook shared by both runners (`runtime/nan_injection.py`)."""

import numpy as np
import pytest
import tensorflow as tf

from tff_radiomap.runtime import nan_injection


def test_parse_gives_round_and_client_and_names_the_ranges():
    assert nan_injection.parse("", 1, 5) is None
    assert nan_injection.parse("3:2", 1, 5, num_clients=4) == (3, 2)
    with pytest.raises(ValueError, match=r"inject_nan_client='6:0': expected ROUND:CLIENT with ROUND in 1..5 and CLIENT in 0..3"):
        nan_injection.parse("6:0", 1, 5, num_clients=4)
    with pytest.raises(ValueError, match=r"inject_nan_client='2:4'"):
        nan_injection.parse("2:4", 1, 5, num_clients=4)
    with pytest.raises(ValueError, match=r"expected ROUND:CLIENT with ROUND in 0..4$"):
        nan_injection.parse("x:1", 0, 4)


def test_poison_turns_only_the_injected_clients_inputs_nan_in_its_round():
    arrays = [{"x": np.ones((2, 3), np.float32), "y": np.zeros(2, np.float32)} for _ in range(3)]
    assert nan_injection.poison((2, 7), 2, [5, 7, 9], arrays)[0] is arrays[0]
    out = nan_injection.poison((2, 7), 2, [5, 7, 9], arrays)
    assert np.all(np.isnan(out[1]["x"])) and np.all(out[1]["y"] == 0) and np.all(np.isfinite(arrays[1]["x"]))
    assert nan_injection.poison((3, 7), 2, [5, 7, 9], arrays) is arrays  # Another round.
    assert nan_injection.poison((2, 8), 2, [5, 7, 9], arrays) is arrays  # Not sampled.
    datasets = [tf.data.Dataset.from_tensor_slices({"x": a["x"], "y": a["y"]}).batch(2) for a in arrays]
    batch = next(iter(nan_injection.poison((2, 9), 2, [5, 7, 9], datasets)[2]))
    assert np.all(np.isnan(batch["x"].numpy())) and np.all(batch["y"].numpy() == 0)
