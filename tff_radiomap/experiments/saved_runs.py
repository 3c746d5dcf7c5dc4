"""Reading a `privacy_radiomap` run folder back: its configuration, the rounds whose program state
it holds, the model it broadcast in a round (for the leakage audit, `programs/leakage_map.py`), and
its max epsilon (its summary's, or replayed from its configuration for an old run).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import Mapping

import tensorflow_federated as tff
from absl import logging

from tff_radiomap.experiments import privacy_accounting
from tff_radiomap.experiments import privacy_radiomap as experiment
from tff_radiomap.models import phases
from tff_radiomap.privacy import leakage


class RoundNotSavedError(ValueError):
    """The run folder does not hold the program state a round's broadcast model needs."""


def run_config(run_dir: str):
    """The `privacy_radiomap.ExperimentConfig` saved in `run_dir`/config.json."""
    path = os.path.join(run_dir, "config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist: {run_dir} is not a privacy_radiomap run folder")
    with open(path) as f:
        saved = json.load(f)
    names = {f.name for f in dataclasses.fields(experiment.ExperimentConfig)}
    # A field the run predates takes the value such runs had (`LEGACY_VALUES`), not today's default.
    saved = {**experiment.LEGACY_VALUES, **saved}
    return experiment.ExperimentConfig(**{k: v for k, v in saved.items() if k in names})


def saved_versions(run_dir: str) -> list[int]:
    """Rounds after which `run_dir` holds a program state (the last few, see `privacy_radiomap`)."""
    states = tff.program.FileProgramStateManager(os.path.join(run_dir, "program_state"))
    return list(asyncio.new_event_loop().run_until_complete(states.get_versions()) or [])


def check_round(run_dir: str, round_num: int) -> None:
    """Raises `RoundNotSavedError` unless `round_num`'s broadcast model can be read from `run_dir`."""
    if round_num == 1:
        return
    versions = saved_versions(run_dir)
    if round_num - 1 not in versions:
        held = f"the models broadcast in rounds {', '.join(str(v + 1) for v in versions)}" if versions else "no saved round"
        raise RoundNotSavedError(f"round {round_num} needs the program state saved after round {round_num - 1}; {run_dir} holds {held} (and round 1)")


def broadcast_state(run_dir: str, round_num: int) -> leakage.ModelState:
    """The model a `privacy_radiomap` run broadcast in round `round_num` (the state saved after
    round - 1; round 1: the run's initial weights), as the leakage audit's `ModelState`. Needs a
    TFF execution context for round > 1."""
    config = run_config(run_dir)
    check_round(run_dir, round_num)
    if round_num == 1:
        weights = phases.initial_weights(config.model_config(), config.seed)
    else:
        trainer = experiment.build_trainer(config, experiment.load_data(config))
        states = tff.program.FileProgramStateManager(os.path.join(run_dir, "program_state"))
        template = experiment._initial_program_state(trainer)
        template["trainer_state"] = trainer.program_state_template(round_num - 1)
        saved = asyncio.new_event_loop().run_until_complete(states.load(round_num - 1, template))
        weights = trainer.network_weights(trainer.from_program_state(saved["trainer_state"], round_num - 1))
    return leakage.ModelState(
        config.model_config(),
        weights,
        f"{os.path.abspath(run_dir)} round {round_num}",
        config.client_optimizer,
        config.client_learning_rate,
        config.seed,
        config.val_fraction,
        config.test_fraction,
    )


def max_epsilon_of_run(run_dir: str, summary: Mapping) -> float | None:
    """A finished run's max epsilon: its summary's `privacy` entry, else (a run finished before
    the accounting existed) replayed from its config.json. None: no guarantee; nan: not known
    (no config.json, or one that cannot be replayed here)."""
    if "privacy" in summary:
        return summary["privacy"]["max_epsilon"]
    if not os.path.exists(os.path.join(run_dir, "config.json")):
        return float("nan")
    try:
        return privacy_accounting.replay(run_config(run_dir)).summary()["max_epsilon"]
    except (OSError, ValueError) as exc:  # A config of another version, a data root gone (subspace).
        logging.warning("%s: max epsilon not replayed: %s", run_dir, exc)
        return float("nan")
