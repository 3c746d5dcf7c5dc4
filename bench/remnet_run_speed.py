"""Seconds of one EPFL-REMNet tables run per method, on the stacked clients, as the tables train it.

  .venv/bin/python -m bench.remnet_run_speed [--rounds=115] [--methods=...] [--scenario=heavy] [--split=block]

Each method of `programs.remnet_tables`' main table (its validation-tuned configuration) trains
`--rounds` rounds of 90 clients in one process, into a temporary folder, with the evaluations
(every 5 rounds) and checkpoints of a real run. Prints per method: the run's wall time, its
first round (the trace), the median round without and with an evaluation, and the test macro
RMSE (so that two versions of the code can be compared for speed and for results in one table).
Times depend on the machine and its load: compare versions side by side, one after the other.
"""

import csv
import dataclasses
import os
import statistics
import tempfile
import time

from absl import app, flags

from baselines import remnet_tables
from tff_radiomap.learning import stacked_runner
from tff_radiomap.runtime import threads

FLAGS = flags.FLAGS
flags.DEFINE_integer("rounds", remnet_tables.ROUND_BUDGET, "Rounds of each run.")
flags.DEFINE_list("methods", list(remnet_tables.MAIN_METHODS), "Methods timed, one run each.")
flags.DEFINE_string("scenario", "heavy", "Scenario whose 90 clients train.")
flags.DEFINE_string("split", "block", "Test split (random | block).")
flags.DEFINE_integer("seed", 0, "Seed of the data split, initial model and shuffles.")


def main(argv):
    del argv
    config = remnet_tables.TablesConfig()
    scenarios, pad_to = remnet_tables.load_split(config, FLAGS.split, FLAGS.seed)
    run = dataclasses.replace(config.run, rounds=FLAGS.rounds, seed=FLAGS.seed)
    print(
        f"{FLAGS.split} split, seed {FLAGS.seed}, {FLAGS.scenario}, {FLAGS.rounds} rounds, 90 clients padded to {pad_to} points, {threads.available_cores()} cores"
    )
    total = 0.0
    with tempfile.TemporaryDirectory() as out:
        for name in FLAGS.methods:
            run_dir = os.path.join(out, name)
            start = time.perf_counter()
            result = stacked_runner.run_stacked(run_dir, scenarios[FLAGS.scenario], config.method(name), run, log=lambda *a: None, pad_to=pad_to)
            wall = time.perf_counter() - start
            total += wall
            with open(os.path.join(run_dir, "metrics.csv")) as f:
                rows = list(csv.DictReader(f))
            evaluated = [float(r["round_s"]) for r in rows[1:] if r["val_macro_rmse"]]
            plain = [float(r["round_s"]) for r in rows[1:] if not r["val_macro_rmse"]]
            print(
                f"{name:18s} run {wall:6.1f} s | first round {float(rows[0]['round_s']):4.1f} s | round {statistics.median(plain):.3f} s, "
                f"evaluated {statistics.median(evaluated):.3f} s (medians) | test macro RMSE {result['macro_rmse']:.6f} dB",
                flush=True,
            )
    print(f"all {len(FLAGS.methods)} runs: {total:.1f} s")


if __name__ == "__main__":
    app.run(main)
