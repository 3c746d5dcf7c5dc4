"""The built-in default data set: a synthetic RadioMapSeer-format set generated once and cached.

The cache folder is $TFF_RADIOMAP_DATA if set, else ~/.cache/tff_radiomap; each spec gets its own
sub-folder, so a changed default never mixes with older files.
"""

from __future__ import annotations

import hashlib
import json
import dataclasses
import os

from tff_radiomap.data import synthetic

# CPU scale: 48 maps x 32 transmitters at 256x256 (RadioMapSeer has 700 x 80).
DEFAULT_SPEC = synthetic.DatasetSpec(maps=48, transmitters=32, size=256, seed=0, simulation="DPM")


def cache_root() -> str:
    return os.environ.get("TFF_RADIOMAP_DATA") or os.path.join(os.path.expanduser("~"), ".cache", "tff_radiomap")


def default_root(spec: synthetic.DatasetSpec = DEFAULT_SPEC) -> str:
    digest = hashlib.sha1(json.dumps(dataclasses.asdict(spec), sort_keys=True).encode()).hexdigest()[:8]
    return os.path.join(cache_root(), f"synthetic_{spec.maps}x{spec.transmitters}_{spec.size}_s{spec.seed}_{digest}")


def ensure_default_dataset(spec: synthetic.DatasetSpec = DEFAULT_SPEC, workers: int | None = None, progress: bool = True) -> str:
    """Generates the default synthetic set if it is not complete yet; returns its root."""
    root = default_root(spec)
    workers = workers or max(1, min(os.cpu_count() or 1, 4))
    return synthetic.generate_dataset(root, spec, workers=workers, progress=progress)
