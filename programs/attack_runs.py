r"""Score finished privacy runs' attacks again with the current attackers, without training them again.

  python -m programs.attack_runs --runs='runs/front/*'
  python -m programs.attack_runs --runs=runs/privacy_radiomap/uniform_nu0.01_s0 --matching_maps=2

Every run folder of --runs (comma list; shell patterns are expanded here) must hold the models its
attack rounds broadcast (attack_rounds/, kept by privacy_radiomap runs); its metrics.csv gets the
attack columns of those rounds rewritten (every attacker, and attack_rmse_m the strongest), and its
config.json the matching attacker's settings. A pattern that matches nothing, or a folder that is
no run or keeps no models, exits 2 before anything is written. Afterwards, regenerate a front's
tables with `python -m programs.privacy_front --report_only ...`.
"""

import glob
import os

from programs import console  # noqa: E402

console.quiet_tensorflow_start()  # Before anything imports TensorFlow.

from absl import app, flags  # noqa: E402

from programs import common  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("runs", None, "Run folders of privacy_radiomap (comma list; patterns such as 'runs/front/*' are expanded).")
flags.DEFINE_integer("matching_maps", None, "Maps the matching attacker observes (0: the ridge alone); default: the run's own setting, else today's default.")
flags.DEFINE_integer("matching_stride", None, "The matching attacker's grid stride in cells (1: every outdoor cell); default as --matching_maps.")
flags.DEFINE_integer("matching_calibration", None, "Calibration positions a map of the matching attacker; default as --matching_maps.")
flags.DEFINE_integer("matching_coarse", None, "The matching attacker's coarse-to-fine step (1: every cell at once); default as --matching_maps.")


def run_folders(patterns: list[str]) -> list[str]:
    """The run folders named by `patterns` (expanded, in order, each once): exit 2 naming a pattern
    that matches no folder holding a config.json and attack_rounds/."""
    found = []
    for pattern in patterns:
        matched = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        runs = [p for p in matched if os.path.isfile(os.path.join(p, "config.json"))]
        common.require(bool(runs), "runs", pattern, "privacy_radiomap run folders (each with a config.json)")
        for run in runs:
            common.require(
                os.path.isdir(os.path.join(run, "attack_rounds")),
                "runs",
                run,
                "a run that kept its attack rounds' models (attack_rounds/); runs from before they were kept must be trained again",
            )
            if run not in found:
                found.append(run)
    return found


def main(argv):
    common.reject_extra_args(argv)
    common.require(bool(FLAGS.runs), "runs", FLAGS.runs, "one or more run folders")
    matching = {k: FLAGS[k].value for k in ("matching_maps", "matching_stride", "matching_calibration", "matching_coarse") if FLAGS[k].value is not None}
    for name, value in matching.items():
        common.require(
            value >= (0 if name == "matching_maps" else 1), name, value, "a non-negative integer" if name == "matching_maps" else "a positive integer"
        )
    runs = run_folders(FLAGS.runs)

    from tff_radiomap.experiments import rescoring

    for run in runs:
        try:
            scored = rescoring.rescore(run, matching)
        except ValueError as exc:
            common.fail(f"{run}: {exc}")
        for round_num, values in scored.items():
            ridge = values["attack_plain_rmse_m"] / values["attack_constant_rmse_m"]
            matched = values["attack_matching_rmse_m"] / values["attack_matching_constant_rmse_m"]
            strongest = values["attack_rmse_m"] / values["attack_constant_rmse_m"]
            print(f"{run} round {round_num}: strongest {strongest:.3f}x the constant guess (ridge {ridge:.3f}x, matching {matched:.3f}x)")


if __name__ == "__main__":
    flags.mark_flag_as_required("runs")
    app.run(main, flags_parser=common.parse_flags)
