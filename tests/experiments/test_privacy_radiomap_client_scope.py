"""The defenses whose clients each use their own basis (Subspace Noise with client scope, Aligned
Noise): keyed uploads through the TFF process, the owners' bases and allocations refreshed from
the twin, exact resume between refreshes, every attacker scoring them, and re-scoring."""

import csv
import dataclasses
import os
import shutil

import numpy as np
import pytest

from tff_radiomap.aggregators import aligned_noise, client_subspace_noise, subspace_noise
from tff_radiomap.experiments import basis_refresh, privacy_defenses, rescoring
from tff_radiomap.experiments import privacy_radiomap as experiment
from tff_radiomap.models.phases import Phase
from tff_radiomap.privacy import budget as budget_lib

SCORES = [m for m in privacy_defenses.ATTACK_METRICS if m != "attack_matching_seconds"]


def _rows(run_dir):
    with open(os.path.join(run_dir, "metrics.csv"), newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def client_runs(tff_runtime, config, cached_trainers, tmp_path_factory):
    """Aligned Noise at nu = 0.01 (1 direction a map: rank 2, as a client holds 2 of the 6 training
    maps), refreshed at each phase's first round, attacked at rounds 1 and 3 (before the stop and
    after the resume: a stage-1 round and a stage-2 round whose owners' files are read back): an
    uninterrupted run, one stopped after round 2 and resumed; and a Subspace Noise run with
    --basis_scope=client."""
    from tff_radiomap.data import twin

    base = tmp_path_factory.mktemp("client_scope")
    twin_root = twin.ensure_twin(config.data_root, positions=4, out_root=str(base / "twin"))
    aligned = dataclasses.replace(
        config,
        defense="aligned",
        noise_multiplier=0.01,
        twin_root=twin_root,
        basis_positions=4,
        basis_k_per_map=1,
        basis_every=2,
        attack_every=3,
        attack_steps=2,
        attack_train_traces=12,
        attack_test_traces=6,
        matching_maps=1,
        matching_stride=4,
        matching_calibration=4,
    )
    runs = {"aligned": aligned, "resumed": str(base / "a"), "straight": str(base / "b"), "subspace": str(base / "s")}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(experiment, "build_trainer", cached_trainers)
        runs["straight_summary"] = experiment.run(aligned, runs["resumed"], progress=False)
        os.rename(runs["resumed"], runs["straight"])
        experiment.run(aligned, runs["resumed"], progress=False, stop_after_round=2)
        runs["resumed_summary"] = experiment.run(aligned, runs["resumed"], progress=False)
        runs["subspace_config"] = dataclasses.replace(aligned, defense="subspace", basis_scope="client", subspace_share=0.5)
        experiment.run(runs["subspace_config"], runs["subspace"], progress=False)
    return runs


def test_owners_are_the_clients_then_the_maps_no_client_holds(config):
    owners = basis_refresh.map_owners(config)
    assert len(owners) == 8 and set(owners.values()) == set(range(5))  # 3 clients, 2 maps held by none.
    counts = np.bincount(list(owners.values()))
    assert list(counts) == [2, 2, 2, 1, 1]
    assert basis_refresh.client_rank(dataclasses.replace(config, basis_k_per_map=3)) == 6


def test_aligned_run_writes_every_owner_basis_and_allocation_and_resumes_exactly(client_runs):
    a, b, cfg = client_runs["resumed"], client_runs["straight"], client_runs["aligned"]
    rows = _rows(a)
    assert [r["basis_refreshed"] for r in rows] == ["1", "1", "0"]
    for ra, rb in zip(rows, _rows(b)):
        for key in ("train_loss", "val_mse", "attack_rmse_m", "attack_matching_rmse_m"):
            np.testing.assert_allclose(float(ra[key]), float(rb[key]), rtol=1e-4, err_msg=key)
    assert client_runs["resumed_summary"]["final_val_mse"] == pytest.approx(client_runs["straight_summary"]["final_val_mse"], rel=1e-5)
    for phase in (1, 2):
        folder = os.path.join(a, "basis", f"phase{phase}")
        g = basis_refresh.subspace_groups(cfg, Phase(phase))
        d = g.num_coordinates
        assert g.rank == 2
        for owner in range(5):
            v = subspace_noise.read_basis(client_subspace_noise.owner_basis_path(folder, owner), (d, 2)).numpy()
            np.testing.assert_allclose(v.T @ v, np.eye(2), atol=1e-4)
            sigma = aligned_noise.read_sigmas(aligned_noise.owner_sigma_path(folder, owner)).numpy().astype(np.float64)
            sizes = np.array([1.0, 1.0, d - 2.0])
            assert np.sum(sizes * sigma**2) == pytest.approx(budget_lib.total_budget(d, cfg.clip_norm, cfg.noise_multiplier), rel=1e-5)
            assert np.all(sigma > 0)
    for key in ("attack_matching_rmse_m", "attack_aware_rmse_m"):  # Every attacker scored the owners' noise at the attack rounds.
        assert [np.isfinite(float(r[key])) for r in rows] == [True, False, True], key


def test_aligned_run_accounts_each_upload_under_its_clients_allocation(client_runs):
    """Each phase refreshed once, so the sigma files on disk are the allocations in force: each
    client's epsilon composes Gaussian mechanisms of its own least-noised direction per phase."""
    import dp_accounting

    from tff_radiomap.experiments import privacy_accounting
    from tff_radiomap.learning import federated_data

    cfg, out = client_runs["aligned"], client_runs["straight"]
    acc = privacy_accounting.new_accountant()
    for r in range(1, cfg.rounds + 1):
        folder = os.path.join(out, "basis", f"phase{int(cfg.phase_for_round(r))}")
        for k in federated_data.sample_clients(cfg.seed, r, cfg.num_clients, cfg.clients_per_round):
            least = float(np.min(aligned_noise.read_sigmas(aligned_noise.owner_sigma_path(folder, int(k))).numpy()))
            acc.record_round([int(k)], dp_accounting.GaussianDpEvent(least / cfg.clip_norm))
    expected = acc.summary()["max_epsilon"]
    assert expected is not None and np.isfinite(expected)
    assert client_runs["straight_summary"]["privacy"]["max_epsilon"] == pytest.approx(expected, rel=1e-5)
    assert client_runs["resumed_summary"]["privacy"]["max_epsilon"] == pytest.approx(expected, rel=1e-5)


def test_subspace_with_client_scope_reads_each_clients_basis(client_runs):
    out = client_runs["subspace"]
    rows = _rows(out)
    assert [r["basis_refreshed"] for r in rows] == ["1", "1", "0"]
    assert [np.isfinite(float(r["attack_rmse_m"])) for r in rows] == [True, False, True]
    assert os.path.exists(client_subspace_noise.owner_basis_path(os.path.join(out, "basis", "phase1"), 4))
    assert not os.path.exists(os.path.join(out, "basis", "phase1.bin"))  # No federation basis.


def test_rescoring_a_client_scoped_run_gives_back_its_figures(client_runs, tmp_path):
    copy = str(tmp_path / "copy")
    shutil.copytree(client_runs["straight"], copy)
    before = _rows(copy)
    assert sorted(rescoring.rescore(copy)) == [1, 3]
    for b, a in zip(before, _rows(copy)):
        for key in SCORES:
            assert f"{float(a[key]):.6g}" == f"{float(b[key]):.6g}", (b["round"], key)


def test_a_missing_owner_file_stops_a_resume_by_name(client_runs, tmp_path):
    refresher = basis_refresh.BasisRefresher(client_runs["aligned"], str(tmp_path / "empty"), {})
    assert not refresher.due(3)
    with pytest.raises(FileNotFoundError, match="owner0.bin"):
        refresher.before_round(None, None, 3)
