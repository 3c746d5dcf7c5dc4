"""The per-client accounting of a privacy run: every defense's event, the replay from (seed, round),
the accountant saved with the checkpoints, and seeded against fresh noise."""

import collections
import dataclasses
import json
import os

import dp_accounting
import numpy as np
import pytest
import tensorflow_federated as tff

from tff_radiomap.models import phases
from tff_radiomap.experiments import defense_registry
from tff_radiomap.experiments import privacy_accounting as pa
from tff_radiomap.experiments import privacy_radiomap as experiment
from tff_radiomap.learning import federated_data
from tff_radiomap.models.phases import Phase
from tff_radiomap.privacy import accounting


def test_every_registered_defense_answers_dp_event(config, tmp_path):
    expected = {"uniform": 0.5 / 1.0, "adaptive_floor": 0.2 / 1.0}
    for name in sorted(experiment.DEFENSES) + ["adaptive_floor"]:
        cfg = dataclasses.replace(
            config,
            resolution=16,
            width=0.125,
            defense="adaptive" if name == "adaptive_floor" else name,
            noise_multiplier=0.5,
            sigma_min=0.2 if name == "adaptive_floor" else 0.0,
        )
        for phase, factory in defense_registry.upload_views(cfg, str(tmp_path)).items():
            event = None if factory is None else factory.dp_event()
            assert event is None or isinstance(event, dp_accounting.DpEvent), (name, phase, event)
            if name in expected:
                assert event == dp_accounting.GaussianDpEvent(pytest.approx(expected[name])), (name, phase)
            elif name in ("subspace", "subspace_client"):  # Full-rank fixed noise: the least-noised direction's mechanism.
                g = factory.groups
                k, d, budget = g.rank, g.num_coordinates, g.num_coordinates * (cfg.clip_norm * 0.5) ** 2
                least = min(np.sqrt(cfg.subspace_share * budget / k), np.sqrt((1 - cfg.subspace_share) * budget / (d - k)))
                assert event == dp_accounting.GaussianDpEvent(pytest.approx(least / cfg.clip_norm, rel=1e-6)), (phase, event)
            else:  # No Defense, FedSGD, Clip Only, Directed, Adaptive without a floor; Aligned before its first allocation.
                assert event is None, (name, phase, event)


def test_replay_counts_each_sampled_upload_of_both_stages_and_composes_like_dp_accounting(config):
    cfg = dataclasses.replace(config, defense="uniform", noise_multiplier=0.8, rounds=7, stage1_rounds=3)
    acc = pa.replay(cfg)
    counts = collections.Counter(int(k) for r in range(1, 8) for k in federated_data.sample_clients(cfg.seed, r, 3, 2))
    assert {k: acc.uploads(k) for k in range(3)} == dict(counts) | {k: 0 for k in range(3) if k not in counts}
    for k, n in counts.items():
        direct = dp_accounting.rdp.RdpAccountant(accounting.DEFAULT_ORDERS).compose(dp_accounting.GaussianDpEvent(0.8), n).get_epsilon(1e-5)
        assert acc.epsilon(k) == pytest.approx(direct, rel=1e-9)
    summary = pa.run_summary(acc)
    assert summary == {
        "delta": 1e-5,
        "max_epsilon": max(acc.epsilon(k) for k in counts),
        "clients_with_uploads": len(counts),
        "max_uploads_per_client": max(counts.values()),
    }
    assert pa.run_summary(pa.replay(dataclasses.replace(cfg, defense="directed")))["max_epsilon"] is None
    assert pa.run_summary(pa.replay(dataclasses.replace(cfg, defense="none")))["max_epsilon"] is None
    central = pa.run_summary(pa.replay(dataclasses.replace(cfg, defense="none", centralised=True)))
    assert (central["max_epsilon"], central["clients_with_uploads"]) == (None, 0)
    # A stage-2 event other than stage 1's counts for the clients of stage-2 rounds.
    mixed = pa.replay(cfg, events={Phase.STAGE1: dp_accounting.GaussianDpEvent(0.8), Phase.STAGE2: None})
    stage2 = {int(k) for r in range(4, 8) for k in federated_data.sample_clients(cfg.seed, r, 3, 2)}
    assert all((mixed.epsilon(k) is None) == (k in stage2) for k in counts)


