r"""Every run behind EPFL-REMNet's tables and figures, then the tables (CSV + Markdown) and PNGs.

  python -m programs.remnet_tables --out=runs/remnet_tables

For each scenario (light, medium, heavy): EPFL-REMNet, FedAvg, FedFly, pFedGP, uncompressed
personalized FL, the five ablations and the (k_fraction x R) Pareto grid. Runs are resumable
(each in --out/runs/{scenario}/{label}); rerunning the program skips finished runs and redoes
only the tables.

CPU default (a 2-core machine, well under an hour): 20 rounds instead of the paper's longer
training, all 90 clients every round, the grid k_fraction in {0.01, 0.05, 0.2} x R in {1, 2}.
Writes main, per_bs, ablation, pareto and checks tables, convergence.png, pareto.png,
boxplot.png and summary.json (configuration, wall time) to --out.
"""

import dataclasses
import json
import os
import time

from absl import app, flags

# TensorFlow must be imported before absl's app.run: imported inside main(), Keras' functional API
# builds graph tensors (TF 2.14) and model construction fails.
from programs import common
from tff_radiomap import runtime
from tff_radiomap.data import rem_points
from tff_radiomap.data.radiomapseer import DataLayoutError
from tff_radiomap.experiments import remnet_figures, remnet_tables
from tff_radiomap.learning import rem_runner
from tff_radiomap.runtime import run_folder

FLAGS = flags.FLAGS
flags.DEFINE_string("out", "runs/remnet_tables", "Output folder.")
flags.DEFINE_integer("rounds", 20, "Communication rounds of every run.")
flags.DEFINE_integer("clients_per_round", 90, "Clients trained per round (of 90).")
flags.DEFINE_integer("eval_every", 5, "Evaluate every this many rounds (and after the last).")
flags.DEFINE_list("scenarios", ["light", "medium", "heavy"], "Scenarios to run.")
flags.DEFINE_list("pareto_k", ["0.01", "0.05", "0.2"], "k_fraction values of the Pareto grid.")
flags.DEFINE_list("pareto_r", ["1", "2"], "Sync periods R of the Pareto grid.")
flags.DEFINE_string("data_root", None, "RadioMapSeer-layout folder; default: the built-in synthetic REM set.")
flags.DEFINE_integer("map_id", 0, "Map of --data_root whose transmitters 0..3 are the base stations.")
flags.DEFINE_integer("seed", 0, "Seed of initial models, shuffles and data splits.")
flags.DEFINE_bool("overwrite", False, "Delete the results of every planned run in --out (of any configuration) and run them afresh.")


def _floats(values, flag):
    try:
        out = tuple(float(v) for v in values)
    except ValueError:
        common.fail(f"--{flag}={','.join(values)!r}: expected comma-separated numbers")
    common.require(out and all(0 < v <= 1 for v in out), flag, ",".join(values), "fractions in (0, 1]")
    return out


def _ints(values, flag):
    common.require(values and all(v.isdigit() and int(v) >= 1 for v in values), flag, ",".join(values), "comma-separated integers >= 1")
    return tuple(int(v) for v in values)


def tables_config():
    common.require(FLAGS.rounds >= 1, "rounds", FLAGS.rounds, "an integer >= 1")
    common.require(1 <= FLAGS.clients_per_round <= 90, "clients_per_round", FLAGS.clients_per_round, "an integer in 1..90")
    common.require(FLAGS.eval_every >= 1, "eval_every", FLAGS.eval_every, "an integer >= 1")
    scenarios = tuple(FLAGS.scenarios)
    common.require(scenarios and set(scenarios) <= set(rem_points.SCENARIOS), "scenarios", ",".join(scenarios), f"a subset of {rem_points.SCENARIOS}")
    common.require(FLAGS.seed >= 0, "seed", FLAGS.seed, "an integer >= 0")
    common.require(FLAGS.map_id >= 0, "map_id", FLAGS.map_id, "an integer >= 0")
    common.data_root(FLAGS.data_root)
    return remnet_tables.TablesConfig(
        data=rem_points.RemPointsConfig(root=FLAGS.data_root, map_id=FLAGS.map_id, seed=FLAGS.seed),
        run=rem_runner.RunConfig(rounds=FLAGS.rounds, clients_per_round=FLAGS.clients_per_round, eval_every=FLAGS.eval_every, seed=FLAGS.seed),
        scenarios=scenarios,
        pareto_k_fractions=_floats(FLAGS.pareto_k, "pareto_k"),
        pareto_sync_periods=_ints(FLAGS.pareto_r, "pareto_r"),
    )


def main(argv):
    common.reject_extra_args(argv)
    config = tables_config()
    common.require_writable_dir(FLAGS.out, "out")

    start = time.monotonic()
    if FLAGS.overwrite:
        for planned in remnet_tables.plan(config):
            run_folder.clear(os.path.join(FLAGS.out, "runs", planned.scenario, planned.label), rem_runner.RUN_FILES)
    try:
        results = common.supervised(lambda: remnet_tables.run_all(config, FLAGS.out), runtime.install_local_context())
    except DataLayoutError as exc:
        common.fail(f"--data_root={FLAGS.data_root!r}: {exc}")
    except rem_runner.RunFolderConflict as exc:
        common.refuse_other_run("out", FLAGS.out, exc)
    tables = remnet_tables.build_tables(config, results)
    markdown = []
    for name, rows in tables.items():
        stem = os.path.join(FLAGS.out, name)
        remnet_tables.write_table(rows, stem, remnet_tables.TITLES[name])
        with open(stem + ".md") as f:
            markdown.append(f.read())
    figures = remnet_figures.write_figures(config, results, FLAGS.out)
    summary = {
        "config": dataclasses.asdict(config),
        "program_wall_s": time.monotonic() - start,
        "training_wall_s": sum({r["run_dir"]: r["wall_s"] for r in results.values()}.values()),
        "runs": len({r["run_dir"] for r in results.values()}),
        "figures": figures,
    }
    with open(os.path.join(FLAGS.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2, default=str)
    print("\n".join(markdown))
    print(f"{summary['runs']} runs; program wall time {summary['program_wall_s']:.0f} s; outputs in {FLAGS.out}")


if __name__ == "__main__":
    app.run(main, flags_parser=common.parse_flags)
