import asyncio
import dataclasses
import json
import os

import numpy as np
import pytest
import tensorflow_federated as tff

from tests.experiments.run_rows import rows_of as _rows
from tff_radiomap.experiments import privacy_accounting as pa
from tff_radiomap.experiments import privacy_radiomap as experiment
from tff_radiomap.experiments import saved_runs
from tff_radiomap.metrics import reconstruction
from tff_radiomap.models import phases
from tff_radiomap.models.phases import Phase


@pytest.fixture(scope="module")
def uniform_straight(tff_runtime, config, cached_trainers, tmp_path_factory):
    """(config, folder, summary) of an uninterrupted Uniform Noise run (nu 0.01), shared (read only)
    by the resume test and the in-process placement test as their reference."""
    uniform = dataclasses.replace(config, defense="uniform", noise_multiplier=0.01)
    out = str(tmp_path_factory.mktemp("uniform") / "straight")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(experiment, "build_trainer", cached_trainers)
        summary = experiment.run(uniform, out, progress=False)
    return uniform, out, summary


def test_interrupted_run_resumes_and_ends_like_an_uninterrupted_one(tff_runtime, uniform_straight, cached_trainers, tmp_path, monkeypatch):
    """Metrics, summary and the per-client accountant (Uniform Noise: a finite epsilon) of a run
    stopped after round 1 and resumed are those of an uninterrupted run."""
    monkeypatch.setattr(experiment, "build_trainer", cached_trainers)
    config, straight, uninterrupted = uniform_straight
    interrupted = str(tmp_path / "interrupted")

    assert experiment.run(config, interrupted, progress=False, stop_after_round=1) == {"stopped_after_round": 1}
    assert [r["round"] for r in _rows(interrupted)] == ["1"]
    assert not os.path.exists(os.path.join(interrupted, "summary.json"))
    with open(pa.state_path(interrupted, 1)) as f:
        assert json.load(f)["uploads"] == pa.replay(config, 1).state()
    # A run already at its stop round stops again without training another (a front's breadth-first pass).
    assert experiment.run(config, interrupted, progress=False, stop_after_round=1) == {"stopped_after_round": 1}
    assert [r["round"] for r in _rows(interrupted)] == ["1"]
    resumed = experiment.run(config, interrupted, progress=False)

    rows_a, rows_b = _rows(interrupted), _rows(straight)
    assert [r["round"] for r in rows_a] == ["1", "2", "3"]  # No row written twice.
    assert [r["phase"] for r in rows_a] == ["1", "2", "2"]
    for a, b in zip(rows_a, rows_b):
        for key in ("num_examples", "train_loss", "val_mse"):
            np.testing.assert_allclose(float(a[key]), float(b[key]), rtol=1e-5, err_msg=key)
    for key in ("best_val_mse", "best_round", "final_val_mse"):
        np.testing.assert_allclose(resumed[key], uninterrupted[key], rtol=1e-5, err_msg=key)
    assert resumed["privacy"] == uninterrupted["privacy"] == pa.run_summary(pa.replay(config))
    assert resumed["privacy"]["max_epsilon"] > 0 and resumed["privacy"]["max_uploads_per_client"] >= 2
    # Seeded noise: the resumed run's rounds are the uninterrupted run's, bit for bit.
    strip = lambda rows: [{k: v for k, v in r.items() if "seconds" not in k} for r in rows]  # noqa: E731
    assert strip(rows_a) == strip(rows_b)
    front_of = saved_runs.max_epsilon_of_run(straight, json.load(open(os.path.join(straight, "summary.json"))))
    assert front_of == resumed["privacy"]["max_epsilon"]
    # A run finished before the accounting existed: its epsilon replayed from config.json.
    assert saved_runs.max_epsilon_of_run(straight, {}) == pytest.approx(front_of, rel=1e-12)
    assert json.load(open(os.path.join(interrupted, "config.json")))["defense"] == "uniform"
    assert os.listdir(os.path.join(interrupted, "tensorboard"))
    for name in ("curves.png", "predictions.png"):
        with open(os.path.join(straight, name), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", name


def test_centralised_reference_sees_the_same_samples_and_resumes(config, cached_trainers, tmp_path, monkeypatch):
    # One CentralisedReference for the three runs: its state (weights, optimizer, samples seen) is
    # all in the saved program state; the object holds its models (reassigned each round) and traced steps.
    monkeypatch.setattr(experiment, "build_trainer", cached_trainers)
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


def test_a_finished_run_is_recognised_from_its_config_and_summary_alone(config, tmp_path):
    """What the front reads back without starting a child: a folder copied from bench/ holds
    config.json, metrics.csv and summary.json, and no program state."""
    out = str(tmp_path / "run")
    assert not experiment.holds_finished_run(config, out)  # No folder yet.
    os.makedirs(out)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(dataclasses.asdict(config), f)
    assert not experiment.holds_finished_run(config, out)  # Started, not finished.
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump({"rounds": config.rounds}, f)
    assert experiment.holds_finished_run(config, out)
    with pytest.raises(experiment.ConfigMismatchError, match="seed: saved 0, now 7"):
        experiment.holds_finished_run(dataclasses.replace(config, seed=7), out)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(stage1_rounds=4), "stage1_rounds=4: expected an integer in 0..3"),
        (dict(defense="nope"), "defense='nope': expected one of"),
        (dict(centralised=True, defense="fedsgd"), "defense='fedsgd': expected 'none' with centralised"),
        (dict(resolution=36), "resolution=36"),
        (dict(matching_coarse=0), "matching_coarse=0: expected an integer >= 1"),
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


