"""EPFL-REMNet's ablations (Table III): the full configuration with one component removed.

no_split_head   the head is shared and uploaded with the backbone (no personalization)
no_sync         synchronization every round (R = 1)
no_top_k        every entry of u uploaded (no Top-K, hence no error feedback)
no_quantization values sent as float32
no_ema          the server evaluates theta itself, not its EMA
"""

from __future__ import annotations

import dataclasses

from tff_radiomap.learning.epfl_remnet import EpflRemnetConfig

ABLATIONS = {
    "no_split_head": dict(split_head=False),
    "no_sync": dict(sync_period=1),
    "no_top_k": dict(k_fraction=None),
    "no_quantization": dict(bits=None),
    "no_ema": dict(ema_decay=0.0),
}
LABELS = {
    "no_split_head": "w/o split-head",
    "no_sync": "w/o periodic sync",
    "no_top_k": "w/o Top-K",
    "no_quantization": "w/o quantization",
    "no_ema": "w/o EMA",
}


def ablated(config: EpflRemnetConfig, ablation: str) -> EpflRemnetConfig:
    if ablation not in ABLATIONS:
        raise ValueError(f"ablation={ablation!r}: expected one of {sorted(ABLATIONS)}")
    return dataclasses.replace(config, **ABLATIONS[ablation])
