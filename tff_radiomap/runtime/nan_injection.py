"""The NaN-update test hook of both experiment runners: `inject_nan_client = "ROUND:CLIENT"` gives
client CLIENT NaN inputs in round ROUND (if it is sampled), so that its update is not finite and
the run must drop it and count it (`nonfinite_updates`)."""

from __future__ import annotations

import collections
from collections.abc import Mapping

import numpy as np


def parse(text: str, first_round: int, last_round: int, num_clients: int | None = None) -> tuple[int, int] | None:
    """(round, client) of `text` ("ROUND:CLIENT"), or None for ""; raises ValueError naming the
    field and the ranges expected (ROUND in first_round..last_round, CLIENT in 0..num_clients-1)."""
    if not text:
        return None
    expected = f"ROUND:CLIENT with ROUND in {first_round}..{last_round}" + (f" and CLIENT in 0..{num_clients - 1}" if num_clients else "")
    parts = text.split(":")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ValueError(f"inject_nan_client={text!r}: expected {expected}")
    round_num, client = int(parts[0]), int(parts[1])
    if not (first_round <= round_num <= last_round and (num_clients is None or client < num_clients)):
        raise ValueError(f"inject_nan_client={text!r}: expected {expected}")
    return round_num, client


def poison(injection: tuple[int, int] | None, round_num: int, clients, datasets: list) -> list:
    """`datasets` (one per sampled client in `clients`: numpy {'x', 'y'} mappings or `tf.data`
    datasets of such batches) with the injected client's inputs NaN in its round."""
    clients = list(clients)
    if injection is None or injection[0] != round_num or injection[1] not in clients:
        return datasets
    i = clients.index(injection[1])
    if isinstance(datasets[i], Mapping):
        poisoned = collections.OrderedDict(datasets[i])
        poisoned["x"] = np.full_like(poisoned["x"], np.nan)
    else:
        poisoned = datasets[i].map(lambda batch: collections.OrderedDict(x=batch["x"] * float("nan"), y=batch["y"]))
    return datasets[:i] + [poisoned] + datasets[i + 1 :]
