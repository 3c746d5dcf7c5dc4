"""FedAvg (McMahan et al., 2017): one global model, full-precision uploads every round.

Built from the EPFL-REMNet process with nothing private and no compression: every client trains
the whole REMNet (backbone and head) for E local epochs from the broadcast model, uploads the
float32 model delta, and the server averages the deltas weighted by the clients' example counts
(TFF's `build_weighted_fed_avg` with SGD(1.0) on the server; tested to match it).
Labels stay z-scored per client (Eq. (3)) as for every method, so the global model predicts each
client's standardized signal and is mapped back to dB with the client's own mean and deviation.
"""

import dataclasses

from tff_radiomap.learning import local_model
from tff_radiomap.learning.epfl_remnet import EpflRemnetConfig
from tff_radiomap.learning.rem_runner import Method

NAME = "fedavg"


def fedavg(base: EpflRemnetConfig) -> Method:
    """FedAvg with `base`'s model size and local training."""
    config = dataclasses.replace(base, split_head=False, k_fraction=None, bits=None, sync_period=1, ema_decay=0.0, client_weighting="num_examples")
    return Method(NAME, config, local_model.remnet_local_model(config.model, split_head=False))
