"""EPFL-REMNet's point data: one sample per outdoor pixel, three Non-IID scenarios, 90 clients.

From a RadioMapSeer-format map whose transmitters `base_stations` (0..3 by default) are the M = 4
base stations (Sec. IV-A):
  - input X in R^(2+P): the pixel's (x, y) = (column, row), min-max scaled per client to [0, 1]
    (Eq. (3)'s preprocessing), and P = 100 environmental features: the building occupancy of a
    10 x 10 grid of `cell_px` x `cell_px`-pixel cells centred on the pixel (the fraction of each
    cell that is built; outside the map counts as open). With the default 4-pixel cells the
    features see a 40 m x 40 m neighbourhood at RadioMapSeer's 1 m per pixel;
  - label y = [s_1..s_M], the gains in dB decoded from the gray levels with RadioMapSeer's
    mapping (`encoding.gray_to_gain_db`), z-scored with the client's own training mean and
    standard deviation per base station (Eq. (3); the standard deviation is floored at
    `min_label_std_db` so that a client whose label is constant, e.g. at the -147 dB floor, stays
    finite). Metrics are reported in dB after undoing the z-score.
Scenarios: H = std(s_1..s_M) per pixel; light H <= q33, medium q33 < H <= q66, heavy H > q66
(the 33rd and 66th percentiles over all outdoor pixels of the map).
Clients: within a scenario the map is cut into a 10 x 9 grid (10 bands of rows, 9 cells of
columns in each band). The cut points are quantiles of the scenario's pixels, not equal
distances: a scenario's pixels cluster (the light one where all base stations are alike), and a
uniform grid leaves up to a third of its cells empty; equal-count cells keep every client
geographic and non-empty. Client c holds its cell's pixels, split into train, validation and test
(`val_fraction`, `test_fraction`, per client, seeded), plus `neighbour_share` times as many
training pixels drawn from the 8 neighbouring cells of the grid (training only, so no held-out
pixel is trained on by its own client). Two ways to hold pixels out (`test_split`):
  random  pixels drawn at random from the cell: a held-out pixel has training neighbours a metre
          away, so the test measures interpolation;
  block   the cell is cut into `block_grid` equal-count spatial blocks (the same quantile cut as
          the client grid) and whole blocks are held out (round(fraction * blocks) each, at least
          one): the test measures extrapolation across space. Neighbour-cell pixels may still
          border a held-out block at the cell's edge.
Validation pixels are for choosing hyperparameters and round budgets; test pixels only for the
reported numbers. Denser clients: `rem_size` (the built-in set's map side, 256 by default; 512
gives each client about four times the pixels) or a RadioMapSeer root of larger maps.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from tff_radiomap.data import default_set, encoding, radiomapseer, synthetic

SCENARIOS = ("light", "medium", "heavy")
TEST_SPLITS = ("random", "block")
# The built-in REM set: synthetic maps with four base stations, one per quadrant.
REM_SPEC = synthetic.DatasetSpec(maps=3, transmitters=4, size=256, seed=0, simulation="DPM")


def rem_spec(size: int = REM_SPEC.size) -> synthetic.DatasetSpec:
    """The built-in REM set at map side `size` (denser clients for larger sizes)."""
    return dataclasses.replace(REM_SPEC, size=size)


def default_rem_root(spec: synthetic.DatasetSpec = REM_SPEC) -> str:
    return os.path.join(default_set.cache_root(), f"rem_quadrants_{spec.maps}x{spec.transmitters}_{spec.size}_s{spec.seed}")


def ensure_default_rem_dataset(spec: synthetic.DatasetSpec = REM_SPEC, progress: bool = False) -> str:
    """Generates (once) the built-in REM set in the RadioMapSeer layout; returns its root."""
    return synthetic.generate_dataset(default_rem_root(spec), spec, progress=progress, placement="quadrants")


@dataclasses.dataclass(frozen=True)
class RemPointsConfig:
    root: str | None = None  # A RadioMapSeer-layout root; None: the built-in synthetic REM set.
    map_id: int = 0
    base_stations: tuple[int, ...] = (0, 1, 2, 3)
    simulation: str = "DPM"
    neighbourhood: int = 10  # P = neighbourhood^2 occupancy features.
    cell_px: int = 4
    grid: tuple[int, int] = (10, 9)  # (bands of rows, cells per band): 90 clients.
    neighbour_share: float = 0.1
    test_fraction: float = 0.2
    val_fraction: float = 0.2
    test_split: str = "random"  # random | block (see the module docstring).
    block_grid: tuple[int, int] = (3, 3)  # Blocks per cell of the block split.
    rem_size: int = 256  # Map side of the built-in synthetic set (ignored with `root`).
    min_label_std_db: float = 1.0
    seed: int = 0

    def __post_init__(self):
        if self.map_id < 0:
            raise ValueError(f"map_id={self.map_id}: expected an integer >= 0")
        if len(self.base_stations) < 2 or len(set(self.base_stations)) != len(self.base_stations):
            raise ValueError(f"base_stations={self.base_stations}: expected at least two distinct transmitter ids")
        if self.neighbourhood < 1 or self.cell_px < 1:
            raise ValueError(f"neighbourhood={self.neighbourhood}, cell_px={self.cell_px}: expected positive sizes")
        if len(self.grid) != 2 or min(self.grid) < 1:
            raise ValueError(f"grid={self.grid}: expected (rows, cols) >= 1")
        if not 0.0 <= self.neighbour_share <= 1.0:
            raise ValueError(f"neighbour_share={self.neighbour_share}: expected a fraction in [0, 1]")
        if not (0.0 < self.test_fraction < 1.0 and 0.0 < self.val_fraction < 1.0 and self.test_fraction + self.val_fraction < 1.0):
            raise ValueError(f"test_fraction={self.test_fraction}, val_fraction={self.val_fraction}: expected fractions in (0, 1) summing below 1")
        if self.test_split not in TEST_SPLITS:
            raise ValueError(f"test_split={self.test_split!r}: expected one of {TEST_SPLITS}")
        if len(self.block_grid) != 2 or min(self.block_grid) < 1 or self.block_grid[0] * self.block_grid[1] < 3:
            raise ValueError(f"block_grid={self.block_grid}: expected (rows, cols) >= 1 with at least 3 blocks")
        if self.rem_size < 32:
            raise ValueError(f"rem_size={self.rem_size}: expected a map side >= 32 pixels")
        if self.min_label_std_db <= 0:
            raise ValueError(f"min_label_std_db={self.min_label_std_db}: expected a positive number of dB")

    @property
    def num_features(self) -> int:
        return 2 + self.neighbourhood**2

    @property
    def num_clients(self) -> int:
        return self.grid[0] * self.grid[1]


# ---------------------------------------------------------------------------------------------
# Reading a map and turning its outdoor pixels into samples.
@dataclasses.dataclass(frozen=True)
class RemMap:
    buildings: np.ndarray  # bool [S, S]
    gains_db: np.ndarray  # float32 [M, S, S]


def load_rem_map(root: str, map_id: int, base_stations=(0, 1, 2, 3), simulation: str = "DPM") -> RemMap:
    """Buildings and the base stations' gains in dB of map `map_id` of a RadioMapSeer-layout root."""
    buildings_path = os.path.join(root, "png", "buildings_complete", f"{map_id}.png")
    buildings = radiomapseer._read_png(buildings_path) > 127
    if buildings.ndim != 2 or buildings.shape[0] != buildings.shape[1]:
        raise radiomapseer.DataLayoutError(f"{buildings_path} has shape {buildings.shape}, expected a square gray image")
    size = buildings.shape[0]
    gains = [radiomapseer._read_png(os.path.join(root, "gain", simulation, f"{map_id}_{t}.png"), size) for t in base_stations]
    if (~buildings).sum() == 0:
        raise radiomapseer.DataLayoutError(f"{buildings_path}: the map has no outdoor pixel")
    return RemMap(buildings=buildings, gains_db=encoding.gray_to_gain_db(np.stack(gains)).astype(np.float32))


