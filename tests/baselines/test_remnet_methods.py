"""Every baseline runs a few rounds on tiny data; ablations change one thing each.

The ablations are configurations of the EPFL-REMNet process; only the one that changes the
process's structure (no split head: the head joins the shared, uploaded parameters) is run here,
the others are exercised by tests/learning/test_epfl_remnet.py (R = 1, with and without
quantization) and checked below to differ from the full configuration in their one field.
"""

import numpy as np
import pytest

from baselines import remnet_methods
from tests.rem_tiny import tiny_config, tiny_scenario
from tff_radiomap.learning import epfl_ablations, rem_runner


TFF_BASELINES = tuple(n for n in remnet_methods.BASELINES if n not in remnet_methods.STACKED_ONLY)  # FedRep, Ditto: test_fedrep_ditto.


@pytest.mark.parametrize("name", TFF_BASELINES + ("no_split_head",))  # EPFL-REMNet: test_rem_runner.
def test_method_runs_and_reports_uplink(tff_runtime, tmp_path, name):
    method = remnet_methods.method(name, tiny_config(sync_period=2, k_fraction=0.2, ema_decay=0.5))
    run = rem_runner.RunConfig(rounds=2, eval_every=2, checkpoint_every=2)
    final = rem_runner.run_experiment(str(tmp_path), tiny_scenario(), method, run, log=lambda m: None)
    assert np.isfinite(final["macro_rmse"]) and final["macro_rmse"] > 0
    uploads = 1 if method.config.sync_period == 2 else 2  # Rounds that synchronize, of 2.
    side = final["cum_uplink_bytes"] - uploads * 3 * final["bytes_per_upload"]
    if name == "fedfly":
        assert side == 4 * 2 * 27 * (8 + 4)  # Activations and labels: 2 rounds x 27 samples, width 8 + 4.
    else:
        assert side == 0


def test_unknown_method_is_named():
    with pytest.raises(ValueError, match="method='fedprox'"):
        remnet_methods.method("fedprox", tiny_config())


def test_each_ablation_removes_exactly_one_component():
    full = tiny_config(sync_period=2, k_fraction=0.2, ema_decay=0.5)
    for name in remnet_methods.ABLATIONS:
        ablated = remnet_methods.method(name, full).config
        changed = {f for f in vars(full) if getattr(full, f) != getattr(ablated, f)}
        assert changed == set(epfl_ablations.ABLATIONS[name]), name
