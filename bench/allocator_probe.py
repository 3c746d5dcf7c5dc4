r"""Issue 14 probe: the closed-form proxy and the allocator on the round-1 model (not a test).

  python -m bench.allocator_probe --nus=0.01,0.03 --rounds=12

On the default data set, the initial weights of seed 0 (the model broadcast in round 1, stage 1),
the leakage partition (the twin's basis, k_per_map = 8 directions a map, in --blocks blocks, and
the residual), for each nu:
  (a) the proxy's L_proxy under Uniform's allocation (and with no noise) against the scoring
      attack's ratio under Uniform Noise (`attack.run_attack`, the stronger of plain and aware);
  (b) --rounds allocator rounds on that same model: the mean weight per group at the start and at
      the end, the largest |dw|, L_proxy and L_task at the end;
  (c) the scoring attack's ratio under the learned allocation, Uniform and Subspace share 0.5, at
      the same budget;
  (d) seconds per allocator round.
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nus", default="0.01,0.03")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--eta_learning_rate", type=float, default=0.05)
    parser.add_argument("--lambda_p", type=float, default=1.0)
    parser.add_argument("--train_traces", type=int, default=1024)
    parser.add_argument("--test_traces", type=int, default=256)
    parser.add_argument("--no_attack", action="store_true", help="(b), (d) only")
    parser.add_argument("--attacks", default="Uniform,Subspace 0.5,Adaptive (learned)", help="Which defenses (c) attacks")
    parser.add_argument(
        "--pretrain_steps",
        type=int,
        default=0,
        help="Centralised Adam steps (batch 64) on the pool before probing: a stand-in for a later round's model, where the leak has opened",
    )
    args = parser.parse_args()

    import tensorflow as tf  # noqa: F401

    from tff_radiomap.aggregators import SubspaceNoiseFactory, UniformNoiseFactory
    from tff_radiomap.aggregators.adaptive_noise import AdaptiveSubspaceNoiseFactory
    from tff_radiomap.data import default_set, radiomapseer, twin
    from tff_radiomap.experiments import privacy_defenses
    from tff_radiomap.learning import local_training, radiounet_process
    from tff_radiomap.models import phases, radiounet
    from tff_radiomap.models.phases import Phase
    from tff_radiomap.privacy import allocator, attack, leakage_basis, proxy
    from tff_radiomap.privacy import groups as groups_lib

    t0 = time.monotonic()
    root = default_set.ensure_default_dataset(progress=False)
    data = radiomapseer.RadioMapSeer(radiomapseer.LoaderConfig(root=root, resolution=64))
    twin_data = radiomapseer.RadioMapSeer(radiomapseer.LoaderConfig(root=twin.ensure_twin(root, 32, seed=0, workers=2), resolution=64))
    mcfg = radiounet.RadioUNetConfig(resolution=64, width=0.25)
    model = phases.build_phase_model(mcfg, Phase.STAGE1)
    phases.set_phase_weights(model, phases.initial_weights(mcfg, 0), Phase.STAGE1)
    optimizer = radiounet_process.build_optimizer("adam", 1e-3)
    pool = privacy_defenses.attacker_pool(data, np.arange(len(data.map_ids)))
    if args.pretrain_steps:
        adam = tf.keras.optimizers.Adam(1e-3)

        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
            adam.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            return loss

        rng = np.random.default_rng(0)
        for step in range(args.pretrain_steps):
            b = rng.choice(len(pool["x"]), 64, replace=False)
            loss = train_step(tf.constant(pool["x"][b]), tf.constant(pool["y"][b]))
        print(f"pretrained {args.pretrain_steps} steps: last batch MSE {float(loss):.4g} ({time.monotonic() - t0:.0f} s)")
    tw = twin_data.arrays(np.arange(len(twin_data.map_ids)))
    keep = tw["tx"] < 32
    cached = f"/tmp/allocator_probe_basis_seed0_pre{args.pretrain_steps}.npy"  # The twin basis of this model (set-up's slowest part).
    if os.path.exists(cached):
        basis = np.load(cached)
    else:
        basis, _ = leakage_basis.leakage_basis(
            leakage_basis.UploadCollector(model, optimizer, local_training.local_updates).collect(tw["x"][keep], tw["y"][keep]), tw["map_id"][keep], 8
        )
        np.save(cached, basis)
    shapes = tuple(tuple(int(s) for s in v.shape) for v in model.trainable_variables)
    groups = groups_lib.SubspaceGroups(shapes, leakage_basis.block_sizes(basis.shape[1], args.blocks), basis=basis)
    print(f"set-up {time.monotonic() - t0:.0f} s: d = {groups.num_coordinates}, K = {groups.rank}, groups {list(groups.names)} sizes {list(groups.sizes)}")
    attack_config = attack.AttackConfig(3, args.train_traces, args.test_traces, seed=1)

    def real_attack(defense):
        t = time.monotonic()
        r = attack.run_attack(attack.TraceCollector(model, optimizer, 3, defense, local_updates=local_training.local_updates), pool, attack_config)
        return r, time.monotonic() - t

    def fmt(r):
        return f"{r.ratio:.3f} ({r.rmse_m:.1f} m; plain {r.plain_rmse_m:.1f}, aware {r.aware_rmse_m:.1f}, view {r.view})"

    for nu in [float(v) for v in args.nus.split(",")]:
        print(f"\n=== nu = {nu} (B = {groups.num_coordinates * nu**2:.4g}) ===")
        adaptive = AdaptiveSubspaceNoiseFactory(1.0, nu, groups, total_rounds=50, seed=0)
        config = allocator.AllocatorConfig(steps=args.steps, eta_learning_rate=args.eta_learning_rate, lambda_p=args.lambda_p, seed=0)
        trainer = allocator.AllocatorTrainer(adaptive, config, local_updates=local_training.local_updates)
        problem, _, _ = trainer.prepare(model, optimizer, pool, 0)
        n, g = len(problem.targets), groups.num_groups
        l_uniform, choice = proxy.proxy_step(problem, np.full((n, g), nu))
        l_none, choice_none = proxy.proxy_step(problem, np.full((n, g), 1e-6))
        share = proxy.proxy_step(problem, np.tile(SubspaceNoiseFactory(1.0, nu, groups, share=0.5).sigmas()[None], (n, 1)))[0]
        print(
            f"(a) L_proxy: no noise {float(l_none):.3f} ({choice_none[0]}), Uniform {float(l_uniform):.3f} ({choice[0]}), Subspace 0.5 {float(share):.3f}"
            f"  [{len(problem.train)} train / {len(problem.test)} held-out traces]"
        )
        extras = adaptive.initial_extras()
        history = []
        for r in range(args.rounds):
            eta, m = trainer.round(model, optimizer, pool, extras)
            history.append(dict(m, seconds=trainer.last_seconds.get("total", float("nan"))))
            extras = dict(extras, eta=eta, round_index=np.int32(extras["round_index"] + 1))
            weights = " ".join(f"{m[f'weight_{name}']:.4f}" for name in groups.names)
            print(
                f"  round {r + 1:2d}: L_proxy {m.get('proxy_loss_start', float('nan')):.3f} -> {m.get('proxy_loss', float('nan')):.3f}, "
                f"L_task {m.get('task_loss', float('nan')):.3f}, w [{weights}], {trainer.last_seconds.get('total', float('nan')):.1f} s"
            )
            if r == 0:
                print(
                    "    harm per energy "
                    + " ".join(f"{m.get(f'harm_per_energy_{name}', float('nan')):.3g}" for name in groups.names)
                    + "; seconds "
                    + " ".join(f"{k} {v:.1f}" for k, v in trainer.last_seconds.items())
                )
        start = np.array(groups.sizes) / groups.num_coordinates
        end = np.array([history[-1][f"weight_{name}"] for name in groups.names])
        print(f"(b) w start (Uniform) {np.round(start, 4).tolist()} -> end {np.round(end, 4).tolist()}; max |dw| {np.max(np.abs(end - start)):.4f}")
        print(f"(d) seconds per allocator round: median {np.median([h['seconds'] for h in history]):.1f}")
        if args.no_attack:
            continue
        adaptive.observe(extras)
        for name, defense in (
            ("Uniform", UniformNoiseFactory(1.0, nu, groups=groups_lib.radiounet_groups(mcfg, Phase.STAGE1), seed=0)),
            ("Subspace 0.5", SubspaceNoiseFactory(1.0, nu, groups, share=0.5, seed=0)),
            ("Adaptive (learned)", adaptive),
        ):
            if name not in args.attacks.split(","):
                continue
            result, seconds = real_attack(defense)
            print(f"(c) attack ratio, {name}: {fmt(result)}  [{seconds:.0f} s]")
    print(f"\ntotal {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
