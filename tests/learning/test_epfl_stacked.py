"""The stacked clients (epfl_stacked) against the TFF process, and the FedRep / Ditto schedules."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from baselines import remnet_methods
from tests.rem_tiny import tiny_config, tiny_scenario
from tff_radiomap.learning import epfl_remnet, epfl_stacked, rem_runner, stacked_local


def _stacked_data(scenario):
    data, _ = rem_runner.padded_client_data(scenario)
    return {
        "x": np.stack([d["x"] for d in data]),
        "y": np.stack([d["y"] for d in data]),
        "num_examples": np.asarray([d["num_examples"] for d in data], np.int32),
    }


def _run_both(method, scenario, rounds):
    data, n_max = rem_runner.padded_client_data(scenario)
    process, layout = epfl_remnet.build_process(method.config, epfl_remnet.client_data_type(n_max, scenario.num_features, scenario.num_outputs), method.local)
    states = [epfl_remnet.initial_client_state(method.config, layout, seed=i) for i in range(len(data))]
    server = process.initialize()
    stacked = epfl_stacked.StackedProcess(method.config, method.local)
    sstate = stacked.initial_state(len(data), [s["seed"] for s in states])
    sdata = _stacked_data(scenario)
    for r in range(rounds):
        server, states, metrics = process.next(server, states, data)
        sstate, smetrics = stacked.next(sstate, sdata, np.ones(len(data), bool), r)
        assert smetrics["uplink_bytes"] == metrics["uplink_bytes"]
        assert smetrics["uploads"] == metrics["uploads"]
        np.testing.assert_allclose(smetrics["train_loss"], metrics["train_loss"], rtol=1e-3)
    return server, states, sstate, layout


@pytest.mark.parametrize("name", ["epfl_remnet", "fedavg", "fedfly", "pfedgp"])
def test_stacked_rounds_equal_the_tff_process(tff_runtime, name):
    scenario = tiny_scenario(train_sizes=(6, 9, 12))
    base = tiny_config(k_fraction=0.3, bits=8, sync_period=2, ema_decay=0.5)
    method = remnet_methods.method(name, base)
    server, states, sstate, layout = _run_both(method, scenario, rounds=4 if name != "pfedgp" else 2)  # 2 GP rounds: Adam amplifies Cholesky rounding
    for key in layout.shared_keys:
        np.testing.assert_allclose(sstate["shared"][key], server["model"]["shared"][key], rtol=2e-3, atol=1e-3, err_msg=key)
    for key in layout.private_keys:
        np.testing.assert_allclose(sstate["private"][key], np.stack([s["head"][key] for s in states]), rtol=2e-3, atol=1e-3, err_msg=key)
    if "error" in sstate:
        for key in layout.shared_keys:
            np.testing.assert_allclose(sstate["error"][key], np.stack([s["error"][key] for s in states]), rtol=2e-3, atol=1e-3, err_msg=key)


def test_the_fused_adam_round_equals_the_tff_process(tff_runtime):
    scenario = tiny_scenario(train_sizes=(12, 11, 9))  # Every client takes every step: Adam runs fused.
    method = remnet_methods.method("epfl_remnet", tiny_config(k_fraction=0.3, bits=8, sync_period=2, ema_decay=0.5))
    server, states, sstate, layout = _run_both(method, scenario, rounds=4)
    for key in layout.shared_keys:
        np.testing.assert_allclose(sstate["shared"][key], server["model"]["shared"][key], rtol=2e-3, atol=1e-3, err_msg=key)
    for key in layout.private_keys:
        np.testing.assert_allclose(sstate["private"][key], np.stack([s["head"][key] for s in states]), rtol=2e-3, atol=1e-3, err_msg=key)


def test_layer_norm_gradient_equals_differentiating_the_moments():
    rng = np.random.default_rng(0)
    h = tf.constant(rng.normal(size=(3, 5, 7)).astype(np.float32) * 3.0 + 1.0)
    p = {"n.gamma": tf.constant(rng.normal(size=(3, 7)).astype(np.float32)), "n.beta": tf.constant(rng.normal(size=(3, 7)).astype(np.float32))}
    dy = tf.constant(rng.normal(size=(3, 5, 7)).astype(np.float32))

    def reference(h, gamma, beta):  # Keras' formula, op by op.
        mean, var = tf.nn.moments(h, axes=[-1], keepdims=True)
        return (h - mean) * tf.math.rsqrt(var + stacked_local.LAYER_NORM_EPSILON) * gamma[:, None, :] + beta[:, None, :]

    values = [h, p["n.gamma"], p["n.beta"]]
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(values)
        mine = stacked_local._layer_norm({"n.gamma": values[1], "n.beta": values[2]}, "n", values[0])
        theirs = reference(*values)
    np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6)
    for got, want in zip(tape.gradient(mine, values, output_gradients=dy), tape.gradient(theirs, values, output_gradients=dy)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)


def _with_val(scenario):
    clients = [dataclasses.replace(c, x_val=c.x_train[:2].copy(), y_val=c.y_train[:2].copy()) for c in scenario.clients]
    return dataclasses.replace(scenario, clients=clients)


def test_a_killed_stacked_run_resumes_to_the_same_rows(tmp_path, monkeypatch):
    from tff_radiomap.learning import stacked_runner

    scenario = _with_val(tiny_scenario())
    method = remnet_methods.method("epfl_remnet", tiny_config(k_fraction=0.3, sync_period=2))
    run = rem_runner.RunConfig(rounds=4, eval_every=2, checkpoint_every=2)
    straight = stacked_runner.run_stacked(str(tmp_path / "a"), scenario, method, run, log=lambda m: None)
    real_next = epfl_stacked.StackedProcess.next

    def dies_in_round_3(self, state, data, selected, round_num):
        if round_num == 3:
            raise KeyboardInterrupt("killed")
        return real_next(self, state, data, selected, round_num)

    monkeypatch.setattr(epfl_stacked.StackedProcess, "next", dies_in_round_3)
    with pytest.raises(KeyboardInterrupt):
        stacked_runner.run_stacked(str(tmp_path / "b"), scenario, method, run, log=lambda m: None)
    monkeypatch.setattr(epfl_stacked.StackedProcess, "next", real_next)
    resumed = stacked_runner.run_stacked(str(tmp_path / "b"), scenario, method, run, log=lambda m: None)
    assert resumed["macro_rmse"] == pytest.approx(straight["macro_rmse"], rel=1e-5)
    assert resumed["val"]["macro_rmse"] != resumed["macro_rmse"]  # Validation and test are scored apart.
    rows = [open(tmp_path / d / "metrics.csv").read().splitlines() for d in ("a", "b")]
    assert len(rows[0]) == len(rows[1]) == 5
    drop_time = lambda line: [v for i, v in enumerate(line.split(",")) if i != stacked_runner.CSV_FIELDS.index("round_s")]  # noqa: E731
    for a, b in zip(rows[0][1:], rows[1][1:]):
        np.testing.assert_allclose([float(v or 0) for v in drop_time(a)], [float(v or 0) for v in drop_time(b)], rtol=1e-5)
