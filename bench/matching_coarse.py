r"""Coarse to fine against every cell: the matching attacker on a finished run's attack rounds.

  python -m bench.matching_coarse --run=runs/front_full/none_s0 --rounds=40,10 --nus=0,0.01

For each round: the run's saved broadcast model (attack_rounds/), the matching observer of the run's
seed (one map, every cell, 8 calibration positions), the clean clipped uploads of every candidate
traced once; then, for each --nus value, numpy Gaussian noise of sigma = nu on every coordinate of
the observed and calibration uploads (Uniform Noise at C = 1), and the posterior-mean ratio to the
constant guess of every cell and of coarse to fine (step 2) at several settings of
`matching_search.coarse_to_fine` (mass, per_query), with the share of the cells each traces. The
candidates' traces are the attack's cost, so the share is its cost against every cell.
"""

import argparse
import dataclasses
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

SETTINGS = ((0.99, 4), (1.0, 4), (1.0, 8), (0.999, 16))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--run", required=True, help="A privacy_radiomap run folder with attack_rounds/.")
    parser.add_argument("--rounds", required=True, help="Comma list of its saved attack rounds.")
    parser.add_argument("--nus", default="0,0.01")
    args = parser.parse_args()

    from tff_radiomap.experiments import attack_rounds, privacy_matching, privacy_setup, saved_runs, shared_models
    from tff_radiomap.models import phases
    from tff_radiomap.privacy import matching_attack as ma
    from tff_radiomap.privacy import matching_uploads
    from tff_radiomap.privacy import matching_search as ms

    cfg = dataclasses.replace(saved_runs.run_config(args.run), matching_maps=1, matching_stride=1, matching_calibration=8, matching_coarse=1)
    sets = privacy_matching.MatchingObserver(cfg, privacy_setup.read_maps(cfg)).maps[0]
    constant = np.full(2, 128.0)
    for r in (int(v) for v in args.rounds.split(",")):
        weights, _ = attack_rounds.load(args.run, attack_rounds.ATTACK_ROUNDS, r)
        phase = cfg.phase_for_round(r)
        traces = shared_models.upload_traces(cfg.model_config(), phase, cfg.client_optimizer, cfg.client_learning_rate, cfg.attack_steps)
        phases.set_phase_weights(traces.model, weights, phase)
        t0 = time.monotonic()
        clean = {k: matching_uploads.clip_uploads(traces.clean(sets[k]["x"], sets[k]["y"]), cfg.clip_norm) for k in ("candidates", "observed", "calibration")}
        n = len(clean["candidates"])
        print(f"round {r}: {n} candidates traced in {time.monotonic() - t0:.1f} s", flush=True)
        noise = ma.NoiseModel.of(None, traces.shapes)
        rng = np.random.default_rng(r)
        for nu in (float(v) for v in args.nus.split(",")):
            noised = {k: clean[k] + rng.normal(0.0, nu, clean[k].shape).astype(np.float32) if nu else clean[k] for k in ("observed", "calibration")}
            every = ma.MapDistances.of(
                noised["observed"],
                sets["observed"]["coords_m"],
                noised["calibration"],
                sets["calibration"]["coords_m"],
                [(clean["candidates"], np.full((n, cfg.attack_steps, 1), nu))],
                sets["candidates"]["coords_m"],
                noise,
            )

            def subset(index, every=every):  # The candidates `index` of every cell's distances (nothing traced again).
                return dataclasses.replace(
                    every,
                    observed=every.observed[..., index],
                    calibration=every.calibration[..., index],
                    candidate_coords=every.candidate_coords[index],
                    candidate_sigma=every.candidate_sigma[index],
                )

            full = ma.match([every], noise, constant)
            print(f"  nu {nu}: every cell {full.ratio:.3f}x the constant guess (MAP {full.map_rmse_m / full.constant_rmse_m:.3f}x)")
            for mass, per_query in SETTINGS:
                found, index = ms.coarse_to_fine(subset, sets["cells"], sets["candidates"]["coords_m"], 2, noise.sizes, mass, per_query)
                res = ma.match([found], noise, constant)
                print(
                    f"    coarse to fine, mass {mass}, per_query {per_query}: {res.ratio:.3f}x (MAP {res.map_rmse_m / res.constant_rmse_m:.3f}x), "
                    f"traced {len(index)}/{n} = {len(index) / n:.2f} of the cells"
                )


if __name__ == "__main__":
    main()