@pytest.fixture(scope="module")
def none_overwritten(tff_runtime, config, cached_trainers, tmp_path_factory):
    """(folder, summary, the refusal before it) of No Defense's run of the module's config, started
    afresh with `overwrite` in a folder that held another run's first round: the overwrite test's
    run, and the default placement's No Defense run of the in-process test."""
    out = str(tmp_path_factory.mktemp("none") / "run")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(experiment, "build_trainer", cached_trainers)
        experiment.run(dataclasses.replace(config, rounds=2, stage1_rounds=1), out, progress=False, stop_after_round=1)
        try:
            experiment.run(config, out, progress=False)
            refused = None
        except experiment.ConfigMismatchError as exc:
            refused = str(exc)
        summary = experiment.run(config, out, progress=False, overwrite=True)
    return out, summary, refused


def test_overwrite_starts_a_folder_of_another_run_afresh_and_finished_runs_are_read_back(none_overwritten, config, cached_trainers, monkeypatch):
    out, summary, refused = none_overwritten
    assert refused is not None and "rounds: saved 2, now 3" in refused
    assert [r["round"] for r in _rows(out)] == ["1", "2", "3"] and summary["rounds"] == 3
    # The gain's RMSE in dB: all pixels from the MSE, outdoor from the best round's row, and the
    # final model scored on the test maps.
    best_row = _rows(out)[summary["best_round"] - 1]
    assert summary["best_val_rmse_db"] == pytest.approx(reconstruction.gain_rmse_db(summary["best_val_mse"]))
    assert float(best_row["val_rmse_db"]) == pytest.approx(summary["best_val_rmse_db"])
    assert summary["best_val_outdoor_rmse_db"] == pytest.approx(float(best_row["val_outdoor_rmse_db"]))
    assert summary["best_val_outdoor_rmse_db"] > summary["best_val_rmse_db"]  # Indoor pixels sit at the floor.
    assert set(summary["test"]) == {"mse_db", "rmse_db", "outdoor_rmse_db"} and all(np.isfinite(list(summary["test"].values())))

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


