r"""Federated two-stage RadioUNet under a defense (paper 000, Section IV), or its centralised reference.

  python -m programs.privacy_radiomap --defense=none --output_dir=runs/privacy/none_s0
  python -m programs.privacy_radiomap --centralised --output_dir=runs/privacy/central_s0

Without --data_root the default synthetic set is generated once and cached. Per round the
metrics go to OUTPUT_DIR/metrics.csv, OUTPUT_DIR/tensorboard and OUTPUT_DIR/log.txt (all INFO
logging goes there; the console shows a progress bar, warnings and the summary); at the end
OUTPUT_DIR/curves.png and predictions.png; the configuration to OUTPUT_DIR/config.json; the
program state to OUTPUT_DIR/program_state, so that the same command after an interruption
resumes after the last finished round. See
`tff_radiomap.experiments.privacy_radiomap` for what is trained.
"""

import dataclasses
import os

from programs import console

console.quiet_tensorflow_start()  # Before anything imports TensorFlow.

from absl import app, flags, logging  # noqa: E402

from programs import common  # noqa: E402
from tff_radiomap.experiments import basis_refresh, privacy_figures  # noqa: E402
from tff_radiomap.experiments import privacy_radiomap as experiment  # noqa: E402

FLAGS = flags.FLAGS
_DEFAULTS = experiment.ExperimentConfig(data_root="")
flags.DEFINE_enum(
    "preset",
    "default",
    list(experiment.PRESETS),
    "A named set-up: its data set and settings, under any flag given. "
    + "; ".join(f"{name}: {preset.description}" for name, preset in experiment.PRESETS.items()),
)
flags.DEFINE_string("data_root", None, "RadioMapSeer-layout folder; default: the preset's built-in synthetic set (cached).")
flags.DEFINE_integer("resolution", _DEFAULTS.resolution, "Side of the maps the model sees, in pixels.")
flags.DEFINE_float("width", _DEFAULTS.width, "Width multiplier of RadioUNet's layer widths.")
flags.DEFINE_enum(
    "stage2_output",
    _DEFAULTS.stage2_output,
    ["linear", "relu"],
    "Stage 2's output activation: linear (default; a ReLU output can die for good) or relu (the authors').",
)
flags.DEFINE_integer("rounds", _DEFAULTS.rounds, "Communication rounds R.")
flags.DEFINE_integer("stage1_rounds", None, "Rounds training stage 1 (R1); default: the preset's share of --rounds.")
flags.DEFINE_integer("clients", _DEFAULTS.num_clients, "Number of clients K.")
flags.DEFINE_integer("clients_per_round", _DEFAULTS.clients_per_round, "Clients sampled per round.")
flags.DEFINE_integer("local_epochs", _DEFAULTS.local_epochs, "Local epochs per round.")
flags.DEFINE_integer("batch_size", _DEFAULTS.batch_size, "Local batch size.")
flags.DEFINE_enum("client_optimizer", _DEFAULTS.client_optimizer, ["adam", "sgd"], "Client optimizer.")
flags.DEFINE_float("client_learning_rate", _DEFAULTS.client_learning_rate, "Client learning rate.")
flags.DEFINE_enum("server_optimizer", _DEFAULTS.server_optimizer, ["adam", "sgd"], "Server optimizer.")
flags.DEFINE_float("server_learning_rate", _DEFAULTS.server_learning_rate, "Server learning rate.")
flags.DEFINE_enum(
    "server_lr_schedule",
    _DEFAULTS.server_lr_schedule,
    list(experiment.SERVER_LR_SCHEDULES),
    "The server's learning rate over a phase's rounds: constant, or cosine (down to --server_lr_final of it at the phase's last round).",
)
flags.DEFINE_float(
    "server_lr_final", _DEFAULTS.server_lr_final, "With --server_lr_schedule=cosine: the rate at a phase's last round, as a fraction of --server_learning_rate."
)
flags.DEFINE_integer("seed", _DEFAULTS.seed, "Seed of the split, partition, sampling, shuffling and initial weights.")
flags.DEFINE_string("defense", _DEFAULTS.defense, f"One of: {', '.join(sorted(experiment.DEFENSES))}.")
flags.DEFINE_float("clip_norm", _DEFAULTS.clip_norm, "L2 clipping norm C of the privacy defenses.")
flags.DEFINE_float(
    "noise_multiplier", _DEFAULTS.noise_multiplier, "Noise multiplier nu; budget B = d (C nu)^2. For central_dp and ddp: z, the noise on the sum over C."
)
flags.DEFINE_enum("ddp_mechanism", _DEFAULTS.ddp_mechanism, ["distributed_skellam", "distributed_dgauss"], "--defense=ddp: the distributed noise.")
flags.DEFINE_integer("ddp_bits", _DEFAULTS.ddp_bits, "--defense=ddp: bits of the secure sum (1..22).")
flags.DEFINE_float("sigma_min", _DEFAULTS.sigma_min, "Adaptive defense's per-coordinate noise floor (0: none).")
flags.DEFINE_bool("fresh_noise", _DEFAULTS.fresh_noise, common.FRESH_NOISE_HELP)
flags.DEFINE_integer("attack_every", _DEFAULTS.attack_every, "Run the localization attack at round 1, every n rounds and the last (0: never).")
flags.DEFINE_integer("attack_train_traces", _DEFAULTS.attack_train_traces, "Labelled traces the attacker trains on.")
flags.DEFINE_integer("attack_test_traces", _DEFAULTS.attack_test_traces, "Held-out traces the attack is scored on.")
flags.DEFINE_integer(
    "matching_maps", _DEFAULTS.matching_maps, "Maps the digital-twin matching attacker observes at every attack round (0: the ridge attacker alone)."
)
flags.DEFINE_integer(
    "matching_stride", _DEFAULTS.matching_stride, "The matching attacker's candidate grid: every n-th outdoor cell of the model's grid (1: every cell)."
)
flags.DEFINE_integer("matching_calibration", _DEFAULTS.matching_calibration, "Twin positions a map on which the matching attacker chooses its tempering.")
flags.DEFINE_integer(
    "matching_coarse",
    _DEFAULTS.matching_coarse,
    "The matching attacker's coarse-to-fine search: every n-th grid cell first, then every cell near the likely ones (1: every cell at once).",
)
flags.DEFINE_string(
    "attack_extra_root", None, "RadioMapSeer-layout folder of samples the observer simulated itself (its digital twin): more training traces for the attack."
)
flags.DEFINE_enum(
    "adaptive_partition",
    _DEFAULTS.adaptive_partition,
    list(experiment.ADAPTIVE_PARTITIONS),
    "Adaptive defense: the groups it allocates over: 'paper' (the paper's mask groups) or 'leakage' (the twin's leakage-basis blocks and the residual, refreshed as for Subspace Noise by the --basis_* flags).",
)
flags.DEFINE_float(
    "subspace_share", _DEFAULTS.subspace_share, "Subspace Noise: share of the budget B in the twin's leakage subspace (the rest uniform on its complement)."
)
flags.DEFINE_enum(
    "basis_scope",
    _DEFAULTS.basis_scope,
    list(experiment.BASIS_SCOPES),
    "Subspace Noise: whose leakage basis a client noises in: 'federation' (every map's directions, one basis for all clients) or 'client' "
    "(its own maps' top directions; the front's row 'subspace_client').",
)
flags.DEFINE_float(
    "aligned_tradeoff",
    _DEFAULTS.aligned_tradeoff,
    "Aligned Noise: weight of the utility cost against the observer's discriminability, each relative to Uniform Noise's (0: noise by leak alone).",
)
flags.DEFINE_integer("basis_positions", _DEFAULTS.basis_positions, "Subspace Noise: twin transmitter positions per map the leakage basis is estimated from.")
flags.DEFINE_integer("basis_k_per_map", _DEFAULTS.basis_k_per_map, "Subspace Noise: leakage directions kept per map (the basis has maps x this many).")
flags.DEFINE_integer("basis_blocks", _DEFAULTS.basis_blocks, "Subspace Noise: blocks the basis is split into (groups of the leakage partition).")
flags.DEFINE_integer("basis_every", _DEFAULTS.basis_every, "Subspace Noise: refresh the basis at each phase's first round and every n rounds of it.")
flags.DEFINE_string(
    "twin_root",
    None,
    "Subspace Noise: the defender's twin (RadioMapSeer layout, the data's maps at other positions); default: simulated once from --data_root and cached.",
)
flags.DEFINE_enum(
    "client_placement",
    _DEFAULTS.client_placement,
    ["tff", "in_process"],
    "Where the clients train: tff (the TFF worker, CPU) or in_process (this Python process, on a GPU if TensorFlow sees one); "
    "aggregation, the defense and the server step are TFF computations either way. Same metrics to float tolerance.",
)
flags.DEFINE_bool("centralised", False, "Train the centralised reference (same model and sample passes, no federation).")
flags.DEFINE_string("output_dir", None, "Results folder; default runs/privacy_radiomap/<defense>_s<seed>.")
flags.DEFINE_bool("progress", True, "Show a progress bar.")
flags.DEFINE_string(
    "workers", "", "host:port,... of TFF workers (python -m programs.start_worker) to split each round's clients across; default: one local worker."
)
flags.DEFINE_bool("overwrite", False, "Delete the results already in --output_dir (of any configuration) and start afresh.")
flags.DEFINE_string(
    "inject_nan_client",
    "",
    "Test hook: ROUND:CLIENT gives client CLIENT NaN inputs in round ROUND; its update must be zeroed and counted in nonfinite_updates.",
)


