r"""The privacy-utility front of paper 000's defenses: every method over a grid of noise multipliers.

  python -m programs.privacy_front --output_dir=runs/privacy_front
  python -m programs.privacy_front --output_dir=runs/privacy_front --methods=none,uniform,directed \
      --noise_multipliers=0.001,0.01,0.03,0.1 --seeds=0,1,2 --set=attack_train_traces=2048
  python -m programs.privacy_front --output_dir=runs/privacy_front --report_only

Runs (or resumes; finished runs are kept) programs.privacy_radiomap's experiment for each method,
noise multiplier nu (z, from --z_grid, for central_dp and ddp) and seed in
OUTPUT_DIR/<method>_nu<nu>_s<seed>/, with the attack at round 1,
every --attack_every rounds and the last; a method without noise (none, clip, fedsgd) runs once
per seed, in OUTPUT_DIR/<method>_s<seed>/ (its row has nu = 0). Then writes OUTPUT_DIR/front.csv
and front.md (per method and nu: best validation MSE in dB and the final attacker RMSE in m, mean
and std over seeds; the attacker RMSE averaged over a run's attacks; the constant-guess RMSE; the
max epsilon at delta 1e-5 where the defense has a guarantee) and front.png (attacker RMSE against
validation MSE, a line per method across nu).

  --jobs=3 (default)  three runs at a time, each this program for one method, nu and seed in its
                      own process (every flag given here is passed on; its output goes to
                      OUTPUT_DIR/<run>.log), costliest first. A failed run does not stop the
                      others; the front is written when all have finished. SIGTERM/SIGINT stop
                      the children; the same command resumes them. --jobs=1: one after another
                      in this process.
  --set=F=V,...       any field F of `tff_radiomap.experiments.privacy_radiomap.ExperimentConfig`
                      for every run, V parsed by the field's type (a tuple's items go on after
                      its F=, comma-separated). Fields with a flag of their own (rounds,
                      attack_every, clip_norm, fresh_noise, data_root) and those of the grid
                      (defense, seed, noise_multiplier) are refused there. stage1_rounds defaults to the
                      preset's share of the rounds.
  --fresh_noise       unseeded defense noise in every run (the deployment setting; see docs/privacy.md,
                      "Epsilon and noise seeds"): not reproducible, a resume is not bit-exact.
  --method_grid=M=NU,...  the noise multipliers of the methods named, in place of the grid's:
                      --noise_multipliers=0.003,0.01,0.03 --method_grid=aligned=0.01 runs
                      Aligned at 0.01 only (and --report_only expects only that).
  --report_only       write the front from the finished run folders present, naming the missing
                      ones; runs nothing.
  --stop_after_round=N  stop every run after round N (saved) and write no front; the same command
                      without it resumes them. With attacks at round 1, --stop_after_round=1 gives
                      every run's round-1 attack first, then the later rounds can follow.

Every other experiment setting keeps ExperimentConfig's default (the CPU default set-up). A run
folder holding another configuration is refused (exit 2) unless --overwrite.
"""

import dataclasses
import functools
import json
import math
import os
import sys

from programs import console

console.quiet_tensorflow_start()  # Before anything imports TensorFlow.

import tensorflow  # noqa: E402, F401  (imported before absl's main; see programs/epfl_remnet.py)
from absl import app, flags  # noqa: E402

