"""The subspace defense's runs: basis refreshes from the twin, exact resume between refreshes."""

import dataclasses
import os

import numpy as np
import pytest

from tests.experiments.run_rows import rows_of as _rows
from tff_radiomap.experiments import privacy_radiomap as experiment


def test_subspace_run_refreshes_its_twin_basis_and_resumes_exactly(tff_runtime, config, cached_trainers, tmp_path, monkeypatch):
    from tff_radiomap.data import twin
    from tff_radiomap.experiments import privacy_defenses

    # Every run trains in folder `a` (the straight run's renamed to `b` once finished): the basis
    # file's path is part of the trainer's computation, so one trainer serves all three.
    monkeypatch.setattr(experiment, "build_trainer", cached_trainers)
    twin_root = twin.ensure_twin(config.data_root, positions=4, out_root=str(tmp_path / "twin"))
    sub = dataclasses.replace(
        config,
        defense="subspace",
        noise_multiplier=0.01,
        twin_root=twin_root,
        basis_positions=4,
        basis_k_per_map=2,
        basis_every=2,
        attack_every=1,
        attack_steps=1,
        attack_train_traces=12,
        attack_test_traces=6,
        matching_stride=4,  # The matching attacker on every 4th cell: this test is about the basis and resume.
    )
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    straight = experiment.run(sub, a, progress=False)
    os.rename(a, b)
    experiment.run(sub, a, progress=False, stop_after_round=2)
    resumed = experiment.run(sub, a, progress=False)  # Round 3 is not a refresh: its basis is read back.
    rows = _rows(a)
    # Refreshed at each phase's first round (1, 2), not at 3 (basis_every=2).
    assert [r["basis_refreshed"] for r in rows] == ["1", "1", "0"]
    for ra, rb in zip(rows, _rows(b)):
        for key in ("train_loss", "val_mse", "attack_rmse_m", "attack_plain_rmse_m", "attack_aware_rmse_m"):
            np.testing.assert_allclose(float(ra[key]), float(rb[key]), rtol=1e-4, err_msg=key)
    assert resumed["final_val_mse"] == pytest.approx(straight["final_val_mse"], rel=1e-5)
    # 8 maps x 2 directions, orthonormal, per phase.
    for phase in (1, 2):
        v = privacy_defenses.subspace_noise.read_basis(os.path.join(a, "basis", f"phase{phase}.bin")).numpy()
        assert v.shape[1] == 16
        np.testing.assert_allclose(v.T @ v, np.eye(16), atol=1e-4)
    for r in rows:  # The strongest attacker is the one reported: the lowest ratio to its constant guess.
        v = {k: float(r[f"attack_{k}rmse_m"]) for k in ("", "plain_", "aware_", "constant_", "matching_", "matching_map_", "matching_constant_")}
        ratios = [min(v["plain_"], v["aware_"]) / v["constant_"], v["matching_"] / v["matching_constant_"], v["matching_map_"] / v["matching_constant_"]]
        assert v[""] == pytest.approx(v["constant_"] * min(ratios), rel=1e-9)
    # Resuming between refreshes without the basis file cannot be exact, and says so.
    refresher = privacy_defenses.BasisRefresher(sub, str(tmp_path / "empty"), {})
    assert not refresher.due(3)
    with pytest.raises(FileNotFoundError, match="phase2.bin"):
        refresher.before_round(None, None, 3)
