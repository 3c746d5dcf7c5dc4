"""The digital twin: simulate given building maps at transmitter positions of one's own choosing.

A defender who wants to know along which directions its uploads reveal the transmitter needs
labelled uploads at many positions on the maps it trains on, none of them a sample an attacker is
scored on. The building maps are public; the propagation model of `synthetic` is the twin. Given
a RadioMapSeer-layout root (synthetic or real), `ensure_twin` writes, for every map of it, the same
building map with `positions` new transmitters (outdoors, at least `min_distance` pixels from every
transmitter of the root, drawn with `seed`), in the same layout, so that the loader reads it as is.

On the real RadioMapSeer the twin is this package's propagation model, not the data set's ray
tracer: the basis it gives is a model's, whose match to the real maps is to be measured.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re

import numpy as np
from PIL import Image

from tff_radiomap.data import propagation
from tff_radiomap.data import encoding, reality, synthetic
from tff_radiomap.runtime.atomic import atomic_write

TWIN_FILE = "twin_spec.json"
# The propagation model of every twin written before the record held one (`ensure_twin`): the
# defaults of `PropagationConfig` then. A record without the field was made with these values.
LEGACY_PROPAGATION = {
    "frequency_hz": 5.9e9,
    "antenna_height_m": 1.5,
    "building_height_m": 25.0,
    "meters_per_pixel": 1.0,
    "corner_loss_db": 12.0,
    "wall_loss_db": 15.0,
    "max_diffractions": 3,
    "max_corners": 160,
}


def simulate(buildings: np.ndarray, positions, config: propagation.PropagationConfig = propagation.PropagationConfig(), seed: int = 0) -> np.ndarray:
    """Gray-level gain maps uint8 [P, S, S] of transmitters at `positions` [(row, col)] on `buildings`."""
    model = propagation.MapPropagation(np.asarray(buildings, bool), config, seed=seed)
    return np.stack([encoding.gain_db_to_gray(model.gain_db(tuple(p))) for p in positions])


def mismatch_db(
    data_root: str,
    maps=None,
    config: propagation.PropagationConfig = propagation.PropagationConfig(),
    corners=None,
    simulation: str = "DPM",
) -> float:
    """The twin's mismatch: the RMSE in dB, pooled over the outdoor pixels of every transmitter map
    of `maps` (default: all) of `data_root`, between the twin's gain at the data's own transmitter
    positions (antenna/{m}.json) and the data's gain there, both as gray levels decoded.

    The twin is `simulate` with `config`, its corner subsample drawn with seed `corners(m)` (default
    the data's own, `corner_seed`, as `ensure_twin` and `position_gains` draw it).
    """
    dirs = synthetic.layout_dirs(data_root, simulation)
    terms = []
    for m in _map_ids(data_root) if maps is None else maps:
        with open(os.path.join(dirs["antenna_json"], f"{m}.json")) as f:
            txs = [(row, col) for col, row in json.load(f)]
        buildings = read_buildings(data_root, m)
        data = np.stack([np.asarray(Image.open(os.path.join(dirs["gain"], f"{m}_{t}.png"))) for t in range(len(txs))])
        twin = simulate(buildings, txs, config, seed=corner_seed(data_root, m) if corners is None else corners(m))
        terms.append(reality.squared_error_db(twin, data, ~buildings))
    return reality.pooled_rmse_db(terms)


def record_mismatch(data_root: str, maps: int, simulation: str = "DPM") -> dict:
    """The twin's mismatch on the first `maps` maps of a synthetic set (`mismatch_db`, the default
    model and corners), beside what its reality adds on every map (`synthetic.reality_rmse_db`),
    written to the set's `synthetic.MISMATCH_FILE` (or read back from it if it holds these maps)."""
    config = propagation.PropagationConfig()
    path = os.path.join(data_root, synthetic.MISMATCH_FILE)
    if os.path.exists(path):
        with open(path) as f:
            found = json.load(f)
        if found.get("maps") == maps and found.get("propagation") == propagation_record(config):
            return found
    record = {
        "twin_rmse_db": mismatch_db(data_root, range(maps), config, simulation=simulation),
        "maps": maps,
        "reality_rmse_db": synthetic.reality_rmse_db(data_root),
        "propagation": propagation_record(config),
    }
    synthetic.write_json(path, record, indent=2)
    return record


def corner_seed(data_root: str, m: int) -> int:
    """The seed of map m's corner subsample as the data were made (`MapPropagation`'s `seed`): a
    synthetic set's own (`synthetic.corner_seed` of the seed its spec records), so that the twin's
    model is the data's exactly; m for a set of other origin (real data: the twin cannot know).

    Twins and position caches made before this existed drew every map's corners with seed m and
    missed the data by about 5 dB RMSE on maps of more than `max_corners` corners; their folders and
    cache keys differ from today's (`CORNERS`), so they are never read as today's."""
    path = os.path.join(data_root, synthetic.SPEC_FILE)
    if not os.path.exists(path):
        return m
    with open(path) as f:
        return synthetic.corner_seed(int(json.load(f)["spec"]["seed"]), m)


