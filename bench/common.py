"""Shared pieces of the bench scripts."""

import numpy as np

from tff_radiomap.learning import federated_data


def random_clients(config, num_clients: int, samples: int, seed: int = 0) -> federated_data.FederatedRadioMaps:
    """`num_clients` clients of `samples` random RadioUNet samples each (speed does not depend on
    the values): x a 30%-dense binary raster pair, y uniform in [0, 1)."""
    rng = np.random.default_rng(seed)
    r = config.resolution
    clients = []
    for _ in range(num_clients):
        x = (rng.random((samples, r, r, 2)) < 0.3).astype(np.float32)
        clients.append((x, rng.random((samples, r, r, 1)).astype(np.float32)))
    return federated_data.FederatedRadioMaps(clients, clients[0], clients[0], seed=seed)
