"""The observers of a deployment on RadioUNet's real uploads at the toy size: the observer of a
client's upload locates one or two samples near exactly, beats the correlation baseline and the
prior set on a client of several samples, the observer of a round's sum gets the aggregate's noise,
and bench/deployment_observer.py writes the ladder of a tiny finished run."""

import csv
import dataclasses
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from tff_radiomap.data import twin
from tff_radiomap.experiments import attack_rounds, deployment_observer, privacy_setup, shared_models, threat_ladder
from tff_radiomap.experiments import privacy_radiomap as experiment
from tff_radiomap.experiments.defense_registry import upload_views
from tff_radiomap.models import phases
from tff_radiomap.models.phases import Phase
from tff_radiomap.privacy import set_scoring, upload_observer

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The run's attack: every round, one observed local step, the matching attacker on every 4th cell with
# 4 calibration positions (these tests are about the saved rounds and the ladder's wiring, not about
# what the attack reads).
ATTACK = dict(attack_every=1, attack_steps=1, attack_train_traces=12, attack_test_traces=6, matching_stride=4, matching_calibration=4)


def _round_one(config, settings, maps):
    view = upload_views(config).get(Phase.STAGE1)
    weights = phases.initial_weights(config.model_config(), config.seed)
    return deployment_observer.RoundObserver(config, maps, weights, None, 1, view, settings)


