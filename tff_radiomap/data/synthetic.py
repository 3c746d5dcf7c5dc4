"""A synthetic, physically motivated stand-in for RadioMapSeer, written in its exact layout.

Layout under `root` (as RadioMapSeer):
    png/buildings_complete/{m}.png   uint8, 255 inside buildings, 0 outside
    png/antennas/{m}_{t}.png         uint8, 255 at the transmitter pixel, 0 elsewhere
    gain/DPM/{m}_{t}.png             uint8 gray-level gain (see `encoding.py`)
    antenna/{m}.json                 [[x, y], ...] transmitter pixels of map m (x = column, y = row)
    reality/{m}.json                 a shadowed set only: map m's drawn losses and the twin model's RMSE

Cities: a street grid of per-map spacing, street width and angle; blocks split into lots, each lot
built or not with a per-map density and random set-backs (touching set-backs merge buildings into
larger blocks); some blocks are open squares. Transmitters stand outside buildings.

The propagation model is `propagation.py`; `DatasetSpec.reality` may add what the twin lacks
(`reality.py`). The spec is recorded in `synthetic_spec.json`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil

import numpy as np
from PIL import Image

from tff_radiomap.data import encoding, reality
from tff_radiomap.data.propagation import MapPropagation, PropagationConfig
from tff_radiomap.runtime.atomic import atomic_write, is_stale_temporary
from tff_radiomap.runtime.hold import hold


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    maps: int = 3
    transmitters: int = 4
    size: int = 256
    seed: int = 0
    simulation: str = "DPM"
    reality: reality.ShadowedReality | None = None  # None: the gains are the propagation model's (the twin's).


def spec_record(spec: DatasetSpec) -> dict:
    """The spec as a set's record holds it: without `reality` when None, as before the field."""
    record = dataclasses.asdict(spec)
    if spec.reality is None:
        del record["reality"]
    return record


# ---------------------------------------------------------------------------------------------
# City layouts.
def generate_city(rng: np.random.Generator, size: int = 256) -> np.ndarray:
    """Returns a bool [size, size] building mask of a random city-like layout."""
    scale = size / 256.0
    angle = rng.uniform(0.0, np.pi / 2)
    spacing = rng.uniform(40.0, 90.0, size=2) * scale
    street = rng.uniform(6.0, 14.0) * scale
    lot_size = rng.uniform(12.0, 30.0) * scale
    lots = np.clip(np.rint((spacing - street) / lot_size), 1, 4).astype(np.int64)  # Per block, along u and v.
    density = rng.uniform(0.55, 0.9)
    open_share = rng.uniform(0.03, 0.12)
    max_setback = rng.uniform(0.04, 0.2)

    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64) + 0.5
    u = np.cos(angle) * xx + np.sin(angle) * yy + rng.uniform(0, spacing[0])
    v = -np.sin(angle) * xx + np.cos(angle) * yy + rng.uniform(0, spacing[1])
    bu, fu = np.divmod(u, spacing[0])
    bv, fv = np.divmod(v, spacing[1])
    half = street / 2
    in_block = (fu >= half) & (fu < spacing[0] - half) & (fv >= half) & (fv < spacing[1] - half)

    # Lot coordinates inside the block, in [0, 1) per lot.
    lot_u = (fu - half) / (spacing[0] - street) * lots[0]
    lot_v = (fv - half) / (spacing[1] - street) * lots[1]
    iu = np.clip(np.floor(lot_u), 0, lots[0] - 1).astype(np.int64)
    iv = np.clip(np.floor(lot_v), 0, lots[1] - 1).astype(np.int64)
    su, sv = lot_u - iu, lot_v - iv

    n = 64  # Hash tables indexed by block (mod n) and lot.
    block_open = rng.random((n, n)) < open_share
    lot_built = rng.random((n, n, 4, 4)) < density
    setbacks = rng.uniform(0.0, max_setback, size=(n, n, 4, 4, 4))
    setbacks[rng.random((n, n, 4, 4, 4)) < 0.35] = 0.0  # Touching lots merge into larger buildings.
    bi, bj = bu.astype(np.int64) % n, bv.astype(np.int64) % n
    s = setbacks[bi, bj, iu, iv]
    inside_lot = (su >= s[..., 0]) & (su < 1 - s[..., 1]) & (sv >= s[..., 2]) & (sv < 1 - s[..., 3])
    return in_block & ~block_open[bi, bj] & lot_built[bi, bj, iu, iv] & inside_lot


def place_transmitters(rng: np.random.Generator, buildings: np.ndarray, count: int, margin: int = 2) -> np.ndarray:
    """Returns [count, 2] distinct (row, col) outdoor pixels, at least `margin` from the border."""
    size = buildings.shape[0]
    outdoor = ~buildings
    outdoor[:margin, :] = outdoor[-margin:, :] = False
    outdoor[:, :margin] = outdoor[:, -margin:] = False
    candidates = np.flatnonzero(outdoor)
    if candidates.size < count:
        raise ValueError(f"map has {candidates.size} outdoor pixels, fewer than {count} transmitters")
    chosen = rng.choice(candidates, size=count, replace=False)
    return np.stack(np.divmod(chosen, size), axis=1)


