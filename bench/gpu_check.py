"""The GPU path's round time at full resolution, and whether the GPU did the client training.

  bench/gpu_check.sh [--cpu_smoke] [--clients=6 --samples=32 --rounds=2 --compare_tff]

Builds RadioUNet stage 1 at 256x256, width x1.0 (the paper's network), and times rounds of
`learning.in_process_clients.InProcessClientsProcess`: the clients' local training in this
process, where TensorFlow places it on a GPU if it sees one, the weighted mean and the server step
as TFF computations on the (CPU) worker. Prints what TensorFlow sees, the median round seconds
after a warm-up round, and `GPU used: yes|no` (the clients' variables live on a GPU). With
--compare_tff, also one round of the all-TFF process (clients in the CPU-only worker_binary) on
the same data, and the ratio. --cpu_smoke: 32x32 x0.25, 2 clients x 8 samples, for a check that
the script runs on a machine without a GPU. Prints as it goes; meant to end within 5 minutes.
"""

import os
import statistics
import time

from programs import console

console.quiet_tensorflow_start()  # Before anything imports TensorFlow.

import tensorflow as tf  # noqa: E402  (before absl's app.run: Keras models built after it fail in TF 2.14)
from absl import app, flags  # noqa: E402

from bench.common import random_clients  # noqa: E402
from tff_radiomap import runtime  # noqa: E402
from tff_radiomap.models import phases  # noqa: E402
from tff_radiomap.learning import in_process_clients, radiounet_process  # noqa: E402
from tff_radiomap.models.phases import Phase  # noqa: E402
from tff_radiomap.models import radiounet  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_bool("cpu_smoke", False, "Tiny model and data: checks the script on a machine without a GPU.")
flags.DEFINE_integer("clients", 6, "Clients per round.")
flags.DEFINE_integer("samples", 32, "Samples per client.")
flags.DEFINE_integer("rounds", 2, "Timed rounds (after one warm-up round).")
flags.DEFINE_bool("compare_tff", True, "Also time one round with the clients in TFF's CPU worker.")

BATCH = 16


def main(argv):
    del argv
    started = time.perf_counter()
    gpus = tf.config.list_physical_devices("GPU")
    print(f"TensorFlow {tf.__version__}, built with CUDA: {tf.test.is_built_with_cuda()}, GPUs: {[g.name for g in gpus]}", flush=True)
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    resolution, width, clients, samples = (32, 0.25, 2, 8) if FLAGS.cpu_smoke else (256, 1.0, FLAGS.clients, FLAGS.samples)
    runtime.install_local_context()
    config = radiounet.RadioUNetConfig(resolution, width)
    initial = phases.initial_weights(config, 0)
    adam, sgd = radiounet_process.build_optimizer("adam", 1e-3), radiounet_process.build_optimizer("sgd", 1.0)
    data = random_clients(config, clients, samples)
    process = in_process_clients.InProcessClientsProcess(config, Phase.STAGE1, initial, adam, sgd, batch_size=BATCH)
    state = process.initialize()
    seconds = []
    for round_num in range(1, FLAGS.rounds + 2):
        t0 = time.perf_counter()
        state, metrics = process.next(state, [data.client_samples(k, round_num) for k in range(clients)])
        seconds.append(time.perf_counter() - t0)
        print(f"  round {round_num}: {seconds[-1]:.2f} s (train_loss {metrics['client_work']['train_loss']:.4f})", flush=True)
    median = statistics.median(seconds[1:])
    print(
        f"RadioUNet stage 1, {resolution}x{resolution}, width x{width}, {clients} clients x {samples} samples, "
        f"batch {BATCH}: in-process clients round {median:.2f} s (median of {FLAGS.rounds} after a warm-up; "
        f"load average {os.getloadavg()[0]:.2f})",
        flush=True,
    )
    print(f"GPU used: {'yes' if process.uses_gpu() else 'no'}", flush=True)
    if FLAGS.compare_tff:
        tff_process = radiounet_process.build_two_stage_process(config, initial, 10**6, adam, sgd, batch_size=BATCH, data_by_reference=True)
        tff_state = tff_process.initialize()
        tff_seconds = []
        for round_num in (1, 2):
            t0 = time.perf_counter()
            tff_state, _ = tff_process.next(tff_state, round_num, tff_process.round_data(data, range(clients), round_num, BATCH))
            tff_seconds.append(time.perf_counter() - t0)
        data.remove_client_files()
        print(f"all-TFF round (clients in the CPU worker): {tff_seconds[1]:.2f} s; in-process / all-TFF: {median / tff_seconds[1]:.2f}", flush=True)
    print(f"total {time.perf_counter() - started:.0f} s", flush=True)


if __name__ == "__main__":
    app.run(main)
