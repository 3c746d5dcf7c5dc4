"""The per-client privacy accounting of a privacy experiment run (`privacy.accounting`).

Threat model: an observer of individual uploads. Every round, each sampled client uploads once
under its phase's defense; the observer knows who uploaded, so sampling gives no amplification and
client k's guarantee composes the events of its own uploads, stage 1's and stage 2's alike
(`PerClientAccountant`). A phase's event is its factory's `dp_event()` (None: no guarantee; No
Defense and FedSGD have no factory, hence none either); Aligned Noise's is each client's own under
the allocation in force at the upload (`client_dp_event`, `phase_events`). The run reports, at delta = `DELTA`, the
worst client's epsilon (None if any upload had no guarantee), how many clients uploaded and the
most uploads of one client (`run_summary`, summary.json's `privacy`).

Client sampling is a function of (seed, round) (`federated_data.sample_clients`), so the uploads of
a run's first r rounds follow from its configuration alone: `replay(config, r)` re-derives them
without training. The runner records them as the rounds go and saves the accountant with every
program state (`save`, `restore`); a run saved before that existed is replayed on resume (a replay
knows no allocation a run made, so Aligned Noise's replayed uploads claim no guarantee).

The defenses on the aggregate (`central_dp`, `ddp`) protect what the server releases, not the
uploads: `aggregate_summary` gives their user-level epsilon (summary.json's `privacy.aggregate`),
for an observer of the round's aggregate who knows who took part (each client composes the rounds
it took part in) and, for central DP, with Poisson sampling amplification (an observer who does not
know who took part; this federation samples 6 of 14 without replacement, so that figure is the
Poisson model's, not an exact bound for it).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import os
from collections.abc import Mapping

import dp_accounting
import numpy as np

from tff_radiomap.aggregators import secure_dp
from tff_radiomap.experiments import defense_registry
from tff_radiomap.learning import federated_data
from tff_radiomap.models import phases
from tff_radiomap.privacy import accounting, ddp_accounting
from tff_radiomap.runtime import run_folder

DELTA = 1e-5
SUMMARY_KEYS = ("delta", "max_epsilon", "clients_with_uploads", "max_uploads_per_client")


def phase_events(factories: Mapping) -> dict:
    """{phase: the event of one upload in that phase, or None} for {phase: factory or None}; for
    a defense whose event differs by client and moves between rounds (`per_client_events`), its
    `client_dp_event`, asked at every recorded upload."""
    return {
        phase: None if factory is None else factory.client_dp_event if getattr(factory, "per_client_events", False) else factory.dp_event()
        for phase, factory in factories.items()
    }


def new_accountant() -> accounting.PerClientAccountant:
    return accounting.PerClientAccountant(delta=DELTA)


def record_round(acc: accounting.PerClientAccountant, events: Mapping, phase, clients) -> None:
    """One upload under `events[phase]` by each of the round's sampled `clients` (a callable
    event: each client's own, `event(client)`)."""
    event = events.get(phase)  # None also where the uploads are not observable (secure aggregation).
    for k in clients:
        own = event(int(k)) if callable(event) else event
        if own is not None and not isinstance(own, dp_accounting.DpEvent):
            raise TypeError(f"phase {phase!r}: client {int(k)}'s event is {own!r}; expected a dp_accounting.DpEvent or None")
        acc.record_round([int(k)], own)


def replay(config, rounds: int | None = None, events: Mapping | None = None) -> accounting.PerClientAccountant:
    """The accountant of a run of `config` after `rounds` rounds (default: all), without training.

    `events`: {phase: event}, default from the run's upload views (`defense_registry.upload_views`;
    the subspace defense's needs the data root's maps). The centralised reference uploads nothing.
    """
    rounds = config.rounds if rounds is None else rounds
    acc = new_accountant()
    if config.centralised:
        return acc
    if events is None:
        events = _events_of(dataclasses.replace(config, seed=0))
    for r in range(1, rounds + 1):
        clients = federated_data.sample_clients(config.seed, r, config.num_clients, config.clients_per_round)
        record_round(acc, events, config.phase_for_round(r), clients)
    return acc


def run_summary(acc: accounting.PerClientAccountant) -> dict:
    """summary.json's `privacy`: delta, max_epsilon (None: no guarantee), clients_with_uploads,
    max_uploads_per_client."""
    summary = acc.summary()
    return {k: summary[k] for k in SUMMARY_KEYS}


def state_path(output_dir: str, round_num: int) -> str:
    return os.path.join(output_dir, "accounting", f"round_{round_num}.json")


def save(output_dir: str, acc: accounting.PerClientAccountant, round_num: int, keep: int = 3) -> None:
    """The accountant after `round_num`, written atomically; the `keep` newest files stay (as the
    program states do)."""
    path = state_path(output_dir, round_num)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    run_folder.write_json(path, {"delta": acc.delta, "uploads": acc.state()})
    for old in range(round_num - keep, 0, -1):
        if not os.path.exists(state_path(output_dir, old)):
            break
        os.remove(state_path(output_dir, old))


def restore(output_dir: str, config, done: int, events: Mapping) -> accounting.PerClientAccountant:
    """The accountant saved with round `done`'s program state; replayed from `config` when the
    run has none (one saved before the accounting existed)."""
    path = state_path(output_dir, done)
    if done == 0 or not os.path.exists(path):
        return replay(config, done, events)
    with open(path) as f:
        saved = json.load(f)
    return accounting.PerClientAccountant.from_state(saved["uploads"], delta=saved["delta"])


