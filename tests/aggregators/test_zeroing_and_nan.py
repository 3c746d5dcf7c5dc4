"""Why non-finite updates are caught with `is_finite` in the client computations (client_work,
epfl_remnet) rather than with TFF's `zeroing_factory`: its test `norm > zeroing_norm` is false for
a NaN norm, so a NaN update reaches the inner aggregation and the mean."""

import numpy as np
import tensorflow_federated as tff


def test_tff_zeroing_factory_zeroes_inf_but_lets_nan_through(tff_runtime):
    factory = tff.aggregators.zeroing_factory(1e6, tff.aggregators.UnweightedMeanFactory(), norm_order=2.0)
    process = factory.create(tff.TensorType(np.float32, [3]))
    state = process.initialize()
    finite = np.ones(3, np.float32)
    with_inf = np.array([1.0, np.inf, 1.0], np.float32)
    with_nan = np.array([1.0, np.nan, 1.0], np.float32)
    out = process.next(state, [finite, with_inf])
    assert out.measurements["zeroed_count"] == 1 and np.all(np.isfinite(out.result))
    out = process.next(state, [finite, with_nan])
    assert out.measurements["zeroed_count"] == 0 and np.isnan(out.result[1])