# ExperimentConfig fields whose flag has another name.
FLAG_OF_FIELD = {"num_clients": "clients"}


def validate(config: experiment.ExperimentConfig) -> None:
    """The flags that the configuration's own checks do not cover: exit 2 naming the first bad one."""
    common.require(not (FLAGS.workers and FLAGS.centralised), "workers", FLAGS.workers, "'' with --centralised (no TFF)")
    common.worker_addresses(FLAGS.workers)
    common.require(
        not basis_refresh.uses_basis(config) or runtime_all_on_this_host(FLAGS.workers),
        "workers",
        FLAGS.workers,
        f"workers on this machine with --defense={config.defense} (the clients read their bases from this machine's run folder)",
    )


def runtime_all_on_this_host(spec: str) -> bool:
    from tff_radiomap import runtime

    return runtime.all_on_this_host(common.worker_addresses(spec))


def _config() -> experiment.ExperimentConfig:
    """The run's configuration from the flags: its own checks are the flags' (a ValueError
    "field=value: expected ..." becomes exit 2 naming the flag), then the folders are resolved
    (the default data set is generated only for a valid configuration)."""
    preset = experiment.PRESETS[FLAGS.preset]
    fields = dict(
        data_root=FLAGS.data_root or "",
        resolution=FLAGS.resolution,
        width=FLAGS.width,
        stage2_output=FLAGS.stage2_output,
        rounds=FLAGS.rounds,
        stage1_rounds=FLAGS.stage1_rounds,
        num_clients=FLAGS.clients,
        clients_per_round=FLAGS.clients_per_round,
        local_epochs=FLAGS.local_epochs,
        batch_size=FLAGS.batch_size,
        client_optimizer=FLAGS.client_optimizer,
        client_learning_rate=FLAGS.client_learning_rate,
        server_optimizer=FLAGS.server_optimizer,
        server_learning_rate=FLAGS.server_learning_rate,
        server_lr_schedule=FLAGS.server_lr_schedule,
        server_lr_final=FLAGS.server_lr_final,
        seed=FLAGS.seed,
        defense=FLAGS.defense,
        centralised=FLAGS.centralised,
        clip_norm=FLAGS.clip_norm,
        noise_multiplier=FLAGS.noise_multiplier,
        sigma_min=FLAGS.sigma_min,
        ddp_mechanism=FLAGS.ddp_mechanism,
        ddp_bits=FLAGS.ddp_bits,
        fresh_noise=FLAGS.fresh_noise,
        attack_every=FLAGS.attack_every,
        attack_train_traces=FLAGS.attack_train_traces,
        attack_test_traces=FLAGS.attack_test_traces,
        matching_maps=FLAGS.matching_maps,
        matching_stride=FLAGS.matching_stride,
        matching_calibration=FLAGS.matching_calibration,
        matching_coarse=FLAGS.matching_coarse,
        inject_nan_client=FLAGS.inject_nan_client,
        adaptive_partition=FLAGS.adaptive_partition,
        subspace_share=FLAGS.subspace_share,
        basis_positions=FLAGS.basis_positions,
        basis_k_per_map=FLAGS.basis_k_per_map,
        basis_blocks=FLAGS.basis_blocks,
        basis_every=FLAGS.basis_every,
        basis_scope=FLAGS.basis_scope,
        aligned_tradeoff=FLAGS.aligned_tradeoff,
        client_placement=FLAGS.client_placement,
    )
    fields.update(preset_fields(preset, fields))
    try:
        config = experiment.ExperimentConfig(**fields)
    except ValueError as exc:  # "field=value: expected ...": the flag's name and what it may be.
        common.config_error(exc, {}, [], FLAG_OF_FIELD)
    validate(config)
    from tff_radiomap.data import default_set

    return dataclasses.replace(
        config,
        data_root=common.data_root(FLAGS.data_root, default=lambda: default_set.ensure_set(preset.data_set)),
        attack_extra_root=common.data_root(FLAGS.attack_extra_root, flag="attack_extra_root") or "",
        twin_root=common.data_root(FLAGS.twin_root, flag="twin_root") or "",
    )