CORNERS = "data"  # In twin records and cache keys: the corner subsample is the data's (`corner_seed`).


def _map_ids(root: str) -> list[int]:
    folder = synthetic.layout_dirs(root)["buildings"]
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{folder} does not exist: {root} is not a RadioMapSeer-layout root")
    return sorted(int(m.group(1)) for f in os.listdir(folder) if (m := re.fullmatch(r"(\d+)\.png", f)))


def _existing_transmitters(root: str, m: int) -> np.ndarray:
    """[T, 2] (row, col) of map m's transmitters, from its antenna rasters."""
    folder = synthetic.layout_dirs(root)["antennas"]
    pattern = re.compile(rf"{m}_(\d+)\.png")
    found = []
    for name in os.listdir(folder):
        if pattern.fullmatch(name):
            raster = np.asarray(Image.open(os.path.join(folder, name)))
            found.append(np.argwhere(raster == raster.max())[0])
    return np.asarray(found, np.int64).reshape(-1, 2)


def twin_positions(rng: np.random.Generator, buildings: np.ndarray, existing: np.ndarray, count: int, min_distance: int, margin: int = 2) -> np.ndarray:
    """[count, 2] distinct outdoor (row, col), each more than `min_distance` pixels (Chebyshev)
    from every position of `existing`."""
    size = buildings.shape[0]
    allowed = ~np.asarray(buildings, bool)
    allowed[:margin, :] = allowed[-margin:, :] = False
    allowed[:, :margin] = allowed[:, -margin:] = False
    for r, c in existing:
        allowed[max(0, r - min_distance) : r + min_distance + 1, max(0, c - min_distance) : c + min_distance + 1] = False
    candidates = np.flatnonzero(allowed)
    if candidates.size < count:
        raise ValueError(f"only {candidates.size} outdoor pixels are far enough from the data's transmitters for {count} twin positions")
    return np.stack(np.divmod(rng.choice(candidates, size=count, replace=False), size), axis=1)


def _write_twin_map(args) -> None:
    data_root, out_root, m, positions, min_distance, seed, config = args
    dirs = synthetic.layout_dirs(out_root)
    buildings = read_buildings(data_root, m)
    rng = np.random.default_rng(np.random.SeedSequence([seed, m]))
    txs = twin_positions(rng, buildings, _existing_transmitters(data_root, m), positions, min_distance)
    grays = simulate(buildings, txs, config, seed=corner_seed(data_root, m))
    for t, ((row, col), gray) in enumerate(zip(txs, grays)):
        raster = np.zeros(buildings.shape, np.uint8)
        raster[row, col] = 255
        synthetic._save_png(os.path.join(dirs["antennas"], f"{m}_{t}.png"), raster)
        synthetic._save_png(os.path.join(dirs["gain"], f"{m}_{t}.png"), gray)
    synthetic.write_json(os.path.join(dirs["antenna_json"], f"{m}.json"), [[int(c), int(r)] for r, c in txs])
    synthetic._save_png(os.path.join(dirs["buildings"], f"{m}.png"), buildings.astype(np.uint8) * 255)  # Last: marks the map done.


def twin_root(
    data_root: str, positions: int, seed: int, cache: str | None = None, config: propagation.PropagationConfig = propagation.PropagationConfig()
) -> str:
    """Where `ensure_twin` writes the twin of `data_root` by default (beside the data cache): one
    folder per propagation model (`propagation_record`); the earlier model's keeps its old name."""
    from tff_radiomap.data import default_set

    record = propagation_record(config)
    model = "" if record == LEGACY_PROPAGATION else "_m" + hashlib.sha1(json.dumps(record, sort_keys=True).encode()).hexdigest()[:8]
    return os.path.join(cache or default_set.cache_root(), f"{_twin_name(data_root)}_p{positions}_s{seed}{model}_c{CORNERS}")


def propagation_record(config: propagation.PropagationConfig) -> dict:
    """The propagation model's settings as a twin's record holds them."""
    return dataclasses.asdict(config)


def _twin_name(data_root: str) -> str:
    digest = hashlib.sha1(os.path.abspath(data_root).encode()).hexdigest()[:8]
    return f"twin_{os.path.basename(os.path.normpath(data_root))}_{digest}"


def positions_root(data_root: str, cache: str | None = None) -> str:
    """Where `position_gains` caches the twin's maps at positions of the caller's choosing."""
    from tff_radiomap.data import default_set

    return os.path.join(cache or default_set.cache_root(), f"{_twin_name(data_root)}_positions_c{CORNERS}")


