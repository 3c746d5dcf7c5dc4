"""`make demo`: the No Defense run of the privacy experiment on the CPU default.

64x64 maps, RadioUNet width x0.25, the default synthetic set (generated once and cached), 50
rounds with 6 of 14 clients a round. The console shows a progress bar, warnings and the summary,
then the results folder and the paths of its pictures (curves.png, predictions.png); INFO logging
goes to the folder's log.txt. Every flag of `programs.privacy_radiomap` can be passed
(make demo DEMO_ARGS="--rounds=10"); a second run resumes, or only reports if the first one
finished.
"""

from absl import app

from programs import common, privacy_radiomap

if __name__ == "__main__":
    app.run(privacy_radiomap.main, flags_parser=common.parse_flags)