from programs import common  # noqa: E402
from tff_radiomap.experiments import front_report, privacy_front  # noqa: E402
from tff_radiomap.experiments import privacy_radiomap as experiment  # noqa: E402
from tff_radiomap.experiments import privacy_table  # noqa: E402
from tff_radiomap.experiments.privacy_table import ChildRuns  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", "runs/privacy_front", "Folder of the runs, the table and the figure.")
flags.DEFINE_string("data_root", None, "RadioMapSeer-layout folder; default: the preset's built-in synthetic set (cached).")
flags.DEFINE_list("methods", ["none", "uniform", "directed", "subspace"], "Methods (defenses, names of privacy_radiomap.DEFENSES) on the front.")
flags.DEFINE_list("noise_multipliers", ["0.001", "0.01", "0.03", "0.1"], "Noise multipliers nu of every noise defense.")
flags.DEFINE_list(
    "z_grid", ["0.01", "0.03", "0.1", "1"], "Noise multipliers z of the defenses on the aggregate (central_dp, ddp): the noise on the sum over C."
)
flags.DEFINE_list(
    "method_grid",
    [],
    "METHOD=NU,...: the noise multipliers of the methods named, in place of --noise_multipliers (or --z_grid); a method named"
    " twice gets both (Aligned and Adaptive only where Uniform costs 0.2-1 dB, say). Also the runs --report_only expects.",
)
flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds; the front reports mean and std over them.")
flags.DEFINE_enum("preset", "default", list(experiment.PRESETS), common.PRESET_HELP)
flags.DEFINE_integer("rounds", None, "Communication rounds of every run; default: the preset's.")
flags.DEFINE_integer("attack_every", 10, "Attack at round 1, every n rounds and the last.")
flags.DEFINE_float("clip_norm", 1.0, "L2 clipping norm C of every defense.")
flags.DEFINE_bool("fresh_noise", False, common.FRESH_NOISE_HELP)
flags.DEFINE_list("set", [], "FIELD=VALUE,... of privacy_radiomap.ExperimentConfig for every run (see the module docstring).")
flags.DEFINE_bool("overwrite", False, "Delete the results already in the run folders and run everything afresh.")
flags.DEFINE_integer("jobs", 3, "Runs at a time, each in its own process (OUTPUT_DIR/<run>.log), costliest first; 1: one after another in this process.")
flags.DEFINE_bool("report_only", False, "Write front.{csv,md,png} from the finished runs present (naming the missing ones); run nothing.")
flags.DEFINE_integer("stop_after_round", 0, "Stop every run after this round (saved, resumable) and write no front; 0: run them to the end.")
flags.DEFINE_bool("report", True, "Write the front once the runs have finished (--jobs children run with --noreport).")

# ExperimentConfig fields that --set may not hold: the flag (or grid axis) that sets each.
OWN_FLAG = {
    "data_root": "data_root",
    "rounds": "rounds",
    "attack_every": "attack_every",
    "clip_norm": "clip_norm",
    "fresh_noise": "fresh_noise",
    "defense": "methods",
    "seed": "seeds",
    "noise_multiplier": "noise_multipliers",
}


def validate() -> dict:
    """Every flag against what it may be (exit 2 naming the first bad one); returns --set's fields."""
    common.require(FLAGS.methods, "methods", ",".join(FLAGS.methods), f"names from {sorted(experiment.DEFENSES)}")
    for m in FLAGS.methods:
        common.require(m in experiment.DEFENSES, "methods", m, f"names from {sorted(experiment.DEFENSES)}")
    common.require(FLAGS.noise_multipliers, "noise_multipliers", "", "comma-separated positive numbers")
    for nu in FLAGS.noise_multipliers:
        common.require(_positive(nu), "noise_multipliers", nu, "comma-separated positive numbers")
    for z in FLAGS.z_grid:
        common.require(_positive(z), "z_grid", z, "comma-separated positive numbers")
    for entry, (method, nu) in zip(FLAGS.method_grid, _method_grid_entries()):
        common.require(method in FLAGS.methods and _positive(nu), "method_grid", entry, "METHOD=NU entries, METHOD one of --methods, NU positive")
    common.require(all(s.isdigit() for s in FLAGS.seeds) and FLAGS.seeds, "seeds", ",".join(FLAGS.seeds), "comma-separated non-negative integers")
    common.require(FLAGS.attack_every >= 1, "attack_every", FLAGS.attack_every, "an integer >= 1")
    common.require(FLAGS.jobs >= 1, "jobs", FLAGS.jobs, "an integer >= 1")
    common.require(FLAGS.stop_after_round >= 0, "stop_after_round", FLAGS.stop_after_round, "an integer >= 0")
    common.require(FLAGS.report or not FLAGS.report_only, "report", False, "--report with --report_only")
    return common.config_settings(FLAGS.set, OWN_FLAG)


def _positive(text: str) -> bool:
    try:
        return math.isfinite(float(text)) and float(text) > 0
    except ValueError:
        return False


def base_config(data_root: str, settings: dict):
    """The ExperimentConfig of every run (the grid sets defense, seed, noise_multiplier); its own
    checks are the flags' (exit 2 naming the flag, or --set if a run of the grid would not be a
    valid configuration)."""
    fields = dict(
        data_root=data_root,
        **common.preset_fields(FLAGS.preset, FLAGS.rounds, settings),
        attack_every=FLAGS.attack_every,
        clip_norm=FLAGS.clip_norm,
        fresh_noise=FLAGS.fresh_noise,
    )
    try:
        base = experiment.ExperimentConfig(**{**fields, **settings})
        privacy_front.grid(base, FLAGS.methods, _nus(), _seeds(), FLAGS.output_dir)  # Each run's config is checked.
    except ValueError as exc:  # The config's own checks are the flags' (naming the flag, or --set).
        common.config_error(exc, settings, FLAGS.set)
    return base


