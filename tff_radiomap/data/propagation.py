"""The synthetic data set's radio propagation (`synthetic.py` writes it in RadioMapSeer's layout).

Propagation at 5.9 GHz with 1.5 m antennas and 25 m buildings, so that it is effectively 2-D:
  - line of sight: Friis free-space loss;
  - around buildings: the best street-routed path through up to `max_diffractions` building
    corners (a visibility graph over convex corners), free-space loss of its length plus
    `corner_loss_db` per corner;
  - through buildings: the direct path with `wall_loss_db` per wall crossed;
  - the stronger of the two; inside buildings the floor value (gray 0), as in RadioMapSeer.
Visibility and wall counts come from a polar ray sweep around each source, vectorised in numpy;
everything that depends only on the buildings (corners, their visibility) is computed once a map,
and a transmitter's `Paths` (lengths, walls, corners) once for any loss constants.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import ndimage

from tff_radiomap.data import encoding


@dataclasses.dataclass(frozen=True)
class PropagationConfig:
    frequency_hz: float = 5.9e9
    antenna_height_m: float = 1.5  # Far below the 25 m buildings: no over-roof path.
    building_height_m: float = 25.0
    meters_per_pixel: float = 1.0
    corner_loss_db: float = 12.0  # Per diffraction corner on the street-routed path.
    wall_loss_db: float = 15.0  # Per wall crossed on the direct path.
    max_diffractions: int = 3
    max_corners: int = 160  # Convex corners kept per map (subsampled if more).


class _PolarGrid:
    """Pixel -> (angle bin, radius bin) lookup around a source, and the ray sample points."""

    def __init__(self, size: int, n_angles: int, step: float):
        self.size, self.n_angles, self.step = size, n_angles, step
        self.n_radii = int(np.ceil(size * np.sqrt(2) / step)) + 2
        theta = np.arange(n_angles) * (2 * np.pi / n_angles)
        radii = np.arange(self.n_radii) * step
        self.ray_dy = np.sin(theta)[:, None] * radii[None, :]
        self.ray_dx = np.cos(theta)[:, None] * radii[None, :]

    def sample(self, occupancy: np.ndarray, source) -> np.ndarray:
        """Occupancy along every ray from `source` (pixel centre); outside the map is open."""
        y = np.floor(source[0] + 0.5 + self.ray_dy).astype(np.int64)
        x = np.floor(source[1] + 0.5 + self.ray_dx).astype(np.int64)
        inside = (y >= 0) & (y < self.size) & (x >= 0) & (x < self.size)
        return inside & occupancy[np.clip(y, 0, self.size - 1), np.clip(x, 0, self.size - 1)]

    def lookup(self, source, dy: np.ndarray, dx: np.ndarray):
        a = np.rint(np.arctan2(dy, dx) * (self.n_angles / (2 * np.pi))).astype(np.int64) % self.n_angles
        r = np.minimum(np.floor(np.hypot(dy, dx) / self.step).astype(np.int64), self.n_radii - 1)
        return a, r


def wall_counts(grid: _PolarGrid, occupancy: np.ndarray, source, dy: np.ndarray, dx: np.ndarray) -> np.ndarray:
    """Number of walls (occupancy changes) crossed on the straight path from `source` to each pixel."""
    occ = grid.sample(occupancy, source)
    changes = np.zeros(occ.shape, dtype=np.int16)
    changes[:, 1:] = np.cumsum(occ[:, 1:] != occ[:, :-1], axis=1)
    # A pixel's own cell may be partly sampled already; count only changes strictly before it.
    a, r = grid.lookup(source, dy, dx)
    return changes[a, np.maximum(r - 1, 0)]


def convex_corners(buildings: np.ndarray, window: int = 7, max_fill: float = 0.3) -> np.ndarray:
    """Outdoor pixels diagonal to a convex building corner: the diffraction points, [N, 2].

    A rotated building rasterises into staircase edges whose every step looks like a corner; a
    true convex corner has at most `max_fill` of its `window` x `window` neighbourhood built
    (a straight edge has about half), and of the corners left within 3 pixels one is kept.
    """
    b = np.pad(buildings, 1, constant_values=False)
    out = ~b
    centre = out[1:-1, 1:-1]
    found = np.zeros_like(centre)
    for dy in (-1, 1):
        for dx in (-1, 1):
            diag = b[1 + dy : b.shape[0] - 1 + dy, 1 + dx : b.shape[1] - 1 + dx]
            side_y = out[1 + dy : b.shape[0] - 1 + dy, 1:-1]
            side_x = out[1:-1, 1 + dx : b.shape[1] - 1 + dx]
            found |= centre & diag & side_y & side_x
    fill = ndimage.uniform_filter(buildings.astype(np.float32), size=window, mode="constant")
    corners = np.argwhere(found & (fill <= max_fill))
    _, first = np.unique(corners // 3, axis=0, return_index=True)
    return corners[np.sort(first)]


# ---------------------------------------------------------------------------------------------
# Pathloss.
class MapPropagation:
    """Everything about one map that does not depend on the transmitter, and the per-tx solver."""

    def __init__(self, buildings: np.ndarray, config: PropagationConfig = PropagationConfig(), seed: int = 0):
        self.buildings = np.asarray(buildings, dtype=bool)
        self.config = config
        size = self.buildings.shape[0]
        self.size = size
        self.yy, self.xx = np.mgrid[0:size, 0:size]
        self.fine = _PolarGrid(size, n_angles=max(1024, 6 * size), step=1.0)
        coarse = _PolarGrid(size, n_angles=max(512, 3 * size), step=1.5)

        corners = convex_corners(self.buildings)
        if len(corners) > config.max_corners:
            keep = np.random.default_rng(seed).choice(len(corners), config.max_corners, replace=False)
            corners = corners[np.sort(keep)]
        self.corners = corners
        # reach[c] = distance (m) from corner c to every pixel it sees, inf where hidden or indoors.
        reach = np.full((len(corners), size, size), np.inf, dtype=np.float32)
        for i, (cy, cx) in enumerate(corners):
            dy, dx = self.yy - cy, self.xx - cx
            visible = (wall_counts(coarse, self.buildings, (cy, cx), dy, dx) == 0) & ~self.buildings
            reach[i][visible] = np.hypot(dy, dx)[visible] * config.meters_per_pixel
        self.reach = reach
        self.corner_to_corner = reach[:, corners[:, 0], corners[:, 1]] if len(corners) else np.zeros((0, 0))

    def paths(self, tx) -> Paths:
        """The paths from a transmitter at pixel `tx` = (row, col) to every pixel, before losses."""
        cfg = self.config
        dy, dx = self.yy - tx[0], self.xx - tx[1]
        direct_m = np.maximum(np.hypot(dy, dx) * cfg.meters_per_pixel, 1.0)
        walls = wall_counts(self.fine, self.buildings, tx, dy, dx)
        routed = []
        if len(self.corners):
            los_at_corner = walls[self.corners[:, 0], self.corners[:, 1]] == 0
            to_corner = np.where(los_at_corner, direct_m[self.corners[:, 0], self.corners[:, 1]], np.inf)
            # Level k: paths through exactly k corners. Only corners whose distance improved at
            # this level can improve anything at the next (an unchanged one costs a corner more).
            live = np.isfinite(to_corner)
            best = to_corner.copy()
            for _ in range(cfg.max_diffractions):
                if not live.any():
                    break
                routed_m = _min_over_corners(to_corner, self.reach, np.flatnonzero(live))
                routed.append(encoding.free_space_loss_db(np.maximum(routed_m, 1.0), cfg.frequency_hz))
                nxt = np.min(to_corner[live, None] + self.corner_to_corner[live], axis=0)
                live = nxt < best
                to_corner = np.where(live, nxt, np.inf)
                best = np.minimum(best, nxt)
        return Paths(encoding.free_space_loss_db(direct_m, cfg.frequency_hz), walls, tuple(routed), ~self.buildings)

    def gain_db(self, tx) -> np.ndarray:
        """Received gain in dB (negative) for a transmitter at pixel `tx` = (row, col)."""
        return self.paths(tx).gain_db(self.config.corner_loss_db, self.config.wall_loss_db)


@dataclasses.dataclass(frozen=True)
class Paths:
    """One transmitter's paths to every pixel [S, S], before the loss constants: what a change of
    `corner_loss_db` or `wall_loss_db` keeps (so a map can be solved once for several of them)."""

    direct_db: np.ndarray  # Free-space loss of the straight path (dB, positive).
    walls: np.ndarray  # Walls crossed on the straight path.
    routed_db: tuple  # routed_db[k - 1]: free-space loss of the best street-routed path through k corners.
    outdoor: np.ndarray  # bool: not inside a building.

    @property
    def line_of_sight(self) -> np.ndarray:
        """bool [S, S]: outdoor pixels whose straight path to the transmitter crosses no wall."""
        return (self.walls == 0) & self.outdoor

    def gain_db(self, corner_loss_db: float, wall_loss_db: float) -> np.ndarray:
        """Gain in dB: the stronger of the direct path through walls and the routed paths; -inf
        (the floor) inside buildings."""
        loss = self.direct_db + wall_loss_db * self.walls
        for k, routed in enumerate(self.routed_db, start=1):
            loss = np.minimum(loss, routed + k * corner_loss_db)
        gain = -loss
        gain[~self.outdoor] = -np.inf  # Floor value inside buildings, as in RadioMapSeer.
        return gain


def _min_over_corners(to_corner: np.ndarray, reach: np.ndarray, corners: np.ndarray) -> np.ndarray:
    """min over c in `corners` of to_corner[c] + reach[c] (float64): the shortest path through one
    more corner. One corner at a time, in place: the same values as the [C, size, size] broadcast,
    without its temporaries."""
    out = np.add(reach[corners[0]], to_corner[corners[0]], dtype=np.float64)
    path = np.empty_like(out)
    for c in corners[1:]:
        np.add(reach[c], to_corner[c], out=path, dtype=np.float64)
        np.minimum(out, path, out=out)
    return out


# ---------------------------------------------------------------------------------------------
# Writing the layout.
