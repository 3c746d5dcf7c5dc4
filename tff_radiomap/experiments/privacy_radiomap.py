"""The privacy experiment family (paper 000, Section IV): federated RadioUNet under a defense.

`run(config, output_dir)` trains the two-stage RadioUNet federatedly (or the centralised
reference) for `config.rounds` rounds and writes to `output_dir`:

    config.json        the full `ExperimentConfig` (a resumed run must have the same one)
    metrics.csv        one row per round: phase, train_loss, num_examples, val_mse, val_mse_db,
                       val_rmse_db and val_outdoor_rmse_db (the gain's RMSE in dB, all and outdoor
                       pixels; `metrics.reconstruction`), seconds, and the aggregator's / finalizer's
                       measurements
    tensorboard/       the same values as TensorBoard scalars
    program_state/     `tff.program.FileProgramStateManager` checkpoints, one per round
    accounting/        the per-client privacy accountant saved with each checkpoint (`privacy_accounting`)
    attack_rounds/, basis_rounds/   the broadcast model of every attack round and basis refresh, for
                       scoring the attacks again without training (`attack_rounds`, programs/attack_runs)
    summary.json       best and final validation MSE (and gain RMSE in dB), the final model's test
                       scores (the test maps, scored once, at the end) and `privacy` (max epsilon at
                       delta 1e-5 over the clients, None where an upload had no guarantee; for
                       central_dp and ddp also `aggregate`, the guarantee of the released
                       aggregate: `privacy_accounting.aggregate_summary`), written when the run
                       completes
    curves.png, predictions.png   pictures of the finished run (`privacy_figures`); a finished
                       run found again without them gets them then
    log.txt            (programs only) the run's INFO logging, `programs/console.py`

A run finding program state in `output_dir` resumes after the last saved round. Every random
choice (initial weights, client sampling, shuffling, the defenses' noise) is a function of
(seed, round), so the resumed run ends with the metrics of an uninterrupted one; with
`fresh_noise` the noise is unseeded and a resume is exact in everything but the noise.

The configuration is `ExperimentConfig` (`privacy_config.py`); the defenses are rows of
`DEFENSES` (`defense_registry.py`: a new defense is one `register_defense(...)` call); the attack,
the allocator's training and the basis refresh around the rounds are `privacy_defenses.py` and
`basis_refresh.py`.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import math
import os
import time

import numpy as np
import tensorflow_federated as tff
from absl import logging

from tff_radiomap.experiments import attack_rounds, defense_registry, run_report, privacy_accounting, privacy_defenses, privacy_figures
from tff_radiomap.experiments.defense_registry import DEFENSES, Defense, phase_factories, register_defense  # noqa: F401 (the experiment's API)
from tff_radiomap.experiments.privacy_config import ADAPTIVE_PARTITIONS, BASIS_SCOPES, LEGACY_VALUES, PRESETS, SERVER_LR_SCHEDULES, ExperimentConfig  # noqa: F401 (the experiment's API)
from tff_radiomap.experiments.privacy_setup import build_trainer, check_data, load_data, read_maps  # noqa: F401 (the experiment's API)
from tff_radiomap.learning import federated_data
from tff_radiomap.metrics import reconstruction
from tff_radiomap.runtime import nan_injection, run_folder
from tff_radiomap.runtime.hold import hold

ALLOCATOR_STATE = "allocator_state"  # The folder of the adaptive allocator's state, one file a saved round.


class ConfigMismatchError(run_folder.RunFolderConflict):
    """`output_dir` holds a run with another configuration."""


DataTooSmallError = privacy_defenses.DataTooSmallError
RUN_FILES = (
    "config.json",
    "metrics.csv",
    "summary.json",
    "program_state",
    "tensorboard",
    ALLOCATOR_STATE,
    "basis",
    "accounting",
    attack_rounds.ATTACK_ROUNDS,
    attack_rounds.BASIS_ROUNDS,
)


def _check_config(config: ExperimentConfig, output_dir: str) -> bool:
    """True if `output_dir` holds this config already; raises if it holds another one. A field
    added to ExperimentConfig after the run was saved counts as the value runs had before it
    existed (its default, or LEGACY_VALUES' entry where the default changed with the field); the
    fields the run's defense does not read are not compared (a Uniform run saved under another
    subspace_share is today's Uniform run)."""
    defaults = {f.name: f.default for f in dataclasses.fields(config) if f.default is not dataclasses.MISSING}
    return run_folder.check_config(
        dataclasses.asdict(config),
        output_dir,
        defaults={**defaults, **LEGACY_VALUES},
        ignored=defense_registry.unread_fields(config.defense),
        error=ConfigMismatchError,
    )


def holds_finished_run(config: ExperimentConfig, output_dir: str) -> bool:
    """True if `output_dir` holds the finished run of `config` (its config.json and summary.json),
    which `run` would return as it is; raises `ConfigMismatchError` if it holds another one."""
    return _check_config(config, output_dir) and os.path.exists(os.path.join(output_dir, "summary.json"))


def _write_config(config: ExperimentConfig, output_dir: str) -> None:
    run_folder.write_json(os.path.join(output_dir, "config.json"), dataclasses.asdict(config))


def run(
    config: ExperimentConfig,
    output_dir: str,
    *,
    progress: bool = True,
    stop_after_round: int | None = None,
    overwrite: bool = False,
    data_by_reference: bool = True,
) -> dict:
    """Trains `config` into `output_dir`, resuming from its program state; returns the summary.

    Federated runs need a TFF execution context (`tff_radiomap.runtime.install_local_context()`).
    `stop_after_round` ends this call after that round (as an interrupted run would), or at once if
    the saved state is already past it; the summary is then not written and the returned dict holds
    'stopped_after_round' (the last saved round). A finished run (its
    summary.json written) is not redone: its summary is returned. A folder holding a run of another
    configuration raises `ConfigMismatchError`, unless `overwrite`: then the run's files
    (`RUN_FILES`, nothing else) are deleted first and it starts afresh. `data_by_reference`: see
    `build_trainer` (False for TFF workers on other machines).
    """
    os.makedirs(output_dir, exist_ok=True)
    if overwrite:
        run_folder.clear(output_dir, RUN_FILES)
    config_saved = _check_config(config, output_dir)
    summary_path = os.path.join(output_dir, "summary.json")
    if config_saved and os.path.exists(summary_path):
        with open(summary_path) as f:
            summary = json.load(f)
        if not all(os.path.exists(p) for p in privacy_figures.paths(output_dir)):
            _pictures_of_finished_run(config, output_dir, data_by_reference)
        return summary
    started = time.monotonic()
    maps = read_maps(config)  # Decoded once: the clients' data and the observer's pool.
    data = load_data(config, maps)
    basis_dir = os.path.join(output_dir, "basis")
    views = defense_registry.upload_views(config, basis_dir)  # What an observer of individual uploads sees.
    hooks = privacy_defenses.build_hooks(config, maps, views)  # Before the (slow) trainer: it checks the data can serve the attack.
    refresher = privacy_defenses.basis_refresher(config, basis_dir, hooks)
    trainer = build_trainer(config, data, data_by_reference=data_by_reference, basis_dir=basis_dir)
    events = privacy_accounting.phase_events(views)  # The hooks hold these very views.
    evaluator = reconstruction.Evaluator(config.model_config(), *data.val)
    if not config_saved:  # Only once the data loaded and the trainer built: a failed start leaves no config.
        _write_config(config, output_dir)

    states = tff.program.FileProgramStateManager(os.path.join(output_dir, "program_state"), keep_total=3)
    loop = asyncio.new_event_loop()
    try:
        program_state, done = _restore(loop, states, trainer)
        if stop_after_round is not None and stop_after_round <= done < config.rounds:
            return {"stopped_after_round": done}
        _restore_allocator(output_dir, hooks, done)
        accountant = privacy_accounting.restore(output_dir, config, done, events)
        # Rows of rounds after the saved state (and a row cut short by a kill) go before resuming.
        run_folder.truncate_csv(os.path.join(output_dir, "metrics.csv"), done)
        releases = tff.program.GroupingReleaseManager(
            [
                tff.program.CSVFileReleaseManager(os.path.join(output_dir, "metrics.csv"), key_fieldname="round"),
                tff.program.TensorBoardReleaseManager(os.path.join(output_dir, "tensorboard")),
                tff.program.LoggingReleaseManager(),
            ]
        )
        _warm_up(config, data, trainer, done, refresher)
        bar = _progress_bar(config, done, progress)
        for round_num in range(done + 1, config.rounds + 1):
            refreshed = refresher.before_round(trainer, program_state["trainer_state"], round_num) if refresher else {}
            _keep_models(config, output_dir, trainer, program_state["trainer_state"], round_num, hooks, refreshed)
            row = _train_round(config, data, trainer, evaluator, program_state, round_num, hooks, (accountant, events))
            row.update(refreshed)
            loop.run_until_complete(releases.release(row, key=round_num))
            _save_allocator(output_dir, hooks, round_num)  # Before the program state: resume needs all three.
            privacy_accounting.save(output_dir, accountant, round_num)
            loop.run_until_complete(states.save(_to_saved(trainer, program_state), round_num))
            hold(f"state after round {round_num}")  # Kill-and-resume tests stop a program here (`runtime.hold`).
            bar.update(1)
            bar.set_postfix(phase=row["phase"], val_mse_db=f"{row['val_mse_db']:.2f}", rmse_db=f"{row['val_rmse_db']:.2f}")
            if stop_after_round is not None and stop_after_round <= round_num < config.rounds:
                bar.close()
                return {"stopped_after_round": round_num}
        bar.close()
    finally:
        loop.close()
        data.remove_client_files()

    final_weights = trainer.network_weights(program_state["trainer_state"])
    _write_pictures(config, output_dir, data, final_weights)
    summary = run_report.summary(config, program_state, output_dir, wall_seconds=time.monotonic() - started)
    summary["test"] = run_report.test_scores(config, data.test, final_weights)
    summary["privacy"] = privacy_accounting.run_summary(accountant)
    if not DEFENSES[config.defense].uploads_observable:  # Secure aggregation: nothing to attack.
        summary["privacy"]["uploads_observable"] = False
    aggregate = privacy_accounting.aggregate_summary(config)
    if aggregate is not None:
        summary["privacy"]["aggregate"] = aggregate
    run_folder.write_json(summary_path, summary)
    return summary


def _keep_models(config: ExperimentConfig, output_dir: str, trainer, state, round_num: int, hooks, refreshed: dict) -> None:
    """The broadcast model of an attack round (with its defense parameters) and of a basis refresh,
    for scoring the attacks again later (`attack_rounds`). A defense whose uploads are unobservable
    (secure aggregation) keeps its attack rounds' models too: the observer of the round's sum
    reads them (`threat_ladder`)."""
    unobservable = not config.centralised and not DEFENSES[config.defense].uploads_observable
    attacked = (hooks is not None or unobservable) and privacy_defenses.attack_due(config, round_num)
    if not (attacked or refreshed.get("basis_refreshed")):
        return
    weights, phase = trainer.network_weights(state), config.phase_for_round(round_num)
    if attacked:
        extras = hooks.round_extras(state, round_num) if hooks is not None else None
        attack_rounds.save(output_dir, attack_rounds.ATTACK_ROUNDS, round_num, weights, phase, extras)
    if refreshed.get("basis_refreshed"):
        attack_rounds.save(output_dir, attack_rounds.BASIS_ROUNDS, round_num, weights, phase)


def _write_pictures(config: ExperimentConfig, output_dir: str, data, weights) -> None:
    """curves.png and predictions.png (privacy_figures); a failure to draw is a warning, not a failed run."""
    try:
        privacy_figures.write_run_pictures(output_dir, config.model_config(), config.phase_for_round(config.rounds), data.val, weights, config.seed)
    except (OSError, ValueError, RuntimeError) as exc:
        logging.warning("%s: the pictures were not written: %s", output_dir, exc)


def _pictures_of_finished_run(config: ExperimentConfig, output_dir: str, data_by_reference: bool) -> None:
    """The pictures of a run finished without them (before they existed): its last saved state."""
    data = load_data(config)
    try:
        trainer = build_trainer(config, data, data_by_reference=data_by_reference, basis_dir=os.path.join(output_dir, "basis"))
        states = tff.program.FileProgramStateManager(os.path.join(output_dir, "program_state"), keep_total=3)
        loop = asyncio.new_event_loop()
        try:
            program_state, done = _restore(loop, states, trainer)
        finally:
            loop.close()
        if done == 0:  # No saved state to draw the predictions of: the curves only.
            logging.warning("%s: no program state left; predictions.png not written", output_dir)
            privacy_figures.curves(os.path.join(output_dir, "metrics.csv"), privacy_figures.paths(output_dir)[0])
            return
        _write_pictures(config, output_dir, data, trainer.network_weights(program_state["trainer_state"]))
    finally:
        data.remove_client_files()


def _warm_up(config: ExperimentConfig, data, trainer, done: int, refresher=None) -> None:
    """Loads the computations of the phases after the next round's one before training, so that
    memory does not step up mid-run when stage 2 starts (`PhasedProcess.warm_up`)."""
    if config.centralised or done >= config.rounds or not hasattr(trainer, "warm_up"):
        return
    later = {config.phase_for_round(r) for r in range(done + 1, config.rounds + 1)} - {config.phase_for_round(done + 1)}
    if later:
        clients = federated_data.sample_clients(config.seed, done + 1, config.num_clients, config.clients_per_round)
        if refresher is not None:
            refresher.placeholder(later)
        trainer.warm_up(later, trainer.round_data(data, clients, done + 1, config.batch_size, config.local_epochs))


def _train_round(config, data, trainer, evaluator, program_state, round_num: int, hooks=None, accounting=None) -> collections.OrderedDict:
    """Runs round `round_num`, updates `program_state` in place, returns the round's metrics.

    With `hooks`: the attack runs on the model broadcast in this round (before training) when
    due, and the adaptive allocator is trained after the round. With `accounting` (a
    `PerClientAccountant` and {phase: event}): the sampled clients' uploads are recorded in it.
    """
    t0 = time.monotonic()
    state = program_state["trainer_state"]
    extra = collections.OrderedDict()
    if hooks is not None and config.attack_every:
        extra.update({k: float("nan") for k in privacy_defenses.ATTACK_METRICS})
        if hooks.attack_due(round_num):
            try:
                extra.update(hooks.attack(trainer, state, round_num))
            except FloatingPointError as exc:
                logging.warning("round %d: attack skipped: %s", round_num, exc)
    clients = federated_data.sample_clients(config.seed, round_num, config.num_clients, config.clients_per_round)
    if config.centralised:
        num_samples = int(data.client_sizes()[clients].sum()) * config.local_epochs
        state, metrics = trainer.next(state, round_num, num_samples)
    else:
        datasets = trainer.round_data(data, clients, round_num, config.batch_size, config.local_epochs)
        datasets = nan_injection.poison(config.nan_injection(), round_num, clients, datasets)
        state, metrics = trainer.next(state, round_num, datasets)
        if accounting is not None:
            privacy_accounting.record_round(*accounting, config.phase_for_round(round_num), clients)
        if hooks is not None:
            state, measured = hooks.train_allocator(trainer, state, round_num)
            extra.update(measured)
    scores = evaluator.scores(trainer.network_weights(state), config.phase_for_round(round_num))
    val_mse = scores["mse"]
    row = run_report.metrics_row(metrics, scores, seconds=time.monotonic() - t0)
    row.update(extra)
    if math.isfinite(val_mse) and val_mse < program_state["best_val_mse"]:
        program_state.update(best_val_mse=np.float64(val_mse), best_round=np.int32(round_num))
    program_state.update(
        trainer_state=state,
        final_val_mse=np.float64(val_mse),
        train_seconds=np.float64(program_state["train_seconds"] + row["seconds"]),
    )
    return row


def _initial_program_state(trainer):
    return collections.OrderedDict(
        trainer_state=trainer.initialize(),
        best_val_mse=np.float64(np.inf),
        best_round=np.int32(0),
        final_val_mse=np.float64(np.nan),
        train_seconds=np.float64(0.0),
    )


def _to_saved(trainer, program_state):
    saved = collections.OrderedDict(program_state)
    saved["trainer_state"] = trainer.to_program_state(program_state["trainer_state"])
    return saved


def _save_allocator(output_dir: str, hooks, round_num: int) -> None:
    """The adaptive allocator's trainer (eta, optimizer slots) saved with round `round_num`."""
    arrays = hooks.allocator_state() if hooks is not None else {}
    if arrays:
        run_folder.save_round_arrays(output_dir, ALLOCATOR_STATE, round_num, arrays)


def _restore_allocator(output_dir: str, hooks, done: int) -> None:
    """Loads the allocator trainer saved with round `done`'s program state, if the run has one."""
    if hooks is None or done == 0 or hooks.config.defense != "adaptive":
        return
    arrays = run_folder.load_round_arrays(output_dir, ALLOCATOR_STATE, done)
    if arrays is None:
        raise FileNotFoundError(
            f"{run_folder.round_arrays_path(output_dir, ALLOCATOR_STATE, done)}: the adaptive allocator's state saved with round {done} "
            "is missing; the run cannot resume exactly (start again with --overwrite)"
        )
    hooks.restore_allocator(arrays)


def _restore(loop, states, trainer):
    """(program state, rounds done): the latest saved state, or the initial one."""
    versions = loop.run_until_complete(states.get_versions())
    if not versions:
        return _initial_program_state(trainer), 0
    done = versions[-1]
    template = _initial_program_state(trainer)
    template["trainer_state"] = trainer.program_state_template(done)
    saved = loop.run_until_complete(states.load(done, template))
    saved = collections.OrderedDict(saved)
    saved["trainer_state"] = trainer.from_program_state(saved["trainer_state"], done)
    logging.info("resuming after round %d", done)
    return saved, done


def _progress_bar(config: ExperimentConfig, done: int, enabled: bool):
    from tqdm import tqdm

    name = "centralised" if config.centralised else config.defense
    return tqdm(total=config.rounds, initial=done, desc=f"{name} rounds", unit="round", disable=not enabled, dynamic_ncols=True)
