"""Seconds per RadioUNet round on one TFF worker against the clients split across several.

  .venv/bin/python -m bench.multi_worker_speed [--workers=2 --clients=6 --samples=80 --rounds=5]

Starts `workers` local worker_binary processes (stopped at the end) and times rounds of our
stage-1 process (as the programs run it) alternately on the single local worker and split across
the others through TFF's mergeable context (`runtime.workers.mergeable_context`, one for the run, loopback
addresses, samples read from files), same data, same rounds. Prints medians, the speed-up
(single / split) and the load average. On one machine the workers share its cores: this measures
the overhead and the parallelism left on the table, not a multi-host speed-up.
"""

import collections
import os
import statistics
import time

import tensorflow_federated as tff
from absl import app, flags

from bench.common import random_clients
from tff_radiomap import runtime
from tff_radiomap.models import phases
from tff_radiomap.learning import radiounet_process
from tff_radiomap.models import radiounet

FLAGS = flags.FLAGS
flags.DEFINE_integer("workers", 2, "Workers to split the clients across.")
flags.DEFINE_integer("clients", 6, "Clients per round.")
flags.DEFINE_integer("samples", 80, "Samples per client.")
flags.DEFINE_integer("rounds", 5, "Timed rounds per set-up (after one warm-up round each).")

BATCH = 64


def main(argv):
    del argv
    local = runtime.install_local_context()
    extra = [runtime.WorkerProcess() for _ in range(FLAGS.workers)]
    try:
        split_context = runtime.workers.mergeable_context([w.address for w in extra])
        config = radiounet.RadioUNetConfig(64, 0.25)
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
        data = random_clients(config, FLAGS.clients, FLAGS.samples)
        states = {"one worker": process.initialize(), f"{FLAGS.workers} workers": process.initialize()}
        seconds = collections.defaultdict(list)
        for round_num in range(1, FLAGS.rounds + 2):
            for name in states:
                client_data = process.round_data(data, range(FLAGS.clients), round_num, BATCH)
                t0 = time.perf_counter()
                tff.framework.set_default_context(local.context if name == "one worker" else split_context)
                states[name], _ = process.next(states[name], round_num, client_data)
                if round_num > 1:
                    seconds[name].append(time.perf_counter() - t0)
        data.remove_client_files()
    finally:
        for worker in extra:
            worker.stop()
    one, split = seconds["one worker"], seconds[f"{FLAGS.workers} workers"]
    print(
        f"stage-1 round, {FLAGS.clients} clients x {FLAGS.samples} samples, 64x64 x0.25, {os.cpu_count()} cores; "
        f"medians of {FLAGS.rounds}; load average {os.getloadavg()[0]:.2f}"
    )
    print(f"  one worker      {statistics.median(one):6.2f} s")
    print(f"  {FLAGS.workers} workers       {statistics.median(split):6.2f} s")
    print(f"  speed-up (one / split): {statistics.median(a / b for a, b in zip(one, split)):.2f}")


if __name__ == "__main__":
    app.run(main)
