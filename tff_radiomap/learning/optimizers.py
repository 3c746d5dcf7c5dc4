"""The client and server optimizers of both experiment families, by name."""

from __future__ import annotations

import tensorflow_federated as tff

NAMES = ("adam", "sgd")


def build_optimizer(name: str, learning_rate: float) -> tff.learning.optimizers.Optimizer:
    """'adam' or 'sgd' (plain, no momentum) from `tff.learning.optimizers`."""
    if not learning_rate > 0:
        raise ValueError(f"learning_rate={learning_rate!r}: expected > 0")
    if name == "adam":
        return tff.learning.optimizers.build_adam(learning_rate)
    if name == "sgd":
        return tff.learning.optimizers.build_sgdm(learning_rate)
    raise ValueError(f"optimizer {name!r}: expected one of {NAMES}")
