"""Uncompressed personalized FL: EPFL-REMNet's shared backbone + private head, without compression.

The reference of the "over 97% less uplink" claim (FedPer / FedRep-style split): every round each
client trains backbone and head, keeps the head and uploads the full float32 backbone delta; the
server averages. Only the communication pipeline differs from EPFL-REMNet (no Top-K, no error
feedback, no quantization, synchronization every round); the EMA of the backbone and the local
training are kept as in `base`, so the comparison isolates the cost of compression.
"""

import dataclasses

from tff_radiomap.learning import local_model
from tff_radiomap.learning.epfl_remnet import EpflRemnetConfig
from tff_radiomap.learning.rem_runner import Method

NAME = "pfl_uncompressed"


def personalized(base: EpflRemnetConfig) -> Method:
    config = dataclasses.replace(base, split_head=True, k_fraction=None, bits=None, sync_period=1)
    return Method(NAME, config, local_model.remnet_local_model(config.model, split_head=True))
