r"""The threat ladder over runs: a row per defense, the five observers as columns, round 1 and the
later attack rounds, mean and std over seeds (`tff_radiomap.experiments.ladder_table`), from the
ladders `bench/deployment_observer.py` wrote into folders under --ladders (one folder a run).

    python -m bench.deployment_observer --run=runs/privacy_front_v2/none_s0 --output_dir=runs/ladder/none_s0 --rounds=1,40 --stride=4 --coordinates=32768 --clients=2
    python -m bench.threat_ladder --ladders=runs/ladder --output_dir=bench/deployment_observer

Writes OUTPUT_DIR/ladder.csv, ladder.md and ladder.png, and prints ladder.md.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from tff_radiomap.experiments import ladder_table  # noqa: E402

from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("ladders", None, "A folder of ladder folders (each with ladder.csv and ladder_settings.json).")
flags.DEFINE_string("output_dir", None, "Where ladder.csv, ladder.md and ladder.png go.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    for name in ("ladders", "output_dir"):
        if not FLAGS[name].value:
            raise app.UsageError(f"--{name} is required")
    try:
        paths = ladder_table.write(FLAGS.ladders, FLAGS.output_dir)
    except (FileNotFoundError, ValueError) as exc:
        raise app.UsageError(str(exc)) from exc
    print(open(paths["md"]).read())
    print(f"{len(paths['runs'])} ladders ({', '.join(paths['runs'])}); wrote {paths['csv']}, {paths['md']}, {paths['png']}")


if __name__ == "__main__":
    app.run(main)
