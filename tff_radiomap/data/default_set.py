"""The built-in data sets: synthetic RadioMapSeer-format sets generated once and cached.

`DEFAULT_SPEC` is the privacy experiment's default set; `SETS` names every built-in set (the
presets of `experiments.privacy_config` pick theirs by name). The cache folder is
$TFF_RADIOMAP_DATA if set, else ~/.cache/tff_radiomap; each set gets its own sub-folder named by a
hash of its spec and its propagation model (`propagation.PropagationConfig`), so that neither a
changed spec nor a changed model ever reuses older files. A folder named by the spec alone (how
sets were cached before the model entered the name) is reused only when the spec and the model it
recorded when it was written are the ones asked for. A set with a reality the twin lacks
(`DatasetSpec.reality`, e.g. "default_shadowed") has it in its record, its digest and its name.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

from tff_radiomap.data import reality, synthetic
from tff_radiomap.data.propagation import PropagationConfig

# CPU scale (RadioMapSeer has 700 maps x 80 transmitters at 256x256): 96 maps, 67 of them training
# maps, dealt to 14 clients (4-5 maps, 128-160 samples each).
DEFAULT_SPEC = synthetic.DatasetSpec(maps=96, transmitters=32, size=256, seed=0, simulation="DPM")
# The set of the first privacy front (`privacy_config.PRESETS['cpu_v1']`).
V1_SPEC = synthetic.DatasetSpec(maps=48, transmitters=32, size=256, seed=0, simulation="DPM")
# The default set's maps and transmitters (the same buildings and positions) with shadow fading and
# per-map losses the twin lacks (`reality.ShadowedReality`): only the gains differ.
DEFAULT_SHADOWED_SPEC = dataclasses.replace(DEFAULT_SPEC, reality=reality.ShadowedReality())
SETS = {"default": DEFAULT_SPEC, "v1": V1_SPEC, "default_shadowed": DEFAULT_SHADOWED_SPEC}


def cache_root() -> str:
    return os.environ.get("TFF_RADIOMAP_DATA") or os.path.join(os.path.expanduser("~"), ".cache", "tff_radiomap")


def _name(spec: synthetic.DatasetSpec, digest_of: dict) -> str:
    digest = hashlib.sha1(json.dumps(digest_of, sort_keys=True).encode()).hexdigest()[:8]
    shadowed = "_shadowed" if spec.reality else ""
    return os.path.join(cache_root(), f"synthetic_{spec.maps}x{spec.transmitters}_{spec.size}_s{spec.seed}{shadowed}_{digest}")


def default_root(spec: synthetic.DatasetSpec = DEFAULT_SPEC, propagation: PropagationConfig = PropagationConfig()) -> str:
    """The cache folder of `spec` made with `propagation`: named by both, or the folder named by
    the spec alone where one holds exactly this spec and model."""
    legacy = _name(spec, synthetic.spec_record(spec))
    if _records(legacy, spec, propagation):
        return legacy
    return _name(spec, {"spec": synthetic.spec_record(spec), "propagation": dataclasses.asdict(propagation)})


def _records(root: str, spec: synthetic.DatasetSpec, propagation: PropagationConfig) -> bool:
    """True if `root` holds a synthetic set whose recorded spec and model are these."""
    try:
        with open(os.path.join(root, synthetic.SPEC_FILE)) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return False
    return record == {"spec": synthetic.spec_record(spec), "propagation": dataclasses.asdict(propagation)}


def ensure_default_dataset(spec: synthetic.DatasetSpec = DEFAULT_SPEC, workers: int | None = None, progress: bool = True) -> str:
    """Generates the set `spec` if it is not complete yet; returns its root."""
    root = default_root(spec)
    workers = workers or max(1, min(os.cpu_count() or 1, 4))
    return synthetic.generate_dataset(root, spec, workers=workers, progress=progress)


def ensure_set(name: str, workers: int | None = None, progress: bool = True) -> str:
    """The root of the built-in set `name` (a key of `SETS`), generated if not complete yet."""
    if name not in SETS:
        raise ValueError(f"data set {name!r}: expected one of {sorted(SETS)}")
    return ensure_default_dataset(SETS[name], workers=workers, progress=progress)
