"""Reader for the RadioMapSeer folder layout (the real data set or our synthetic one).

    root/png/buildings_complete/{m}.png   buildings, 255 inside
    root/png/antennas/{m}_{t}.png         transmitter raster, one pixel at 255
    root/gain/{simulation}/{m}_{t}.png    gray-level gain (DPM, IRT2, ...)

Per sample (map m, transmitter t) it yields the input x = [buildings, transmitter raster] of shape
[H, W, 2], the target y [H, W, 1] and the transmitter coordinate in meters (x = column, y = row,
pixel centres). Preprocessing follows the RadioUNet authors:
  - gain g = gray / 255, then g = max(g, thresh) and (g - thresh) / (1 - thresh) (thresh 0.2);
  - buildings / 255.
At a `resolution` below the stored size, buildings and targets are area-averaged; the transmitter
raster stays one-hot (the low-resolution pixel holding the transmitter is 1).

Everything is decoded once (buildings once a map) and kept in memory; `dataset()` builds
`tf.data` pipelines that assemble inputs on the fly from the per-map building images.
"""

from __future__ import annotations

import dataclasses
import os
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from PIL import Image

DEFAULT_THRESH = 0.2


class DataLayoutError(ValueError):
    """The data root is not in the RadioMapSeer layout, or a file in it is bad."""


def _read_png(path: str, size: int | None = None) -> np.ndarray:
    if not os.path.isfile(path):
        raise DataLayoutError(f"missing file {path}")
    try:
        with Image.open(path) as img:
            array = np.asarray(img.convert("L") if img.mode not in ("L", "I", "I;16") else img)
    except Exception as exc:  # PIL raises many types for corrupt files.
        raise DataLayoutError(f"cannot read PNG {path}: {exc}") from exc
    if size is not None and array.shape != (size, size):
        raise DataLayoutError(f"{path} is {array.shape[1]}x{array.shape[0]} pixels, expected {size}x{size}")
    return array


