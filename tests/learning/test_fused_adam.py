"""The stacked clients' fused Adam (TF's ResourceApplyAdam) against the masked per-client step."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from baselines import remnet_methods
from tests.rem_tiny import tiny_config, tiny_scenario
from tff_radiomap.learning import epfl_stacked, stacked_local, stacked_runner


@pytest.mark.parametrize("shape", [(3, 16, 16), (3, 17, 5)])  # Sizes a multiple of the kernel's vector width, and not.
def test_one_fused_adam_step_equals_the_masked_step_bit_for_bit(shape):
    config = tiny_config(client_learning_rate=3e-3)
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=shape).astype(np.float32)
    w, a, v = tf.constant(w0), tf.zeros(shape), tf.zeros(shape)
    scratch = (tf.Variable(w0), tf.Variable(tf.zeros(shape)), tf.Variable(tf.zeros(shape)))
    rates, everyone = stacked_local._adam_rates(config, 6), tf.ones([shape[0]])
    for t in range(6):
        g = (rng.normal(size=shape) * 10.0 ** rng.uniform(-12, 0, size=shape)).astype(np.float32)  # Tiny to large.
        w, a, v = stacked_local._optimizer_step(config, w, g, a, v, tf.fill([shape[0]], rates[t]), everyone)
        stacked_local._fused_adam_step(config, scratch, tf.constant(g), rates[t])
        for mine, fused in zip((w, a, v), scratch):
            np.testing.assert_array_equal(mine.numpy(), fused.numpy())


def _rounds(name, scenario, fused, rounds=3, selected=None):
    method = remnet_methods.method(name, tiny_config(k_fraction=0.3, bits=8, ema_decay=0.5, local_epochs=2))
    process = epfl_stacked.StackedProcess(method.config, method.local, fused_adam=fused)
    data = stacked_runner.stacked_data(scenario)
    state = process.initial_state(len(scenario.clients), range(len(scenario.clients)))
    selected = np.ones(len(scenario.clients), bool) if selected is None else selected
    losses = []
    for r in range(rounds):
        state, metrics = process.next(state, data, selected, r)
        losses.append(metrics["train_loss"])
    return process, state, losses


@pytest.mark.parametrize("name", ["epfl_remnet", "fedavg", "fedrep", "ditto", "pfedgp"])
def test_fused_rounds_equal_masked_rounds(name):
    scenario = tiny_scenario(train_sizes=(12, 11, 9))  # Batch 4: three steps an epoch for every client.
    fused_process, fused, fused_losses = _rounds(name, scenario, fused=True)
    masked_process, masked, masked_losses = _rounds(name, scenario, fused=False)
    assert fused_process._rounds[True, True].experimental_get_tracing_count() == 1
    assert all(f.experimental_get_tracing_count() == 0 for (_, kind), f in masked_process._rounds.items() if kind)
    # One Adam step is bit for bit (above); TF may round the rest of two different graphs apart.
    np.testing.assert_allclose(fused_losses, masked_losses, rtol=1e-5)
    for part in ("shared", "private"):
        for key in masked[part]:
            np.testing.assert_allclose(np.asarray(fused[part][key]), np.asarray(masked[part][key]), rtol=1e-4, atol=1e-6, err_msg=f"{part}/{key}")


def test_fused_adam_applies_only_when_every_client_takes_every_step():
    uniform, ragged = tiny_scenario(train_sizes=(12, 11, 9)), tiny_scenario(train_sizes=(12, 8, 9))
    method = remnet_methods.method("epfl_remnet", tiny_config())
    process = epfl_stacked.StackedProcess(method.config, method.local)
    everyone, two = np.ones(3, bool), np.array([True, False, True])
    assert process.fused_adam_applies(stacked_runner.stacked_data(uniform), everyone)
    assert not process.fused_adam_applies(stacked_runner.stacked_data(uniform), two)  # An idle client takes no step.
    assert not process.fused_adam_applies(stacked_runner.stacked_data(ragged), everyone)  # 8 rows: two steps of three.
    assert not process.fused_adam_applies(stacked_runner.stacked_data(uniform, pad_to=13), everyone)  # Padded to a fourth step.
    sgd = dataclasses.replace(method.config, client_optimizer="sgd")
    assert not epfl_stacked.StackedProcess(sgd, method.local).fused_adam_applies(stacked_runner.stacked_data(uniform), everyone)
    assert not epfl_stacked.StackedProcess(method.config, method.local, fused_adam=False).fused_adam_applies(stacked_runner.stacked_data(uniform), everyone)


@pytest.mark.parametrize("name", ["epfl_remnet", "ditto"])
def test_an_idle_client_is_left_alone_by_the_masked_step_the_fused_one_cannot_take(name):
    scenario = tiny_scenario(train_sizes=(12, 11, 9))
    idle = np.array([True, False, True])
    process, state, _ = _rounds(name, scenario, fused=True, rounds=2, selected=idle)
    assert all(f.experimental_get_tracing_count() == 0 for (_, kind), f in process._rounds.items() if kind)
    initial = process.initial_state(3, range(3))
    for key, value in state["private"].items():  # The idle client's head (Ditto: personal model) is untouched.
        np.testing.assert_array_equal(np.asarray(value)[1], initial["private"][key][1])