def preset_fields(preset, fields: dict) -> dict:
    """The preset's fields that no flag was given for, and stage 1's rounds where --stage1_rounds
    was not given (the preset's share of the rounds)."""
    chosen = {name: value for name, value in preset.fields.items() if not FLAGS[FLAG_OF_FIELD.get(name, name)].present}
    if FLAGS.stage1_rounds is None:
        chosen["stage1_rounds"] = preset.stage1_rounds(chosen.get("rounds", fields["rounds"]))
    return chosen


def _gain_text(summary: dict) -> str:
    """The gain's RMSE in dB, validation (best round) and test (final model); a run finished before
    these figures existed says so."""
    if "test" not in summary:
        return "gain RMSE: not recorded (a run finished before the figure existed)"
    test = summary["test"]
    return (
        f"gain RMSE: best round {summary['best_val_rmse_db']:.2f} dB over all pixels, {summary['best_val_outdoor_rmse_db']:.2f} dB outdoor (validation maps); "
        f"final model on the test maps {test['mse_db']:.2f} dB MSE, {test['rmse_db']:.2f} dB RMSE, {test['outdoor_rmse_db']:.2f} dB outdoor"
    )


def _privacy_text(summary: dict) -> str:
    """'; max epsilon ...' of the summary's accounting ('' for a run finished before it existed)."""
    privacy = summary.get("privacy")
    if privacy is None or summary["defense"] == "centralised":
        return ""
    seeded = "" if FLAGS.fresh_noise else ", seeded noise: not private in deployment"
    if not privacy.get("uploads_observable", True):
        text = "; the uploads are masked by secure aggregation (no attack on them)"
    elif privacy["max_epsilon"] is None:
        text = "; no privacy guarantee against an observer of the uploads"
    else:
        text = f"; max epsilon {privacy['max_epsilon']:.3g} at delta {privacy['delta']:g} per client against an observer of the uploads{seeded}"
    aggregate = privacy.get("aggregate")
    if aggregate is not None:
        text += f"; the released aggregate: epsilon {aggregate['epsilon']:.3g} at delta {aggregate['delta']:g} (participation known)"
        if "epsilon_poisson" in aggregate:
            text += f", {aggregate['epsilon_poisson']:.3g} with Poisson sampling amplification (participation unknown)"
    return text


