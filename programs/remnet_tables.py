r"""Every run behind EPFL-REMNet's tables and figures, then the tables (CSV + Markdown) and PNGs.

  python -m programs.remnet_tables --output_dir=bench/remnet_tables
  python -m programs.remnet_tables --tune --output_dir=bench/remnet_tables   # the validation sweep

Per test split (random, block), seed (0, 1, 2) and scenario (light, medium, heavy): EPFL-REMNet,
FedAvg, pFedGP, FedRep, Ditto and uncompressed personalized FL (= FedPer); on the block split
of the heavy scenario (--detail_splits, --detail_scenarios) also the five ablations and the
(k_fraction x R) Pareto grid. All on the stacked clients
(`tff_radiomap.learning.epfl_stacked`, equal to the TFF process to float tolerance). Every
hyperparameter default and the round budget were chosen on validation pixels by `--tune`
(`baselines.remnet_tuning`; bench/RESULTS.md). Runs are resumable (each in
--output_dir/runs/{split}/seed{S}/{scenario}/{label}); rerunning skips finished runs and redoes only the
tables. Writes main, per_bs, ablation, pareto and checks tables, convergence.png, pareto.png,
boxplot.png and summary.json (configuration, wall time) to --output_dir (--out is an alias). FedFly is left out by default
(its training equals FedAvg's; --methods can add it).
"""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from absl import app, flags

# TensorFlow must be imported before absl's app.run: imported inside main(), Keras' functional API
# builds graph tensors (TF 2.14) and model construction fails.
from programs import common
from tff_radiomap import runtime
from tff_radiomap.data import rem_points
from tff_radiomap.data.radiomapseer import DataLayoutError
from baselines import remnet_figures, remnet_tables, remnet_tuning
from tff_radiomap.learning import rem_runner
from tff_radiomap.runtime import run_folder, threads

FLAGS = flags.FLAGS
ROUND_BUDGET = remnet_tables.ROUND_BUDGET
flags.DEFINE_string("output_dir", "runs/remnet_tables", "Results folder: the runs (OUTPUT_DIR/runs/...), the tables and figures.")
flags.DEFINE_alias("out", "output_dir")
flags.DEFINE_integer("rounds", ROUND_BUDGET, "Communication rounds of every run (the same for all methods; chosen on validation curves).")
flags.DEFINE_integer("clients_per_round", 90, "Clients trained per round (of 90).")
flags.DEFINE_integer("eval_every", 5, "Evaluate every this many rounds (and after the last).")
flags.DEFINE_list("scenarios", ["light", "medium", "heavy"], "Scenarios to run.")
flags.DEFINE_list("test_splits", ["block", "random"], "How test (and validation) pixels are held out in each client's cell: random | block.")
flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds (each: data split, initial model, shuffles).")
flags.DEFINE_list("methods", list(remnet_tables.MAIN_METHODS), "Methods of the main table.")
flags.DEFINE_list("detail_splits", ["block"], "Splits on which the ablations and the Pareto grid run (may be empty).")
flags.DEFINE_list("detail_scenarios", ["heavy"], "Scenarios on which the ablations and the Pareto grid run (may be empty).")
flags.DEFINE_integer("rem_size", 256, "Map side of the built-in synthetic REM set (512: about 4x the pixels per client).")
flags.DEFINE_integer(
    "jobs",
    threads.available_cores(),
    "Runs trained at a time, each in its own child process with its share of the cores (default: one per core; 1: all in this process); "
    "the tables are written once all are done.",
)
flags.DEFINE_string("shard", "", "I/N trains only the I-th of N interleaved shares of the runs and writes no tables (e.g. one share per machine).")
flags.DEFINE_string(
    "claims",
    "",
    "Internal (--jobs): folder in which the children claim runs (with --shard=I/N naming the child); each keeps to the configurations it has traced.",
)
flags.DEFINE_bool(
    "report_only",
    False,
    "Only write the tables and figures of the runs already finished in --output_dir (no training); a partial table says how many seeds stand behind each row.",
)
flags.DEFINE_bool("tune", False, "Run the validation sweep (remnet_tuning.GRID) on --tune_scenario, block split, seed 0, and write tuning.csv/md; no tables.")
flags.DEFINE_string("tune_scenario", "heavy", "Scenario of the validation sweep.")
flags.DEFINE_integer("tune_rounds", 120, "Rounds of each sweep run (the round budget is chosen within them).")
flags.DEFINE_list(
    "tune_methods",
    list(remnet_tuning.GRID),
    "Methods whose candidates the sweep trains (several invocations with disjoint lists can share the CPU cores; "
    "one with all of them then reads the finished runs back and writes the complete tuning tables).",
)
flags.DEFINE_list("pareto_k", ["0.01", "0.05", "0.2"], "k_fraction values of the Pareto grid.")
flags.DEFINE_list("pareto_r", ["1", "2"], "Sync periods R of the Pareto grid.")
flags.DEFINE_string("data_root", None, "RadioMapSeer-layout folder; default: the built-in synthetic REM set.")
flags.DEFINE_integer("map_id", 0, "Map of --data_root whose transmitters 0..3 are the base stations.")
flags.DEFINE_bool("overwrite", False, "Delete the results of every planned run in --output_dir (of any configuration) and run them afresh.")