PLACEMENTS = ("random", "quadrants")


def place_in_quadrants(rng: np.random.Generator, buildings: np.ndarray, count: int = 4) -> np.ndarray:
    """[count, 2] (row, col): transmitter q at an outdoor pixel in the central half of quadrant q
    (row-major: top-left, top-right, bottom-left, bottom-right), e.g. EPFL-REMNet's four base
    stations spread over the map. Falls back to the whole quadrant if its centre is all built."""
    if count != 4:
        raise ValueError(f"placement 'quadrants' places 4 transmitters, asked for {count}")
    size = buildings.shape[0]
    half, lo, hi = size // 2, size // 8, size // 2 - size // 8
    chosen = []
    for top in (0, half):
        for left in (0, half):
            for a, b in ((lo, hi), (2, half - 2)):
                window = ~buildings[top + a : top + b, left + a : left + b]
                if window.any():
                    r, c = np.argwhere(window)[rng.integers(window.sum())]
                    chosen.append((top + a + r, left + a + c))
                    break
            else:
                raise ValueError(f"quadrant at row {top}, col {left} has no outdoor pixel for a transmitter")
    return np.asarray(chosen, dtype=np.int64)


# ---------------------------------------------------------------------------------------------
# Geometry: polar ray sweeps.
def layout_dirs(root: str, simulation: str = "DPM") -> dict[str, str]:
    return {
        "buildings": os.path.join(root, "png", "buildings_complete"),
        "antennas": os.path.join(root, "png", "antennas"),
        "gain": os.path.join(root, "gain", simulation),
        "antenna_json": os.path.join(root, "antenna"),
    }


def _save_png(path: str, array: np.ndarray) -> None:
    # Never a half-written PNG; two programs completing the same set at once (two runs of a front
    # starting together) each write whole files and the last rename wins (`atomic_write`).
    with atomic_write(path, "wb") as f:
        Image.fromarray(array.astype(np.uint8), mode="L").save(f, format="PNG")


def write_json(path: str, value, **kwargs) -> None:
    """Writes `value` as JSON to `path` whole or not at all (`atomic_write`)."""
    with atomic_write(path) as f:
        json.dump(value, f, **kwargs)


