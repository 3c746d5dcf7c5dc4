r"""Trains one method of the EPFL-REMNet comparison on one Non-IID scenario.

  python -m programs.epfl_remnet --scenario=heavy --method=epfl_remnet --rounds=30 \
      --k_fraction=0.05 --bits=8 --sync_period=2 --ema_decay=0.5 --output_dir=runs/epfl_remnet

Data: the built-in synthetic REM set (four base stations, one per quadrant; generated once into
the cache), or --data_root, any RadioMapSeer-layout folder whose transmitters 0..3 of map
--map_id are the four base stations. Writes metrics per round (CSV and TensorBoard),
checkpoints, final.json, log.txt (INFO logging) and the pictures curves.png (RMSE and uplink per
round) and client_rmse.png (per-client RMSE on the 10 x 9 grid) under --output_dir/{scenario}/{method} (--out is an alias);
rerunning with the same flags resumes a killed run after its last checkpoint (--checkpoint_every),
and different flags for an existing folder are refused unless --overwrite. --inject_nan_client
is a test hook (a client with NaN inputs). --k_fraction=0 disables Top-K (and error feedback),
--bits=0 quantization, --ema_decay=0 the EMA.
"""

import os

from programs import console

console.quiet_tensorflow_start()  # Before anything imports TensorFlow.

from absl import app, flags  # noqa: E402

# TensorFlow must be imported before absl's app.run: imported inside main(), Keras' functional API
# builds graph tensors (TF 2.14) and model construction fails.
from baselines import remnet_methods  # noqa: E402
from programs import common  # noqa: E402
from tff_radiomap.data import rem_points  # noqa: E402
from tff_radiomap.data.radiomapseer import DataLayoutError  # noqa: E402
from baselines import remnet_figures  # noqa: E402
from tff_radiomap.learning import rem_runner, stacked_runner  # noqa: E402
from tff_radiomap.learning.epfl_remnet import EpflRemnetConfig  # noqa: E402
from tff_radiomap.models.remnet import RemNetConfig  # noqa: E402
from tff_radiomap.runtime import run_folder  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("scenario", "heavy", "light | medium | heavy.")
flags.DEFINE_string(
    "method",
    "epfl_remnet",
    "epfl_remnet, a baseline (fedavg, fedfly, pfedgp, pfl_uncompressed, fedrep, ditto; the last two with --client_placement=stacked) or an ablation (no_split_head, no_sync, no_top_k, no_quantization, no_ema).",
)
flags.DEFINE_string("test_split", "random", "How each client's validation and test pixels are held out: random | block (whole spatial blocks of its cell).")
flags.DEFINE_integer("rounds", 30, "Communication rounds.")
flags.DEFINE_integer("clients_per_round", 90, "Clients trained per round (of 90).")
flags.DEFINE_integer("local_epochs", 2, "Local epochs E.")
flags.DEFINE_integer("batch_size", 32, "Local minibatch size.")
flags.DEFINE_float("client_lr", 1e-3, "Client Adam learning rate.")
flags.DEFINE_float("k_fraction", 0.05, "Top-K fraction of the backbone update kept; 0: no Top-K.")
flags.DEFINE_integer("bits", 8, "Quantization bits; 0: float32 values.")
flags.DEFINE_integer("sync_period", 2, "R: upload every R-th round.")
flags.DEFINE_float("ema_decay", 0.5, "EMA decay of the evaluated backbone; 0: no EMA.")
flags.DEFINE_string("head", "linear", "Personalized head: linear | mlp.")
flags.DEFINE_integer("seed", 0, "Seed of the initial model, client shuffles and data splits.")
flags.DEFINE_string("data_root", None, "RadioMapSeer-layout folder; default: the built-in synthetic REM set.")
flags.DEFINE_integer("map_id", 0, "Map of --data_root whose transmitters 0..3 are the base stations.")
flags.DEFINE_integer("eval_every", 5, "Evaluate every this many rounds (and after the last).")
flags.DEFINE_integer("checkpoint_every", 5, "Save server and client states every this many rounds (and after the last); a killed run resumes from there.")
flags.DEFINE_string("output_dir", "runs/epfl_remnet", "Results folder; each run goes to OUTPUT_DIR/{scenario}/{method}.")
flags.DEFINE_alias("out", "output_dir")
flags.DEFINE_string(
    "workers", "", "host:port,... of TFF workers (python -m programs.start_worker) to split each round's clients across; default: one local worker."
)
flags.DEFINE_enum(
    "client_placement",
    "tff",
    ["tff", "in_process", "stacked"],
    "Where the clients train: tff (the TFF worker, CPU) or in_process (this Python process, on a GPU if TensorFlow sees one); "
    "Top-K, quantization, aggregation and the server update are TFF computations either way. stacked: every client at once "
    "in one tf.function (epfl_stacked; what remnet_tables uses; no --workers, no --inject_nan_client). Same metrics to float tolerance.",
)
flags.DEFINE_bool("overwrite", False, "Delete the results already in --output_dir/{scenario}/{method} (of any configuration) and start afresh.")
flags.DEFINE_string(
    "inject_nan_client",
    "",
    "Test hook: ROUND:CLIENT (0-based, as in metrics.csv) gives client CLIENT NaN inputs in round ROUND; its round must be dropped and counted in nonfinite_updates.",
)