def ensure_twin(
    data_root: str,
    positions: int = 16,
    seed: int = 0,
    out_root: str | None = None,
    min_distance: int = 4,
    workers: int = 1,
    config: propagation.PropagationConfig = propagation.PropagationConfig(),
) -> str:
    """Writes (or completes) the twin of every map of `data_root`; returns its root.

    `min_distance` (pixels at the stored size) keeps every twin transmitter out of the
    low-resolution cell of any transmitter of `data_root` (4 covers 256 -> 64). A root holding a
    twin made with other settings, the propagation model `config` included, raises ValueError
    (a record written before it held the model was made with `LEGACY_PROPAGATION`).
    """
    if positions < 1:
        raise ValueError(f"twin positions={positions}: expected >= 1")
    out_root = out_root or twin_root(data_root, positions, seed, config=config)
    record = {
        "data_root": os.path.abspath(data_root),
        "positions": positions,
        "seed": seed,
        "min_distance": min_distance,
        "propagation": propagation_record(config),
        "corners": CORNERS,
    }
    for d in synthetic.layout_dirs(out_root).values():
        os.makedirs(d, exist_ok=True)
    path = os.path.join(out_root, TWIN_FILE)
    if os.path.exists(path):
        with open(path) as f:
            found = json.load(f)
        found.setdefault("propagation", LEGACY_PROPAGATION)
        if found != record:
            raise ValueError(f"{out_root} holds a twin made with {found}, asked for {record}")
    else:
        synthetic.write_json(path, record)
    done = lambda m: os.path.exists(os.path.join(synthetic.layout_dirs(out_root)["buildings"], f"{m}.png"))  # noqa: E731
    todo = [(data_root, out_root, m, positions, min_distance, seed, config) for m in _map_ids(data_root) if not done(m)]
    if workers > 1 and len(todo) > 1:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            list(pool.imap_unordered(_write_twin_map, todo))
    else:
        for args in todo:
            _write_twin_map(args)
    return out_root


# -- the observer's own positions: a grid of candidate cells, and calibration points off it ------
def grid_positions(buildings: np.ndarray, resolution: int, stride: int) -> np.ndarray:
    """[P, 2] (row, col) at the stored size: the centre pixel of every `stride`-th cell, in both
    directions, of the `resolution` x `resolution` grid whose centre is outdoors."""
    buildings = np.asarray(buildings, bool)
    size = buildings.shape[0]
    if resolution < 1 or size % resolution:
        raise ValueError(f"resolution {resolution} does not divide the map size {size}")
    if stride < 1:
        raise ValueError(f"grid stride={stride}: expected >= 1")
    factor = size // resolution
    centres = np.arange(0, resolution, stride) * factor + factor // 2
    rows, cols = np.meshgrid(centres, centres, indexing="ij")
    positions = np.stack([rows.ravel(), cols.ravel()], axis=1)
    return positions[~buildings[positions[:, 0], positions[:, 1]]]


def off_grid_positions(rng: np.random.Generator, buildings: np.ndarray, resolution: int, count: int, margin: int = 2) -> np.ndarray:
    """[count, 2] distinct outdoor (row, col) that are no cell's centre pixel (the candidates of
    `grid_positions` at any stride sit on centres): positions a grid never holds exactly."""
    buildings = np.asarray(buildings, bool)
    size = buildings.shape[0]
    factor = size // resolution
    allowed = ~buildings
    allowed[:margin, :] = allowed[-margin:, :] = False
    allowed[:, :margin] = allowed[:, -margin:] = False
    centre = np.zeros(size, bool)
    centre[np.arange(resolution) * factor + factor // 2] = True
    allowed &= ~(centre[:, None] & centre[None, :])
    candidates = np.flatnonzero(allowed)
    if candidates.size < count:
        raise ValueError(f"only {candidates.size} outdoor off-grid pixels for {count} positions")
    return np.stack(np.divmod(rng.choice(candidates, size=count, replace=False), size), axis=1)


def read_buildings(data_root: str, m: int) -> np.ndarray:
    """Map m's building mask (bool, stored size) of a RadioMapSeer-layout root."""
    return np.asarray(Image.open(os.path.join(synthetic.layout_dirs(data_root)["buildings"], f"{m}.png"))) > 127


def position_gains(
    data_root: str,
    m: int,
    positions: np.ndarray,
    cache_dir: str | None = None,
    config: propagation.PropagationConfig = propagation.PropagationConfig(),
) -> np.ndarray:
    """Gray-level gain maps uint8 [P, S, S] of transmitters at `positions` [(row, col)] on map m of
    `data_root`, simulated by the twin (as `ensure_twin` does) and cached in `cache_dir` (one file
    per map and position set; default `positions_root(data_root)`, beside the twins)."""
    positions = np.asarray(positions, np.int64).reshape(-1, 2)
    key = hashlib.sha1(positions.tobytes() + repr(dataclasses.astuple(config)).encode()).hexdigest()[:12]
    cache_dir = cache_dir or positions_root(data_root)
    path = os.path.join(cache_dir, f"{m}_{len(positions)}_{key}.npz")
    if os.path.exists(path):
        with np.load(path) as f:
            if np.array_equal(f["positions"], positions):
                return f["gains"]
    gains = simulate(read_buildings(data_root, m), positions, config, seed=corner_seed(data_root, m))
    os.makedirs(cache_dir, exist_ok=True)
    with atomic_write(path, "wb") as f:  # Processes simulating the same map race on it.
        np.savez(f, positions=positions, gains=gains)
    return gains
