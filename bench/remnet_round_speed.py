"""Seconds per round of the EPFL-REMNet process with 90 clients, against a plain TF loop.

  .venv/bin/python -m bench.remnet_round_speed [--rounds=6] [--scenario=heavy]

Prints medians over rounds (after a warm-up round) of:
  - local training only: the same client training function (`local_model.build_train_fn`) run
    in this process, one client after the other, no TFF;
  - one TFF round of EPFL-REMNet (sync and non-sync rounds apart), of uncompressed personalized
    FL and of FedAvg, 90 clients each, client states in and out of the worker.
"""

import statistics
import time

import tensorflow as tf
from absl import app, flags

from baselines import remnet_methods
from tff_radiomap import runtime
from tff_radiomap.data import rem_points
from tff_radiomap.learning import epfl_remnet, local_model, rem_runner

FLAGS = flags.FLAGS
flags.DEFINE_integer("rounds", 6, "Timed rounds per process (after one warm-up round).")
flags.DEFINE_string("scenario", "heavy", "Scenario whose 90 clients are used.")


def local_only(method, data) -> float:
    """Seconds for every client's local training, in-process, one after the other."""
    model = method.local.build()
    train = local_model.build_train_fn(method.local, model, epfl_remnet.client_optimizer(method.config), method.config.training)
    tensors = [{k: tf.constant(v) for k, v in d.items()} for d in data]
    train(tensors[0], tf.constant([0, 0], tf.int64))  # Trace once.
    start = time.perf_counter()
    for i, d in enumerate(tensors):
        train(d, tf.constant([i, 1], tf.int64))
    return time.perf_counter() - start


def tff_rounds(method, data, rounds: int) -> list[float]:
    n_max = data[0]["x"].shape[0]
    data_type = epfl_remnet.client_data_type(n_max, data[0]["x"].shape[1], data[0]["y"].shape[1])
    process, layout = epfl_remnet.build_process(method.config, data_type, method.local)
    state = process.initialize()
    states = [epfl_remnet.initial_client_state(method.config, layout, seed=i) for i in range(len(data))]
    times = []
    for _ in range(rounds + 1):
        start = time.perf_counter()
        state, states, _ = process.next(state, states, data)
        times.append(time.perf_counter() - start)
    return times[1:]


def main(argv):
    del argv
    runtime.install_local_context()
    scenario = rem_points.load_scenarios(rem_points.RemPointsConfig(), (FLAGS.scenario,))[FLAGS.scenario]
    data, _ = rem_runner.padded_client_data(scenario)
    base = epfl_remnet.EpflRemnetConfig()
    epfl = remnet_methods.method("epfl_remnet", base)
    print(
        f"{len(data)} clients, {sum(c.num_train for c in scenario.clients)} training samples, model {base.model.backbone_units}, E={base.local_epochs}, B={base.batch_size}"
    )
    print(f"local training only, in-process: {statistics.median(local_only(epfl, data) for _ in range(3)):.2f} s per round")
    for name in ("epfl_remnet", "pfl_uncompressed", "fedavg"):
        times = tff_rounds(remnet_methods.method(name, base), data, FLAGS.rounds)
        if name == "epfl_remnet":  # Rounds 1, 3, ... (0-based, after the warm-up round 0) sync at R = 2.
            sync, local = times[0::2], times[1::2]
            print(f"TFF round, {name}: sync {statistics.median(sync):.2f} s, non-sync {statistics.median(local):.2f} s")
        else:
            print(f"TFF round, {name}: {statistics.median(times):.2f} s")
    print(f"(rounds timed: {FLAGS.rounds}; medians; machine shared, +-20%)")


if __name__ == "__main__":
    app.run(main)
