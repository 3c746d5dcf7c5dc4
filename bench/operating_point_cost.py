"""What a No Defense run of the default set-up costs against the first front's (`--preset=cpu_v1`),
side by side in one process: rounds of each set-up alternate, so both see the same load.

    .venv/bin/python -m bench.operating_point_cost [--rounds=3 --seed=0]

For each set-up (its built-in data set, its clients' epochs and batch) and each stage: one warm-up
round, then `--rounds` timed rounds (round numbers of that stage, real clients of the run), each
followed by the validation scores the run takes. Prints the median seconds a round per stage, the
full run they add up to (R1 stage-1 rounds and R - R1 stage-2 rounds; start-up, pictures and test
scores not included) and the ratio of the two set-ups, with the load average.
"""

import os
import statistics
import time

from absl import app, flags

from tff_radiomap import runtime
from tff_radiomap.data import default_set
from tff_radiomap.experiments import privacy_radiomap as experiment
from tff_radiomap.experiments.privacy_setup import build_trainer, load_data
from tff_radiomap.learning import federated_data
from tff_radiomap.metrics import reconstruction
from tff_radiomap.models.phases import Phase

FLAGS = flags.FLAGS
flags.DEFINE_integer("rounds", 3, "Timed rounds of each stage and set-up (after one warm-up round).")
flags.DEFINE_integer("seed", 0, "Seed of the runs.")

PRESETS = ("cpu_v1", "default")


def _config(name: str) -> experiment.ExperimentConfig:
    preset = experiment.PRESETS[name]
    return experiment.ExperimentConfig(data_root=default_set.ensure_set(preset.data_set, progress=False), seed=FLAGS.seed, **preset.fields)


class SetUp:
    """One set-up's trainer, data and evaluator, and a state per stage to time rounds from."""

    def __init__(self, name: str):
        self.name, self.config = name, _config(name)
        self.data = load_data(self.config)
        self.trainer = build_trainer(self.config, self.data)
        self.evaluator = reconstruction.Evaluator(self.config.model_config(), *self.data.val)
        self.states = {}
        self.seconds = {Phase.STAGE1: [], Phase.STAGE2: []}

    def round_of(self, phase: Phase) -> int:
        first, _ = self.config.phase_rounds(phase)
        return first + len(self.seconds[phase])

    def time_round(self, phase: Phase, record: bool = True) -> None:
        round_num = self.round_of(phase)
        state = self.states.get(phase) or self.trainer.initialize()
        clients = federated_data.sample_clients(self.config.seed, round_num, self.config.num_clients, self.config.clients_per_round)
        t0 = time.monotonic()
        datasets = self.trainer.round_data(self.data, clients, round_num, self.config.batch_size, self.config.local_epochs)
        state, _ = self.trainer.next(state, round_num, datasets)
        self.evaluator.scores(self.trainer.network_weights(state), phase)
        if record:
            self.seconds[phase].append(time.monotonic() - t0)
        self.states[phase] = state

    def full_run(self) -> float:
        r1 = self.config.stage1_rounds
        return r1 * statistics.median(self.seconds[Phase.STAGE1]) + (self.config.rounds - r1) * statistics.median(self.seconds[Phase.STAGE2])


def main(argv):
    del argv
    runtime.install_local_context()
    setups = [SetUp(name) for name in PRESETS]
    for phase in (Phase.STAGE1, Phase.STAGE2):
        for s in setups:
            s.time_round(phase, record=False)
        for _ in range(FLAGS.rounds):
            for s in setups:
                s.time_round(phase)
    for s in setups:
        c = s.config
        print(
            f"{s.name}: {c.rounds} rounds ({c.stage1_rounds} of stage 1), {c.local_epochs} local epochs at batch {c.batch_size}, "
            f"{int(s.data.client_sizes().sum())} training samples; s a round: stage 1 {statistics.median(s.seconds[Phase.STAGE1]):.2f}, "
            f"stage 2 {statistics.median(s.seconds[Phase.STAGE2]):.2f}; full run {s.full_run():.0f} s"
        )
    print(f"ratio default / cpu_v1: {setups[1].full_run() / setups[0].full_run():.2f}x; load average {os.getloadavg()}")
    for s in setups:
        s.data.remove_client_files()


if __name__ == "__main__":
    app.run(main)
