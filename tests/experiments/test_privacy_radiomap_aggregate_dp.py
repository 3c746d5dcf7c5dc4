"""The defenses on the aggregate in the privacy experiment: central DP (TFF's
DifferentiallyPrivateFactory) is attacked as Clip Only's clean uploads and reports the released
aggregate's epsilon; distributed DP (TFF's DistributedDpSumFactory under secure aggregation) is not
attacked, says so, and reports its epsilon with TFF's calibration."""

import csv
import dataclasses
import os

import numpy as np
import pytest

from tff_radiomap.experiments import privacy_accounting
from tff_radiomap.experiments import privacy_radiomap as experiment

# One observed local step: these tests are about which defense is attacked and what it reports.
ATTACK = dict(attack_every=1, attack_steps=1, attack_train_traces=12, attack_test_traces=6)


def _rows(run_dir):
    with open(os.path.join(run_dir, "metrics.csv"), newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def runs(tff_runtime, config, tmp_path_factory):
    base = tmp_path_factory.mktemp("aggregate_dp")
    out = {}
    for name in ("central_dp", "ddp"):
        cfg = dataclasses.replace(config, defense=name, noise_multiplier=0.5, rounds=2, **ATTACK)
        out[name] = (cfg, str(base / name), experiment.run(cfg, str(base / name), progress=False))
    return out


def test_central_dp_is_attacked_as_clean_uploads_and_reports_the_aggregates_epsilon(runs):
    cfg, run_dir, summary = runs["central_dp"]
    rows = _rows(run_dir)
    assert all(np.isfinite(float(r["attack_rmse_m"])) for r in rows)
    assert summary["privacy"]["max_epsilon"] is None  # The uploads are clipped, not noised.
    aggregate = summary["privacy"]["aggregate"]
    assert aggregate == privacy_accounting.aggregate_summary(cfg)
    assert aggregate["mechanism"] == "central" and np.isfinite(aggregate["epsilon"]) and aggregate["epsilon_poisson"] < aggregate["epsilon"]
    assert np.isfinite(summary["best_val_mse_db"])


def test_ddp_is_not_attacked_and_reports_its_calibration(runs):
    cfg, run_dir, summary = runs["ddp"]
    rows = _rows(run_dir)
    assert "attack_rmse_m" not in rows[0]  # Nothing observable: no attack columns at all.
    assert summary["privacy"]["uploads_observable"] is False
    aggregate = summary["privacy"]["aggregate"]
    assert aggregate == privacy_accounting.aggregate_summary(cfg)
    assert aggregate["mechanism"] == "distributed" and set(aggregate["calibration"]) == {1, 2}
    assert all(np.isfinite(float(r["val_mse_db"])) for r in rows)
    assert float(rows[0]["train_loss"]) > 0  # The clients' measurements arrive through the secure sum.


def test_ddp_keeps_its_attack_rounds_models_for_the_observer_of_the_sum(runs, shadowed_root):
    from tff_radiomap.experiments import attack_rounds, rescoring, threat_ladder
    from tff_radiomap.experiments.deployment_observer import ObserverSettings

    cfg, run_dir, _ = runs["ddp"]
    assert attack_rounds.saved_rounds(run_dir, attack_rounds.ATTACK_ROUNDS) == [1, 2]
    with pytest.raises(ValueError, match="secure aggregation"):  # No upload to score again.
        rescoring.rescore(run_dir)
    settings = ObserverSettings(stride=4, baselines=False, sweeps=1)
    rows = threat_ladder.ladder(run_dir, settings, [1], shadowed_root, ("upload_shadowed", "sum_shadowed"), log=lambda line: None)
    (unobservable,) = [r for r in rows if r["column"] == "upload_shadowed"]
    assert unobservable["note"] == "unobservable"
    observed = {r["attacker"]: r for r in rows if r["column"] == "sum_shadowed"}
    assert set(observed) == {"observer", "search", "constant", "prior"} and observed["observer"]["transmitters"] == 12
    assert np.isfinite(observed["observer"]["ratio"]) and observed["constant"]["ratio"] == pytest.approx(1.0)