def _area_average(image: np.ndarray, factor: int) -> np.ndarray:
    if factor == 1:
        return image
    h, w = image.shape
    return image.reshape(h // factor, factor, w // factor, factor).mean(axis=(1, 3))


def normalize_gain(gray: np.ndarray, thresh: float = DEFAULT_THRESH) -> np.ndarray:
    """The RadioUNet authors' target: g = max(gray/255, thresh), then (g - thresh) / (1 - thresh)."""
    g = np.asarray(gray, dtype=np.float32) / 255.0
    if thresh > 0:
        g = (np.maximum(g, thresh) - thresh) / (1.0 - thresh)
    return g


@dataclasses.dataclass(frozen=True)
class LoaderConfig:
    root: str
    simulation: str = "DPM"
    resolution: int = 64
    thresh: float = DEFAULT_THRESH
    maps: int | None = None  # Use the first `maps` maps (sorted by id); None: all.
    transmitters: int | None = None  # Use transmitters 0..T-1 of each map; None: all found.
    meters_per_pixel: float = 1.0
    io_threads: int = 8


class RadioMapSeer:
    """The decoded data set in memory.

    Attributes:
      map_ids: [M] ids of the maps read.
      buildings: float32 [M, r, r] building maps at the output resolution.
      targets: float16 [M, T, r, r] normalized gain targets.
      tx_pixels: int32 [M, T, 2] transmitter (row, col) at the stored resolution.
      coords_m: float32 [M, T, 2] transmitter (x, y) in meters.
    """

    def __init__(self, config: LoaderConfig):
        self.config = config
        root = config.root
        if not os.path.isdir(root):
            raise DataLayoutError(f"data root {root} does not exist")
        dirs = {
            "buildings": os.path.join(root, "png", "buildings_complete"),
            "antennas": os.path.join(root, "png", "antennas"),
            "gain": os.path.join(root, "gain", config.simulation),
        }
        for name, d in dirs.items():
            if not os.path.isdir(d):
                raise DataLayoutError(f"data root {root} lacks {os.path.relpath(d, root)}/ (the {name} folder of the RadioMapSeer layout)")
        self._dirs = dirs

        map_ids = list_map_ids(root)
        if not map_ids:
            raise DataLayoutError(f"no building maps ({{m}}.png) in {dirs['buildings']}")
        if config.maps is not None:
            if config.maps > len(map_ids):
                raise DataLayoutError(f"asked for {config.maps} maps, {dirs['buildings']} holds {len(map_ids)}")
            map_ids = map_ids[: config.maps]
        self.map_ids = np.asarray(map_ids, dtype=np.int64)

        first = _read_png(os.path.join(dirs["buildings"], f"{map_ids[0]}.png"))
        if first.ndim != 2 or first.shape[0] != first.shape[1]:
            raise DataLayoutError(f"{dirs['buildings']}/{map_ids[0]}.png has shape {first.shape}, expected a square gray image")
        self.size = first.shape[0]
        if config.resolution < 1 or self.size % config.resolution:
            raise DataLayoutError(f"resolution {config.resolution} does not divide the stored size {self.size}")
        self.factor = self.size // config.resolution
        self.num_transmitters = config.transmitters or self._count_transmitters(map_ids[0])

        with ThreadPoolExecutor(config.io_threads) as pool:
            per_map = list(pool.map(self._load_map, map_ids))
        self.buildings = np.stack([p[0] for p in per_map])
        self.targets = np.stack([p[1] for p in per_map])
        self.tx_pixels = np.stack([p[2] for p in per_map])
        mpp = config.meters_per_pixel
        self.coords_m = ((self.tx_pixels[..., ::-1].astype(np.float32) + 0.5) * mpp).astype(np.float32)

    # -- reading ------------------------------------------------------------------------------
    def _count_transmitters(self, m: int) -> int:
        pattern = re.compile(rf"{m}_(\d+)\.png")
        ts = sorted(int(x.group(1)) for f in os.listdir(self._dirs["gain"]) if (x := pattern.fullmatch(f)))
        if not ts:
            raise DataLayoutError(f"no gain maps {m}_{{t}}.png in {self._dirs['gain']}")
        return len(ts)

    def _load_map(self, m: int):
        size, factor, cfg = self.size, self.factor, self.config
        b = _read_png(os.path.join(self._dirs["buildings"], f"{m}.png"), size).astype(np.float32) / 255.0
        targets, pixels = [], []
        for t in range(self.num_transmitters):
            antenna_path = os.path.join(self._dirs["antennas"], f"{m}_{t}.png")
            raster = _read_png(antenna_path, size)
            hot = np.argwhere(raster == raster.max()) if raster.max() > 0 else np.zeros((0, 2))
            if len(hot) != 1:
                raise DataLayoutError(f"{antenna_path}: expected exactly one transmitter pixel, found {len(hot)}")
            pixels.append(hot[0])
            gray = _read_png(os.path.join(self._dirs["gain"], f"{m}_{t}.png"), size)
            targets.append(_area_average(normalize_gain(gray, cfg.thresh), factor).astype(np.float16))
        return _area_average(b, factor), np.stack(targets), np.asarray(pixels, dtype=np.int32)

    # -- samples ------------------------------------------------------------------------------
    @property
    def resolution(self) -> int:
        return self.config.resolution

    def sample_index(self, map_positions) -> np.ndarray:
        """[N, 2] (map position, transmitter) pairs for every transmitter of the given maps."""
        map_positions = np.asarray(map_positions, dtype=np.int64)
        t = np.arange(self.num_transmitters)
        return np.stack(np.meshgrid(map_positions, t, indexing="ij"), -1).reshape(-1, 2)

    def arrays(self, map_positions) -> dict[str, np.ndarray]:
        """Materialized samples of the given maps: x [N,r,r,2], y [N,r,r,1], coords_m [N,2]."""
        idx = self.sample_index(map_positions)
        m, t = idx[:, 0], idx[:, 1]
        r = self.resolution
        raster = np.zeros((len(idx), r, r), np.float32)
        low = self.tx_pixels[m, t] // self.factor
        raster[np.arange(len(idx)), low[:, 0], low[:, 1]] = 1.0
        x = np.stack([self.buildings[m], raster], axis=-1)
        return {
            "x": x,
            "y": self.targets[m, t].astype(np.float32)[..., None],
            "coords_m": self.coords_m[m, t],
            "map_id": self.map_ids[m],
            "tx": t,
        }

    def samples_at(self, map_position: int, tx_pixels: np.ndarray, grays: np.ndarray) -> dict[str, np.ndarray]:
        """x, y, coords_m (as `arrays`) of transmitters at `tx_pixels` [P, 2] (row, col at the stored
        size) on the map at `map_position`, whose gray-level gain maps are `grays` [P, S, S] (e.g. the
        digital twin's, `data.twin.position_gains`), preprocessed as the data set's own."""
        tx_pixels = np.asarray(tx_pixels, np.int64).reshape(-1, 2)
        if grays.shape != (len(tx_pixels), self.size, self.size):
            raise ValueError(f"gain maps of shape {grays.shape}, expected ({len(tx_pixels)}, {self.size}, {self.size})")
        r = self.resolution
        raster = np.zeros((len(tx_pixels), r, r), np.float32)
        low = tx_pixels // self.factor
        raster[np.arange(len(tx_pixels)), low[:, 0], low[:, 1]] = 1.0
        buildings = np.broadcast_to(self.buildings[map_position], raster.shape)
        targets = np.stack([_area_average(normalize_gain(g, self.config.thresh), self.factor) for g in grays]) if len(grays) else np.zeros((0, r, r))
        mpp = self.config.meters_per_pixel
        return {
            "x": np.stack([buildings, raster], axis=-1),
            "y": targets.astype(np.float16).astype(np.float32)[..., None],
            "coords_m": ((tx_pixels[:, ::-1].astype(np.float32) + 0.5) * mpp).astype(np.float32),
        }

    def dataset(self, map_positions, batch_size: int | None = None, shuffle_seed: int | None = None):
        """A cached `tf.data.Dataset` of {'x', 'y'} samples of the given maps."""
        import tensorflow as tf

        a = self.arrays(map_positions)
        ds = tf.data.Dataset.from_tensor_slices({"x": a["x"], "y": a["y"]}).cache()
        if shuffle_seed is not None:
            ds = ds.shuffle(len(a["x"]), seed=shuffle_seed, reshuffle_each_iteration=True)
        if batch_size:
            ds = ds.batch(batch_size)
        return ds

    def summary(self) -> dict:
        b = self.buildings
        y = self.targets.astype(np.float32)
        return {
            "root": self.config.root,
            "simulation": self.config.simulation,
            "maps": int(len(self.map_ids)),
            "transmitters_per_map": int(self.num_transmitters),
            "samples": int(len(self.map_ids) * self.num_transmitters),
            "stored_size": int(self.size),
            "resolution": int(self.resolution),
            "building_fraction": float(b.mean()),
            "target_mean": float(y.mean()),
            "target_std": float(y.std()),
            "target_zero_fraction": float((y == 0).mean()),
        }


# ---------------------------------------------------------------------------------------------
# Splits: by map, before any client partitioning.
@dataclasses.dataclass(frozen=True)
class MapSplit:
    train: np.ndarray  # Map positions (indices into RadioMapSeer.map_ids).
    val: np.ndarray
    test: np.ndarray


def list_map_ids(root: str) -> list[int]:
    """The ids m of the building maps ROOT/png/buildings_complete/{m}.png, sorted (nothing is read)."""
    folder = os.path.join(root, "png", "buildings_complete")
    return sorted(int(m.group(1)) for f in os.listdir(folder) if (m := re.fullmatch(r"(\d+)\.png", f)))


def split_maps(num_maps: int, val_fraction: float = 0.15, test_fraction: float = 0.15, seed: int = 0) -> MapSplit:
    """Seeded map-level train/validation/test split (positions 0..num_maps-1)."""
    if not (0 <= val_fraction < 1 and 0 <= test_fraction < 1 and val_fraction + test_fraction < 1):
        raise ValueError(f"val_fraction={val_fraction}, test_fraction={test_fraction}: expected fractions summing below 1")
    order = np.random.default_rng(seed).permutation(num_maps)
    n_val = int(round(val_fraction * num_maps)) if val_fraction else 0
    n_test = int(round(test_fraction * num_maps)) if test_fraction else 0
    if val_fraction and n_val == 0:
        n_val = 1
    if test_fraction and n_test == 0:
        n_test = 1
    if n_val + n_test >= num_maps:
        raise ValueError(f"{num_maps} maps are too few for a validation and test split")
    return MapSplit(
        train=np.sort(order[n_val + n_test :]),
        val=np.sort(order[:n_val]),
        test=np.sort(order[n_val : n_val + n_test]),
    )


def partition_maps(train_maps: np.ndarray, num_clients: int = 14, seed: int = 0) -> list[np.ndarray]:
    """Deals the training maps over `num_clients` clients (seeded); each client gets >= 1 map."""
    train_maps = np.asarray(train_maps)
    if num_clients < 1 or num_clients > len(train_maps):
        raise ValueError(f"num_clients={num_clients}: expected 1..{len(train_maps)} (the number of training maps)")
    order = np.random.default_rng(seed).permutation(train_maps)
    return [np.sort(part) for part in np.array_split(order, num_clients)]


def client_weights(partition: list[np.ndarray], transmitters_per_map: int) -> np.ndarray:
    """p_k proportional to the client's sample count (Eq. (5)), summing to 1."""
    counts = np.asarray([len(p) * transmitters_per_map for p in partition], dtype=np.float64)
    return counts / counts.sum()
