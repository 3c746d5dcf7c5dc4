"""Seconds per federated RadioUNet round as the clients per round and the model grow.

  .venv/bin/python -m bench.round_scaling [--rounds=3 --samples=80 --big_samples=16]

Our stage-1 process as the programs run it (tensor local loop, samples read by reference, client
Adam, weighted mean, server SGD) on random data, one local epoch in batches of 64:
  - clients per round 6, 12, 24 at 64x64, width x0.25, `samples` samples each;
  - width x0.25, x0.5, x1.0 at 64x64, 6 clients;
  - 256x256 at width x1.0 (the paper's network, 10.4 M parameters), 6 clients x `big_samples`,
    one timed round (after the round that loads the computation).
Prints the median seconds of `rounds` rounds after a warm-up round, and seconds per sample.
"""

import os
import statistics
import time

from absl import app, flags

from bench.common import random_clients
from tff_radiomap import runtime
from tff_radiomap.models import phases
from tff_radiomap.learning import radiounet_process
from tff_radiomap.models import radiounet

FLAGS = flags.FLAGS
flags.DEFINE_integer("rounds", 3, "Timed rounds per set-up (after one warm-up round).")
flags.DEFINE_integer("samples", 80, "Samples per client at 64x64.")
flags.DEFINE_integer("big_samples", 16, "Samples per client at 256x256.")
flags.DEFINE_bool("big", True, "Include the 256x256 x1.0 round.")

BATCH = 64


def round_seconds(resolution: int, width: float, clients: int, samples: int, rounds: int) -> list[float]:
    config = radiounet.RadioUNetConfig(resolution, width)
    initial = phases.initial_weights(config, 0)
    process = radiounet_process.build_two_stage_process(
        config,
        initial,
        10**6,
        radiounet_process.build_optimizer("adam", 1e-3),
        radiounet_process.build_optimizer("sgd", 1.0),
        batch_size=BATCH,
        data_by_reference=True,
    )
    data = random_clients(config, clients, samples)
    state = process.initialize()
    seconds = []
    for round_num in range(1, rounds + 2):
        t0 = time.perf_counter()
        state, _ = process.next(state, round_num, process.round_data(data, range(clients), round_num, BATCH))
        seconds.append(time.perf_counter() - t0)
    data.remove_client_files()
    return seconds


def main(argv):
    del argv
    runtime.install_local_context()
    setups = [(64, 0.25, c, FLAGS.samples) for c in (6, 12, 24)]
    setups += [(64, w, 6, FLAGS.samples) for w in (0.5, 1.0)]
    print(f"stage-1 round, batch {BATCH}, medians of {FLAGS.rounds} rounds after a warm-up")
    print(f"  {'resolution':>10s} {'width':>5s} {'clients':>7s} {'samples':>7s} {'seconds':>8s} {'ms/sample':>9s} {'params':>11s} {'load':>5s}")
    rows = [(s, FLAGS.rounds) for s in setups]
    if FLAGS.big:
        rows.append(((256, 1.0, 6, FLAGS.big_samples), 1))
    for (resolution, width, clients, samples), rounds in rows:
        seconds = round_seconds(resolution, width, clients, samples, rounds)
        median = statistics.median(seconds[1:])
        params = radiounet.parameter_count(radiounet.build_radiounet(radiounet.RadioUNetConfig(resolution, width)).stage1)
        print(
            f"  {resolution:>10d} {width:5.2f} {clients:7d} {samples:7d} {median:8.2f} "
            f"{1e3 * median / (clients * samples):9.1f} {params:11,d} {os.getloadavg()[0]:5.2f}"
            + (f"   (first round {seconds[0]:.1f} s)" if rounds == 1 else ""),
            flush=True,
        )


if __name__ == "__main__":
    app.run(main)
