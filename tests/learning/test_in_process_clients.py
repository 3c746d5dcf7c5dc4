"""The GPU path: clients trained in this process, TFF aggregating, against the all-TFF process."""

import numpy as np
import pytest

from tff_radiomap.models import phases
from tff_radiomap.learning import federated_data, in_process_clients, radiounet_process as rp
from tff_radiomap.models.phases import Phase
from tff_radiomap.models import radiounet

CONFIG = radiounet.RadioUNetConfig(resolution=32, width=0.25)


def test_in_process_clients_give_the_tff_process_weights(tff_runtime):
    rng = np.random.default_rng(1)
    clients = []
    for n in (7, 3):
        x = np.stack([rng.random((n, 32, 32)) < 0.3, rng.random((n, 32, 32)) < 0.002], -1).astype(np.float32)
        clients.append((x, rng.random((n, 32, 32, 1)).astype(np.float32)))
    data = federated_data.FederatedRadioMaps(clients, clients[0], clients[0], seed=2)
    initial = phases.initial_weights(CONFIG, seed=4)
    adam, sgd = rp.build_optimizer("adam", 1e-3), rp.build_optimizer("sgd", 1.0)
    hybrid = in_process_clients.InProcessClientsProcess(CONFIG, Phase.STAGE1, initial, adam, sgd, batch_size=4)
    assert not hybrid.uses_gpu()  # This machine has none.
    # A server learning-rate schedule (round 2 at half the rate) reaches both the same way.
    schedule = {1: 1.0, 2: 0.5}.get
    tff_process = rp.build_two_stage_process(CONFIG, initial, 10, adam, sgd, batch_size=4, server_learning_rate=schedule)
    state_h, state_t = hybrid.initialize(), tff_process.initialize()
    for r in (1, 2):
        state_h = rp.set_server_learning_rate(hybrid, state_h, schedule(r))
        state_h, metrics_h = hybrid.next(state_h, [data.client_samples(k, r, epochs=2) for k in (0, 1)])
        state_t, metrics_t = tff_process.next(state_t, r, tff_process.round_data(data, [0, 1], r, 4, epochs=2))
    assert metrics_h["client_work"]["num_examples"] == metrics_t["client_work"]["num_examples"] == 20
    np.testing.assert_allclose(metrics_h["client_work"]["train_loss"], metrics_t["client_work"]["train_loss"], rtol=1e-5)
    got = hybrid.network_weights(state_h, initial).stage1
    want = tff_process.network_weights(state_t).stage1
    for a, b, w0 in zip(got, want, initial.stage1):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
        assert not np.array_equal(a, w0)


def test_bad_batch_size_is_refused():
    initial = phases.initial_weights(CONFIG, seed=4)
    sgd = rp.build_optimizer("sgd", 0.1)
    with pytest.raises(ValueError, match="batch_size=0"):
        in_process_clients.InProcessClientsProcess(CONFIG, Phase.STAGE1, initial, sgd, sgd, batch_size=0)
