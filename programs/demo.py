"""`make demo`: the No Defense run of the privacy experiment on the CPU default, shortened to fit
five minutes.

The default set-up (`privacy_radiomap.ExperimentConfig`: 64x64 maps, RadioUNet width x0.25, the
default synthetic set of 96 maps x 32 transmitters, generated once and cached, 6 of 14 clients a
round, 5 local epochs at batch 16) for DEMO_ROUNDS rounds of stage 1 instead of 40 rounds of stage 1
and 20 of stage 2 (stage 2 starts from a fresh network and needs ~15 rounds to catch up with stage
1; bench/RESULTS.md, "The operating point"), into runs/demo/none_s0. The console shows a progress
bar, warnings and the summary, then the results folder and the paths of its pictures (curves.png,
predictions.png); INFO logging goes to the folder's log.txt. Every flag of
`programs.privacy_radiomap` can be passed (make demo DEMO_ARGS="--rounds=60 --stage1_rounds=40" is
the full default run); without --stage1_rounds every round trains stage 1. A second run resumes,
or only reports if the first one finished.
"""

from absl import app, flags

from programs import common, privacy_radiomap

DEMO_ROUNDS = 16


def main(argv):
    if not flags.FLAGS["stage1_rounds"].present:
        flags.FLAGS.stage1_rounds = flags.FLAGS.rounds
    privacy_radiomap.main(argv)


if __name__ == "__main__":
    flags.FLAGS.set_default("rounds", DEMO_ROUNDS)
    flags.FLAGS.set_default("output_dir", "runs/demo/none_s0")
    app.run(main, flags_parser=common.parse_flags)
