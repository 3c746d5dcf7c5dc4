import collections

import numpy as np
import pytest

from tff_radiomap.learning import state_packing


def _state(rng):
    return collections.OrderedDict(
        weights=[rng.random((3, 2)).astype(np.float32), rng.random(4).astype(np.float32)],
        step=np.int64(7),
        inner=collections.OrderedDict(lr=np.float32(0.1), counts=np.arange(3, dtype=np.int32)),
    )


def test_round_trip_keeps_values_shapes_and_dtypes():
    state = _state(np.random.default_rng(0))
    packed = state_packing.pack(state)
    assert sorted(packed) == ["float32", "int32", "int64"] and packed["float32"].shape == (11,)
    back = state_packing.unpack(packed, _state(np.random.default_rng(1)))
    np.testing.assert_array_equal(back["weights"][0], state["weights"][0])
    assert back["step"] == 7 and back["inner"]["counts"].dtype == np.int32
    np.testing.assert_array_equal(back["inner"]["counts"], [0, 1, 2])


def test_a_state_of_another_shape_is_refused():
    packed = state_packing.pack(_state(np.random.default_rng(0)))
    bigger = _state(np.random.default_rng(0))
    bigger["weights"].append(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="holds 11 float32 values, the template needs more"):
        state_packing.unpack(packed, bigger)
    smaller = _state(np.random.default_rng(0))
    smaller["weights"].pop()
    with pytest.raises(ValueError, match="holds 11 float32 values, the template 7"):
        state_packing.unpack(packed, smaller)
