"""FedRep (Collins et al., 2021): a shared body, a private head trained first each round.

Each round a client trains its private head for `head_epochs` epochs with the body frozen at the
broadcast theta^t, then the body for `local_epochs` epochs with the new head frozen, and uploads
the float32 body delta; the server averages the deltas (equal weights, as EPFL-REMNet's
Algorithm 1). Same backbone/head split and keys as EPFL-REMNet; no compression, R = 1, no EMA.
Runs on the stacked clients (`epfl_stacked`). Uncompressed PFL (`personalized.py`), which trains
head and body together each round, is FedPer (Arivazhagan et al., 2019), not FedRep.
"""

import dataclasses

from tff_radiomap.learning import local_model
from tff_radiomap.learning.epfl_remnet import EpflRemnetConfig
from tff_radiomap.learning.rem_runner import Method

NAME = "fedrep"
HEAD_EPOCHS = 2  # Chosen on validation (bench/RESULTS.md, "The validation sweep and the round budget").


def fedrep(base: EpflRemnetConfig, head_epochs: int = HEAD_EPOCHS) -> Method:
    config = dataclasses.replace(base, split_head=True, k_fraction=None, bits=None, sync_period=1, ema_decay=0.0, head_epochs=head_epochs)
    return Method(NAME, config, local_model.remnet_local_model(config.model, split_head=True))
