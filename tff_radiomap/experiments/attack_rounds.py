"""What a privacy run keeps so that its attacks can be scored again without training again.

At every attack round a run saves the model broadcast in it (the weights its phase's model holds: stage 1's
in stage 1, 0.5 MB at the CPU default, both stages' in stage 2) and the defense parameters its clients held (`round_extras`: the
allocator's eta, the round index), in `attack_rounds/round_N.npz`; a run whose defense reads the
twin's leakage basis also saves the model of every basis refresh (`basis_rounds/`), from which the
basis in force at an attack round is computed again. `rescore` runs the current attackers on them
(`programs/attack_runs.py`).
"""

from __future__ import annotations

import collections
import collections.abc
import os
import re

import numpy as np

from tff_radiomap.models import phases
from tff_radiomap.runtime import run_folder

ATTACK_ROUNDS, BASIS_ROUNDS = "attack_rounds", "basis_rounds"


def save(output_dir: str, name: str, round_num: int, weights: phases.NetworkWeights, phase: phases.Phase, extras=None) -> None:
    """Saves the part of `weights` that `phase`'s model holds (stage 1's alone in stage 1) and the
    defense `extras` (a nested mapping of arrays) with round `round_num`."""
    arrays = {f"stage1/{i:03d}": np.asarray(w) for i, w in enumerate(weights.stage1)}
    if phase != phases.Phase.STAGE1:
        arrays.update({f"stage2/{i:03d}": np.asarray(w) for i, w in enumerate(weights.stage2)})
    arrays.update({f"extras/{k}": v for k, v in _flatten(extras or {}).items()})
    path = run_folder.round_arrays_path(output_dir, name, round_num)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    run_folder.write_npz(path, arrays)  # Every round's file stays (save_round_arrays keeps the newest only).


def load(output_dir: str, name: str, round_num: int) -> tuple[phases.NetworkWeights, collections.OrderedDict | None]:
    """(weights, extras or None) saved with round `round_num` (stage 2's weights empty for a
    stage-1 round); FileNotFoundError if there are none."""
    arrays = run_folder.load_round_arrays(output_dir, name, round_num)
    if arrays is None:
        raise FileNotFoundError(f"{run_folder.round_arrays_path(output_dir, name, round_num)}: no model saved with round {round_num}")
    stage = lambda s: tuple(arrays[k] for k in sorted(k for k in arrays if k.startswith(f"{s}/")))  # noqa: E731
    extras = {k[len("extras/") :]: v for k, v in arrays.items() if k.startswith("extras/")}
    return phases.NetworkWeights(stage("stage1"), stage("stage2")), (_unflatten(extras) if extras else None)


def saved_rounds(output_dir: str, name: str) -> list[int]:
    """The rounds with a saved model in `name`'s folder, in order."""
    folder = os.path.dirname(run_folder.round_arrays_path(output_dir, name, 1))
    if not os.path.isdir(folder):
        return []
    found = (re.fullmatch(r"round_(\d+)\.npz", f) for f in os.listdir(folder))
    return sorted(int(m.group(1)) for m in found if m)


def _flatten(tree, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, collections.abc.Mapping):
            flat.update(_flatten(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = np.asarray(value)
    return flat


def _unflatten(flat: dict) -> collections.OrderedDict:
    tree = collections.OrderedDict()
    for path, value in flat.items():
        node = tree
        *parents, leaf = path.split("/")
        for p in parents:
            node = node.setdefault(p, collections.OrderedDict())
        node[leaf] = value
    return tree