@functools.lru_cache(maxsize=None)
def _events_of(config) -> dict:
    """The phase events of `config`'s factories, built once per configuration (`replay` passes it
    with seed 0: the seeds of a front share them, an event depends on the defense's parameters)."""
    # The subspace factory's basis file is read by its clients only: no folder is needed here.
    return phase_events(defense_registry.upload_views(config, basis_dir=""))


# ---------------------------------------------------------------------------------------------
# The guarantee of the released aggregate (central DP, distributed DP).
OBSERVER_KNOWN = "the round's aggregate (the server, or anyone the model is released to), participation known: each client composes the rounds it took part in"
OBSERVER_POISSON = "the round's aggregate, participation unknown: Poisson sampling at q = clients_per_round / num_clients over every round (a model of this federation's fixed-size sampling)"


def participation(config, rounds: int | None = None) -> dict[int, collections.Counter]:
    """{client: Counter({phase: rounds of that phase it took part in})} over the first `rounds`
    rounds (default: all), from the run's client sampling."""
    rounds = config.rounds if rounds is None else rounds
    taken: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in range(1, rounds + 1):
        for k in federated_data.sample_clients(config.seed, r, config.num_clients, config.clients_per_round):
            taken[int(k)][config.phase_for_round(r)] += 1
    return dict(taken)


def _worst_epsilon(round_rdp: Mapping, taken: Mapping, orders) -> tuple[float, int]:
    """(the worst client's epsilon at DELTA, its rounds) from {phase: RDP of one round at `orders`}."""
    worst, worst_rounds = 0.0, 0
    for counts in taken.values():
        rdp = sum(n * np.asarray(round_rdp[phase], np.float64) for phase, n in counts.items())
        eps, _ = dp_accounting.rdp.compute_epsilon(orders, rdp, DELTA)
        if eps > worst:
            worst, worst_rounds = float(eps), sum(counts.values())
    return worst, worst_rounds


def aggregate_summary(config, rounds: int | None = None) -> dict | None:
    """summary.json's `privacy.aggregate` for a defense on the aggregate (None for the others):
    the mechanism, z, the observer each epsilon assumes and the worst client's epsilon at DELTA.

    Central DP: the Gaussian mechanism at z a round (TFF's `extract_dp_event_from_state` gives
    `GaussianDpEvent(z)`), RDP alpha / (2 z^2) at `accounting.DEFAULT_ORDERS`. Distributed DP: the
    round of TFF's DistributedDpSumFactory as the run configures it, for each phase's dimension
    (`ddp_accounting.tff_ddp_calibration`, at its integer orders); its calibration (scale, inflated
    clip, local noise) is reported per phase.
    """
    mechanism = defense_registry.DEFENSES[config.defense].aggregate_dp
    if not mechanism or config.centralised:
        return None
    rounds = config.rounds if rounds is None else rounds
    taken = participation(config, rounds)
    phases_taken = sorted({p for c in taken.values() for p in c}, key=int)
    out = {"mechanism": mechanism, "noise_multiplier": config.noise_multiplier, "delta": DELTA, "observer": OBSERVER_KNOWN}
    if mechanism == "central":
        orders = np.asarray(accounting.DEFAULT_ORDERS, np.float64)
        round_rdps = {phase: orders / (2.0 * config.noise_multiplier**2) for phase in phases_taken}
    else:
        orders = np.asarray(ddp_accounting.DDP_ORDERS, np.float64)
        calibrations = {phase: ddp_calibration(config, phase) for phase in phases_taken}
        phase_rounds = collections.Counter(config.phase_for_round(r) for r in range(1, rounds + 1))
        round_rdps = {phase: c.rdp(orders) for phase, c in calibrations.items()}
        out["calibration"] = {
            int(phase): {
                "dim": c.padded_dim,
                "scale": c.scale,
                "inflated_l2_clip": c.inflated_l2_clip,
                "local_stddev": c.local_stddev,
                "bits": config.ddp_bits,
                "wrap_probability": secure_dp.MODCLIP_PROB,
                "expected_wraps": secure_dp.MODCLIP_PROB * c.padded_dim * phase_rounds[phase],  # Coordinates of the run's sums.
            }
            for phase, c in calibrations.items()
        }
    out["epsilon"], out["worst_client_rounds"] = _worst_epsilon(round_rdps, taken, orders)
    if mechanism == "central":
        q = config.clients_per_round / config.num_clients
        event = dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(config.noise_multiplier)), rounds)
        out.update(observer_poisson=OBSERVER_POISSON, sampling_rate=q, epsilon_poisson=accounting.epsilon_of(event, DELTA))
    return out


def ddp_calibration(config, phase) -> ddp_accounting.TffDdpCalibration:
    """TFF's DistributedDpSumFactory as the run configures it for the uploads of `phase` (their
    dimension sets the padding and the rounded update's sensitivity)."""
    dim = int(sum(np.prod(s) for s in phases.uploaded_shapes(config.model_config(), phase)))
    return ddp_accounting.tff_ddp_calibration(
        config.noise_multiplier,
        config.clients_per_round,
        config.ddp_bits,
        config.clip_norm,
        dim,
        modclip_prob=secure_dp.MODCLIP_PROB,
        mechanism=config.ddp_mechanism,
        rotation_type="dft",
    )