@pytest.mark.parametrize("defense", ["none", "uniform"])
def test_in_process_clients_give_the_default_placement_metrics(
    tff_runtime, config, cached_trainers, uniform_straight, none_overwritten, tmp_path, monkeypatch, defense
):
    """client_placement='in_process': the clients train in this process, the defense's clipping and
    noise and the server step stay TFF computations; both phases, 3 rounds. The default placement's
    run: Uniform Noise's is the module's shared one; No Defense's the overwrite test's (a run of the
    module's config)."""
    monkeypatch.setattr(experiment, "build_trainer", cached_trainers)
    if defense == "uniform":
        base, tff_dir, summary_t = uniform_straight
    else:
        (tff_dir, summary_t, _), base = none_overwritten, config
    assert base.defense == defense and base.client_placement == "tff"
    out = str(tmp_path / "in_process")
    summary_i = experiment.run(dataclasses.replace(base, client_placement="in_process"), out, progress=False)
    rows_t, rows_i = _rows(tff_dir), _rows(out)
    assert [r["phase"] for r in rows_i] == ["1", "2", "2"]
    assert [list(r) for r in rows_i] == [list(r) for r in rows_t]  # The same measurements.
    for a, b in zip(rows_i, rows_t):
        assert (a["phase"], a["num_examples"], a["nonfinite_updates"]) == (b["phase"], b["num_examples"], b["nonfinite_updates"])
        for key in [k for k in a if k.startswith("aggregator/defense/budget")]:
            np.testing.assert_allclose(float(a[key]), float(b[key]), rtol=1e-5, err_msg=key)
    if defense == "uniform":
        # Seeded noise is keyed on each client's clipped update, bit for bit (`_update_hash`): the
        # TFF worker binary's TensorFlow and this process's may round an update differently (seen on
        # one machine of this kind, not on another), and then draw other noise. So with noise only
        # the rounds before it reaches the model are compared (round 1's training loss); with a
        # constant salt the two placements gave equal val_mse (bench/RESULTS.md, "Seeded noise follows the update's bits").
        np.testing.assert_allclose(float(rows_i[0]["train_loss"]), float(rows_t[0]["train_loss"]), rtol=1e-4)
        return
    for a, b in zip(rows_i, rows_t):
        for key in ("train_loss", "val_mse"):
            np.testing.assert_allclose(float(a[key]), float(b[key]), rtol=1e-4, err_msg=key)
    np.testing.assert_allclose(summary_i["final_val_mse"], summary_t["final_val_mse"], rtol=1e-4)


def test_client_placement_is_checked_and_old_runs_count_as_tff(config, tmp_path):
    with pytest.raises(ValueError, match="client_placement='gpu': expected one of"):
        dataclasses.replace(config, client_placement="gpu")
    with pytest.raises(ValueError, match="client_placement='in_process': expected 'tff' with centralised"):
        dataclasses.replace(config, centralised=True, client_placement="in_process")
    saved = dataclasses.asdict(config)
    del saved["client_placement"]  # A run saved before the field existed.
    os.makedirs(tmp_path / "old")
    with open(tmp_path / "old" / "config.json", "w") as f:
        json.dump(saved, f)
    assert experiment._check_config(config, str(tmp_path / "old"))
    with pytest.raises(experiment.ConfigMismatchError, match="client_placement: saved 'tff', now 'in_process'"):
        experiment._check_config(dataclasses.replace(config, client_placement="in_process"), str(tmp_path / "old"))


def test_a_field_the_defense_does_not_read_does_not_tell_runs_apart(config, tmp_path):
    """subspace_share is read by Subspace Noise alone: a Uniform run saved under another share is
    today's Uniform run; a Subspace run under another share is another run."""
    for defense, same in (("uniform", True), ("subspace", False)):
        saved = dataclasses.asdict(dataclasses.replace(config, defense=defense, subspace_share=0.5))
        folder = tmp_path / defense
        os.makedirs(folder)
        with open(folder / "config.json", "w") as f:
            json.dump(saved, f)
        now = dataclasses.replace(config, defense=defense, subspace_share=0.25)
        if same:
            assert experiment._check_config(now, str(folder))
        else:
            with pytest.raises(experiment.ConfigMismatchError, match="subspace_share: saved 0.5, now 0.25"):
                experiment._check_config(now, str(folder))
    with pytest.raises(experiment.ConfigMismatchError, match="defense: saved 'uniform', now 'subspace'"):
        experiment._check_config(dataclasses.replace(config, defense="subspace", subspace_share=0.5), str(tmp_path / "uniform"))
    # The allocator's settings likewise tell only Adaptive runs apart (a front adds Adaptive rows
    # with --set=allocator_lambda_p=... beside runs saved without it).
    assert experiment._check_config(
        dataclasses.replace(config, defense="uniform", allocator_lambda_p=100.0, adaptive_partition="leakage"), str(tmp_path / "uniform")
    )
    saved = dataclasses.asdict(dataclasses.replace(config, defense="adaptive"))
    os.makedirs(tmp_path / "adaptive")
    with open(tmp_path / "adaptive" / "config.json", "w") as f:
        json.dump(saved, f)
    with pytest.raises(experiment.ConfigMismatchError, match="allocator_lambda_p: saved 1.0, now 100.0"):
        experiment._check_config(dataclasses.replace(config, defense="adaptive", allocator_lambda_p=100.0), str(tmp_path / "adaptive"))


