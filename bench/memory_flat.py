"""Resident memory of Python + the TFF worker over a 50-round run: it must not grow round on round.

  .venv/bin/python -m bench.memory_flat [--rounds=50 --defense=none]

Runs the privacy experiment's default configuration (`programs.privacy_radiomap`'s: default
synthetic set, 64x64, width x0.25, 6 of 14 clients a round, stage 1 for rounds 1-25, stage 2 after,
validation every round, program state saved every round) into a temporary folder, while a thread
samples the resident set size (RSS) of this process and of its worker_binary every 0.2 s. Prints
the largest RSS seen during each reported round, the peak (VmHWM) of both processes, and the
growth of the per-round largest RSS after round 5 relative to round 5 (target: under 10%), and
the growth within each stage (the switch to stage 2 loads new computations once).
"""

import os
import statistics
import tempfile
import threading
import time

import psutil
from absl import app, flags

from tff_radiomap import runtime
from tff_radiomap.data import default_set
from tff_radiomap.experiments import privacy_radiomap as experiment

FLAGS = flags.FLAGS
flags.DEFINE_integer("rounds", 50, "Rounds of the run.")
flags.DEFINE_string("defense", "none", "Defense of the run.")

MB = 2**20


def _peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def main(argv):
    del argv
    local = runtime.install_local_context()
    me, worker = psutil.Process(), psutil.Process(local.worker.pid)
    config = experiment.ExperimentConfig(
        data_root=default_set.ensure_default_dataset(), rounds=FLAGS.rounds, stage1_rounds=FLAGS.rounds // 2, defense=FLAGS.defense
    )
    per_round: dict[int, int] = {}
    per_round_parts: dict[int, tuple[int, int]] = {}
    done = threading.Event()

    with tempfile.TemporaryDirectory() as out:
        csv_path = os.path.join(out, "metrics.csv")

        def sample():
            while not done.wait(0.2):
                try:
                    with open(csv_path) as f:
                        current = sum(1 for _ in f)  # Header + finished rounds: the round running now.
                except FileNotFoundError:
                    current = 1
                python_rss, worker_rss = me.memory_info().rss, worker.memory_info().rss
                if python_rss + worker_rss > per_round.get(current, 0):
                    per_round[current] = python_rss + worker_rss
                    per_round_parts[current] = (python_rss, worker_rss)

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        t0 = time.perf_counter()
        experiment.run(config, out, progress=False)
        done.set()
        thread.join()
        wall = time.perf_counter() - t0

    rounds = sorted(r for r in per_round if 1 <= r <= FLAGS.rounds)
    print(
        f"{FLAGS.rounds}-round run ({FLAGS.defense}, default configuration), {wall:.0f} s; RSS of Python + worker, "
        f"largest sample during the round; load average {os.getloadavg()[0]:.2f}"
    )
    for r in rounds:
        if r in (1, 2, 5) or r % 5 == 0 or r == rounds[-1]:
            python_rss, worker_rss = per_round_parts[r]
            print(f"  round {r:3d}: {per_round[r] / MB:8.1f} MiB (Python {python_rss / MB:7.1f}, worker {worker_rss / MB:7.1f})")
    base = per_round[5]
    after = [per_round[r] for r in rounds if r > 5]
    growth = 100.0 * (max(after) - base) / base
    print(f"  peak (VmHWM): Python {_peak_rss(me.pid) / MB:.1f} MiB, worker {_peak_rss(worker.pid) / MB:.1f} MiB")
    print(
        f"  after round 5: largest {max(after) / MB:.1f} MiB, median {statistics.median(after) / MB:.1f} MiB; growth over round 5: {growth:+.1f}% (target < 10%)"
    )
    # The switch to stage 2 loads the stage-2 computations once: growth within each phase apart.
    switch = FLAGS.rounds // 2 + 1
    for first, last, label in ((5, switch - 1, "stage 1"), (switch + 4, rounds[-1], "stage 2")):
        if first in per_round and last in per_round and last > first:
            within = max(per_round[r] for r in rounds if first < r <= last)
            print(
                f"  {label}, rounds {first}..{last}: largest {within / MB:.1f} MiB, growth over round {first}: {100.0 * (within - per_round[first]) / per_round[first]:+.1f}%"
            )


if __name__ == "__main__":
    app.run(main)