def _items(flag, kind=str, expected=""):
    """The non-empty items of list flag `flag` as `kind` (what they may be is the configuration's check)."""
    values = getattr(FLAGS, flag)
    try:
        return tuple(kind(v) for v in values if v)
    except ValueError:
        common.fail(f"--{flag}={','.join(values)!r}: expected {expected}")


# Configuration fields whose flag has another name.
FLAG_OF_FIELD = {"main_methods": "methods", "pareto_k_fractions": "pareto_k", "pareto_sync_periods": "pareto_r"}


def tables_config():
    """The TablesConfig of the flags: its own checks (and its parts') are the flags' (exit 2 naming the
    flag); here only what no configuration holds (jobs, shards, the sweep, the built-in set's sizes)."""
    common.require(FLAGS.jobs >= 1, "jobs", FLAGS.jobs, "an integer >= 1")
    shard = FLAGS.shard.split("/") if FLAGS.shard else ["0", "1"]
    common.require(len(shard) == 2 and all(v.isdigit() for v in shard) and int(shard[0]) < int(shard[1]), "shard", FLAGS.shard, "I/N with 0 <= I < N")
    common.require(not FLAGS.claims or (FLAGS.shard and os.path.isdir(FLAGS.claims)), "claims", FLAGS.claims, "an existing folder, with --shard")
    common.require(FLAGS.tune_rounds >= 5, "tune_rounds", FLAGS.tune_rounds, "an integer >= 5")
    common.require(
        FLAGS.tune_methods and set(FLAGS.tune_methods) <= set(remnet_tuning.GRID),
        "tune_methods",
        ",".join(FLAGS.tune_methods),
        f"a subset of {tuple(remnet_tuning.GRID)}",
    )
    common.require(FLAGS.tune_scenario in rem_points.SCENARIOS, "tune_scenario", FLAGS.tune_scenario, f"one of {rem_points.SCENARIOS}")
    common.require(FLAGS.rem_size in (256, 512, 1024), "rem_size", FLAGS.rem_size, "256, 512 or 1024")
    seeds = _items("seeds", int, "distinct integers >= 0")
    k_fractions = _items("pareto_k", float, "comma-separated numbers")
    sync_periods = _items("pareto_r", int, "comma-separated integers >= 1")
    common.data_root(FLAGS.data_root)
    try:
        return remnet_tables.TablesConfig(
            data=rem_points.RemPointsConfig(root=FLAGS.data_root, map_id=FLAGS.map_id, rem_size=FLAGS.rem_size),
            run=rem_runner.RunConfig(rounds=FLAGS.rounds, clients_per_round=FLAGS.clients_per_round, eval_every=FLAGS.eval_every),
            scenarios=_items("scenarios"),
            test_splits=_items("test_splits"),
            seeds=seeds,
            main_methods=_items("methods"),
            detail_splits=_items("detail_splits"),
            detail_scenarios=_items("detail_scenarios"),
            pareto_k_fractions=k_fractions,
            pareto_sync_periods=sync_periods,
        )
    except ValueError as exc:
        common.config_error(exc, {}, [], FLAG_OF_FIELD)


def tune(config) -> None:
    """The validation sweep: tuning.csv (every candidate's validation curve) and tuning.md."""
    data = dataclasses.replace(config.data, test_split="block", seed=0)
    rows = remnet_tuning.run_sweep(FLAGS.output_dir, data, FLAGS.tune_scenario, FLAGS.tune_rounds, base=config.base, methods=tuple(FLAGS.tune_methods))
    chosen = remnet_tuning.choose(rows)
    budget = remnet_tuning.round_budget(rows, chosen)
    last = [dict(r, chosen=r["label"] in chosen.values()) for r in rows if r["round"] == FLAGS.tune_rounds]
    remnet_tables.write_table(rows, os.path.join(FLAGS.output_dir, "tuning_curves"), "Validation curves of the sweep")
    remnet_tables.write_table(
        last,
        os.path.join(FLAGS.output_dir, "tuning"),
        f"Validation sweep ({FLAGS.tune_scenario}, block split, seed 0, {FLAGS.tune_rounds} rounds); round budget {budget}",
    )
    with open(os.path.join(FLAGS.output_dir, "tuning.md")) as f:
        print(f.read())
    print(f"chosen: {chosen}; round budget (every chosen method within 2% of its best validation RMSE): {budget}")