def test_a_per_client_event_is_asked_at_every_upload():
    """Aligned Noise's event differs by client and moves at every refresh: the accountant records
    each upload under the event in force when it is made."""
    allocation = {0: 0.5, 1: 2.0}

    class Moving:
        per_client_events = True

        def client_dp_event(self, client):
            m = allocation.get(client)
            return None if m is None else dp_accounting.GaussianDpEvent(m)

    events = pa.phase_events({Phase.STAGE1: Moving()})
    acc = pa.new_accountant()
    pa.record_round(acc, events, Phase.STAGE1, [0, 1])
    allocation[0] = 1.0  # A refresh.
    pa.record_round(acc, events, Phase.STAGE1, [0])
    assert acc.state() == [[0, [[0.5, 1], [1.0, 1]]], [1, [[2.0, 1]]]]
    pa.record_round(acc, events, Phase.STAGE1, [2])  # No allocation: no guarantee for that client alone.
    assert acc.epsilon(2) is None and acc.epsilon(1) is not None
    with pytest.raises(TypeError, match="client 3's event"):
        pa.record_round(acc, {Phase.STAGE1: lambda k: "gaussian"}, Phase.STAGE1, [3])


def test_the_accountant_is_restored_from_its_file_or_replayed(config, tmp_path):
    cfg = dataclasses.replace(config, defense="uniform", rounds=6, stage1_rounds=2)
    events = pa.phase_events(experiment.phase_factories(cfg))
    out = str(tmp_path)
    for r in range(1, 6):
        pa.save(out, pa.replay(cfg, r, events), r)
    assert sorted(os.listdir(os.path.join(out, "accounting"))) == ["round_3.json", "round_4.json", "round_5.json"]  # The 3 newest.
    restored = pa.restore(out, cfg, 5, events)
    assert restored.state() == pa.replay(cfg, 5, events).state() and restored.summary() == pa.replay(cfg, 5, events).summary()
    with open(pa.state_path(out, 4), "w") as f:  # What is read is the file, not a replay.
        json.dump({"delta": 1e-5, "uploads": [[0, [[2.0, 1]]]]}, f)
    assert pa.restore(out, cfg, 4, events).state() == [[0, [[2.0, 1]]]]
    # A run saved before the accounting existed (no file at its round): replayed from (seed, round).
    assert pa.restore(out, cfg, 2, events).state() == pa.replay(cfg, 2, events).state()
    assert pa.restore(out, cfg, 0, events).state() == []


def _upload_twice(cfg):
    """The phase-1 upload of one fixed update through the run's factory, twice from one state."""
    factory = experiment.phase_factories(cfg)[Phase.STAGE1]
    model = phases.build_phase_model(cfg.model_config(), Phase.STAGE1)
    value = [np.full(v.shape, 1e-3, np.float32) for v in model.trainable_variables]
    process = factory.create(tff.to_type([tff.TensorType(np.float32, v.shape) for v in value]))
    state = process.initialize()
    return [np.concatenate([np.ravel(t) for t in process.next(state, [value]).result]) for _ in range(2)]


def test_seeded_noise_repeats_for_identical_uploads_and_fresh_noise_does_not(tff_runtime, config):
    seeded = dataclasses.replace(config, defense="uniform", noise_multiplier=0.5)
    a, b = _upload_twice(seeded)
    np.testing.assert_array_equal(a, b)  # Whoever knows --seed can regenerate (and remove) it.
    a, b = _upload_twice(dataclasses.replace(seeded, fresh_noise=True))
    assert not np.allclose(a, b)
    assert np.std(a - b) == pytest.approx(np.sqrt(2) * 0.5, rel=0.1)  # Two independent draws of sigma = C nu.


def test_a_config_saved_before_fresh_noise_existed_reads_as_seeded(config, tmp_path):
    config = dataclasses.replace(config, defense="uniform", noise_multiplier=0.01)  # A defense that reads it.
    saved = dataclasses.asdict(config)
    del saved["fresh_noise"]
    os.makedirs(tmp_path / "old")
    with open(tmp_path / "old" / "config.json", "w") as f:
        json.dump(saved, f)
    assert experiment._check_config(config, str(tmp_path / "old"))
    with pytest.raises(experiment.ConfigMismatchError, match="fresh_noise: saved False, now True"):
        experiment._check_config(dataclasses.replace(config, fresh_noise=True), str(tmp_path / "old"))


