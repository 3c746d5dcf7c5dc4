import asyncio
import csv
import dataclasses
import json
import os

import numpy as np
import pytest
import tensorflow_federated as tff

from tff_radiomap.data import synthetic
from tff_radiomap.experiments import privacy_radiomap as experiment


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    spec = synthetic.DatasetSpec(maps=8, transmitters=3, size=64, seed=5)
    return synthetic.generate_dataset(str(tmp_path_factory.mktemp("rms")), spec, progress=False)


@pytest.fixture(scope="module")
def config(data_root):
    # 8 maps: 6 train maps over 3 clients, 2 a round; round 1 trains stage 1, rounds 2-3 stage 2.
    return experiment.ExperimentConfig(
        data_root=data_root, resolution=32, width=0.25, rounds=3, stage1_rounds=1, num_clients=3,
        clients_per_round=2, batch_size=4, client_learning_rate=3e-3,
    )


@pytest.fixture(scope="module")
def cached_trainers():
    """build_trainer memoised per config: the trainers are pure functions of it, and building the
    TFF processes is the slow part of a run."""
    cache = {}
    build = experiment.build_trainer

    def cached(config, data, **kwargs):
        if config not in cache:
            cache[config] = build(config, data, **kwargs)
        return cache[config]

    return cached


def _rows(output_dir):
    with open(os.path.join(output_dir, "metrics.csv")) as f:
        return list(csv.DictReader(f))


