"""`make demo`: the No Defense run of the privacy experiment on the CPU default, shortened to fit
a few minutes.

The default set-up (`privacy_radiomap.ExperimentConfig`: 64x64 maps, RadioUNet width x0.25, the
default synthetic set of 96 maps x 32 transmitters, generated once and cached, 6 of 14 clients a
round, 5 local epochs at batch 16) for DEMO_ROUNDS rounds instead of 60, stage 1 for two thirds of
them, the clients trained in this process (`--client_placement=in_process`: the same training to
float tolerance, without the TFF worker's overhead), into runs/demo/none_s0. The console shows a
progress bar, warnings and the summary, then the results folder and the paths of its pictures
(curves.png, predictions.png); INFO logging goes to the folder's log.txt. Every flag of
`programs.privacy_radiomap` can be passed (make demo DEMO_ARGS="--rounds=60" for the full default
run); a second run resumes, or only reports if the first one finished.
"""

from absl import app, flags

from programs import common, privacy_radiomap

DEMO_ROUNDS = 24

if __name__ == "__main__":
    flags.FLAGS.set_default("rounds", DEMO_ROUNDS)
    flags.FLAGS.set_default("client_placement", "in_process")
    flags.FLAGS.set_default("output_dir", "runs/demo/none_s0")
    app.run(privacy_radiomap.main, flags_parser=common.parse_flags)