def test_runs_without_noise_are_the_same_run_at_every_noise_multiplier(config, tmp_path):
    """No Defense, FedSGD and Clip Only read no noise setting: Table I at nu = 0.01 reads back the
    runs saved at nu = 3 (or the front's No Defense runs, saved at nu = 0); a noise defense's nu
    still tells its runs apart."""
    for defense in ("none", "fedsgd", "clip", "uniform"):
        folder = tmp_path / defense
        os.makedirs(folder)
        with open(folder / "config.json", "w") as f:
            json.dump(dataclasses.asdict(dataclasses.replace(config, defense=defense, noise_multiplier=3.0, fresh_noise=True)), f)
        now = dataclasses.replace(config, defense=defense, noise_multiplier=0.01)
        if defense == "uniform":
            with pytest.raises(experiment.ConfigMismatchError, match="fresh_noise: saved True, now False, noise_multiplier: saved 3.0, now 0.01"):
                experiment._check_config(now, str(folder))
        else:
            assert experiment._check_config(now, str(folder))


def test_runs_saved_before_stage2_output_existed_count_as_relu(config, tmp_path):
    assert config.stage2_output == "linear" and config.model_config().stage2_output == "linear"
    saved = dataclasses.asdict(config)
    del saved["stage2_output"]  # A run saved before the field existed used the authors' ReLU.
    os.makedirs(tmp_path / "old")
    with open(tmp_path / "old" / "config.json", "w") as f:
        json.dump(saved, f)
    with pytest.raises(experiment.ConfigMismatchError, match="stage2_output: saved 'relu', now 'linear'"):
        experiment._check_config(config, str(tmp_path / "old"))
    assert experiment._check_config(dataclasses.replace(config, stage2_output="relu"), str(tmp_path / "old"))
    with pytest.raises(ValueError, match="stage2_output='tanh': expected one of"):
        dataclasses.replace(config, stage2_output="tanh")


def test_a_runs_broadcast_model_is_read_back_by_round(tff_runtime, uniform_straight, cached_trainers, monkeypatch):
    """`saved_runs.broadcast_state` of the uninterrupted run: round 1's model is the initial one,
    round 2's the state saved after round 1 (stage 1 trained in round 1), a round past the saved
    states is refused by name."""
    monkeypatch.setattr(experiment, "build_trainer", cached_trainers)
    config, run_dir, _ = uniform_straight
    first = saved_runs.broadcast_state(run_dir, 1)
    for got, want in zip(first.weights.stage1, phases.initial_weights(config.model_config(), config.seed).stage1):
        np.testing.assert_array_equal(got, want)
    # Round 2's broadcast model is the one round 1 ended with: its validation MSE is round 1's row.
    second = saved_runs.broadcast_state(run_dir, 2)
    logged = float(_rows(run_dir)[0]["val_mse"])
    evaluator = reconstruction.Evaluator(config.model_config(), *experiment.load_data(config).val)
    assert evaluator.mse(second.weights, Phase.STAGE1) == pytest.approx(logged, rel=1e-6)
    assert evaluator.mse(first.weights, Phase.STAGE1) != pytest.approx(logged, rel=1e-3)
    assert second.client_optimizer == config.client_optimizer and second.source.endswith("round 2")
    # The run kept the states saved after rounds 1-3: the models broadcast in rounds 2-4.
    with pytest.raises(saved_runs.RoundNotSavedError, match="round 5 needs the program state saved after round 4"):
        saved_runs.broadcast_state(run_dir, 5)
