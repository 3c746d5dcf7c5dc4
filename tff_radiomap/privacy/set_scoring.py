"""Scoring an observer that names a set of transmitter positions per map (`upload_observer`).

An upload of many samples, or a round's sum, holds many transmitters; the observer says where they
are as a set of estimates per map. Each true transmitter is scored by its distance to the estimate
it is matched to, one to one (Hungarian, `scipy.optimize.linear_sum_assignment`, on squared
distances, per map: an estimate on map A never stands for a transmitter on map B). A transmitter
left unmatched (fewer estimates than transmitters on its map) is scored against the map's constant
guess: the observer said nothing about it. Estimates beyond the transmitters' number are dropped.

The figures (`SetScore`): the RMSE in meters over the transmitters, the constant guess's (each
transmitter against its map's mean outdoor cell centre) and their ratio, as paper 000's Eq. (8),
and the share within 10 m. Read them against the prior set too (`prior_sets`: the map's outdoor
cells in k clusters, k the number of transmitters): an observer that knows only the maps and the
count places its k guesses spread over the outdoor area, and one-to-one matching then scores it
well below the constant guess (about 0.4 of it for 32 transmitters a map on the default set)
without any knowledge of where the transmitters are. Only a ratio below the prior set's is
information from the upload.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy.cluster.vq import kmeans2
from scipy.optimize import linear_sum_assignment

WITHIN_M = 10.0


def matched_distances(estimates: np.ndarray, truth: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """[n] the distance of each true position `truth` [n, 2] to its estimate, `estimates` [k, 2]
    matched one to one by least total squared distance; transmitters left without one (k < n) get
    their distance to `fallback` [2] (the map's constant guess)."""
    truth = np.asarray(truth, np.float64).reshape(-1, 2)
    estimates = np.asarray(estimates, np.float64).reshape(-1, 2)
    out = np.sqrt(np.sum((truth - np.asarray(fallback, np.float64)[None]) ** 2, 1))
    if len(estimates) and len(truth):
        squared = np.sum((truth[:, None, :] - estimates[None]) ** 2, 2)
        rows, cols = linear_sum_assignment(squared)
        out[rows] = np.sqrt(squared[rows, cols])
    return out


@dataclasses.dataclass(frozen=True)
class SetScore:
    """RMSE (m) of the matched distances, the constant guess's on the same transmitters, the share
    within `WITHIN_M` meters, and how many transmitters were scored."""

    rmse_m: float
    constant_rmse_m: float
    within_share: float
    transmitters: int

    @property
    def ratio(self) -> float:
        return self.rmse_m / self.constant_rmse_m if self.constant_rmse_m > 0 else float("nan")

    def as_dict(self, prefix: str = "") -> dict:
        return {f"{prefix}ratio": self.ratio, f"{prefix}within_10m": self.within_share, f"{prefix}rmse_m": self.rmse_m}


def score_sets(estimates: dict, truth: dict, constants: dict) -> SetScore:
    """The score of estimates {map id: [k, 2]} against the true positions {map id: [n, 2]}, each
    map's constant guess {map id: [2]} as fallback and reference (a map without estimates: all of
    its transmitters at the fallback)."""
    distances, constant = [], []
    for m, positions in truth.items():
        if len(positions) == 0:
            continue
        distances.append(matched_distances(estimates.get(m, np.zeros((0, 2))), positions, constants[m]))
        constant.append(np.sqrt(np.sum((np.asarray(positions, np.float64) - np.asarray(constants[m], np.float64)[None]) ** 2, 1)))
    if not distances:
        raise ValueError("no true transmitter to score")
    d, c = np.concatenate(distances), np.concatenate(constant)
    return SetScore(float(np.sqrt(np.mean(d**2))), float(np.sqrt(np.mean(c**2))), float(np.mean(d <= WITHIN_M)), len(d))


def pooled(scores) -> SetScore:
    """Several `SetScore`s as one over all their transmitters (RMSEs pooled by their counts)."""
    scores = [s for s in scores if s is not None and s.transmitters]
    n = sum(s.transmitters for s in scores)
    if not n:
        return SetScore(float("nan"), float("nan"), float("nan"), 0)
    mean = lambda values: sum(v * s.transmitters for v, s in zip(values, scores)) / n  # noqa: E731
    return SetScore(
        float(np.sqrt(mean([s.rmse_m**2 for s in scores]))),
        float(np.sqrt(mean([s.constant_rmse_m**2 for s in scores]))),
        float(mean([s.within_share for s in scores])),
        n,
    )


def constant_guess(outdoor_coords: np.ndarray) -> np.ndarray:
    """[2] the constant guess of a map: the mean of its outdoor cell centres [P, 2] (meters)."""
    return np.asarray(outdoor_coords, np.float64).mean(0)


def prior_sets(outdoor_coords: np.ndarray, count: int, seed: int = 0) -> np.ndarray:
    """[count, 2] the prior set of a map: its outdoor cell centres [P, 2] in `count` k-means
    clusters (k-means++ start, seeded), the best spread guess of an observer that knows only the map."""
    coords = np.asarray(outdoor_coords, np.float64)
    if count <= 0:
        return np.zeros((0, 2))
    if count >= len(coords):
        return coords[:count].copy()
    centres, _ = kmeans2(coords, count, seed=np.random.default_rng(seed), minit="++")
    return centres
