"""The EPFL-REMNet process: what the server holds, what clients keep, what a sync round sends."""

import numpy as np
import pytest
import tensorflow_federated as tff

from tests.rem_tiny import tiny_config, tiny_scenario
from tff_radiomap.aggregators import top_k
from tff_radiomap.learning import epfl_remnet, rem_runner


def _names(type_spec) -> list[str]:
    """Every element name in a (nested, possibly federated) TFF type."""
    if isinstance(type_spec, tff.FederatedType):
        return _names(type_spec.member)
    if isinstance(type_spec, tff.StructType):
        return [n for name, t in tff.structure.iter_elements(type_spec) for n in ([name] if name else []) + _names(t)]
    return []


def _build(config, scenario):
    data, n_max = rem_runner.padded_client_data(scenario)
    process, layout = epfl_remnet.build_process(config, epfl_remnet.client_data_type(n_max, scenario.num_features, scenario.num_outputs))
    states = [epfl_remnet.initial_client_state(config, layout, seed=i) for i in range(len(data))]
    return process, layout, data, states


def test_head_never_in_server_state_but_in_client_state():
    scenario = tiny_scenario()
    process, layout, _, _ = _build(tiny_config(head="mlp"), scenario)
    server_names = _names(process.state_type)
    client_names = _names(process.next.type_signature.parameter[1])
    assert any(n.startswith("backbone_") for n in server_names)
    assert not any(n.startswith("head_") for n in server_names), server_names
    assert {"head_hidden.kernel", "head_out.kernel"} <= set(client_names)
    assert "error" in client_names
    # Without the split the head is shared: the check above could fail.
    shared_process, _, _, _ = _build(tiny_config(split_head=False), scenario)
    assert any(n.startswith("head_") for n in _names(shared_process.state_type))


def test_sync_round_sends_top_k_of_u_and_keeps_the_residual(tff_runtime):
    scenario = tiny_scenario(train_sizes=(10,))
    config = tiny_config(k_fraction=0.1, bits=None, sync_period=2, ema_decay=0.0)
    process, layout, data, states = _build(config, scenario)
    state0 = process.initialize()
    theta0 = state0["model"]["shared"]

    # Round 0 (not a sync round): the head learns, nothing is sent, theta and e are unchanged.
    state1, states1, metrics1 = process.next(state0, states, data)
    assert metrics1["uploads"] == 0 and metrics1["uplink_bytes"] == 0
    for key in layout.shared_keys:
        np.testing.assert_array_equal(state1["model"]["shared"][key], theta0[key])
        np.testing.assert_array_equal(states1[0]["error"][key], 0.0)
    assert any(np.any(states1[0]["head"][k] != states[0]["head"][k]) for k in layout.private_keys)
    assert states1[0]["rounds"] == 1 and states1[0]["uploads"] == 0

    # Round 1 (sync): theta moves by exactly the K entries sent; e holds the rest of u.
    state2, states2, metrics2 = process.next(state1, states1, data)
    sent = np.concatenate([(state2["model"]["shared"][k] - theta0[k]).ravel() for k in layout.shared_keys])
    error = np.concatenate([np.asarray(states2[0]["error"][k]).ravel() for k in layout.shared_keys])
    n = sent.size
    k = top_k.num_kept(n, k_fraction=0.1)
    assert np.count_nonzero(sent) == k
    assert np.all((sent == 0) | (error == 0))  # Disjoint supports: u = sent + e entry by entry.
    assert np.abs(sent[sent != 0]).min() >= np.abs(error).max() * (1 - 1e-6)  # The K largest of |u|.
    assert metrics2["uploads"] == 1 and states2[0]["uploads"] == 1
    assert metrics2["uplink_bytes"] == top_k.index_bytes(n, k) + 4 * k


def test_quantized_upload_bytes_and_ema(tff_runtime):
    scenario = tiny_scenario()
    config = tiny_config(k_fraction=0.2, bits=8, sync_period=1, ema_decay=0.75)
    process, layout, data, states = _build(config, scenario)
    state0 = process.initialize()
    state1, _, metrics = process.next(state0, states, data)
    factory = epfl_remnet.upload_factory(config)
    per_client = factory.byte_counts(layout.shared_type)["bytes_per_client"]
    n = sum(v.size for v in layout.initial_shared)
    k = top_k.num_kept(n, k_fraction=0.2)
    assert per_client == top_k.index_bytes(n, k) + k + 4 * len(layout.shared_keys)
    assert metrics["uplink_bytes"] == 3 * per_client
    for key in layout.shared_keys:
        expected = 0.75 * state0["model"]["ema"][key] + 0.25 * state1["model"]["shared"][key]
        np.testing.assert_allclose(state1["model"]["ema"][key], expected, rtol=1e-6, atol=1e-7)


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="sync_period=0"):
        tiny_config(sync_period=0)
    with pytest.raises(ValueError, match="ema_decay=1.0"):
        tiny_config(ema_decay=1.0)
    with pytest.raises(ValueError, match="client_optimizer='rmsprop'"):
        tiny_config(client_optimizer="rmsprop")
