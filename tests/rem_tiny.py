"""Tiny EPFL-REMNet data and configurations for tests: a few clients, a few samples, a tiny MLP."""

import dataclasses

import numpy as np

from tff_radiomap.data.rem_points import ClientData, RemPointsConfig, RemScenario
from tff_radiomap.learning.epfl_remnet import EpflRemnetConfig
from tff_radiomap.models.remnet import RemNetConfig

FEATURES, OUTPUTS = 6, 4


def tiny_scenario(train_sizes=(6, 9, 12), test_size=3, seed=0) -> RemScenario:
    """Random clients whose labels depend smoothly on their inputs (so training can lower the loss)."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(FEATURES, OUTPUTS)).astype(np.float32)
    clients = []
    for c, n in enumerate(train_sizes):
        x = rng.uniform(size=(n + test_size, FEATURES)).astype(np.float32)
        y = np.tanh(x @ w + c).astype(np.float32)
        clients.append(
            ClientData(
                cell=c,
                x_train=x[:n],
                y_train=y[:n],
                x_test=x[n:],
                y_test=y[n:],
                label_mean_db=np.full(OUTPUTS, -100.0, np.float32),
                label_std_db=np.full(OUTPUTS, 10.0, np.float32),
                neighbour_samples=0,
            )
        )
    data = RemPointsConfig(neighbourhood=2, grid=(1, len(train_sizes)))  # num_features = 2 + 2^2 = 6
    return RemScenario(name="heavy", thresholds=(1.0, 2.0), clients=clients, config=data)


def tiny_config(**overrides) -> EpflRemnetConfig:
    """A tiny process configuration; overrides of RemNetConfig fields (e.g. head) go to the model."""
    model_fields = {f.name for f in dataclasses.fields(RemNetConfig)}
    model = RemNetConfig(input_dim=FEATURES, outputs=OUTPUTS, backbone_units=(8, 8, 16), head_hidden=8)
    model = dataclasses.replace(model, **{k: v for k, v in overrides.items() if k in model_fields})
    base = EpflRemnetConfig(model=model, local_epochs=1, batch_size=4, client_learning_rate=0.05)
    return dataclasses.replace(base, **{k: v for k, v in overrides.items() if k not in model_fields})
