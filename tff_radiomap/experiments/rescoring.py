"""Scoring a finished privacy run's attacks again with the current attackers, without training.

A run keeps the model broadcast in each attack round, the defense parameters of that round and
the models of its basis refreshes (`attack_rounds`). `rescore(run_dir)` rebuilds the run's observer
(`privacy_defenses.build_hooks`) from its config.json, with the matching attacker's settings given
(by default today's), and for every saved attack round recomputes the subspace basis in force (from
the last refresh of that phase at or before the round) and every attacker's figures. It rewrites
the attack columns of those rounds in metrics.csv (others untouched) and the matching fields of
config.json, so that the record names the attacker behind its figures. The same code scores the
rounds during training, and the noise is seeded from (seed, round), so re-scoring a run with the
attacker it ran with gives back the figures it wrote.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os

from absl import logging

from tff_radiomap.experiments import attack_rounds, privacy_defenses, privacy_setup, saved_runs
from tff_radiomap.experiments.defense_registry import DEFENSES, upload_views
from tff_radiomap.runtime import run_folder
from tff_radiomap.runtime.atomic import atomic_write

MATCHING_FIELDS = ("matching_maps", "matching_stride", "matching_calibration", "matching_coarse")


class NotRescorableError(FileNotFoundError):
    """The run folder lacks what re-scoring needs (a run from before the models were kept)."""


def rescore(run_dir: str, matching: dict | None = None) -> dict[int, dict]:
    """{round: attack metrics} of every saved attack round of the run in `run_dir`, written into
    its metrics.csv. `matching`: values of `MATCHING_FIELDS` to score with (missing ones: the
    run's own, where it has them, else today's defaults)."""
    config = saved_runs.run_config(run_dir)
    if not DEFENSES[config.defense].uploads_observable:  # It keeps its attack rounds' models for the observer of the sum.
        raise ValueError(
            f"{run_dir}: defense {config.defense!r} uploads under secure aggregation: no upload to attack; its round's sum: bench/deployment_observer.py"
        )
    rounds = attack_rounds.saved_rounds(run_dir, attack_rounds.ATTACK_ROUNDS)
    if not rounds:
        raise NotRescorableError(
            f"{run_dir}: no saved attack-round models ({attack_rounds.ATTACK_ROUNDS}/); the run predates them and must be trained again (--overwrite)"
        )
    config = _with_matching(config, run_dir, matching or {})
    maps = privacy_setup.read_maps(config)
    basis_dir = os.path.join(run_dir, "basis")
    factories = upload_views(config, basis_dir)
    hooks = privacy_defenses.build_hooks(config, maps, factories)
    refresher = privacy_defenses.basis_refresher(config, basis_dir, hooks)
    refreshes = attack_rounds.saved_rounds(run_dir, attack_rounds.BASIS_ROUNDS)
    scored = {}
    for round_num in rounds:
        weights, extras = attack_rounds.load(run_dir, attack_rounds.ATTACK_ROUNDS, round_num)
        phase = config.phase_for_round(round_num)
        if refresher is not None:
            source = [r for r in refreshes if r <= round_num and config.phase_for_round(r) == phase]
            if not source:
                raise NotRescorableError(f"{run_dir}: no basis refresh saved at or before round {round_num} in its phase ({attack_rounds.BASIS_ROUNDS}/)")
            basis_weights, _ = attack_rounds.load(run_dir, attack_rounds.BASIS_ROUNDS, source[-1])
            refresher.install(phase, basis_weights)
        try:
            scored[round_num] = hooks.attack_weights(weights, extras, round_num)
        except FloatingPointError as exc:  # As in training: the attack of a diverged model is skipped.
            logging.warning("%s round %d: attack skipped: %s", run_dir, round_num, exc)
            scored[round_num] = {k: float("nan") for k in privacy_defenses.ATTACK_METRICS}
    _write_metrics(os.path.join(run_dir, "metrics.csv"), scored)
    _write_matching_fields(run_dir, config)
    return scored


def _with_matching(config, run_dir: str, matching: dict):
    unknown = sorted(set(matching) - set(MATCHING_FIELDS))
    if unknown:
        raise ValueError(f"matching settings {unknown}: expected some of {MATCHING_FIELDS}")
    defaults = {f.name: f.default for f in dataclasses.fields(config) if f.name in MATCHING_FIELDS}
    saved = _read_json(os.path.join(run_dir, "config.json"))
    own = {k: saved[k] for k in MATCHING_FIELDS if k in saved and saved.get("matching_maps", 0)}  # A run scored with the matching attacker.
    return dataclasses.replace(config, **{**defaults, **own, **matching})


def _read_json(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def _write_metrics(path: str, scored: dict[int, dict]) -> None:
    """metrics.csv with the attack columns of the scored rounds replaced (columns added if new)."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = list(reader.fieldnames or []), list(reader)
    for name in privacy_defenses.ATTACK_METRICS:
        if name not in fields:
            fields.append(name)
    found = set()
    for row in rows:
        r = int(row["round"])
        for name in privacy_defenses.ATTACK_METRICS:
            row.setdefault(name, "nan")
            if r in scored:
                row[name] = repr(float(scored[r][name]))
        found.add(r)
    missing = sorted(set(scored) - found)
    if missing:
        raise ValueError(f"{path} has no rows for the saved attack rounds {missing}")
    with atomic_write(path, newline="") as f:
        writer = csv.DictWriter(f, fieldnames=sorted(fields, key=lambda c: (c != "round", c)))
        writer.writeheader()
        writer.writerows(rows)


def _write_matching_fields(run_dir: str, config) -> None:
    path = os.path.join(run_dir, "config.json")
    saved = _read_json(path)
    saved.update({k: getattr(config, k) for k in MATCHING_FIELDS})
    run_folder.write_json(path, saved)
