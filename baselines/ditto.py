"""Ditto (Li et al., 2021): a global model by FedAvg, and a personal model per client pulled toward it.

Each round a client (a) trains a copy of the broadcast global model theta^t for E epochs and
uploads the float32 delta (FedAvg, example-weighted), and (b) trains its private personal model
v_i for E epochs on loss(v_i) + lambda/2 ||v_i - theta^t||^2. The personal model (the whole
REMNet) never leaves the client and is what is evaluated. lambda -> 0 is local training alone,
lambda -> infinity the global model. Runs on the stacked clients (`epfl_stacked`).
"""

import dataclasses

from tff_radiomap.learning import local_model
from tff_radiomap.learning.epfl_remnet import EpflRemnetConfig
from tff_radiomap.learning.rem_runner import Method

NAME = "ditto"
LAMBDA = 0.001  # Chosen on validation (bench/RESULTS.md, "The validation sweep and the round budget").


def ditto(base: EpflRemnetConfig, ditto_lambda: float = LAMBDA) -> Method:
    config = dataclasses.replace(
        base, split_head=False, k_fraction=None, bits=None, sync_period=1, ema_decay=0.0, client_weighting="num_examples", ditto_lambda=ditto_lambda
    )
    return Method(NAME, config, local_model.remnet_local_model(config.model, split_head=False))