def main(argv):
    common.reject_extra_args(argv)
    name = "centralised" if FLAGS.centralised else FLAGS.defense
    output_dir = FLAGS.output_dir or os.path.join("runs", "privacy_radiomap", f"{name}_s{FLAGS.seed}")
    config = _config()
    common.require_writable_dir(output_dir, "output_dir")
    console.log_to(output_dir)
    try:  # Before any TensorFlow work: too few maps for the split or for --clients.
        experiment.check_data(config)
    except experiment.DataTooSmallError as exc:
        common.fail(str(exc))

    from tff_radiomap import runtime
    from tff_radiomap.data import radiomapseer

    overwrite = FLAGS.overwrite
    addresses = common.worker_addresses(FLAGS.workers)
    # Workers on other machines cannot read this one's temporary files: the samples are sent.
    by_reference = runtime.all_on_this_host(addresses)

    def run():
        nonlocal overwrite
        clear, overwrite = overwrite, False  # Once: a resume after a worker restart keeps the saved rounds.
        return experiment.run(config, output_dir, progress=FLAGS.progress, overwrite=clear, data_by_reference=by_reference)

    try:
        if config.centralised:
            summary = run()
        else:
            summary = common.run_federated(run, addresses)
    except experiment.ConfigMismatchError as exc:
        common.refuse_other_run("output_dir", output_dir, exc)
    except radiomapseer.DataLayoutError as exc:
        common.fail(f"--data_root={config.data_root!r}: {exc}")
    except experiment.DataTooSmallError as exc:
        common.fail(str(exc))
    logging.info("summary: %s", summary)
    print(
        f"{summary['defense']}: best validation MSE {summary['best_val_mse_db']:.2f} dB (round {summary['best_round']}), "
        f"final {summary['final_val_mse_db']:.2f} dB after {summary['rounds']} rounds ({summary['train_seconds']:.0f} s of training)" + _privacy_text(summary)
    )
    print(_gain_text(summary))
    print(f"results: {os.path.abspath(output_dir)} (metrics.csv, summary.json, config.json, {console.LOG_NAME}, tensorboard/)")
    for path in privacy_figures.paths(output_dir):
        if os.path.exists(path):
            print(f"picture: {os.path.abspath(path)}")


if __name__ == "__main__":
    app.run(main, flags_parser=common.parse_flags)