def occupancy_features(buildings: np.ndarray, rows: np.ndarray, cols: np.ndarray, neighbourhood: int = 10, cell_px: int = 4) -> np.ndarray:
    """[N, neighbourhood^2] built fraction of each cell of the grid centred on (rows, cols).

    Cell (i, j) covers rows r + (i - n/2) * cell_px .. + cell_px (and the same for columns), in
    row-major order; pixels outside the map count as open.
    """
    half = neighbourhood * cell_px // 2
    pad = half + cell_px
    padded = np.pad(buildings.astype(np.float64), pad)
    integral = np.zeros((padded.shape[0] + 1, padded.shape[1] + 1))
    integral[1:, 1:] = padded.cumsum(0).cumsum(1)
    starts = np.arange(neighbourhood) * cell_px - half
    r0 = rows[:, None] + pad + starts[None, :]  # [N, n] top row of each cell band
    c0 = cols[:, None] + pad + starts[None, :]
    r0, c0 = r0[:, :, None], c0[:, None, :]
    total = integral[r0 + cell_px, c0 + cell_px] - integral[r0, c0 + cell_px] - integral[r0 + cell_px, c0] + integral[r0, c0]
    return (total / cell_px**2).reshape(len(rows), -1).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class RemPoints:
    """Every outdoor pixel of a map as a sample (before any per-client normalization)."""

    rows: np.ndarray  # int [N]
    cols: np.ndarray  # int [N]
    features: np.ndarray  # float32 [N, P]
    labels_db: np.ndarray  # float32 [N, M]
    size: int

    @property
    def heterogeneity(self) -> np.ndarray:
        """H = std(s_1..s_M) per pixel (population standard deviation, in dB)."""
        return self.labels_db.std(axis=1)


