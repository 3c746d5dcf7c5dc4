r"""The threat ladder of a finished privacy run: paper 000's observer, then a deployment's.

For every saved attack round of a `privacy_radiomap` run (its config.json and attack_rounds/), five
observers (`tff_radiomap.experiments.threat_ladder`): (i) today's single-sample trace with the
perfect twin, (ii) the same on the shadowed reality, (iii) each client's real upload of the round
with the perfect twin, (iv) the same on the shadowed reality, (v) the round's sum on the shadowed
reality; each beside its baselines (the constant guess, the prior set, today's matching attacker
on the upload, the top candidates by cosine). Prints the tables and each cell's seconds, and writes
OUTPUT_DIR/ladder.csv, ladder.md, ladder.png.

    python -m bench.deployment_observer --run=runs/privacy_front_v2/none_s0 --output_dir=runs/ladder/none_s0
    python -m bench.deployment_observer --run=RUN --output_dir=OUT --rounds=1,10 --stride=4 --coordinates=32768 --clients=2
    python -m bench.deployment_observer --run=RUN --output_dir=OUT --notold   # the observer is not told the counts

The files are rewritten after every round; the same command resumes a stopped ladder from its last
finished round (OUTPUT_DIR/ladder_settings.json records the run, the observer's settings and the
columns; a command with others is refused and the folder left as it is). More --rounds add to it.

A run on the default set reads its shadowed reality from the built-in `default_shadowed` set
(generated once, ~1.5 min); a run on other data needs --shadowed_root (the same maps and
transmitter positions in another reality: `synthetic.DatasetSpec(..., reality=ShadowedReality())`).
Cost: docs/deployment_observer.md.
"""

from __future__ import annotations

import dataclasses
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# TensorFlow (through the library) before absl: Keras imported after absl has parsed the flags builds
# graph tensors where its functional models expect Keras tensors.
from tff_radiomap.experiments import saved_runs, threat_ladder  # noqa: E402
from tff_radiomap.experiments.deployment_observer import ObserverSettings  # noqa: E402

from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("run", None, "A privacy_radiomap run folder with attack_rounds/.")
flags.DEFINE_string("output_dir", None, "Where ladder.csv, ladder.md and ladder.png go.")
flags.DEFINE_list("rounds", None, "Saved attack rounds to score (default: all).")
flags.DEFINE_list("columns", None, "Columns of the ladder (default: all): single_twin, single_shadowed, upload_twin, upload_shadowed, sum_shadowed.")
flags.DEFINE_string("shadowed_root", None, "The shadowed reality of the run's data (default: the built-in default_shadowed, for the default set).")
flags.DEFINE_integer("stride", 2, "Candidates' grid stride in cells of the model's resolution (every column's).")
flags.DEFINE_integer("coordinates", 0, "Coordinates of the upload the observer keeps (0: all d): memory and search time scale with it.")
flags.DEFINE_integer("clients", 0, "Clients of a round the single-upload observer attacks (0: all the round's).")
flags.DEFINE_boolean("told", True, "Whether the observer is told each client's count of transmitters per map (else the count rule).")
flags.DEFINE_integer("sweeps", 3, "Coordinate-descent sweeps after the greedy selection.")
flags.DEFINE_integer("calibration", 8, "Off-grid calibration positions a map of the matching baseline.")
flags.DEFINE_boolean("baselines", True, "Compute the single-sample baselines (matching, correlation): S local steps per candidate.")
flags.DEFINE_integer("fallback", 1, "Twin rounds that decide between the observer's search and the prior set (0: the search always).")
flags.DEFINE_integer("refine", 8, "Shortlist of the refinement with the true local training (0: none); made only where each client's samples fit in one batch.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    for name in ("run", "output_dir"):
        if not FLAGS[name].value:
            raise app.UsageError(f"--{name} is required")
    try:
        settings = ObserverSettings(
            stride=FLAGS.stride,
            coordinates=FLAGS.coordinates,
            clients=FLAGS.clients,
            told=FLAGS.told,
            sweeps=FLAGS.sweeps,
            calibration=FLAGS.calibration,
            baselines=FLAGS.baselines,
            refine=FLAGS.refine,
            fallback=FLAGS.fallback,
        )
        rounds = None if not FLAGS.rounds else [int(r) for r in FLAGS.rounds]
    except ValueError as exc:
        raise app.UsageError(str(exc)) from exc
    t0 = time.monotonic()
    columns = tuple(FLAGS.columns or threat_ladder.COLUMNS)
    try:
        done = threat_ladder.resumed_rows(FLAGS.output_dir, _settings_record(settings, columns))
    except ValueError as exc:
        raise app.UsageError(str(exc)) from exc
    title = os.path.basename(os.path.normpath(FLAGS.run))
    paths = {}

    def save(rows):
        paths.update(threat_ladder.report(rows, FLAGS.output_dir, title))

    if done:
        print(f"resuming {FLAGS.output_dir}: rounds {sorted({r['round'] for r in done})} already scored", flush=True)
    rows = threat_ladder.ladder(FLAGS.run, settings, rounds, FLAGS.shadowed_root, columns, log=lambda line: print(line, flush=True), done=done, on_round=save)
    save(rows)
    print(threat_ladder.markdown(rows, title))
    print(f"{time.monotonic() - t0:.0f} s; wrote {', '.join(paths.values())}")


def _settings_record(settings: ObserverSettings, columns) -> dict:
    """What ladder_settings.json holds: the run (and the defense, noise multiplier and seed that
    `bench.threat_ladder` tabulates it by), the observer's settings, the columns, the reality."""
    config = saved_runs.run_config(FLAGS.run)
    return {
        "run": os.path.abspath(FLAGS.run),
        "defense": config.defense,
        "noise_multiplier": config.noise_multiplier,
        "seed": config.seed,
        "settings": dataclasses.asdict(settings),
        "columns": list(columns),
        "shadowed_root": FLAGS.shadowed_root and os.path.abspath(FLAGS.shadowed_root),
    }


if __name__ == "__main__":
    app.run(main)