@pytest.fixture(scope="module")
def map_one_candidates(config):
    """Map 1's samples and a candidate at the centre of every cell (2 m at the toy size) with its
    stage-1 gradient at the initial model: the same for each parametrization below."""
    maps = privacy_setup.read_maps(config)
    mc = config.model_config()
    weights = phases.initial_weights(mc, config.seed)
    phases.set_phase_weights(shared_models.phase_model(mc, Phase.STAGE1), weights, Phase.STAGE1)
    p = 1  # A map whose transmitters' cells all have their centre outdoors: each is a candidate's cell.
    m, samples = int(maps.map_ids[p]), maps.arrays([p])
    buildings = twin.read_buildings(config.data_root, m)
    grid = twin.grid_positions(buildings, config.resolution, 1)
    factor = buildings.shape[0] // config.resolution
    assert all(any((grid // factor == t // factor).all(1)) for t in maps.tx_pixels[p])
    candidates = maps.samples_at(p, grid, twin.position_gains(config.data_root, m, grid))
    gradients = shared_models.candidate_gradients(mc, Phase.STAGE1)(candidates["x"], candidates["y"])
    return weights, m, samples, grid, candidates, gradients


@pytest.mark.parametrize("rows", [[1], [0, 2]])
def test_the_real_upload_of_one_or_two_samples_is_located_near_exactly(config, map_one_candidates, rows):
    weights, m, samples, grid, candidates, gradients = map_one_candidates
    mc = config.model_config()
    phases.set_phase_weights(shared_models.phase_model(mc, Phase.STAGE1), weights, Phase.STAGE1)  # Another test may have set others.
    trainer = shared_models.client_trainer(mc, Phase.STAGE1, config.client_optimizer, config.client_learning_rate, config.batch_size)

    def upload(x, y, epochs=3):  # Three Adam steps on the client's one batch, as a client of 3 local epochs.
        return trainer.upload(np.tile(x, (epochs, 1, 1, 1)), np.tile(y, (epochs, 1, 1, 1)))

    observed, truth = upload(samples["x"][rows], samples["y"][rows]), samples["coords_m"][rows]
    for told in (True, False):
        client = upload_observer.ClientCandidates(
            gradients, candidates["coords_m"], np.full(len(grid), m), samples=len(rows), counts={m: len(rows)} if told else None
        )
        settings = upload_observer.ObserverConfig(batch_size=config.batch_size, told=told, max_per_map=4)
        located = upload_observer.locate(observed, [client], settings)
        assert len(located.positions[0][m]) == len(rows)  # Not told, the count rule finds it.
        refined = upload_observer.refine(observed, located, lambda k, atoms: upload(candidates["x"][atoms], candidates["y"][atoms]), settings)
        assert refined.fit >= located.fit - 1e-6 and refined.fit > 0.95  # The true local training's cosine.
        distances = set_scoring.matched_distances(refined.positions[0][m], truth, fallback=np.zeros(2))
        assert np.all(distances < 1.5), distances  # Each at the centre of its own cell.


def test_the_upload_observer_beats_the_correlation_baseline_and_the_prior_on_multi_sample_clients(config):
    maps = privacy_setup.read_maps(config)
    observer = _round_one(config, deployment_observer.ObserverSettings(stride=2), maps)
    scores, _ = observer.single_upload_cell(observer.uploads(privacy_setup.load_data(config, maps)), column=0)
    assert scores["observer"].transmitters == 12  # Two clients of 2 maps x 3 transmitters: 6 samples each.
    assert scores["constant"].ratio == pytest.approx(1.0)
    assert scores["observer"].rmse_m < 0.8 * scores["correlation"].rmse_m
    assert scores["observer"].rmse_m < scores["prior"].rmse_m
    assert scores["observer"].rmse_m < scores["matching"].rmse_m


def test_the_round_sum_is_the_weighted_sum_of_the_views_with_the_aggregates_noise():
    rng = np.random.default_rng(0)
    uploads = rng.normal(size=(3, 50_000)).astype(np.float32)
    uploads[0] *= 10.0 / np.linalg.norm(uploads[0])  # Over the clip.
    clean = deployment_observer.observed_sum(uploads, np.array([1.0, 2.0, 0.5]), None, 0.0, rng)
    np.testing.assert_allclose(clean, uploads[0] + 2.0 * uploads[1] + 0.5 * uploads[2], rtol=1e-5, atol=1e-5)
    clipped = deployment_observer.observed_sum(uploads, np.ones(3), 1.0, 0.0, rng)
    np.testing.assert_allclose(clipped, sum(_clip(u) for u in uploads), rtol=1e-4, atol=1e-5)
    assert np.linalg.norm(_clip(uploads[0])) == pytest.approx(1.0)
    noised = deployment_observer.observed_sum(uploads, np.ones(3), 1.0, 0.3, rng)
    assert np.std(noised - clipped) == pytest.approx(0.3, rel=0.02)


def _clip(u, c=1.0):
    return u * min(1.0, c / np.linalg.norm(u))


def test_the_sum_observer_of_central_dp_sees_clipped_uploads_and_noise_z_c_on_their_sum(config, monkeypatch):
    cdp = dataclasses.replace(config, defense="central_dp", noise_multiplier=0.5, clip_norm=0.8)
    maps = privacy_setup.read_maps(cdp)
    seen = {}
    real = deployment_observer.observed_sum

    def spy(uploads, weights, clip_norm, noise_std, rng):
        seen.update(weights=np.asarray(weights), clip_norm=clip_norm, noise_std=noise_std)
        return real(uploads, weights, clip_norm, noise_std, rng)

    monkeypatch.setattr(deployment_observer, "observed_sum", spy)
    observer = _round_one(cdp, deployment_observer.ObserverSettings(stride=4, baselines=False), maps)
    scores, _ = observer.sum_cell(observer.uploads(privacy_setup.load_data(cdp, maps)), column=4)
    assert seen["clip_norm"] == 0.8 and seen["noise_std"] == pytest.approx(0.4) and np.all(seen["weights"] == 1.0)  # Unweighted, z C.
    assert scores["observer"].transmitters == 12 and np.isfinite(scores["observer"].ratio)


@pytest.fixture(scope="module")
def tiny_run(tff_runtime, config, tmp_path_factory):
    """A No Defense run of two rounds, both attacked: round 1 trains stage 1, round 2 stage 2."""
    cfg = dataclasses.replace(config, rounds=2, **ATTACK)
    out = str(tmp_path_factory.mktemp("ladder") / "none")
    experiment.run(cfg, out, progress=False)
    return cfg, out


def test_the_recomputed_uploads_are_the_runs_to_float_tolerance(tiny_run):
    # No Defense, server SGD at rate 1: the stage-1 weights broadcast in round 2 (stage 2 freezes
    # them) are round 1's minus the example-weighted mean of round 1's uploads.
    cfg, run_dir = tiny_run
    (first, _), (second, _) = (attack_rounds.load(run_dir, attack_rounds.ATTACK_ROUNDS, r) for r in (1, 2))
    maps = privacy_setup.read_maps(cfg)
    observer = deployment_observer.RoundObserver(cfg, maps, first, None, 1, None, deployment_observer.ObserverSettings())
    uploads = observer.uploads(privacy_setup.load_data(cfg, maps))
    examples = np.array([len(observer.parts[int(k)]) for k in observer.clients], np.float64)
    mean = np.tensordot(examples / examples.sum(), uploads.astype(np.float64), axes=1)
    applied = np.concatenate([(a - b).ravel() for a, b in zip(first.stage1, second.stage1)])
    np.testing.assert_allclose(mean, applied, rtol=1e-3, atol=2e-6)
    assert np.linalg.norm(applied) > 1e-3


def test_the_ladder_script_scores_every_column_of_a_tiny_run(tiny_run, shadowed_root, tmp_path):
    out = tmp_path / "ladder"
    # The observer's search, its fallback and its pass over every client are the in-process tests'
    # above: here one sweep, no twin round, the round's first client.
    wiring = ["--stride=4", "--sweeps=1", "--calibration=2", "--fallback=0", "--clients=1"]
    args = [f"--run={tiny_run[1]}", f"--output_dir={out}", f"--shadowed_root={shadowed_root}", *wiring]
    run = subprocess.run([sys.executable, "-m", "bench.deployment_observer", *args], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = list(csv.DictReader(open(out / "ladder.csv")))
    cells = {(int(r["round"]), r["column"], r["attacker"]): r for r in rows}
    for round_num in (1, 2):
        for column in ("single_twin", "single_shadowed", "upload_twin", "upload_shadowed", "sum_shadowed"):
            observer = cells[(round_num, column, "observer")]
            assert np.isfinite(float(observer["ratio"])) and 0 <= float(observer["within_10m"]) <= 1 and float(observer["seconds"]) > 0
            assert float(cells[(round_num, column, "constant")]["ratio"]) == pytest.approx(1.0)
        for column in ("upload_twin", "sum_shadowed"):
            assert {a for (r, c, a) in cells if r == round_num and c == column} == set(deployment_observer.ATTACKERS)
    assert np.isfinite(float(cells[(1, "single_twin", "observer")]["run_ratio"]))  # The run's own figure beside it.
    table = open(out / "ladder.md").read()
    assert "## round 1" in table and "## round 2" in table and "(v) round's sum, shadowed reality" in table
    assert os.path.getsize(out / "ladder.png") > 0 and "Seconds per cell" in run.stdout


def test_a_resumed_ladder_keeps_the_saved_rounds_it_is_not_asked_for(tiny_run, shadowed_root):
    saved = threat_ladder._rows(1, "upload_twin", {"observer": set_scoring.SetScore(1.0, 2.0, 0.5, 3)}, 1.0)
    saved += threat_ladder._rows(2, "upload_twin", {"observer": set_scoring.SetScore(1.5, 2.0, 0.5, 3)}, 1.0)
    scored = []
    rows = threat_ladder.ladder(tiny_run[1], rounds=[1], reality_root=shadowed_root, columns=("upload_twin",), log=scored.append, done=saved)
    assert rows == saved and scored == []  # Round 1 is not scored again; round 2's rows stay.
