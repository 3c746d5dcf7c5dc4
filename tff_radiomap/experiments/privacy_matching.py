"""The matching attacker of a privacy run (`privacy.matching_attack`): which uploads it observes,
where its candidates and calibration samples come from, and how its score joins the ridge's.

Observed: every data-set sample of `matching_maps` maps, drawn once from the run's seed (the same
maps at every attack round, so that the twin's simulations are made once and cached). Candidates:
on each observed map, a transmitter at the centre of every `matching_stride`-th outdoor cell of the
model's grid, simulated by the digital twin (`data.twin.position_gains`), never a data-set
sample. Calibration: `matching_calibration` twin transmitters a map at outdoor pixels that are no
cell's centre. The observed and calibration uploads are privatized by the run's defense with
seeded noise of their own streams; the candidates are clean and clipped, as a client's upload
before its noise.

Cost per attack round: maps x (candidates + calibration + observed) single-sample traces of S local
steps, plus the distances (one [N, d] x [d, N_q] product a step and group, in float64).
"""

from __future__ import annotations

import numpy as np

from tff_radiomap import seeds as seeds_lib
from tff_radiomap.data import twin
from tff_radiomap.privacy import matching_attack, matching_search, matching_uploads

# The matching attacker's measurements per attacked round (the posterior mean is the attack's
# estimate; the MAP and the constant guess of its own observed samples are reported beside it,
# and the seconds it took: traces, distances and posterior).
MATCHING_METRICS = ("attack_matching_rmse_m", "attack_matching_map_rmse_m", "attack_matching_constant_rmse_m", "attack_matching_seconds")


class MatchingObserver:
    """The observed maps of one run, their candidates and calibration samples (made once)."""

    def __init__(self, config, maps):
        self.config = config
        rng = seeds_lib.generator(config.seed, seeds_lib.MATCHING_MAPS)
        count = min(config.matching_maps, len(maps.map_ids))
        self.map_positions = np.sort(rng.choice(len(maps.map_ids), count, replace=False))
        self.maps = []
        for p in self.map_positions:
            m = int(maps.map_ids[p])
            buildings = twin.read_buildings(config.data_root, m)
            grid = twin.grid_positions(buildings, config.resolution, config.matching_stride)
            calibration = twin.off_grid_positions(
                seeds_lib.generator(config.seed, seeds_lib.MATCHING_MAPS, m), buildings, config.resolution, config.matching_calibration
            )
            gains = twin.position_gains(config.data_root, m, np.concatenate([grid, calibration]))
            simulated = maps.samples_at(int(p), np.concatenate([grid, calibration]), gains)
            observed = maps.arrays([int(p)])
            split = len(grid)
            factor = buildings.shape[0] // config.resolution
            self.maps.append(
                {
                    "map_id": m,
                    "observed": {k: observed[k] for k in ("x", "y", "coords_m")},
                    "candidates": {k: v[:split] for k, v in simulated.items()},
                    "calibration": {k: v[split:] for k, v in simulated.items()},
                    "cells": (grid - factor // 2) // (factor * config.matching_stride),  # [P, 2] in grid steps.
                }
            )

    def map_distances(self, traces: matching_uploads.UploadTraces, defense, extras, round_seed: int, noise: matching_attack.NoiseModel, chunk: int = 256):
        """`MapDistances` of every observed map in turn, the uploads from `traces`' model as it is;
        the candidates' uploads `chunk` at a time, every grid cell or coarse to fine
        (`matching_coarse`, `matching_search.coarse_to_fine`)."""
        clip = None if defense is None else defense.clip_norm
        for j, sets in enumerate(self.maps):
            if hasattr(defense, "observe_map"):  # Noise that differs by client: the map's holder's.
                defense.observe_map(sets["map_id"])
                noise = matching_attack.NoiseModel.of(defense, traces.shapes)
            fixed = None if defense is None else defense.fixed_sigmas()
            observed = traces.clean(sets["observed"]["x"], sets["observed"]["y"])
            calibration = traces.clean(sets["calibration"]["x"], sets["calibration"]["y"])
            if defense is not None:
                observed, _ = traces.privatize(observed, defense, extras, seed=(round_seed, 16 + 2 * j))
                calibration, _ = traces.privatize(calibration, defense, extras, seed=(round_seed, 17 + 2 * j))
            cand = sets["candidates"]

            def candidate_chunks(index):
                for start in range(0, len(index), chunk):
                    rows = index[start : start + chunk]
                    clean = traces.clean(cand["x"][rows], cand["y"][rows])
                    clipped = matching_uploads.clip_uploads(clean, clip)
                    if defense is None:
                        sigma = np.zeros((len(clean), traces.steps, 1))
                    elif fixed is not None:
                        sigma = np.broadcast_to(np.asarray(fixed, np.float64), (len(clean), traces.steps, len(fixed)))
                    elif noise.basis is not None:  # Scales that depend on the update, and projections both need.
                        coef = matching_attack.candidate_projections(clipped, noise)
                        yield clipped, traces.sigmas(clipped, defense, extras, seed=(round_seed, 15), coef=coef), coef
                        continue
                    else:  # The noise scale depends on the update: each candidate's own (its noise is dropped).
                        sigma = traces.sigmas(clean, defense, extras, seed=(round_seed, 15))
                    yield clipped, sigma

            def distances(index):
                return matching_attack.MapDistances.of(
                    observed,
                    sets["observed"]["coords_m"],
                    calibration,
                    sets["calibration"]["coords_m"],
                    candidate_chunks(index),
                    cand["coords_m"][index],
                    noise,
                )

            found, _ = matching_search.coarse_to_fine(distances, sets["cells"], cand["coords_m"], self.config.matching_coarse, noise.sizes)
            yield found

    def attack(self, traces: matching_uploads.UploadTraces, defense, extras, round_seed: int, constant_position) -> matching_attack.MatchingResult:
        if hasattr(defense, "observe_map") and self.maps:
            defense.observe_map(self.maps[0]["map_id"])  # Every owner's noise model has the same group sizes.
        noise = matching_attack.NoiseModel.of(defense, traces.shapes)
        return matching_attack.match(self.map_distances(traces, defense, extras, round_seed, noise), noise, np.asarray(constant_position, np.float64))


def strongest(ridge_rmse: float, ridge_constant: float, matching: matching_attack.MatchingResult | None) -> float:
    """The strongest attacker's RMSE in the ridge's meters: ridge_constant x the lowest ratio to the
    constant guess among the ridge (its best view), the matching posterior mean and its MAP, each
    ratio on its own observed samples (the attackers observe different samples)."""
    ratios = [ridge_rmse / ridge_constant]
    if matching is not None:
        ratios += [matching.rmse_m / matching.constant_rmse_m, matching.map_rmse_m / matching.constant_rmse_m]
    return ridge_constant * min(ratios)