def extract_points(rem_map: RemMap, neighbourhood: int = 10, cell_px: int = 4) -> RemPoints:
    rows, cols = np.nonzero(~rem_map.buildings)
    return RemPoints(
        rows=rows,
        cols=cols,
        features=occupancy_features(rem_map.buildings, rows, cols, neighbourhood, cell_px),
        labels_db=rem_map.gains_db[:, rows, cols].T.copy(),
        size=rem_map.buildings.shape[0],
    )


def scenario_thresholds(heterogeneity: np.ndarray) -> tuple[float, float]:
    """(q33, q66) of H."""
    q33, q66 = np.percentile(heterogeneity, [33, 66])
    return float(q33), float(q66)


def scenario_mask(heterogeneity: np.ndarray, scenario: str, thresholds: tuple[float, float]) -> np.ndarray:
    q33, q66 = thresholds
    if scenario == "light":
        return heterogeneity <= q33
    if scenario == "medium":
        return (heterogeneity > q33) & (heterogeneity <= q66)
    if scenario == "heavy":
        return heterogeneity > q66
    raise ValueError(f"scenario={scenario!r}: expected one of {SCENARIOS}")


def grid_cells(rows: np.ndarray, cols: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    """Equal-count grid: band index by row quantiles, then cell index by column quantiles per band.

    Returns the cell id band * grid[1] + cell of every point. Cells hold N / 90 points up to one:
    points of equal row are split between bands in column order (and vice versa within a band).
    """
    bands, per_band = grid
    if len(rows) < bands * per_band:
        raise ValueError(f"{len(rows)} points cannot fill a {bands}x{per_band} grid")
    band = _equal_count_bins(rows, bands)
    cell = np.empty(len(rows), np.int64)
    for b in range(bands):
        members = np.flatnonzero(band == b)
        cell[members] = b * per_band + _equal_count_bins(cols[members], per_band)
    return cell


def _equal_count_bins(values: np.ndarray, bins: int) -> np.ndarray:
    """Bin of each value by rank (ties in input order), bins of equal size up to one."""
    order = np.argsort(values, kind="stable")
    out = np.empty(len(values), np.int64)
    out[order] = np.arange(len(values)) * bins // len(values)
    return out


def neighbour_cells(cell: int, grid: tuple[int, int]) -> list[int]:
    """The up to 8 cells around `cell` in the grid of cell ids."""
    bands, per_band = grid
    b, c = divmod(cell, per_band)
    return [nb * per_band + nc for nb in range(max(0, b - 1), min(bands, b + 2)) for nc in range(max(0, c - 1), min(per_band, c + 2)) if (nb, nc) != (b, c)]


# ---------------------------------------------------------------------------------------------
# Clients.
@dataclasses.dataclass(frozen=True)
class ClientData:
    """One client's samples. x: [n, 2+P] (scaled coordinates, features); y: z-scored labels."""

    cell: int
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    label_mean_db: np.ndarray  # [M] mu_i
    label_std_db: np.ndarray  # [M] sigma_i
    neighbour_samples: int  # Training samples drawn from neighbouring cells.
    x_val: np.ndarray | None = None  # Validation pixels (for tuning only); None: no validation split.
    y_val: np.ndarray | None = None

    def held_out(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of the 'val' or 'test' pixels."""
        if split == "test":
            return self.x_test, self.y_test
        if split == "val" and self.x_val is not None:
            return self.x_val, self.y_val
        raise ValueError(f"split={split!r}: expected 'test' or 'val' (this client has {'no ' if self.x_val is None else ''}validation pixels)")

    @property
    def num_train(self) -> int:
        return len(self.x_train)

    def to_db(self, y_z: np.ndarray) -> np.ndarray:
        """Undoes Eq. (3): z-scored labels or predictions back to dB."""
        return y_z * self.label_std_db + self.label_mean_db


@dataclasses.dataclass(frozen=True)
class RemScenario:
    name: str
    thresholds: tuple[float, float]
    clients: list[ClientData]
    config: RemPointsConfig

    @property
    def num_features(self) -> int:
        return self.config.num_features

    @property
    def num_outputs(self) -> int:
        return len(self.config.base_stations)

    def summary(self) -> dict:
        train = np.asarray([c.num_train for c in self.clients])
        test = np.asarray([len(c.x_test) for c in self.clients])
        val = np.asarray([0 if c.x_val is None else len(c.x_val) for c in self.clients])
        return {
            "scenario": self.name,
            "test_split": self.config.test_split,
            "q33_db": self.thresholds[0],
            "q66_db": self.thresholds[1],
            "clients": len(self.clients),
            "train_samples": int(train.sum()),
            "test_samples": int(test.sum()),
            "train_per_client_min_median_max": [int(train.min()), int(np.median(train)), int(train.max())],
            "test_per_client_min": int(test.min()),
            "val_samples": int(val.sum()),
        }


def hold_out(points: RemPoints, own: np.ndarray, config: RemPointsConfig, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(train, val, test) indices of a cell's own pixels under `config.test_split`."""
    if config.test_split == "random":
        units = [np.asarray([i]) for i in rng.permutation(own)]
    else:
        blocks = grid_cells(points.rows[own], points.cols[own], config.block_grid)
        units = [own[blocks == b] for b in rng.permutation(config.block_grid[0] * config.block_grid[1])]
    n_test = max(1, int(round(config.test_fraction * len(units))))
    n_val = max(1, int(round(config.val_fraction * len(units))))
    if len(units) - n_test - n_val < 1:
        raise ValueError(f"{len(own)} pixels: too few for a train/val/test split")
    test, val, train = (np.concatenate(part) for part in (units[:n_test], units[n_test : n_test + n_val], units[n_test + n_val :]))
    return train, val, test


def _client_from_points(points: RemPoints, own: np.ndarray, neighbours: np.ndarray, cell: int, config: RemPointsConfig, rng) -> ClientData:
    try:
        train, val, test = hold_out(points, own, config, rng)
    except ValueError as exc:
        raise ValueError(f"cell {cell}: {exc}") from exc
    train = np.concatenate([train, neighbours])
    coords = np.stack([points.cols, points.rows], axis=1).astype(np.float32)  # (x, y)
    low, high = coords[train].min(0), coords[train].max(0)
    span = np.where(high > low, high - low, 1.0)

    def inputs(idx):
        return np.concatenate([(coords[idx] - low) / span, points.features[idx]], axis=1).astype(np.float32)

    mean = points.labels_db[train].mean(0)
    std = np.maximum(points.labels_db[train].std(0), config.min_label_std_db)
    return ClientData(
        cell=cell,
        x_train=inputs(train),
        y_train=((points.labels_db[train] - mean) / std).astype(np.float32),
        x_test=inputs(test),
        y_test=((points.labels_db[test] - mean) / std).astype(np.float32),
        label_mean_db=mean.astype(np.float32),
        label_std_db=std.astype(np.float32),
        neighbour_samples=len(neighbours),
        x_val=inputs(val),
        y_val=((points.labels_db[val] - mean) / std).astype(np.float32),
    )


def build_scenario(points: RemPoints, scenario: str, config: RemPointsConfig) -> RemScenario:
    """The scenario's pixels, cut into the grid's clients (see the module docstring)."""
    thresholds = scenario_thresholds(points.heterogeneity)
    index = np.flatnonzero(scenario_mask(points.heterogeneity, scenario, thresholds))
    cells = grid_cells(points.rows[index], points.cols[index], config.grid)
    members = [index[cells == c] for c in range(config.num_clients)]
    clients = []
    for c in range(config.num_clients):
        rng = np.random.default_rng([config.seed, SCENARIOS.index(scenario), c])
        pool = np.concatenate([members[nc] for nc in neighbour_cells(c, config.grid)])
        take = min(len(pool), int(round(config.neighbour_share * len(members[c]))))
        neighbours = rng.choice(pool, size=take, replace=False) if take else pool[:0]
        clients.append(_client_from_points(points, members[c], neighbours, c, config, rng))
    return RemScenario(name=scenario, thresholds=thresholds, clients=clients, config=config)


def load_scenarios(config: RemPointsConfig = RemPointsConfig(), scenarios=SCENARIOS) -> dict[str, RemScenario]:
    """Reads the map once and builds the requested scenarios."""
    root = config.root or ensure_default_rem_dataset(rem_spec(config.rem_size))
    rem_map = load_rem_map(root, config.map_id, config.base_stations, config.simulation)
    points = extract_points(rem_map, config.neighbourhood, config.cell_px)
    return {s: build_scenario(points, s, config) for s in scenarios}
