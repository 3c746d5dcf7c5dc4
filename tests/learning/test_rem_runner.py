"""The program-side driver: client-state store, checkpoints, resume without duplicate rows."""

import collections
import csv
import json
import os

import numpy as np
import pytest

from baselines import remnet_methods
from tests.rem_tiny import tiny_config, tiny_scenario
from tff_radiomap.learning import rem_runner


def test_store_and_checkpoint_round_trip(tmp_path):
    states = {i: collections.OrderedDict(head=collections.OrderedDict(w=np.full((2, 2), i, np.float32)), rounds=np.int32(i)) for i in range(3)}
    store = rem_runner.ClientStateStore(states)
    store.scatter([1], [collections.OrderedDict(head=collections.OrderedDict(w=np.ones((2, 2), np.float32) * 7), rounds=np.int32(5))])
    server = collections.OrderedDict(model=collections.OrderedDict(shared=[np.arange(3.0)], round=np.int32(4)), aggregator=())
    path = str(tmp_path / "ckpt.npz")
    rem_runner.save_checkpoint(path, server, store, {"round": 4})
    fresh = rem_runner.ClientStateStore(
        {i: collections.OrderedDict(head=collections.OrderedDict(w=np.zeros((2, 2), np.float32)), rounds=np.int32(0)) for i in range(3)}
    )
    template = collections.OrderedDict(model=collections.OrderedDict(shared=[np.zeros(3)], round=np.int32(0)), aggregator=())
    restored, meta = rem_runner.load_checkpoint(path, template, fresh)
    assert meta == {"round": 4}
    np.testing.assert_array_equal(restored["model"]["shared"][0], [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(fresh.states[1]["head"]["w"], 7.0)
    assert fresh.states[2]["rounds"] == 2


class Killed(Exception):
    pass


def test_killed_run_resumes_from_its_checkpoint_without_duplicate_rows(tff_runtime, tmp_path):
    scenario = tiny_scenario()
    method = remnet_methods.method("epfl_remnet", tiny_config(sync_period=2))
    run = rem_runner.RunConfig(rounds=5, eval_every=1, checkpoint_every=2)
    run_dir = str(tmp_path / "run")

    def kill_after_round_3(message):
        if "round 3/" in message:
            raise Killed()

    with pytest.raises(Killed):
        rem_runner.run_experiment(run_dir, scenario, method, run, log=kill_after_round_3)
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        assert [int(r["round"]) for r in csv.DictReader(f)] == [0, 1, 2]  # Checkpoint after round 1.
    final = rem_runner.run_experiment(run_dir, scenario, method, run, log=lambda m: None)
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [int(r["round"]) for r in rows] == [0, 1, 2, 3, 4]
    assert final["cum_uplink_bytes"] == sum(int(r["uplink_bytes"]) for r in rows)
    assert sum(int(r["uploads"]) for r in rows) == 2 * 3  # Rounds 1 and 3 sync, 3 clients each.
    assert np.isfinite(final["macro_rmse"]) and len(final["per_client_rmse"]) == 3
    # Finished: a rerun reads the result back; another configuration in the folder is refused.
    assert rem_runner.run_experiment(run_dir, scenario, method, run) == final
    with pytest.raises(ValueError, match="another configuration"):
        rem_runner.run_experiment(run_dir, scenario, method, rem_runner.RunConfig(rounds=6), log=lambda m: None)


def test_client_selection_is_seeded_and_complete_when_all_participate():
    assert rem_runner.select_clients(5, 5, 0, 3) == [0, 1, 2, 3, 4]
    a = rem_runner.select_clients(90, 10, 0, 3)
    assert a == rem_runner.select_clients(90, 10, 0, 3) and len(set(a)) == 10
    assert a != rem_runner.select_clients(90, 10, 0, 4)


def test_a_nan_client_is_dropped_counted_and_the_run_stays_finite(tff_runtime, tmp_path):
    scenario = tiny_scenario()
    method = remnet_methods.method("epfl_remnet", tiny_config(sync_period=1))
    run = rem_runner.RunConfig(rounds=3, eval_every=1, checkpoint_every=1, inject_nan_client="1:2")
    run_dir = str(tmp_path / "run")
    final = rem_runner.run_experiment(run_dir, scenario, method, run, log=lambda m: None)
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [int(r["nonfinite_updates"]) for r in rows] == [0, 1, 0]
    assert [int(r["uploads"]) for r in rows] == [3, 2, 3]  # The poisoned client uploads nothing.
    assert all(np.isfinite(float(r[k])) for r in rows for k in ("train_loss", "macro_rmse"))
    assert np.isfinite(final["macro_rmse"]) and all(np.isfinite(final["per_client_rmse"]))
    # Server and client states (backbone, EMA, heads, error feedback) are all finite.
    arrays = np.load(os.path.join(run_dir, "checkpoint.npz"))
    assert all(np.all(np.isfinite(arrays[k])) for k in arrays.files if k != "meta")
    with pytest.raises(ValueError, match="inject_nan_client='3:0'"):
        rem_runner.RunConfig(rounds=3, inject_nan_client="3:0")


def test_overwrite_replaces_a_run_of_another_configuration(tff_runtime, tmp_path):
    scenario = tiny_scenario()
    method = remnet_methods.method("epfl_remnet", tiny_config(sync_period=1))
    run_dir = str(tmp_path / "run")
    rem_runner.run_experiment(run_dir, scenario, method, rem_runner.RunConfig(rounds=2, eval_every=1), log=lambda m: None)
    (tmp_path / "run" / "notes.txt").write_text("mine")
    longer = rem_runner.RunConfig(rounds=3, eval_every=1)
    with pytest.raises(rem_runner.RunFolderConflict, match="another configuration"):
        rem_runner.run_experiment(run_dir, scenario, method, longer, log=lambda m: None)
    final = rem_runner.run_experiment(run_dir, scenario, method, longer, log=lambda m: None, overwrite=True)
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        assert [int(r["round"]) for r in csv.DictReader(f)] == [0, 1, 2]
    assert final["rounds"] == 3 and (tmp_path / "run" / "notes.txt").read_text() == "mine"


def test_in_process_clients_give_the_tff_placement_run(tff_runtime, tmp_path):
    """client_placement='in_process': the clients' rounds in this process, Top-K, quantization,
    aggregation and the server update in TFF; 2 rounds (a sync round among them), a NaN client."""
    scenario = tiny_scenario()
    method = remnet_methods.method("epfl_remnet", tiny_config(sync_period=1))
    results = {}
    for placement in ("tff", "in_process"):
        run = rem_runner.RunConfig(rounds=2, eval_every=1, checkpoint_every=1, inject_nan_client="1:2", client_placement=placement)
        run_dir = str(tmp_path / placement)
        final = rem_runner.run_experiment(run_dir, scenario, method, run, log=lambda m: None)
        with open(os.path.join(run_dir, "metrics.csv")) as f:
            results[placement] = final, list(csv.DictReader(f))
    (final_t, rows_t), (final_i, rows_i) = results["tff"], results["in_process"]
    for a, b in zip(rows_i, rows_t):
        for key in ("uploads", "uplink_bytes", "nonfinite_updates"):
            assert a[key] == b[key], key
        for key in ("train_loss", "macro_rmse", "micro_rmse"):
            np.testing.assert_allclose(float(a[key]), float(b[key]), rtol=1e-4, err_msg=key)
    np.testing.assert_allclose(final_i["per_client_rmse"], final_t["per_client_rmse"], rtol=1e-4)
    assert [int(r["nonfinite_updates"]) for r in rows_i] == [0, 1]
    assert "client_placement" not in json.load(open(tmp_path / "tff" / "config.json"))["run"]  # Old runs still match.
    assert json.load(open(tmp_path / "in_process" / "config.json"))["run"]["client_placement"] == "in_process"
    with pytest.raises(ValueError, match="client_placement='gpu'"):
        rem_runner.RunConfig(client_placement="gpu")
