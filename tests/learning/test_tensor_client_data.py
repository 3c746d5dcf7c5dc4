"""The fast local loop (samples gathered into tensors, batched by slicing) against `dataset.reduce`."""

import os

import numpy as np
import pytest

from tff_radiomap.models import phases
from tff_radiomap.learning import federated_data, radiounet_process as rp
from tff_radiomap.models import radiounet

CONFIG = radiounet.RadioUNetConfig(resolution=32, width=0.25)
BATCH = 4


def _data(seed=0):
    rng = np.random.default_rng(seed)
    clients = []
    for n in (7, 3):
        x = np.stack([rng.random((n, 32, 32)) < 0.3, rng.random((n, 32, 32)) < 0.002], -1).astype(np.float32)
        clients.append((x, rng.random((n, 32, 32, 1)).astype(np.float32)))
    return federated_data.FederatedRadioMaps(clients, clients[0], clients[0], seed=seed)


def _run(process, data, rounds):
    state = process.initialize()
    for r in range(1, rounds + 1):
        client_data = process.round_data(data, [0, 1], r, BATCH, epochs=2)
        state, metrics = process.next(state, r, client_data)
    return process.network_weights(state), metrics


@pytest.mark.parametrize("protocol", ["two_stage", "fedsgd"])
def test_tensor_path_gives_the_dataset_path_weights(tff_runtime, protocol):
    initial = phases.initial_weights(CONFIG, seed=3)
    adam, sgd = rp.build_optimizer("adam", 1e-3), rp.build_optimizer("sgd", 1.0)
    data = _data()
    results = {}
    # The reference loop on data sets against the tensor loop on references to files. The tensor
    # loop on samples sent by value is the by-reference one's in tests/runtime/test_multi_worker.py
    # (a two-stage run split across workers against the single worker's).
    variants = ((None, False), (BATCH, True))
    for batch_size, by_reference in variants:
        kwargs = dict(batch_size=batch_size, data_by_reference=by_reference)
        if protocol == "two_stage":
            process = rp.build_two_stage_process(CONFIG, initial, 1, adam, sgd, **kwargs)
        else:
            process = rp.build_fedsgd_process(CONFIG, initial, adam, sgd, **kwargs)
        results[batch_size, by_reference] = _run(process, data, 2)
    data.remove_client_files()
    w_ref, m_ref = results[None, False]
    for key in variants[1:]:
        _assert_same(*results[key], w_ref, m_ref, initial)


def _assert_same(w_fast, m_fast, w_ref, m_ref, initial):
    assert m_fast["client_work"]["num_examples"] == m_ref["client_work"]["num_examples"] == 20
    np.testing.assert_allclose(m_fast["client_work"]["train_loss"], m_ref["client_work"]["train_loss"], rtol=1e-5)
    for got, want in zip(w_fast.stage1 + w_fast.stage2, w_ref.stage1 + w_ref.stage2):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    moved = [not np.array_equal(a, b) for a, b in zip(w_fast.stage1 + w_fast.stage2, initial.stage1 + initial.stage2)]
    assert all(moved)


def test_bad_batch_size_is_refused():
    initial = phases.initial_weights(CONFIG, seed=3)
    sgd = rp.build_optimizer("sgd", 0.1)
    with pytest.raises(ValueError, match="batch_size=0"):
        rp.build_two_stage_process(CONFIG, initial, 1, sgd, sgd, batch_size=0)
    with pytest.raises(ValueError, match="needs a batch_size"):
        rp.build_fedsgd_process(CONFIG, initial, sgd, sgd, data_by_reference=True)


def test_references_name_files_holding_the_clients_samples():
    data = _data()
    reference = next(iter(data.client_reference(1, 4, epochs=2)))
    samples = federated_data.read_samples(reference, 32)
    batches = list(data.client_dataset(1, 4, BATCH, epochs=2).as_numpy_iterator())
    np.testing.assert_array_equal(samples["x"].numpy(), np.concatenate([b["x"] for b in batches]))
    np.testing.assert_array_equal(samples["y"].numpy(), np.concatenate([b["y"] for b in batches]))
    folder = os.path.dirname(data.client_files()[0][0])
    data.remove_client_files()
    assert not os.path.exists(folder)
