r"""How the matching attacker's strength depends on its candidate grid (a probe, not a test).

  python -m bench.matching_grid --stride=1 --maps=1
  python -m bench.matching_grid --stride=4 --maps=3

On the default data set, the initial weights of seed 0 (the model broadcast in round 1, stage 1):
the observed maps of `privacy_matching.MatchingObserver` (seed 0; every data-set sample of each),
the candidates at the centre of every --stride-th outdoor cell, --calibration off-grid twin
positions a map; the clean uploads of S = 3 Adam steps, then for each nu numpy Gaussian noise of
sigma = nu on every coordinate (Uniform Noise at C = 1; the clip is inactive at round 1, norms
~0.11) and the matching attacker's posterior-mean and MAP ratios to the constant guess of the
observed samples, using the first S' = 1, 2, 3 uploads. Prints the trace time per candidate, and
how far apart two candidate cells' uploads are (what the noise must hide: ||c_q - c_q'||^2 / nu^2).
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stride", type=int, default=1)
    parser.add_argument("--maps", type=int, default=1)
    parser.add_argument("--calibration", type=int, default=16)
    parser.add_argument("--nus", default="0,0.003,0.01")
    args = parser.parse_args()

    from tff_radiomap.data import default_set
    from tff_radiomap.experiments import privacy_matching, privacy_setup
    from tff_radiomap.experiments.privacy_config import ExperimentConfig
    from tff_radiomap.learning import local_training, radiounet_process
    from tff_radiomap.models import phases
    from tff_radiomap.privacy import matching_attack as ma
    from tff_radiomap.privacy import matching_uploads

    root = default_set.ensure_default_dataset(progress=False)
    cfg = ExperimentConfig(data_root=root, attack_every=10, matching_maps=args.maps, matching_stride=args.stride, matching_calibration=args.calibration)
    observer = privacy_matching.MatchingObserver(cfg, privacy_setup.read_maps(cfg))
    model = phases.build_phase_model(cfg.model_config(), phases.Phase.STAGE1)
    phases.set_phase_weights(model, phases.initial_weights(cfg.model_config(), cfg.seed), phases.Phase.STAGE1)
    traces = matching_uploads.UploadTraces(model, radiounet_process.build_optimizer("adam", 1e-3), 3, local_updates=local_training.local_updates)
    noise = ma.NoiseModel.of(None, traces.shapes)
    t0 = time.monotonic()
    clean = [{k: traces.clean(s[k]["x"], s[k]["y"]) for k in ("observed", "calibration", "candidates")} for s in observer.maps]
    count = sum(len(c["candidates"]) + len(c["observed"]) + len(c["calibration"]) for c in clean)
    print(
        f"stride {args.stride}, {args.maps} map(s): {sum(len(c['candidates']) for c in clean)} candidates; {(time.monotonic() - t0) / count * 1e3:.1f} ms a trace"
    )
    rng = np.random.default_rng(0)
    # What noise must hide: the squared distance between two candidate cells' uploads (all S steps),
    # over sigma^2 = nu^2 of Uniform Noise, for 40 candidates of the first map.
    pick = clean[0]["candidates"][rng.choice(len(clean[0]["candidates"]), 40, replace=False)].astype(np.float64)
    flat = pick.reshape(40, -1)
    square = np.sum(flat**2, 1)
    gaps = (square[:, None] + square[None] - 2.0 * flat @ flat.T)[~np.eye(40, dtype=bool)]
    print(f"upload norms per step {np.linalg.norm(pick, axis=2).mean(0).round(3)}; two cells' uploads apart by ||c_q - c_q'||^2 median {np.median(gaps):.4f}")
    truth = np.concatenate([s["observed"]["coords_m"] for s in observer.maps]).astype(np.float64)
    constant = ma.rmse(np.broadcast_to(np.full(2, 128.0), truth.shape), truth)
    for nu in (float(v) for v in args.nus.split(",")):
        for steps in (1, 2, 3):
            maps = []
            for s, c in zip(observer.maps, clean):
                noised = {k: c[k][:, :steps] + rng.normal(0.0, nu, c[k][:, :steps].shape).astype(np.float32) for k in ("observed", "calibration")}
                sigma = np.full((len(c["candidates"]), steps, 1), nu)
                maps.append(
                    ma.MapDistances.of(
                        noised["observed"],
                        s["observed"]["coords_m"],
                        noised["calibration"],
                        s["calibration"]["coords_m"],
                        [(c["candidates"][:, :steps], sigma)],
                        s["candidates"]["coords_m"],
                        noise,
                    )
                )
            result = ma.match(maps, noise, np.full(2, 128.0))
            print(
                f"nu {nu:g}, S' = {steps}: posterior mean {result.rmse_m / constant:.3f}, MAP {result.map_rmse_m / constant:.3f} (constant guess {constant:.1f} m)"
            )


if __name__ == "__main__":
    main()
