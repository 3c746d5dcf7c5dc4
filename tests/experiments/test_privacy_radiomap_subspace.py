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

    monkeypatch.setattr(experiment, "build_trainer", cached_trainers)  # The resume of `a` reuses its trainer (same basis file).
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
    )
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    experiment.run(sub, a, progress=False, stop_after_round=2)
    resumed = experiment.run(sub, a, progress=False)  # Round 3 is not a refresh: its basis is read back.
    straight = experiment.run(sub, b, progress=False)
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
    for r in rows:  # The stronger attacker is the one reported.
        assert float(r["attack_rmse_m"]) == min(float(r["attack_plain_rmse_m"]), float(r["attack_aware_rmse_m"]))
    # Resuming between refreshes without the basis file cannot be exact, and says so.
    refresher = privacy_defenses.BasisRefresher(sub, str(tmp_path / "empty"), {})
    assert not refresher.due(3)
    with pytest.raises(FileNotFoundError, match="phase2.bin"):
        refresher.before_round(None, None, 3)
