r"""Table I and Fig. 2 of paper 000: every method over several seeds.

  python -m programs.privacy_table --output_dir=runs/privacy_table --seeds=0,1,2

Runs (or resumes; finished runs are kept) programs.privacy_radiomap's experiment for each method
and seed in OUTPUT_DIR/<method>_s<seed>/, with the attack every --attack_every rounds, then writes
OUTPUT_DIR/table1.{csv,md} and OUTPUT_DIR/fig2.png. Every flag of the single-run program that is
not listed here keeps its default (see `tff_radiomap.experiments.privacy_radiomap`), unless
--set=F=V,... gives it (any field F of its ExperimentConfig except those with a flag here and
defense, seed; e.g. --set=adaptive_partition=leakage,allocator_lambda_p=100 for Adaptive on the
leakage partition, as in bench/table1_0.01).
"""

import dataclasses
import functools
import json
import os
import sys

from programs import console

console.quiet_tensorflow_start()  # Before anything imports TensorFlow.

import tensorflow  # noqa: E402, F401  (imported before absl's main; see programs/epfl_remnet.py)
from absl import app, flags  # noqa: E402

from programs import common  # noqa: E402
from tff_radiomap.experiments import privacy_radiomap as experiment  # noqa: E402
from tff_radiomap.experiments import privacy_table  # noqa: E402
from tff_radiomap.experiments.privacy_table import ChildRuns  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", "runs/privacy_table", "Folder of the runs, the table and the figure.")
flags.DEFINE_string("data_root", None, "RadioMapSeer-layout folder; default: the preset's built-in synthetic set (cached).")
flags.DEFINE_list("methods", list(privacy_table.METHODS), "Methods (defenses) to compare.")
flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds; the table reports mean and std over them.")
flags.DEFINE_enum("preset", "default", list(experiment.PRESETS), common.PRESET_HELP)
flags.DEFINE_integer("rounds", None, "Communication rounds of every run; default: the preset's.")
flags.DEFINE_integer("attack_every", 10, "Attack at round 1, every n rounds and the last.")
flags.DEFINE_float("clip_norm", 1.0, "L2 clipping norm C.")
flags.DEFINE_float("noise_multiplier", 3.0, "Noise multiplier nu of every noise defense.")
flags.DEFINE_bool("fresh_noise", False, common.FRESH_NOISE_HELP)
flags.DEFINE_enum("server_optimizer", "sgd", ["adam", "sgd"], "Server optimizer (the same for all methods).")
flags.DEFINE_float("server_learning_rate", 1.0, "Server learning rate (the same for all methods).")
flags.DEFINE_list("set", [], "FIELD=VALUE,... of privacy_radiomap.ExperimentConfig for every run (see the module docstring).")
flags.DEFINE_bool("overwrite", False, "Delete the results already in the run folders and the table, and run everything afresh.")
flags.DEFINE_integer(
    "jobs",
    3,
    "Runs at a time, each in its own process (this program for one method and seed, its output in "
    "OUTPUT_DIR/<method>_s<seed>.log), costliest first; 1: one after another in this process. One "
    "run keeps about 1.5 of 2 cores busy (its Python side and its TFF worker take turns); several fill them.",
)


# ExperimentConfig fields that --set may not hold: the flag that sets each.
OWN_FLAG = {
    "data_root": "data_root",
    "rounds": "rounds",
    "attack_every": "attack_every",
    "clip_norm": "clip_norm",
    "noise_multiplier": "noise_multiplier",
    "fresh_noise": "fresh_noise",
    "server_optimizer": "server_optimizer",
    "server_learning_rate": "server_learning_rate",
    "defense": "methods",
    "seed": "seeds",
}


def validate() -> dict:
    """Every flag against what it may be (exit 2 naming the first bad one); returns --set's fields."""
    common.require(FLAGS.methods, "methods", ",".join(FLAGS.methods), f"names from {sorted(experiment.DEFENSES)}")
    for m in FLAGS.methods:
        common.require(m in experiment.DEFENSES, "methods", m, f"names from {sorted(experiment.DEFENSES)}")
    common.require(all(s.isdigit() for s in FLAGS.seeds) and FLAGS.seeds, "seeds", ",".join(FLAGS.seeds), "comma-separated non-negative integers")
    common.require(FLAGS.attack_every >= 1, "attack_every", FLAGS.attack_every, "an integer >= 1")
    common.require(FLAGS.jobs >= 1, "jobs", FLAGS.jobs, "an integer >= 1")
    return common.config_settings(FLAGS.set, OWN_FLAG)


def base_config(settings: dict) -> experiment.ExperimentConfig:
    """The ExperimentConfig of every run (the table sets defense and seed): its own checks are the
    flags' (exit 2 naming the flag, or --set); data_root is filled in by the caller."""
    fields = dict(
        data_root="",
        **common.preset_fields(FLAGS.preset, FLAGS.rounds, settings),
        attack_every=FLAGS.attack_every,
        clip_norm=FLAGS.clip_norm,
        noise_multiplier=FLAGS.noise_multiplier,
        fresh_noise=FLAGS.fresh_noise,
        server_optimizer=FLAGS.server_optimizer,
        server_learning_rate=FLAGS.server_learning_rate,
    )
    try:
        base = experiment.ExperimentConfig(**{**fields, **settings})
        for method in FLAGS.methods:  # Each run's config is checked before any starts.
            dataclasses.replace(base, defense=method)
    except ValueError as exc:
        common.config_error(exc, settings, FLAGS.set)
    return base


def main(argv):
    common.reject_extra_args(argv)
    base = base_config(validate())
    from tff_radiomap.data import default_set

    root = common.data_root(FLAGS.data_root, default=lambda: default_set.ensure_set(experiment.PRESETS[FLAGS.preset].data_set))
    base = dataclasses.replace(base, data_root=root)
    common.require_writable_dir(FLAGS.output_dir, "output_dir")
    console.log_to(FLAGS.output_dir)  # INFO logging (the runs' release managers); warnings stay on stderr.
    seeds = [int(s) for s in FLAGS.seeds]

    def floors(config):
        return privacy_table.mse_floors(experiment.load_data(config))

    children, local, run_fn = common.privacy_runner(
        ChildRuns, functools.partial(child_command, data_root=root), FLAGS.jobs > 1 and len(FLAGS.methods) * len(seeds) > 1, FLAGS.overwrite, FLAGS.jobs
    )

    def table():
        return privacy_table.run_table(base, FLAGS.methods, seeds, FLAGS.output_dir, run_fn=run_fn, floors_fn=floors, jobs=FLAGS.jobs if children else 1)

    result = common.run_privacy_runs(table, children, local, root, FLAGS.output_dir)
    print(open(result["table_md"]).read())
    print(json.dumps({"table": result["table_md"], "figure": result["figure"]}, indent=2))


def child_command(config, data_root: str) -> list[str]:
    """This program for one method and seed of the table: every flag as given here, except those."""
    per_run = {"output_dir": os.path.abspath(FLAGS.output_dir), "data_root": data_root, "methods": config.defense, "seeds": config.seed, "jobs": 1}
    module_flags = FLAGS.get_flags_for_module(sys.modules[__name__])
    return [sys.executable, "-m", "programs.privacy_table", *privacy_table.child_arguments(module_flags, per_run)]


if __name__ == "__main__":
    app.run(main, flags_parser=common.parse_flags)