def _nus() -> dict[str, list[float]]:
    """{method: its noise multipliers}: those --method_grid names for it, else --z_grid for the
    defenses on the aggregate and --noise_multipliers for the others."""
    nus, zs = [float(nu) for nu in FLAGS.noise_multipliers], [float(z) for z in FLAGS.z_grid]
    grid = {m: zs if experiment.DEFENSES[m].aggregate_dp else nus for m in FLAGS.methods}
    named: dict[str, list[float]] = {}
    for method, nu in _method_grid_entries():
        named.setdefault(method, []).append(float(nu))
    return {**grid, **named}


def _method_grid_entries() -> list[tuple[str, str]]:
    """--method_grid's entries as (method, its multiplier's text), in the flag's order."""
    return [(method, nu) for method, _, nu in (entry.partition("=") for entry in FLAGS.method_grid)]


def _seeds() -> list[int]:
    return [int(s) for s in FLAGS.seeds]


def main(argv):
    common.reject_extra_args(argv)
    settings = validate()
    if FLAGS.report_only:
        return report_only()
    base = base_config("", settings)  # Checked before the default data set is made.
    from tff_radiomap.data import default_set

    root = common.data_root(FLAGS.data_root, default=lambda: default_set.ensure_set(experiment.PRESETS[FLAGS.preset].data_set))
    base = dataclasses.replace(base, data_root=root)
    common.require_writable_dir(FLAGS.output_dir, "output_dir")
    console.log_to(FLAGS.output_dir)  # INFO logging (the runs' release managers); warnings stay on stderr.

    runs = privacy_front.grid(base, FLAGS.methods, _nus(), _seeds(), FLAGS.output_dir)
    children, local, run_fn = common.privacy_runner(
        ChildRuns,
        functools.partial(child_command, data_root=root),
        FLAGS.jobs > 1 and len(runs) > 1,
        FLAGS.overwrite,
        FLAGS.jobs,
        stop_after_round=FLAGS.stop_after_round or None,
    )

    # Finished runs (copied back from bench/, say) are read, not handed to a child.
    skip = None if FLAGS.overwrite else experiment.holds_finished_run

    def front():
        privacy_front.run_front(base, FLAGS.methods, _nus(), _seeds(), FLAGS.output_dir, run_fn=run_fn, jobs=FLAGS.jobs if children else 1, skip=skip)
        return front_report.write_results(FLAGS.output_dir, FLAGS.methods, _nus(), _seeds()) if FLAGS.report and not FLAGS.stop_after_round else None

    result = common.run_privacy_runs(front, children, local, root, FLAGS.output_dir)
    names = ", ".join(os.path.basename(d) for _, d in runs)
    if FLAGS.stop_after_round:
        print(
            f"stopped after round {FLAGS.stop_after_round} (or finished): {names} in {os.path.abspath(FLAGS.output_dir)}; without --stop_after_round the same command resumes them"
        )
    elif result is None:
        print(f"finished: {names} in {os.path.abspath(FLAGS.output_dir)}")
    else:
        _print(result)


def report_only() -> None:
    try:
        result = front_report.write_results(FLAGS.output_dir, FLAGS.methods, _nus(), _seeds(), skip_missing=True)
    except FileNotFoundError as exc:
        common.fail(f"--output_dir={FLAGS.output_dir!r}: {exc}", code=1)
    if result["missing"]:
        print(f"missing (not finished), left out of the front: {', '.join(result['missing'])}", file=sys.stderr)
    _print(result)


def _print(result: dict) -> None:
    print(open(result["table_md"]).read())
    keys = ("csv", "table_md", "figure", "allocation_csv", "allocation_figure", "missing")
    print(json.dumps({k: result[k] for k in keys if k in result}, indent=2))


def child_command(config, data_root: str) -> list[str]:
    """This program for one run of the front: every flag as given here, except those of the grid."""
    per_run = {
        "output_dir": os.path.abspath(FLAGS.output_dir),
        "data_root": data_root,
        "methods": config.defense,
        "seeds": config.seed,
        "jobs": 1,
        "report": False,
        "method_grid": "",  # The child's one multiplier is below.
    }
    if config.defense not in privacy_front.NOISE_FREE:  # A noise-free run is one per seed whatever the grid.
        per_run["noise_multipliers"] = per_run["z_grid"] = repr(config.noise_multiplier)
    module_flags = FLAGS.get_flags_for_module(sys.modules[__name__])
    return [sys.executable, "-m", "programs.privacy_front", *privacy_table.child_arguments(module_flags, per_run)]


if __name__ == "__main__":
    app.run(main, flags_parser=common.parse_flags)
