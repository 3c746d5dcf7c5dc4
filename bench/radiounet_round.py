"""Seconds per federated round of RadioUNet in TFF, against plain TensorFlow doing the same round.

  .venv/bin/python -m bench.radiounet_round [--resolution=64 --width=0.25 --clients=6 --samples=80
                                             --rounds=5 --phase=stage1 --reference]

What is compared, round by round, alternating, on the same random data (speed does not depend on
its values): C clients, each with S samples in batches of 64, one local epoch with client Adam 1e-3
from the global weights, uploads weighted by sample count, server SGD 1.0.
  - `tff`: one `next` of our learning process as the programs run it
    (`radiounet_process.build_two_stage_process` with `batch_size` and `data_by_reference`: the
    clients' samples are read from files inside the computation) on TFF's worker_binary, which
    runs the clients in parallel;
  - `plain`: one `tf.function` in this process doing the same round (every client's local loop,
    `local_training.train_epochs_on_tensors`, the weighted mean of the uploads, the server step)
    in one graph, so that TensorFlow also runs the clients in parallel. Same clients, samples,
    batches, steps and arithmetic: both end with the same weights (printed, to float tolerance);
  - with --reference, two slower variants of the same process: `tff_datasets`, the samples sent
    as serialized data sets every round; `tff_reduce`, that and the `dataset.reduce` local loop
    (the path before issue 6).
Prints the medians over `rounds` rounds (after one warm-up round each) and the median of the
per-round ratios tff / plain, with the load average.
"""

import collections
import os
import statistics
import time

import numpy as np
import tensorflow as tf
from absl import app, flags

from bench.common import random_clients
from tff_radiomap import runtime
from tff_radiomap.models import phases
from tff_radiomap.learning import keras_wrap, local_training, radiounet_process
from tff_radiomap.models.phases import Phase
from tff_radiomap.models import radiounet

FLAGS = flags.FLAGS
flags.DEFINE_integer("resolution", 64, "Map side in pixels.")
flags.DEFINE_float("width", 0.25, "RadioUNet width multiplier.")
flags.DEFINE_integer("clients", 6, "Clients per round.")
flags.DEFINE_integer("samples", 80, "Samples per client.")
flags.DEFINE_integer("batch_size", 64, "Local batch size.")
flags.DEFINE_integer("rounds", 5, "Timed rounds (after one warm-up round).")
flags.DEFINE_enum("phase", "stage1", ["stage1", "stage2"], "Which stage the rounds train.")
flags.DEFINE_bool("reference", False, "Also time the dataset.reduce local loop (the pre-issue-6 path).")

LEARNING_RATE = 1e-3


class PlainRound:
    """One FedAvg round of `phase` in one `tf.function`: the plain-TensorFlow reference."""

    def __init__(self, config, phase: Phase, initial: phases.NetworkWeights, num_clients: int, batch_size: int):
        start = keras_wrap.to_model_weights(initial, phase)
        self.global_weights = [tf.Variable(w) for w in start.trainable]
        self.models = [phases.build_phase_model(config, phase) for _ in range(num_clients)]
        for model in self.models:
            for v, w in zip(model.non_trainable_variables, start.non_trainable):
                v.assign(w)
        self.optimizer = radiounet_process.build_optimizer("adam", LEARNING_RATE)
        self.batch_size = batch_size
        self.run = tf.function(self._round)

    def _round(self, samples):
        updates, weights = [], []
        for model, client in zip(self.models, samples):
            for v, w in zip(model.trainable_variables, self.global_weights):
                v.assign(w)
            state = local_training.initial_optimizer_state(self.optimizer, model)
            _, _, count = local_training.train_epochs_on_tensors(model, self.optimizer, state, client["x"], client["y"], self.batch_size)
            updates.append([w - v for w, v in zip(self.global_weights, model.trainable_variables)])
            weights.append(tf.cast(count, tf.float32))
        total = tf.add_n(weights)
        for i, w in enumerate(self.global_weights):  # Server SGD 1.0 on the weighted mean update.
            w.assign_sub(tf.add_n([u[i] * n for u, n in zip(updates, weights)]) / total)
        return total


def _samples(data, clients, round_num):
    out = []
    for k in clients:
        batches = list(data.client_dataset(int(k), round_num, FLAGS.batch_size).as_numpy_iterator())
        out.append({key: tf.constant(np.concatenate([b[key] for b in batches])) for key in ("x", "y")})
    return out


def main(argv):
    del argv
    runtime.install_local_context()
    config = radiounet.RadioUNetConfig(FLAGS.resolution, FLAGS.width)
    phase = Phase.STAGE1 if FLAGS.phase == "stage1" else Phase.STAGE2
    initial = phases.initial_weights(config, 0)
    data = random_clients(config, FLAGS.clients, FLAGS.samples)
    clients = list(range(FLAGS.clients))
    adam = radiounet_process.build_optimizer("adam", LEARNING_RATE)
    sgd = radiounet_process.build_optimizer("sgd", 1.0)
    stage1_rounds = 10**6 if phase == Phase.STAGE1 else 0
    variants = {"tff": dict(batch_size=FLAGS.batch_size, data_by_reference=True)}
    if FLAGS.reference:
        variants.update(tff_datasets=dict(batch_size=FLAGS.batch_size), tff_reduce={})
    processes = {name: radiounet_process.build_two_stage_process(config, initial, stage1_rounds, adam, sgd, **kwargs) for name, kwargs in variants.items()}
    states = {name: p.initialize() for name, p in processes.items()}
    plain = PlainRound(config, phase, initial, FLAGS.clients, FLAGS.batch_size)

    seconds = collections.defaultdict(list)
    for round_num in range(1, FLAGS.rounds + 2):
        samples = _samples(data, clients, round_num)
        for name, process in processes.items():
            t0 = time.perf_counter()
            client_data = process.round_data(data, clients, round_num, FLAGS.batch_size)
            states[name], _ = process.next(states[name], round_num, client_data)
            seconds[name].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        plain.run(samples)
        seconds["plain"].append(time.perf_counter() - t0)

    timed = {name: s[1:] for name, s in seconds.items()}  # Round 1 loads / traces: left out.
    tff_weights = keras_wrap.to_model_weights(processes["tff"].network_weights(states["tff"]), phase).trainable
    max_diff = max(float(np.max(np.abs(a - b.numpy()))) for a, b in zip(tff_weights, plain.global_weights))
    max_weight = max(float(np.max(np.abs(a))) for a in tff_weights)
    print(
        f"RadioUNet {FLAGS.phase} round, {FLAGS.clients} clients x {FLAGS.samples} samples, "
        f"{FLAGS.resolution}x{FLAGS.resolution}, width x{FLAGS.width}, batch {FLAGS.batch_size}; "
        f"medians of {FLAGS.rounds} rounds; load average {os.getloadavg()[0]:.2f}"
    )
    for name, s in timed.items():
        print(f"  {name:10s} {statistics.median(s):7.3f} s   ({' '.join(f'{t:.2f}' for t in s)})")
    for name in processes:
        ratio = statistics.median(a / b for a, b in zip(timed[name], timed["plain"]))
        print(f"  ratio {name} / plain: {ratio:.3f}")
    print(f"  weights after {FLAGS.rounds + 1} rounds, max |tff - plain| = {max_diff:.2e} (max |w| = {max_weight:.2f})")


if __name__ == "__main__":
    app.run(main)