def test_central_dp_uploads_read_as_clip_only_and_ddp_uploads_are_not_observable(config):
    central = dataclasses.replace(config, defense="central_dp", noise_multiplier=1.0)
    views = defense_registry.upload_views(central, "")
    assert set(views) == {Phase.STAGE1, Phase.STAGE2} and all(type(v).__name__ == "ClipOnlyFactory" for v in views.values())
    assert all(v.clip_norm == central.clip_norm for v in views.values())
    assert type(defense_registry.phase_factories(central, "")[Phase.STAGE1]).__name__ == "DifferentiallyPrivateFactory"
    ddp = dataclasses.replace(config, defense="ddp", noise_multiplier=1.0)
    assert defense_registry.upload_views(ddp, "") == {}
    assert pa.replay(ddp).summary()["max_epsilon"] is None  # Uploads were made, none under a DP event.
    with pytest.raises(ValueError, match="noise_multiplier=0.0: expected a positive z"):
        dataclasses.replace(config, defense="central_dp", noise_multiplier=0.0)
    with pytest.raises(ValueError, match="ddp_mechanism='laplace'"):
        dataclasses.replace(config, defense="ddp", ddp_mechanism="laplace")


def test_central_dp_epsilon_is_dp_accountings_for_the_worst_clients_rounds_and_for_poisson_sampling(config):
    cfg = dataclasses.replace(config, defense="central_dp", noise_multiplier=1.5, rounds=12, num_clients=3, clients_per_round=2)
    taken = pa.participation(cfg)
    assert sum(sum(c.values()) for c in taken.values()) == 12 * 2
    worst = max(sum(c.values()) for c in taken.values())
    out = pa.aggregate_summary(cfg)
    # By hand: the Gaussian mechanism at z composed over the worst client's rounds, and the
    # Poisson-subsampled one over every round, through dp_accounting's own RDP accountant.
    known = dp_accounting.rdp.RdpAccountant(accounting.DEFAULT_ORDERS).compose(dp_accounting.GaussianDpEvent(1.5), worst).get_epsilon(pa.DELTA)
    poisson = (
        dp_accounting.rdp.RdpAccountant(accounting.DEFAULT_ORDERS)
        .compose(dp_accounting.PoissonSampledDpEvent(2 / 3, dp_accounting.GaussianDpEvent(1.5)), 12)
        .get_epsilon(pa.DELTA)
    )
    assert out["worst_client_rounds"] == worst
    assert out["epsilon"] == pytest.approx(known, rel=1e-6)
    assert out["epsilon_poisson"] == pytest.approx(poisson, rel=1e-6)
    assert pa.aggregate_summary(dataclasses.replace(cfg, noise_multiplier=3.0))["epsilon"] < out["epsilon"]
    assert pa.aggregate_summary(dataclasses.replace(cfg, defense="uniform")) is None


def test_ddp_epsilon_is_the_ddp_accountants_for_the_worst_clients_rounds(config):
    from tff_radiomap.aggregators import secure_dp
    from tff_radiomap.privacy import ddp_accounting

    cfg = dataclasses.replace(config, defense="ddp", noise_multiplier=2.0, rounds=8, stage1_rounds=8, num_clients=3, clients_per_round=2)
    out = pa.aggregate_summary(cfg)
    dim = int(sum(np.prod(s) for s in phases.uploaded_shapes(cfg.model_config(), Phase.STAGE1)))
    calibration = ddp_accounting.tff_ddp_calibration(2.0, 2, cfg.ddp_bits, cfg.clip_norm, dim, mechanism=cfg.ddp_mechanism, modclip_prob=secure_dp.MODCLIP_PROB)
    rounds_by_client = {k: sum(c.values()) for k, c in pa.participation(cfg).items()}
    by_hand = ddp_accounting.per_client_epsilon(calibration.event, rounds_by_client, pa.DELTA)
    assert out["epsilon"] == pytest.approx(max(by_hand.values()), rel=1e-9)
    assert out["calibration"][int(Phase.STAGE1)]["scale"] == pytest.approx(calibration.scale)
    assert "epsilon_poisson" not in out  # No amplification is claimed for distributed DP.
    # The discrete Gaussian at the same z differs from Skellam by little; both fall with z.
    assert pa.aggregate_summary(dataclasses.replace(cfg, noise_multiplier=4.0))["epsilon"] < out["epsilon"]