def test_interrupted_run_resumes_and_ends_like_an_uninterrupted_one(tff_runtime, config, cached_trainers, tmp_path, monkeypatch):
    monkeypatch.setattr(experiment, "build_trainer", cached_trainers)
    interrupted, straight = str(tmp_path / "interrupted"), str(tmp_path / "straight")

    assert experiment.run(config, interrupted, progress=False, stop_after_round=1) == {"stopped_after_round": 1}
    assert [r["round"] for r in _rows(interrupted)] == ["1"]
    assert not os.path.exists(os.path.join(interrupted, "summary.json"))
    resumed = experiment.run(config, interrupted, progress=False)
    uninterrupted = experiment.run(config, straight, progress=False)

    rows_a, rows_b = _rows(interrupted), _rows(straight)
    assert [r["round"] for r in rows_a] == ["1", "2", "3"]  # No row written twice.
    assert [r["phase"] for r in rows_a] == ["1", "2", "2"]
    for a, b in zip(rows_a, rows_b):
        for key in ("num_examples", "train_loss", "val_mse"):
            np.testing.assert_allclose(float(a[key]), float(b[key]), rtol=1e-5, err_msg=key)
    for key in ("best_val_mse", "best_round", "final_val_mse"):
        np.testing.assert_allclose(resumed[key], uninterrupted[key], rtol=1e-5, err_msg=key)
    assert json.load(open(os.path.join(interrupted, "config.json")))["defense"] == "none"
    assert os.listdir(os.path.join(interrupted, "tensorboard"))
    for name in ("curves.png", "predictions.png"):
        with open(os.path.join(straight, name), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", name


def test_centralised_reference_sees_the_same_samples_and_resumes(config, tmp_path):
    central = dataclasses.replace(config, centralised=True)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    experiment.run(central, a, progress=False, stop_after_round=2)
    resumed = experiment.run(central, a, progress=False)
    straight = experiment.run(central, b, progress=False)
    assert resumed["final_val_mse"] == pytest.approx(straight["final_val_mse"], rel=1e-5)
    rows = _rows(a)
    # Round r trains on as many samples as the federated round r: its 2 sampled clients' data.
    data = experiment.load_data(config)
    sizes = data.client_sizes()
    expected = [int(sizes[experiment.federated_data.sample_clients(config.seed, r, 3, 2)].sum()) for r in (1, 2, 3)]
    assert [int(r["num_examples"]) for r in rows] == expected
    assert [r["phase"] for r in rows] == ["1", "2", "2"]


def test_a_different_config_in_the_same_folder_is_refused(config, tmp_path):
    out = str(tmp_path / "run")
    os.makedirs(out)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(dataclasses.asdict(dataclasses.replace(config, seed=7)), f)
    with pytest.raises(experiment.ConfigMismatchError, match="seed: saved 7, now 0"):
        experiment.run(config, out, progress=False)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(stage1_rounds=4), "stage1_rounds=4: expected an integer in 0..rounds=3"),
        (dict(defense="nope"), "defense='nope': expected one of"),
        (dict(centralised=True, defense="fedsgd"), "defense='fedsgd': expected 'none' for the centralised reference"),
        (dict(resolution=36), "resolution=36"),
    ],
)
def test_bad_configs_name_the_field(config, change, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(config, **change)


def test_defense_table_refuses_unknown_protocols_and_duplicates():
    with pytest.raises(ValueError, match="protocol='async'"):
        experiment.register_defense("x", experiment.Defense("async", lambda c, p: None, ""))
    with pytest.raises(ValueError, match="'none' is registered already"):
        experiment.register_defense("none", experiment.DEFENSES["none"])


@pytest.mark.parametrize("defense", ["none", "uniform"])
def test_a_nan_client_update_is_zeroed_counted_and_the_run_goes_on(tff_runtime, config, cached_trainers, tmp_path, monkeypatch, defense):
    monkeypatch.setattr(experiment, "build_trainer", cached_trainers)
    poisoned_client = int(experiment.federated_data.sample_clients(config.seed, 2, 3, 2)[0])
    poisoned = dataclasses.replace(config, defense=defense, noise_multiplier=0.01, inject_nan_client=f"2:{poisoned_client}")
    summary = experiment.run(poisoned, str(tmp_path / "run"), progress=False)
    rows = _rows(str(tmp_path / "run"))
    assert [int(r["nonfinite_updates"]) for r in rows] == [0, 1, 0]
    assert all(np.isfinite(float(r[k])) for r in rows for k in ("train_loss", "val_mse"))
    assert np.isfinite(summary["final_val_mse"])
    # The weights the run ends with (its last saved state) are finite.
    trainer = cached_trainers(poisoned, experiment.load_data(poisoned))
    states = tff.program.FileProgramStateManager(str(tmp_path / "run" / "program_state"))
    loop = asyncio.new_event_loop()
    try:
        state, done = experiment._restore(loop, states, trainer)
    finally:
        loop.close()
    weights = trainer.network_weights(state["trainer_state"])
    assert done == 3 and all(np.all(np.isfinite(w)) for w in weights.stage1 + weights.stage2)


def test_overwrite_starts_a_folder_of_another_run_afresh_and_finished_runs_are_read_back(tff_runtime, config, cached_trainers, tmp_path, monkeypatch):
    monkeypatch.setattr(experiment, "build_trainer", cached_trainers)
    out = str(tmp_path / "run")
    experiment.run(dataclasses.replace(config, rounds=2, stage1_rounds=1), out, progress=False, stop_after_round=1)
    with pytest.raises(experiment.ConfigMismatchError, match="rounds: saved 2, now 3"):
        experiment.run(config, out, progress=False)
    summary = experiment.run(config, out, progress=False, overwrite=True)
    assert [r["round"] for r in _rows(out)] == ["1", "2", "3"] and summary["rounds"] == 3

    def no_training(*args):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(experiment, "build_trainer", no_training)
    assert experiment.run(config, out, progress=False) == summary

    # A finished run without its pictures (one from before they existed) gets them, untrained.
    for name in ("curves.png", "predictions.png"):
        os.remove(os.path.join(out, name))
    monkeypatch.setattr(experiment, "build_trainer", cached_trainers)
    monkeypatch.setattr(experiment, "_train_round", no_training)
    assert experiment.run(config, out, progress=False) == summary
    assert os.path.getsize(os.path.join(out, "curves.png")) > 0 and os.path.getsize(os.path.join(out, "predictions.png")) > 0


def test_resume_cuts_the_csv_back_to_the_saved_round(tff_runtime, config, cached_trainers, tmp_path, monkeypatch):
    """A kill between a round's CSV row and its saved state, or in the middle of a row."""
    monkeypatch.setattr(experiment, "build_trainer", cached_trainers)
    out = str(tmp_path / "run")
    experiment.run(config, out, progress=False, stop_after_round=1)
    with open(os.path.join(out, "metrics.csv"), "a") as f:
        f.write("2,1,0.5,9\n3,1,0.")  # Round 2's row without its state, round 3's cut short.
    experiment.run(config, out, progress=False)
    rows = _rows(out)
    assert [r["round"] for r in rows] == ["1", "2", "3"] and all(r["val_mse"] not in ("", None) for r in rows)


def test_an_attack_larger_than_the_data_is_refused_before_training(config, tmp_path, monkeypatch):
    def no_training(*args, **kwargs):
        raise AssertionError("the trainer was built")

    monkeypatch.setattr(experiment, "build_trainer", no_training)
    big = dataclasses.replace(config, defense="uniform", attack_every=1, attack_train_traces=500, attack_test_traces=10)
    with pytest.raises(experiment.DataTooSmallError, match="--attack_train_traces=500 --attack_test_traces=10: expected together at most the 24 samples of"):
        experiment.run(big, str(tmp_path / "run"), progress=False)
    assert not os.path.exists(tmp_path / "run" / "config.json")


def test_an_adaptive_run_with_the_attack_is_the_same_run_to_run_and_across_a_resume(tff_runtime, config, cached_trainers, tmp_path, monkeypatch):
    """The attack's noise, the allocator's picks and noise, and its proxy attacker and optimizer
    state (saved beside the program state) make a resumed run equal to an uninterrupted one."""
    monkeypatch.setattr(experiment, "build_trainer", cached_trainers)
    adaptive = dataclasses.replace(config, defense="adaptive", attack_every=1, attack_train_traces=16, attack_test_traces=8)
    # Rounds 1-2 of `resumed` are a second fresh run (run-to-run identity), round 3 comes after the resume.
    first, resumed = str(tmp_path / "first"), str(tmp_path / "resumed")
    experiment.run(adaptive, first, progress=False)
    assert experiment.run(adaptive, resumed, progress=False, stop_after_round=2) == {"stopped_after_round": 2}
    assert sorted(os.listdir(os.path.join(resumed, "allocator_state"))) == ["round_1.npz", "round_2.npz"]
    experiment.run(adaptive, resumed, progress=False)

    rows = {name: _rows(str(tmp_path / name)) for name in ("first", "resumed")}
    checked = [k for k in rows["first"][0] if k.startswith(("attack_", "allocator/")) or k in ("train_loss", "val_mse")]
    assert {"attack_rmse_m", "allocator/proxy_loss", "allocator/weight_residual"} <= set(checked)
    assert [r["round"] for r in rows["resumed"]] == ["1", "2", "3"]
    for a, b in zip(rows["first"], rows["resumed"]):
        for key in checked:
            np.testing.assert_allclose(float(b[key]), float(a[key]), rtol=1e-5, err_msg=f"round {a['round']} {key}")
    assert all(float(r["allocator/skipped"]) == 0 for r in rows["first"])


def test_resuming_an_adaptive_run_without_its_allocator_state_is_refused(tff_runtime, config, cached_trainers, tmp_path, monkeypatch):
    monkeypatch.setattr(experiment, "build_trainer", cached_trainers)
    adaptive = dataclasses.replace(config, defense="adaptive")
    out = str(tmp_path / "run")
    experiment.run(adaptive, out, progress=False, stop_after_round=1)
    os.remove(os.path.join(out, "allocator_state", "round_1.npz"))
    with pytest.raises(FileNotFoundError, match="round_1.npz: the adaptive allocator's state saved with round 1 is missing"):
        experiment.run(adaptive, out, progress=False)


def test_subspace_run_refreshes_its_twin_basis_and_resumes_exactly(tff_runtime, config, tmp_path):
    from tff_radiomap.data import twin
    from tff_radiomap.experiments import privacy_defenses

    twin_root = twin.ensure_twin(config.data_root, positions=4, out_root=str(tmp_path / "twin"))
    sub = dataclasses.replace(
        config, defense="subspace", noise_multiplier=0.01, twin_root=twin_root, basis_positions=4, basis_k_per_map=2,
        basis_every=2, attack_every=1, attack_train_traces=12, attack_test_traces=6,
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


@pytest.mark.parametrize("defense", ["none", "uniform"])
def test_in_process_clients_give_the_default_placement_metrics(tff_runtime, config, tmp_path, defense):
    """client_placement='in_process': the clients train in this process, the defense's clipping and
    noise and the server step stay TFF computations; both phases, 2 rounds."""
    base = dataclasses.replace(config, rounds=2, stage1_rounds=1, defense=defense, noise_multiplier=0.01)
    runs = {}
    for placement in ("tff", "in_process"):
        out = str(tmp_path / placement)
        runs[placement] = (experiment.run(dataclasses.replace(base, client_placement=placement), out, progress=False), _rows(out))
    (summary_t, rows_t), (summary_i, rows_i) = runs["tff"], runs["in_process"]
    assert [list(r) for r in rows_i] == [list(r) for r in rows_t]  # The same measurements.
    for a, b in zip(rows_i, rows_t):
        assert (a["phase"], a["num_examples"], a["nonfinite_updates"]) == (b["phase"], b["num_examples"], b["nonfinite_updates"])
        for key in ("train_loss", "val_mse"):
            np.testing.assert_allclose(float(a[key]), float(b[key]), rtol=1e-4, err_msg=key)
    np.testing.assert_allclose(summary_i["final_val_mse"], summary_t["final_val_mse"], rtol=1e-4)


def test_client_placement_is_checked_and_old_runs_count_as_tff(config, tmp_path):
    with pytest.raises(ValueError, match="client_placement='gpu': expected one of"):
        dataclasses.replace(config, client_placement="gpu")
    with pytest.raises(ValueError, match="client_placement='in_process': expected 'tff' for the centralised reference"):
        dataclasses.replace(config, centralised=True, client_placement="in_process")
    saved = dataclasses.asdict(config)
    del saved["client_placement"]  # A run saved before the field existed.
    os.makedirs(tmp_path / "old")
    with open(tmp_path / "old" / "config.json", "w") as f:
        json.dump(saved, f)
    assert experiment._check_config(config, str(tmp_path / "old"))
    with pytest.raises(experiment.ConfigMismatchError, match="client_placement: saved 'tff', now 'in_process'"):
        experiment._check_config(dataclasses.replace(config, client_placement="in_process"), str(tmp_path / "old"))
