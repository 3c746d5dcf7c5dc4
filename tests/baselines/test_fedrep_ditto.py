"""FedRep and Ditto on the stacked clients: what each trains, keeps and sends."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from baselines import remnet_methods
from baselines.ditto import ditto
from baselines.fedrep import fedrep
from tests.rem_tiny import tiny_config, tiny_scenario
from tff_radiomap.learning import epfl_remnet, epfl_stacked, stacked_runner


def _first_round(method, scenario):
    process = epfl_stacked.StackedProcess(method.config, method.local)
    state = process.initial_state(len(scenario.clients), range(len(scenario.clients)))
    data = stacked_runner.stacked_data(scenario)
    new, metrics = process.next(state, data, np.ones(len(scenario.clients), bool), 0)
    return process, state, new, metrics, data


def test_head_only_training_leaves_the_body_untouched():
    method = fedrep(tiny_config(), head_epochs=1)
    process = epfl_stacked.StackedProcess(method.config, method.local)
    state = process.initial_state(3, range(3))
    data = {k: tf.constant(v) for k, v in stacked_runner.stacked_data(tiny_scenario()).items()}
    params = {k: np.repeat(v[None], 3, 0) for k, v in state["shared"].items()} | state["private"]
    trained, _ = epfl_stacked.local_train(
        method.config,
        params,
        process.stacked.private_keys,
        process._loss_fn(),
        data,
        tf.ones(3, tf.bool),
        tf.constant(state["seeds"]),
        tf.constant(0, tf.int64),
        1,
    )
    for k in process.layout.shared_keys:
        np.testing.assert_array_equal(trained[k], params[k])
    assert all(np.abs(trained[k] - params[k]).max() > 0 for k in process.stacked.private_keys)


def test_fedrep_sends_the_float32_body_and_keeps_a_head_unlike_joint_training():
    scenario = tiny_scenario()
    process, state, new, metrics, _ = _first_round(fedrep(tiny_config(), head_epochs=2), scenario)
    body_values = sum(v.size for v in process.layout.initial_shared)
    assert process.bytes_per_upload == 4 * body_values and metrics["uploads"] == 3
    assert metrics["uplink_bytes"] == 3 * 4 * body_values
    assert set(new["private"]) == {"head_out.kernel", "head_out.bias"}
    _, _, joint, _, _ = _first_round(remnet_methods.method("pfl_uncompressed", dataclasses.replace(tiny_config(), ema_decay=0.0)), scenario)
    assert np.abs(np.asarray(new["private"]["head_out.kernel"]) - np.asarray(joint["private"]["head_out.kernel"])).max() > 1e-4


def test_ditto_personal_model_between_local_training_and_the_global_model():
    scenario = tiny_scenario()
    process, state, free, _, _ = _first_round(ditto(tiny_config(), ditto_lambda=0.0), scenario)
    _, _, tied, _, _ = _first_round(ditto(tiny_config(), ditto_lambda=1e4), scenario)
    _, _, fedavg, _, _ = _first_round(remnet_methods.method("fedavg", tiny_config()), scenario)
    theta0 = state["shared"]
    for k in process.layout.shared_keys:
        # The global model is FedAvg's, whatever lambda.
        np.testing.assert_allclose(free["shared"][k], fedavg["shared"][k], rtol=1e-5, atol=1e-6)
        personal = epfl_stacked.PERSONAL + k
        # lambda = 0 moves the personal model freely; a large lambda holds it at theta^0.
        free_move = np.abs(np.asarray(free["private"][personal]) - theta0[k]).max()
        tied_move = np.abs(np.asarray(tied["private"][personal]) - theta0[k]).max()
        assert tied_move < 0.2 * free_move + 1e-6, k


def test_fedrep_and_ditto_are_refused_by_the_tff_process():
    for method in (fedrep(tiny_config()), ditto(tiny_config())):
        with pytest.raises(ValueError, match="stacked clients"):
            epfl_remnet.build_process(method.config, None, method.local)


def test_bad_schedules_are_refused():
    with pytest.raises(ValueError, match="head_epochs=-1"):
        tiny_config(head_epochs=-1)
    with pytest.raises(ValueError, match="ditto_lambda"):
        tiny_config(ditto_lambda=0.1)  # split_head=True: Ditto needs the whole model shared.