def _run_children(jobs: int) -> None:
    """--jobs: this program `jobs` times at once, each with its share of the cores
    (`threads.thread_limits`), the children claiming runs from one shared plan
    (`remnet_tables.claim`); exit 1 if one fails."""
    args = [a for a in sys.argv[1:] if not a.startswith(("--jobs", "--shard", "--claims", "--overwrite", "--nooverwrite"))]
    claims = tempfile.mkdtemp(prefix=".claims-", dir=FLAGS.output_dir)  # Fresh per invocation: a killed one's claims do not count.
    env = {**os.environ, **threads.thread_limits(jobs)}
    try:
        children = [
            subprocess.Popen([sys.executable, "-m", "programs.remnet_tables", *args, "--jobs=1", f"--shard={i}/{jobs}", f"--claims={claims}"], env=env)
            for i in range(jobs)
        ]
        codes = [child.wait() for child in children]
    finally:
        shutil.rmtree(claims, ignore_errors=True)
    if any(codes):
        common.fail(f"--jobs={jobs}: shard exit codes {codes}; finished runs are kept, run the same command again to resume", code=1)


def main(argv):
    common.reject_extra_args(argv)
    config = tables_config()
    common.require_writable_dir(FLAGS.output_dir, "output_dir")

    start = time.monotonic()
    if FLAGS.overwrite:
        for planned in remnet_tables.plan(config):
            run_folder.clear(planned.run_dir(FLAGS.output_dir), rem_runner.RUN_FILES)
    try:
        if FLAGS.tune:
            return common.supervised(lambda: tune(config), runtime.install_local_context())
        if FLAGS.shard:
            shard = tuple(int(v) for v in FLAGS.shard.split("/"))
            # Nothing returned: absl's app.run exits with main's return value (a dict would exit 1).
            common.supervised(
                lambda: remnet_tables.run_all(config, FLAGS.output_dir, shard=shard, claims_dir=FLAGS.claims or None), runtime.install_local_context()
            )
            return None
        if FLAGS.jobs > 1 and not FLAGS.report_only:
            _run_children(FLAGS.jobs)
        if FLAGS.report_only or FLAGS.jobs > 1:
            results = remnet_tables.run_all(config, FLAGS.output_dir, train=False)
        else:
            results = common.supervised(lambda: remnet_tables.run_all(config, FLAGS.output_dir), runtime.install_local_context())
    except DataLayoutError as exc:
        common.fail(f"--data_root={FLAGS.data_root!r}: {exc}")
    except rem_runner.RunFolderConflict as exc:
        common.refuse_other_run("output_dir", FLAGS.output_dir, exc)
    tables = remnet_tables.build_tables(config, results)
    markdown = []
    for name, rows in tables.items():
        if not rows:  # A partial run (--report_only) may not have reached these runs yet.
            print(f"table {name}: no finished run behind it yet")
            continue
        stem = os.path.join(FLAGS.output_dir, name)
        remnet_tables.write_table(rows, stem, remnet_tables.TITLES[name])
        with open(stem + ".md") as f:
            markdown.append(f.read())
    figures = remnet_figures.write_figures(config, results, FLAGS.output_dir)
    summary = {
        "config": dataclasses.asdict(config),
        "program_wall_s": time.monotonic() - start,
        "training_wall_s": sum({r["run_dir"]: r["wall_s"] for r in results.values()}.values()),
        "runs": len({r["run_dir"] for r in results.values()}),
        "planned_runs": len({p.key() for p in remnet_tables.plan(config)}),
        "report_only": FLAGS.report_only,
        "figures": figures,
    }
    with open(os.path.join(FLAGS.output_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2, default=str)
    print("\n".join(markdown))
    print(f"{summary['runs']} runs; program wall time {summary['program_wall_s']:.0f} s; outputs in {FLAGS.output_dir}")


if __name__ == "__main__":
    app.run(main, flags_parser=common.parse_flags)
