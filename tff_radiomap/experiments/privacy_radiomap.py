"""The privacy experiment family (paper 000, Section IV): federated RadioUNet under a defense.

`run(config, output_dir)` trains the two-stage RadioUNet federatedly (or the centralised
reference) for `config.rounds` rounds and writes to `output_dir`:

    config.json        the full `ExperimentConfig` (a resumed run must have the same one)
    metrics.csv        one row per round: phase, train_loss, num_examples, val_mse, val_mse_db,
                       seconds, and the aggregator's / finalizer's measurements
    tensorboard/       the same values as TensorBoard scalars
    program_state/     `tff.program.FileProgramStateManager` checkpoints, one per round
    accounting/        the per-client privacy accountant saved with each checkpoint (`privacy_accounting`)
    summary.json       best and final validation MSE and `privacy` (max epsilon at delta 1e-5 over
                       the clients, None where an upload had no guarantee), written when the run completes
    curves.png, predictions.png   pictures of the finished run (`privacy_figures`); a finished
                       run found again without them gets them then
    log.txt            (programs only) the run's INFO logging, `programs/console.py`

A run finding program state in `output_dir` resumes after the last saved round. Every random
choice (initial weights, client sampling, shuffling, the defenses' noise) is a function of
(seed, round), so the resumed run ends with the metrics of an uninterrupted one; with
`fresh_noise` the noise is unseeded and a resume is exact in everything but the noise.

Defenses are rows of `DEFENSES`: a short name, the training protocol, and a function giving the
model-update aggregator (`tff.aggregators` factory) for a phase. A new defense is one
`register_defense(...)` call.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Mapping

import numpy as np
import tensorflow_federated as tff
from absl import logging

from tff_radiomap.models import phases
from tff_radiomap.data import radiomapseer
from tff_radiomap.experiments import privacy_accounting, privacy_defenses, privacy_figures
from tff_radiomap.learning import centralised, federated_data, radiounet_process
from tff_radiomap.models.phases import Phase
from tff_radiomap.metrics import reconstruction
from tff_radiomap.models import radiounet
from tff_radiomap.runtime import run_folder

PROTOCOLS = ("two_stage", "fedsgd")
ADAPTIVE_PARTITIONS = ("paper", "leakage")


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    """One run of the privacy experiment. The defaults are the CPU default set-up."""

    data_root: str
    resolution: int = 64
    width: float = 0.25
    # Stage 2's output activation (radiounet.RadioUNetConfig.stage2_output): "linear" since the
    # front's fourth session; runs saved before the field existed used "relu" (LEGACY_VALUES).
    stage2_output: str = "linear"
    rounds: int = 50
    stage1_rounds: int = 25
    num_clients: int = 14
    clients_per_round: int = 6
    local_epochs: int = 1
    batch_size: int = 64
    client_optimizer: str = "adam"
    client_learning_rate: float = 1e-3
    server_optimizer: str = "sgd"
    server_learning_rate: float = 1.0
    seed: int = 0
    defense: str = "none"
    centralised: bool = False  # Train the centralised reference instead of the federated system.
    val_fraction: float = 0.15
    test_fraction: float = 0.15
    # Privacy defenses and the attack (paper 000, Section III); see privacy_defenses.py.
    clip_norm: float = 1.0  # C
    noise_multiplier: float = 3.0  # nu; budget B = d (C nu)^2
    sigma_min: float = 0.0  # Adaptive defense's noise floor (0: none)
    # The defenses' noise is seeded from `seed` (reproducible runs, exact resume): anyone who knows
    # the seed can recompute it for a guessed update. True: unseeded noise, the deployment setting
    # (the run is then not reproducible and a resume is not bit-exact).
    fresh_noise: bool = False
    attack_every: int = 0  # Attack at round 1, every n rounds and the last; 0: never
    attack_steps: int = 3  # S
    attack_train_traces: int = 1024
    attack_test_traces: int = 256
    attack_extra_root: str = ""  # The observer's own simulated samples (RadioMapSeer layout), training traces only.
    # Subspace Noise (privacy_defenses.BasisRefresher): share of B in the twin's leakage basis,
    # from `basis_positions` twin positions a map and its top `basis_k_per_map` directions. The
    # share 0.25 was chosen on seed 10 by the rule in bench/RESULTS.md (seventh session); runs before
    # it used 0.5, and every share tried (0.1-0.5) gave the same front to within a seed's spread.
    subspace_share: float = 0.25
    basis_positions: int = 32
    basis_k_per_map: int = 8
    basis_blocks: int = 1
    basis_every: int = 10  # Refresh at every phase's first round and every n rounds of it.
    twin_root: str = ""  # The defender's twin (RadioMapSeer layout); default: data.twin.ensure_twin(data_root).
    # Adaptive's groups: "paper" (the paper's mask groups) or "leakage" (the basis blocks of
    # Subspace Noise and the residual, refreshed as for `subspace`; see privacy_defenses.uses_basis).
    adaptive_partition: str = "paper"
    allocator_lambda_p: float = 1.0
    allocator_lambda_h: float = 0.01
    # Train the allocator after a phase's first round and every n rounds of it (1: every round, as
    # in the paper; the allocation holds in between). The front's Adaptive rows use 5, for cost.
    allocator_every: int = 1
    map_size_m: float = 256.0
    # Test hook: "ROUND:CLIENT" feeds client CLIENT NaN inputs in round ROUND (if it is sampled),
    # so that its update is not finite; the run must zero it and count it (nonfinite_updates).
    inject_nan_client: str = ""
    # Where the clients train: "tff" (the TFF worker, CPU) or "in_process" (this Python process, on
    # a GPU if TensorFlow sees one); aggregation, defenses and the server step are TFF either way.
    # Equal to float tolerance, not bitwise: a run keeps the placement it started with.
    client_placement: str = "tff"

    def __post_init__(self):
        checks = [
            (self.rounds >= 1, "rounds", "an integer >= 1"),
            (0 <= self.stage1_rounds <= self.rounds, "stage1_rounds", f"an integer in 0..rounds={self.rounds}"),
            (self.num_clients >= 1, "num_clients", "an integer >= 1"),
            (1 <= self.clients_per_round <= self.num_clients, "clients_per_round", f"1..num_clients={self.num_clients}"),
            (self.local_epochs >= 1, "local_epochs", "an integer >= 1"),
            (self.batch_size >= 1, "batch_size", "an integer >= 1"),
            (self.client_optimizer in ("adam", "sgd"), "client_optimizer", "'adam' or 'sgd'"),
            (self.server_optimizer in ("adam", "sgd"), "server_optimizer", "'adam' or 'sgd'"),
            (self.client_learning_rate > 0, "client_learning_rate", "a positive number"),
            (self.server_learning_rate > 0, "server_learning_rate", "a positive number"),
            (self.defense in DEFENSES, "defense", f"one of {sorted(DEFENSES)}"),
            (not self.centralised or self.defense == "none", "defense", "'none' for the centralised reference"),
            (math.isfinite(self.clip_norm) and self.clip_norm > 0, "clip_norm", "a positive number"),
            (math.isfinite(self.noise_multiplier) and self.noise_multiplier >= 0, "noise_multiplier", "a non-negative number"),
            (math.isfinite(self.sigma_min) and self.sigma_min >= 0, "sigma_min", "a non-negative number"),
            (self.attack_every >= 0, "attack_every", "an integer >= 0"),
            (math.isfinite(self.subspace_share) and 0 <= self.subspace_share <= 1, "subspace_share", "a number in [0, 1]"),
            (self.basis_positions >= 2, "basis_positions", "an integer >= 2"),
            (1 <= self.basis_k_per_map < self.basis_positions, "basis_k_per_map", f"an integer in 1..basis_positions-1={self.basis_positions - 1}"),
            (self.basis_blocks >= 1, "basis_blocks", "an integer >= 1"),
            (self.basis_every >= 1, "basis_every", "an integer >= 1"),
            (self.allocator_every >= 1, "allocator_every", "an integer >= 1"),
            (self.adaptive_partition in ADAPTIVE_PARTITIONS, "adaptive_partition", f"one of {ADAPTIVE_PARTITIONS}"),
            (self.attack_steps >= 1, "attack_steps", "an integer >= 1"),
            (self.attack_train_traces >= 10, "attack_train_traces", "an integer >= 10"),
            (self.attack_test_traces >= 1, "attack_test_traces", "an integer >= 1"),
            (self.client_placement in radiounet_process.CLIENT_PLACEMENTS, "client_placement", f"one of {radiounet_process.CLIENT_PLACEMENTS}"),
            (not self.centralised or self.client_placement == "tff", "client_placement", "'tff' for the centralised reference (no clients)"),
        ]
        for ok, name, expected in checks:
            if not ok:
                raise ValueError(f"{name}={getattr(self, name)!r}: expected {expected}")
        self.model_config()  # Validates resolution and width.
        self.nan_injection()  # Validates inject_nan_client.

    def nan_injection(self) -> tuple[int, int] | None:
        """(round, client) of the `inject_nan_client` test hook, or None."""
        if not self.inject_nan_client:
            return None
        expected = f"ROUND:CLIENT with ROUND in 1..{self.rounds} and CLIENT in 0..{self.num_clients - 1}"
        parts = self.inject_nan_client.split(":")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise ValueError(f"inject_nan_client={self.inject_nan_client!r}: expected {expected}")
        round_num, client = int(parts[0]), int(parts[1])
        if not (1 <= round_num <= self.rounds and 0 <= client < self.num_clients):
            raise ValueError(f"inject_nan_client={self.inject_nan_client!r}: expected {expected}")
        return round_num, client

    def model_config(self) -> radiounet.RadioUNetConfig:
        return radiounet.RadioUNetConfig(resolution=self.resolution, width=self.width, stage2_output=self.stage2_output)

    def phase_for_round(self, round_num: int) -> Phase:
        if DEFENSES[self.defense].protocol == "fedsgd":
            return Phase.JOINT
        return Phase.STAGE1 if round_num <= self.stage1_rounds else Phase.STAGE2


AggregatorFn = Callable[[ExperimentConfig, Phase, "str | None"], "radiounet_process.AggregationFactory | None"]


@dataclasses.dataclass(frozen=True)
class Defense:
    """A row of the defense table.

    protocol: 'two_stage' (No Defense's protocol) or 'fedsgd'.
    model_aggregator: (config, phase, basis_dir) -> a `tff.aggregators` factory for the uploads of
      that phase, or None for the plain example-weighted mean; `basis_dir` is the run's folder of
      subspace bases (only the subspace defense uses it).
    """

    protocol: str
    model_aggregator: AggregatorFn
    description: str


DEFENSES: dict[str, Defense] = {}


def register_defense(name: str, defense: Defense) -> None:
    if defense.protocol not in PROTOCOLS:
        raise ValueError(f"defense {name!r}: protocol={defense.protocol!r}, expected one of {PROTOCOLS}")
    if name in DEFENSES:
        raise ValueError(f"defense {name!r} is registered already")
    DEFENSES[name] = defense


register_defense("none", Defense("two_stage", lambda config, phase, basis_dir=None: None, "No Defense: two-stage protocol, weighted mean"))
register_defense("fedsgd", Defense("fedsgd", lambda config, phase, basis_dir=None: None, "FedSGD: one local gradient step, both stages"))
for _name, _text in (
    ("clip", "Clip Only: client-side L2 clipping at C"),
    ("uniform", "Uniform Noise: clip, then N(0, (C nu)^2) on every coordinate (TF-Privacy Gaussian query)"),
    ("directed", "Directed Uniform: clip, then the whole budget on the transmitter-sensitive groups"),
    ("adaptive", "Adaptive: clip, then the budget split by the learned allocator (Eqs. (12)-(16))"),
    ("subspace", "Subspace Noise: clip, then a share of the budget in the twin's leakage subspace, the rest on its complement"),
):
    register_defense(
        _name, Defense("two_stage", lambda config, phase, basis_dir=None, n=_name: privacy_defenses.make_factory(n, config, phase, basis_dir), _text)
    )


def phase_factories(config: ExperimentConfig, basis_dir: str | None = None) -> dict:
    """{phase: the defense's aggregation factory for that phase's uploads, or None} of the run."""
    defense = DEFENSES[config.defense]
    phases = (Phase.JOINT,) if defense.protocol == "fedsgd" else (Phase.STAGE1, Phase.STAGE2)
    return {p: defense.model_aggregator(config, p, basis_dir) for p in phases}


# ---------------------------------------------------------------------------------------------
def build_trainer(config: ExperimentConfig, data: federated_data.FederatedRadioMaps, data_by_reference: bool = True, basis_dir: str | None = None):
    """The `PhasedProcess` (federated) or `CentralisedReference` that `config` describes.

    Federated clients train with the tensor local loop; with `data_by_reference` (TFF workers that
    see this machine's temporary folder) they read their samples from files, else each round sends
    them. Both give the same results; the NaN test hook needs the data sent. With
    `config.client_placement == 'in_process'` they train in this process instead.
    """
    model_config = config.model_config()
    initial = phases.initial_weights(model_config, config.seed)
    client_opt = radiounet_process.build_optimizer(config.client_optimizer, config.client_learning_rate)
    if config.centralised:
        return centralised.CentralisedReference(
            model_config, initial, data.pooled_train(), config.phase_for_round, client_opt, config.batch_size, config.seed
        )
    server_opt = radiounet_process.build_optimizer(config.server_optimizer, config.server_learning_rate)
    defense = DEFENSES[config.defense]
    data_path = dict(
        batch_size=config.batch_size, data_by_reference=data_by_reference and not config.nan_injection(), client_placement=config.client_placement
    )
    if defense.protocol == "fedsgd":
        aggregator = defense.model_aggregator(config, Phase.JOINT, basis_dir)
        return radiounet_process.build_fedsgd_process(model_config, initial, client_opt, server_opt, aggregator, **data_path)
    aggregators = {phase: defense.model_aggregator(config, phase, basis_dir) for phase in (Phase.STAGE1, Phase.STAGE2)}
    return radiounet_process.build_two_stage_process(
        model_config, initial, config.stage1_rounds, client_opt, server_opt, aggregators, **data_path
    )


def check_data(config: ExperimentConfig, num_maps: int | None = None) -> None:
    """Raises `DataTooSmallError` naming the flag unless the data root's `num_maps` maps (default:
    those listed in it) serve the map split and `config.num_clients` clients (>= 1 training map each)."""
    if num_maps is None:
        num_maps = len(radiomapseer.list_map_ids(config.data_root))
    try:
        split = radiomapseer.split_maps(num_maps, config.val_fraction, config.test_fraction, config.seed)
    except ValueError as exc:
        raise DataTooSmallError(f"--data_root={config.data_root!r}: {exc} (expected at least 3 maps: validation, test, training)") from exc
    if config.num_clients > len(split.train):
        raise DataTooSmallError(
            f"--clients={config.num_clients}: expected at most the {len(split.train)} training maps of "
            f"--data_root={config.data_root!r} ({num_maps} maps, {len(split.val)} for validation, {len(split.test)} for test)"
        )


def load_data(config: ExperimentConfig) -> federated_data.FederatedRadioMaps:
    data = radiomapseer.RadioMapSeer(radiomapseer.LoaderConfig(root=config.data_root, resolution=config.resolution))
    check_data(config, len(data.map_ids))
    return federated_data.FederatedRadioMaps.load(data, config.num_clients, config.seed, config.val_fraction, config.test_fraction)


def flatten_metrics(metrics: Mapping, prefix: str = "") -> collections.OrderedDict:
    """Numeric leaves of nested metrics as {'a/b': float or int}; empty structures are dropped."""
    flat = collections.OrderedDict()
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_metrics(value, name + "/"))
        elif isinstance(value, (tuple, list)) and not value:
            continue
        else:
            array = np.asarray(value)
            if array.shape == () and array.dtype.kind in "biuf":
                flat[name] = array.item()
    return flat


class ConfigMismatchError(run_folder.RunFolderConflict):
    """`output_dir` holds a run with another configuration."""


class DataTooSmallError(ValueError):
    """The data set cannot serve the configuration (e.g. fewer samples than the attack needs)."""


# Fields added with a default other than the behaviour of the runs saved before them.
LEGACY_VALUES = {"stage2_output": "relu"}
# Fields that only some defenses read: a run of another defense is the same run whatever they hold
# (a Uniform run saved under subspace_share 0.5 is the Uniform run of today's default).
_NOISE = ("uniform", "directed", "adaptive", "subspace")
DEFENSE_FIELDS = {
    # No Defense, FedSGD and Clip Only add no noise: Table I at another nu reads their runs back.
    "noise_multiplier": _NOISE,
    "fresh_noise": _NOISE,
    "sigma_min": ("adaptive",),
    "subspace_share": ("subspace",),
    "adaptive_partition": ("adaptive",),
    "allocator_lambda_p": ("adaptive",),
    "allocator_lambda_h": ("adaptive",),
    "allocator_every": ("adaptive",),
}

RUN_FILES = ("config.json", "metrics.csv", "summary.json", "program_state", "tensorboard", "allocator_state", "basis", "accounting")


def _check_config(config: ExperimentConfig, output_dir: str) -> bool:
    """True if `output_dir` holds this config already; raises if it holds another one."""
    path = os.path.join(output_dir, "config.json")
    if not os.path.exists(path):
        return False
    wanted = dataclasses.asdict(config)
    try:
        with open(path) as f:
            found = json.load(f)
    except (OSError, ValueError) as exc:
        raise ConfigMismatchError(f"{path} is unreadable ({exc})") from exc
    # A field added to ExperimentConfig after the run was saved counts as the value runs had before
    # it existed: its default, or LEGACY_VALUES' entry where the default changed with the field.
    defaults = {f.name: f.default for f in dataclasses.fields(config) if f.default is not dataclasses.MISSING}
    defaults.update(LEGACY_VALUES)
    saved = lambda k: found.get(k, defaults.get(k))  # noqa: E731
    unread = {k for k, defenses in DEFENSE_FIELDS.items() if config.defense not in defenses}
    differing = sorted(k for k in (set(found) | set(wanted)) - unread if saved(k) != wanted.get(k))
    if differing:
        detail = ", ".join(f"{k}: saved {saved(k)!r}, now {wanted.get(k)!r}" for k in differing)
        raise ConfigMismatchError(f"{output_dir} holds a run with another configuration ({detail})")
    return True


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
    `stop_after_round` ends this call after that round (as an interrupted run would); the summary
    is then not written and the returned dict holds 'stopped_after_round'. A finished run (its
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
    data = load_data(config)
    basis_dir = os.path.join(output_dir, "basis")
    hooks = _privacy_hooks(config, basis_dir)  # Before the (slow) trainer: it checks the data can serve the attack.
    refresher = _basis_refresher(config, basis_dir, hooks)
    trainer = build_trainer(config, data, data_by_reference=data_by_reference, basis_dir=basis_dir)
    events = privacy_accounting.phase_events(hooks.factories if hooks is not None else phase_factories(config, basis_dir))
    evaluator = reconstruction.Evaluator(config.model_config(), *data.val)
    if not config_saved:  # Only once the data loaded and the trainer built: a failed start leaves no config.
        _write_config(config, output_dir)

    states = tff.program.FileProgramStateManager(os.path.join(output_dir, "program_state"), keep_total=3)
    loop = asyncio.new_event_loop()
    try:
        program_state, done = _restore(loop, states, trainer)
        _restore_allocator(output_dir, hooks, done)
        accountant = privacy_accounting.restore(output_dir, config, done, events)
        # Rows of rounds after the saved state (and a row cut short by a kill) go before resuming.
        run_folder.truncate_csv(os.path.join(output_dir, "metrics.csv"), done)
        releases = tff.program.GroupingReleaseManager([
            tff.program.CSVFileReleaseManager(os.path.join(output_dir, "metrics.csv"), key_fieldname="round"),
            tff.program.TensorBoardReleaseManager(os.path.join(output_dir, "tensorboard")),
            tff.program.LoggingReleaseManager(),
        ])
        _warm_up(config, data, trainer, done, refresher)
        bar = _progress_bar(config, done, progress)
        for round_num in range(done + 1, config.rounds + 1):
            refreshed = refresher.before_round(trainer, program_state["trainer_state"], round_num) if refresher else {}
            row = _train_round(config, data, trainer, evaluator, program_state, round_num, hooks, (accountant, events))
            row.update(refreshed)
            loop.run_until_complete(releases.release(row, key=round_num))
            _save_allocator(output_dir, hooks, round_num)  # Before the program state: resume needs all three.
            privacy_accounting.save(output_dir, accountant, round_num)
            loop.run_until_complete(states.save(_to_saved(trainer, program_state), round_num))
            bar.update(1)
            bar.set_postfix(phase=row["phase"], val_mse_db=f"{row['val_mse_db']:.2f}")
            if stop_after_round is not None and stop_after_round <= round_num < config.rounds:
                bar.close()
                return {"stopped_after_round": round_num}
        bar.close()
    finally:
        loop.close()
        data.remove_client_files()

    _write_pictures(config, output_dir, data, trainer.network_weights(program_state["trainer_state"]))
    summary = _summary(config, program_state, wall_seconds=time.monotonic() - started)
    summary["privacy"] = privacy_accounting.run_summary(accountant)
    run_folder.write_json(summary_path, summary)
    return summary


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


def _basis_refresher(config: ExperimentConfig, basis_dir: str, hooks):
    """The subspace defense's basis keeper (None for other defenses); its twin is made if absent."""
    if not privacy_defenses.uses_basis(config):
        return None
    return privacy_defenses.BasisRefresher(config, basis_dir, hooks.factories if hooks is not None else {})


def _privacy_hooks(config: ExperimentConfig, basis_dir: str | None = None):
    """Attack and allocator hooks, or None when the run needs neither."""
    if config.centralised or (config.attack_every == 0 and config.defense != "adaptive"):
        return None
    data = radiomapseer.RadioMapSeer(radiomapseer.LoaderConfig(root=config.data_root, resolution=config.resolution))
    factories = phase_factories(config, basis_dir)
    # The observer's labelled pool: every (map, transmitter) sample of the data set (building maps
    # are public; the held-out traces are other samples), plus its own simulations if given.
    pool = privacy_defenses.attacker_pool(data, np.arange(len(data.map_ids)))
    need = config.attack_train_traces + config.attack_test_traces
    if config.attack_every and len(pool["x"]) < need:
        raise DataTooSmallError(
            f"--attack_train_traces={config.attack_train_traces} --attack_test_traces={config.attack_test_traces}: "
            f"expected together at most the {len(pool['x'])} samples of {config.data_root}"
        )
    extra = None
    if config.attack_extra_root:
        twin = radiomapseer.RadioMapSeer(radiomapseer.LoaderConfig(root=config.attack_extra_root, resolution=config.resolution))
        extra = privacy_defenses.attacker_pool(twin, np.arange(len(twin.map_ids)))
    return privacy_defenses.PrivacyHooks(config, pool, factories, extra_pool=extra)


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
        datasets = _inject_nan(config, round_num, clients, datasets)
        state, metrics = trainer.next(state, round_num, datasets)
        if accounting is not None:
            privacy_accounting.record_round(*accounting, config.phase_for_round(round_num), clients)
        if hooks is not None:
            state, measured = hooks.train_allocator(trainer, state, round_num)
            extra.update(measured)
    val_mse = evaluator.mse(trainer.network_weights(state), config.phase_for_round(round_num))
    row = _metrics_row(metrics, val_mse, seconds=time.monotonic() - t0)
    row.update(extra)
    if math.isfinite(val_mse) and val_mse < program_state["best_val_mse"]:
        program_state.update(best_val_mse=np.float64(val_mse), best_round=np.int32(round_num))
    program_state.update(
        trainer_state=state,
        final_val_mse=np.float64(val_mse),
        train_seconds=np.float64(program_state["train_seconds"] + row["seconds"]),
    )
    return row


def _inject_nan(config: ExperimentConfig, round_num: int, clients, datasets: list) -> list:
    """The `inject_nan_client` test hook: the chosen client's inputs become NaN in its round."""
    injection = config.nan_injection()
    if injection is None or injection[0] != round_num or injection[1] not in list(clients):
        return datasets
    i = list(clients).index(injection[1])
    logging.warning("round %d: test hook: client %d trains on NaN inputs", round_num, injection[1])
    if isinstance(datasets[i], Mapping):  # In-process clients: numpy samples.
        poisoned = collections.OrderedDict(x=datasets[i]["x"] * np.float32("nan"), y=datasets[i]["y"])
    else:
        poisoned = datasets[i].map(lambda batch: collections.OrderedDict(x=batch["x"] * float("nan"), y=batch["y"]))
    return datasets[:i] + [poisoned] + datasets[i + 1 :]


def _metrics_row(metrics, val_mse: float, seconds: float) -> collections.OrderedDict:
    """One release: phase, train_loss, num_examples, val_mse(_db), seconds, then other measurements."""
    flat = flatten_metrics({k: v for k, v in metrics.items() if k != "phase"})
    row = collections.OrderedDict(
        phase=int(metrics["phase"]),
        train_loss=float(flat.pop("client_work/train_loss")),
        num_examples=int(flat.pop("client_work/num_examples")),
        nonfinite_updates=int(flat.pop("client_work/nonfinite_updates", 0)),
        val_mse=float(val_mse),
        val_mse_db=reconstruction.mse_db(val_mse) if val_mse > 0 else float("nan"),
        seconds=float(seconds),
    )
    row.update(flat)
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


def _allocator_path(output_dir: str, round_num: int) -> str:
    return os.path.join(output_dir, "allocator_state", f"round_{round_num}.npz")


def _save_allocator(output_dir: str, hooks, round_num: int, keep: int = 3) -> None:
    """The adaptive allocator's trainer (proxy attacker, optimizer slots) after `round_num`,
    written atomically; the `keep` newest files stay (as the program states do)."""
    arrays = hooks.allocator_state() if hooks is not None else {}
    if not arrays:
        return
    path = _allocator_path(output_dir, round_num)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    run_folder.write_npz(path, arrays)
    for old in range(round_num - keep, 0, -1):
        if not os.path.exists(_allocator_path(output_dir, old)):
            break
        os.remove(_allocator_path(output_dir, old))


def _restore_allocator(output_dir: str, hooks, done: int) -> None:
    """Loads the allocator trainer saved with round `done`'s program state, if the run has one."""
    if hooks is None or done == 0 or hooks.config.defense != "adaptive":
        return
    path = _allocator_path(output_dir, done)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{path}: the adaptive allocator's state saved with round {done} is missing; the run cannot resume "
            "exactly (start again with --overwrite)"
        )
    with np.load(path) as saved:
        hooks.restore_allocator({k: saved[k] for k in saved.files})


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


def _summary(config: ExperimentConfig, program_state, wall_seconds: float) -> dict:
    best = float(program_state["best_val_mse"])
    final = float(program_state["final_val_mse"])
    return {
        "defense": "centralised" if config.centralised else config.defense,
        "rounds": config.rounds,
        "best_val_mse": best,
        "best_val_mse_db": reconstruction.mse_db(best),
        "best_round": int(program_state["best_round"]),
        "final_val_mse": final,
        "final_val_mse_db": reconstruction.mse_db(final),
        "train_seconds": float(program_state["train_seconds"]),
        "wall_seconds_this_call": wall_seconds,
    }