def map_seed(seed: int, map_index: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([seed, map_index])


def corner_seed(seed: int, map_index: int) -> int:
    """The seed of map `map_index`'s corner subsample (`MapPropagation`'s `seed`)."""
    return int(map_seed(seed, map_index).spawn(3)[2].generate_state(1)[0])


def write_map(root: str, map_index: int, spec: DatasetSpec, config: PropagationConfig = PropagationConfig(), placement: str = "random") -> None:
    """Generates map `map_index` with its transmitters and writes it; reproducible from the seed."""
    # The fourth child (the reality's) leaves the first three, and so the twin's sets, as they were.
    city_seq, tx_seq, _, reality_seq = map_seed(spec.seed, map_index).spawn(4)
    buildings = generate_city(np.random.default_rng(city_seq), spec.size)
    place = place_in_quadrants if placement == "quadrants" else place_transmitters
    txs = place(np.random.default_rng(tx_seq), buildings, spec.transmitters)
    dirs = layout_dirs(root, spec.simulation)
    propagation = MapPropagation(buildings, config, seed=corner_seed(spec.seed, map_index))
    shadowed = reality.ShadowedMap(spec.reality, config, reality_seq, len(txs)) if spec.reality else None
    errors = []  # The twin model's (same corners) squared error against the data, per transmitter.
    for t, (row, col) in enumerate(txs):
        raster = np.zeros((spec.size, spec.size), np.uint8)
        raster[row, col] = 255
        _save_png(os.path.join(dirs["antennas"], f"{map_index}_{t}.png"), raster)
        if shadowed:  # One path solve for the data's gain and the twin model's.
            paths = propagation.paths((row, col))
            gray = encoding.gain_db_to_gray(shadowed.gain_db(t, paths))
            twin_gray = encoding.gain_db_to_gray(paths.gain_db(config.corner_loss_db, config.wall_loss_db))
            errors.append(reality.squared_error_db(gray, twin_gray, ~buildings))
        else:
            gray = encoding.gain_db_to_gray(propagation.gain_db((row, col)))
        _save_png(os.path.join(dirs["gain"], f"{map_index}_{t}.png"), gray)
    write_json(os.path.join(dirs["antenna_json"], f"{map_index}.json"), [[int(col), int(row)] for row, col in txs])
    if shadowed:
        record = {"corner_loss_db": shadowed.corner_loss_db, "wall_loss_db": shadowed.wall_loss_db}
        record.update(twin_model_rmse_db=reality.pooled_rmse_db(errors), outdoor_pixels=sum(n for _, n in errors))
        write_json(os.path.join(root, REALITY_DIR, f"{map_index}.json"), record, indent=2)
    hold(f"map {map_index} before its buildings")  # Kill-and-resume tests stop a program here (`runtime.hold`).
    # The buildings image goes last: its presence marks the map as complete (used to resume).
    _save_png(os.path.join(dirs["buildings"], f"{map_index}.png"), buildings.astype(np.uint8) * 255)


def map_is_complete(root: str, map_index: int, spec: DatasetSpec) -> bool:
    dirs = layout_dirs(root, spec.simulation)
    needed = [os.path.join(dirs["buildings"], f"{map_index}.png"), os.path.join(dirs["antenna_json"], f"{map_index}.json")]
    needed += [os.path.join(dirs["gain"], f"{map_index}_{t}.png") for t in range(spec.transmitters)]
    if spec.reality:
        needed.append(os.path.join(root, REALITY_DIR, f"{map_index}.json"))
    return all(os.path.exists(p) for p in needed)


SPEC_FILE = "synthetic_spec.json"
REALITY_DIR = "reality"  # A shadowed set's per-map records.
MISMATCH_FILE = "twin_mismatch.json"  # The twin's mismatch, as `programs.make_dataset` measured it.


def read_reality(root: str) -> dict[int, dict]:
    """map -> its record under reality/ (drawn losses, the twin model's RMSE); {} for a twin set."""
    folder = os.path.join(root, REALITY_DIR)
    names = os.listdir(folder) if os.path.isdir(folder) else []
    out = {}
    for name in sorted(n for n in names if n.endswith(".json") and n[:-5].isdigit()):
        with open(os.path.join(folder, name)) as f:
            out[int(name[:-5])] = json.load(f)
    return out


def reality_rmse_db(root: str) -> float:
    """What a shadowed set's reality adds: the RMSE (dB) over every map's outdoor pixels between its
    gains and the twin's model on the same corners, pooled from reality/; 0.0 for a twin set."""
    records = read_reality(root).values()
    return reality.pooled_rmse_db([(r["twin_model_rmse_db"] ** 2 * r["outdoor_pixels"], r["outdoor_pixels"]) for r in records]) if records else 0.0


def prepare_root(root: str, spec: DatasetSpec, config: PropagationConfig = PropagationConfig(), placement: str = "random") -> list[int]:
    """Creates the folders and records the spec; returns the maps still to write.

    Raises ValueError if `root` already holds a synthetic set made with a different spec, so
    that a different request never silently mixes with (or overwrites) existing data.
    """
    for d in layout_dirs(root, spec.simulation).values():
        os.makedirs(d, exist_ok=True)
    if spec.reality:
        os.makedirs(os.path.join(root, REALITY_DIR), exist_ok=True)
    if placement not in PLACEMENTS:
        raise ValueError(f"placement={placement!r}: expected one of {PLACEMENTS}")
    record = {"spec": spec_record(spec), "propagation": dataclasses.asdict(config)}
    if placement != "random":  # Recorded only when set, so existing sets keep their record.
        record["placement"] = placement
    path = os.path.join(root, SPEC_FILE)
    if os.path.exists(path):
        with open(path) as f:
            existing = json.load(f)
        if existing != record:
            raise ValueError(
                f"{root} already holds a synthetic data set made with {existing['spec']}; "
                f"asked for {record['spec']}. Use --overwrite to replace it, or another --output_dir."
            )
    else:
        write_json(path, record, indent=2)  # A kill leaves the spec whole or absent.
    for d in layout_dirs(root, spec.simulation).values():  # PNGs a kill left half-written.
        for name in os.listdir(d):
            if is_stale_temporary(name):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(d, name))
    return [m for m in range(spec.maps) if not map_is_complete(root, m, spec)]


def remove_dataset(root: str) -> None:
    """Deletes the synthetic set written under `root` (its spec and layout folders, nothing else)."""
    path = os.path.join(root, SPEC_FILE)
    if not os.path.exists(path):
        return
    try:
        with open(path) as f:
            simulation = json.load(f)["spec"]["simulation"]
    except (OSError, ValueError, KeyError):
        simulation = "DPM"
    for d in [*layout_dirs(root, simulation).values(), os.path.join(root, REALITY_DIR)]:
        if os.path.isdir(d):
            shutil.rmtree(d)
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(root, MISMATCH_FILE))
    os.remove(path)


def generate_dataset(
    root: str, spec: DatasetSpec, config: PropagationConfig = PropagationConfig(), workers: int = 1, progress: bool = False, placement: str = "random"
) -> str:
    """Writes (or completes) a synthetic data set under `root`; returns `root`."""
    todo = prepare_root(root, spec, config, placement)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=spec.maps, initial=spec.maps - len(todo), unit="map", desc="synthetic maps")
    if workers > 1 and len(todo) > 1:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            for _ in pool.imap_unordered(_write_map_star, [(root, m, spec, config, placement) for m in todo]):
                bar and bar.update(1)
    else:
        for m in todo:
            write_map(root, m, spec, config, placement)
            bar and bar.update(1)
    if bar is not None:
        bar.close()
    return root


def _write_map_star(args) -> None:
    write_map(*args)
