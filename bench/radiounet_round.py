"""Seconds per federated round of the two-stage RadioUNet, against plain TensorFlow doing the same.

  python -m bench.radiounet_round [--resolution 64 --width 0.25 --clients 6 --samples 80 --rounds 5]

Random data (the speed does not depend on it). Prints the median seconds of a stage-1 and a stage-2
round of the TFF process (first round of each stage, which loads the computation into the worker,
excluded) and of a `tf.function` loop running the same local training in this process.
"""

import collections
import statistics
import time

import numpy as np
import tensorflow as tf
from absl import app, flags

from tff_radiomap import runtime
from tff_radiomap.learning import keras_wrap, local_training, radiounet_process
from tff_radiomap.learning.keras_wrap import Phase
from tff_radiomap.models import radiounet

FLAGS = flags.FLAGS
flags.DEFINE_integer("resolution", 64, "Map side in pixels.")
flags.DEFINE_float("width", 0.25, "RadioUNet width multiplier.")
flags.DEFINE_integer("clients", 6, "Clients per round.")
flags.DEFINE_integer("samples", 80, "Samples per client.")
flags.DEFINE_integer("rounds", 5, "Rounds timed per stage (after one warm-up round).")


def _datasets(config, rng):
    r = config.resolution
    out = []
    for _ in range(FLAGS.clients):
        x = (rng.random((FLAGS.samples, r, r, 2)) < 0.3).astype(np.float32)
        y = rng.random((FLAGS.samples, r, r, 1)).astype(np.float32)
        out.append(tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y)).batch(64))
    return out


def main(argv):
    del argv
    runtime.install_local_context()
    config = radiounet.RadioUNetConfig(FLAGS.resolution, FLAGS.width)
    initial = keras_wrap.initial_weights(config, 0)
    adam = radiounet_process.build_optimizer("adam", 1e-3)
    process = radiounet_process.build_two_stage_process(
        config, initial, FLAGS.rounds + 1, adam, radiounet_process.build_optimizer("sgd", 1.0)
    )
    data = _datasets(config, np.random.default_rng(0))
    state = process.initialize()
    seconds = collections.defaultdict(list)
    for round_num in range(1, 2 * FLAGS.rounds + 3):
        t0 = time.perf_counter()
        state, _ = process.next(state, round_num, data)
        if round_num not in (1, FLAGS.rounds + 2):
            seconds[process.phase_for_round(round_num)].append(time.perf_counter() - t0)

    for phase in (Phase.STAGE1, Phase.STAGE2):
        model = keras_wrap.build_phase_model(config, phase)

        @tf.function
        def local(dataset):
            return local_training.train_epochs(model, adam, local_training.initial_optimizer_state(adam, model), dataset)

        for d in data:  # Warm-up: trace.
            local(d)
        plain = []
        for _ in range(FLAGS.rounds):
            t0 = time.perf_counter()
            for d in data:
                local(d)
            plain.append(time.perf_counter() - t0)
        print(
            f"{phase.name.lower()}: TFF round {statistics.median(seconds[phase]):.2f} s, "
            f"plain tf.function {statistics.median(plain):.2f} s "
            f"({FLAGS.clients} clients x {FLAGS.samples} samples, {FLAGS.resolution}x{FLAGS.resolution}, width x{FLAGS.width})"
        )


if __name__ == "__main__":
    app.run(main)