def validate() -> None:
    common.require(FLAGS.scenario in rem_points.SCENARIOS, "scenario", FLAGS.scenario, f"one of {rem_points.SCENARIOS}")
    common.require(FLAGS.method in remnet_methods.METHODS, "method", FLAGS.method, f"one of {remnet_methods.METHODS}")
    common.require(FLAGS.test_split in rem_points.TEST_SPLITS, "test_split", FLAGS.test_split, f"one of {rem_points.TEST_SPLITS}")
    stacked_only = FLAGS.method in remnet_methods.STACKED_ONLY
    common.require(not stacked_only or FLAGS.client_placement == "stacked", "method", FLAGS.method, "--client_placement=stacked for FedRep and Ditto")
    common.require(
        FLAGS.client_placement != "stacked" or not (FLAGS.workers or FLAGS.inject_nan_client),
        "client_placement",
        "stacked",
        "no --workers and no --inject_nan_client with it",
    )
    common.require(1 <= FLAGS.clients_per_round <= 90, "clients_per_round", FLAGS.clients_per_round, "an integer in 1..90")
    try:  # The configurations' own checks are the flags'.
        base_config()
        data_config()
        injection = run_config().nan_injection()
    except ValueError as exc:
        common.config_error(exc, {}, [], FLAG_OF_FIELD)
    common.require(injection is None or injection[1] < 90, "inject_nan_client", FLAGS.inject_nan_client, "ROUND:CLIENT with CLIENT in 0..89")
    common.worker_addresses(FLAGS.workers)
    common.data_root(FLAGS.data_root)
    common.require_writable_dir(FLAGS.output_dir, "output_dir")


# Configuration fields whose flag has another name.
FLAG_OF_FIELD = {"client_learning_rate": "client_lr"}


def run_config() -> rem_runner.RunConfig:
    return rem_runner.RunConfig(
        rounds=FLAGS.rounds,
        clients_per_round=FLAGS.clients_per_round,
        eval_every=FLAGS.eval_every,
        seed=FLAGS.seed,
        checkpoint_every=FLAGS.checkpoint_every,
        inject_nan_client=FLAGS.inject_nan_client,
        client_placement="tff" if FLAGS.client_placement == "stacked" else FLAGS.client_placement,
    )


def data_config() -> rem_points.RemPointsConfig:
    return rem_points.RemPointsConfig(root=FLAGS.data_root, map_id=FLAGS.map_id, seed=FLAGS.seed, test_split=FLAGS.test_split)


def base_config():
    """EPFL-REMNet's configuration from the flags (baselines and ablations derive from it)."""
    return EpflRemnetConfig(
        model=RemNetConfig(head=FLAGS.head),
        local_epochs=FLAGS.local_epochs,
        batch_size=FLAGS.batch_size,
        client_learning_rate=FLAGS.client_lr,
        k_fraction=FLAGS.k_fraction or None,
        bits=FLAGS.bits or None,
        sync_period=FLAGS.sync_period,
        ema_decay=FLAGS.ema_decay,
    )


def main(argv):
    common.reject_extra_args(argv)
    validate()
    data = data_config()
    try:
        scenario = rem_points.load_scenarios(data, (FLAGS.scenario,))[FLAGS.scenario]
    except (DataLayoutError, ValueError) as exc:
        common.fail(f"--data_root={FLAGS.data_root!r} --map_id={FLAGS.map_id}: {exc}")
    method = remnet_methods.method(FLAGS.method, base_config())
    run = run_config()
    run_dir = os.path.join(FLAGS.output_dir, FLAGS.scenario, FLAGS.method)
    common.require_writable_dir(run_dir, "output_dir")
    console.log_to(run_dir)
    overwrite = FLAGS.overwrite

    def train():
        nonlocal overwrite
        clear, overwrite = overwrite, False  # Once: a resume after a worker restart keeps the checkpoint.
        if FLAGS.client_placement == "stacked":
            if clear:
                run_folder.clear(run_dir, rem_runner.RUN_FILES)
            return stacked_runner.run_stacked(run_dir, scenario, method, run)
        return rem_runner.run_experiment(run_dir, scenario, method, run, overwrite=clear)

    try:
        final = common.run_federated(train, common.worker_addresses(FLAGS.workers))
    except rem_runner.RunFolderConflict as exc:
        common.refuse_other_run("output_dir", FLAGS.output_dir, exc)
    print(
        f"{FLAGS.method} on {FLAGS.scenario}: macro RMSE {final['macro_rmse']:.3f} dB, micro {final['micro_rmse']:.3f} dB, "
        f"uplink {final['cum_uplink_mb']:.2f} MB over {final['rounds']} rounds ({final['wall_s']:.0f} s)"
    )
    print(f"results: {os.path.abspath(run_dir)} (metrics.csv, final.json, config.json, {console.LOG_NAME}, tensorboard/)")
    for path in remnet_figures.write_run_figures(run_dir, final, scenario.config.grid):
        print(f"picture: {os.path.abspath(path)}")


if __name__ == "__main__":
    app.run(main, flags_parser=common.parse_flags)
