"""The observers of a deployment (`privacy.upload_observer`) on one round of a privacy run.

For round r of a run, from the model it broadcast (`attack_rounds`):

- the real uploads: the round's clients (`federated_data.sample_clients(seed, r, K, m)`) train on
  their samples of round r (`FederatedRadioMaps.client_samples`: every sample of their maps,
  reshuffled each local epoch, as the run's clients got them) with the clients' own local loop
  (`local_training.ClientTrainer`, the in-process clients' loop: equal to the TFF clients' uploads
  to float tolerance, not bitwise). The data may be another set of the same maps and transmitter
  positions (a shadowed reality, `data.reality`): the clients then train on what reality gave them;
- the observer's view of an upload: the defense's client step (`defense_registry.upload_views`:
  Clip Only's for central DP), its noise drawn from the observer's own seeded streams (the run's
  noise is a function of the update's bits, not recomputed; equal in law);
- the round's sum, what a secure-aggregation server holds: sum_k a_k v_k over the round's clients
  (a_k their examples under the weighted mean, 1 under central and distributed DP, whose aggregators
  are unweighted), with N(0, (z C)^2) on every coordinate of the sum of uploads clipped at C where
  the defense noises the aggregate (`central_dp`, and `ddp`, whose Skellam noise of the same
  variance is drawn as a Gaussian: at z C ~ 1 a coordinate and 2^20 quantization levels the two
  are indistinguishable for this purpose);
- the candidates: on each map of the round's clients, a twin transmitter (the run's data root's
  propagation model, `data.twin.position_gains`, cached on disk) at the centre of every `stride`-th
  outdoor cell, with its gradient at the broadcast model (`privacy.candidate_gradients`) and, for
  the baselines, its single-sample upload of S = `attack_steps` steps, and `calibration` off-grid
  calibration traces a map.

`RoundObserver.single_upload_cell` scores the observer of each client's upload and
`RoundObserver.sum_cell` the observer of the round's sum, each against the baselines (`ATTACKERS`).
`coordinates` > 0 keeps that many of the d coordinates (seeded), the observer's cost knob.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from tff_radiomap import seeds as seeds_lib
from tff_radiomap.data import radiomapseer, twin
from tff_radiomap.experiments import shared_models
from tff_radiomap.experiments.defense_registry import DEFENSES
from tff_radiomap.learning import federated_data
from tff_radiomap.models import phases
from tff_radiomap.privacy import matching_attack, set_scoring, upload_baselines, upload_observer
from tff_radiomap.privacy.matching_uploads import clip_uploads

# The observer and its baselines, in the order of the ladder's tables: the observer (its search, or
# the prior set where its own twin rounds show the search reads nothing: `ObserverSettings.fallback`),
# its first-order search alone, the constant guess, the prior set (`set_scoring.prior_sets`), today's
# matching attacker on the upload as if one sample's (`upload_baselines.single_sample_matching`) and
# the candidates of highest cosine (`upload_baselines.correlation_top`).
ATTACKERS = ("observer", "search", "constant", "prior", "matching", "correlation")


@dataclasses.dataclass(frozen=True)
class ObserverSettings:
    """The observer's candidates and search: grid `stride` in cells of the model's resolution,
    `coordinates` kept (0: all), the first `clients` of the round's clients attacked one by one (0:
    all), whether it is `told` the counts per map, `sweeps` of coordinate descent, `calibration`
    positions a map for the matching baseline, whether the single-sample `baselines` (matching,
    correlation) are computed (they trace S local steps per candidate), and the shortlist of the
    refinement with the true local training (`upload_observer.refine`; 0: none), made where every
    observed client's samples fit in one batch (its upload is then a function of its set alone), and
    the twin rounds of the fallback (0: none): the observer simulates that many rounds of the same
    clients with twin transmitters at random candidates (random batch order), searches them, and
    answers the prior set where its search did not beat the prior there."""

    stride: int = 2
    coordinates: int = 0
    clients: int = 0
    told: bool = True
    sweeps: int = 3
    calibration: int = 8
    baselines: bool = True
    refine: int = 8
    fallback: int = 1

    def __post_init__(self):
        if min(self.stride - 1, self.coordinates, self.clients, self.sweeps, self.calibration - 2, self.refine, self.fallback) < 0:
            raise ValueError(f"{self}: expected stride >= 1, coordinates, clients, sweeps, refine, fallback >= 0, calibration >= 2")


def client_maps(config, num_maps: int) -> list[np.ndarray]:
    """Each client's map positions (into the data set's map ids), as `FederatedRadioMaps.load` deals them."""
    split = radiomapseer.split_maps(num_maps, config.val_fraction, config.test_fraction, config.seed)
    return radiomapseer.partition_maps(split.train, config.num_clients, config.seed)


def outdoor_coords(buildings: np.ndarray, resolution: int, meters_per_pixel: float = 1.0) -> np.ndarray:
    """[P, 2] (x, y) in meters of the centres of a map's outdoor cells at `resolution`."""
    return (twin.grid_positions(buildings, resolution, 1)[:, ::-1].astype(np.float64) + 0.5) * meters_per_pixel


def observed_sum(uploads: np.ndarray, weights: np.ndarray, clip_norm: float | None, noise_std: float, rng: np.random.Generator) -> np.ndarray:
    """[d] what a secure-aggregation server holds: sum_k weights[k] clip(uploads[k]) (`clip_norm`
    None: as they are) plus N(0, noise_std^2) on every coordinate (central or distributed DP's z C)."""
    clipped = clip_uploads(np.asarray(uploads, np.float32), clip_norm)
    total = np.tensordot(np.asarray(weights, np.float64), clipped.astype(np.float64), axes=1)
    if noise_std > 0:
        total = total + rng.normal(0.0, noise_std, total.shape)
    return total.astype(np.float32)


class RoundObserver:
    """Round `round_num` of a run of `config` whose data set is `maps` (read at its resolution):
    the broadcast `weights` (with the defense `extras` of the round), the observer's `view` of an
    upload (a `ClientPerturbationFactory` or None) and its `settings`."""

    def __init__(self, config, maps: radiomapseer.RadioMapSeer, weights: phases.NetworkWeights, extras, round_num: int, view, settings: ObserverSettings):
        self.config, self.maps, self.round, self.view, self.extras, self.settings = config, maps, round_num, view, extras, settings
        self.phase = config.phase_for_round(round_num)
        mc = config.model_config()
        phases.restore_eager_keras()  # A TFF factory built before may have left Keras's graph classes in place.
        phases.set_phase_weights(shared_models.phase_model(mc, self.phase), weights, self.phase)
        one_step = DEFENSES[config.defense].protocol == "fedsgd"
        self.trainer = shared_models.client_trainer(mc, self.phase, config.client_optimizer, config.client_learning_rate, config.batch_size, one_step)
        self.gradients = shared_models.candidate_gradients(mc, self.phase)
        self.traces = shared_models.upload_traces(mc, self.phase, config.client_optimizer, config.client_learning_rate, config.attack_steps)
        self.observer_config = upload_observer.ObserverConfig(
            optimizer=config.client_optimizer, batch_size=config.batch_size, one_step=one_step, told=settings.told, sweeps=settings.sweeps
        )
        d = self.gradients.size
        rng = seeds_lib.generator(config.seed, seeds_lib.DEPLOYMENT_OBSERVER, round_num)
        keep = settings.coordinates
        self.coordinates = np.sort(rng.choice(d, keep, replace=False)) if 0 < keep < d else None
        self.parts = client_maps(config, len(maps.map_ids))
        self.clients = federated_data.sample_clients(config.seed, round_num, config.num_clients, config.clients_per_round)
        self._candidates = {}
        self.candidate_seconds = 0.0  # Twin, gradients and baseline traces of the candidates (shared by the cells).
        if view is not None and extras is not None and hasattr(view, "observe"):
            view.observe(extras)

    def _cut(self, flat: np.ndarray) -> np.ndarray:
        return flat if self.coordinates is None else flat[..., self.coordinates]

    def uploads(self, data: federated_data.FederatedRadioMaps) -> np.ndarray:
        """[K, d] the round's clients' real uploads (before the defense) on the samples of `data`."""
        samples = (data.client_samples(int(k), self.round, self.config.local_epochs) for k in self.clients)
        return np.stack([self.trainer.upload(s["x"], s["y"]) for s in samples])

    def truth(self, k: int) -> dict:
        """{map id: [32, 2]} the positions (m) of client k's transmitters (equal in every reality)."""
        a = self.maps.arrays(self.parts[k])
        return {int(m): a["coords_m"][a["map_id"] == m].astype(np.float64) for m in np.unique(a["map_id"])}

    def _privatize(self, uploads: np.ndarray, stream: int) -> np.ndarray:
        if self.view is None:
            return uploads
        noised, _ = self.traces.privatize(uploads[:, None], self.view, self.extras, seed=(self.config.seed, stream))
        return noised[:, 0]

    def _stream(self, column: int, index: int = 0) -> int:
        """The noise stream of the round's `column` (64 + i: the fallback's twin round i), `index` another draw in it."""
        return ((seeds_lib.DEPLOYMENT_OBSERVER * 10_000 + self.round) * 1000 + index) * 128 + column

    def candidates(self, p: int) -> dict:
        """The candidates of the map at position `p` (computed once a round)."""
        if p in self._candidates:
            return self._candidates[p]
        t0 = time.monotonic()
        cfg, m = self.config, int(self.maps.map_ids[p])
        buildings = twin.read_buildings(cfg.data_root, m)
        grid = twin.grid_positions(buildings, cfg.resolution, self.settings.stride)
        s = self.maps.samples_at(p, grid, twin.position_gains(cfg.data_root, m, grid))
        outdoor = outdoor_coords(buildings, cfg.resolution, self.maps.config.meters_per_pixel)
        out = dict(
            map=m, coords=s["coords_m"].astype(np.float64), gradients=self.gradients(s["x"], s["y"], self.coordinates), outdoor=outdoor, x=s["x"], y=s["y"]
        )
        out["constant"] = set_scoring.constant_guess(outdoor)
        if self.settings.baselines:
            clip = None if self.view is None else self.view.clip_norm
            clean = self.traces.clean(s["x"], s["y"])[:, -1:]
            out["uploads"] = self._cut(clip_uploads(clean, clip)[:, 0])
            out["sigma"] = self._sigmas(clean)
            rng = seeds_lib.generator(cfg.seed, seeds_lib.DEPLOYMENT_OBSERVER, m)
            where = twin.off_grid_positions(rng, buildings, cfg.resolution, self.settings.calibration)
            c = self.maps.samples_at(p, where, twin.position_gains(cfg.data_root, m, where))
            out["calibration"] = self._cut(self._privatize(self.traces.clean(c["x"], c["y"])[:, -1], self._stream(7, 1 + m)))
            out["calibration_coords"] = c["coords_m"].astype(np.float64)
        self._candidates[p] = out
        self.candidate_seconds += time.monotonic() - t0
        return out

    def _sigmas(self, clean: np.ndarray) -> np.ndarray:
        """[N, G] the defense's noise scales of the candidates' uploads [N, 1, d]."""
        if self.view is None:
            return np.zeros((len(clean), 1))
        fixed = self.view.fixed_sigmas()
        if fixed is not None:
            return np.broadcast_to(np.asarray(fixed, np.float64), (len(clean), len(fixed)))
        return self.traces.sigmas(clean, self.view, self.extras, seed=(self.config.seed, self._stream(6)))[:, 0]

    def noise_model(self) -> matching_attack.NoiseModel:
        """The view's noise model on the observer's coordinates (coordinate groups only)."""
        full = matching_attack.NoiseModel.of(self.view, self.traces.shapes)
        if full.basis is not None:
            raise ValueError(f"defense {self.config.defense!r}: a basis defense's view is not supported by the deployment observer")
        if self.coordinates is None:
            return full
        ids = full.group_of_coordinate[self.coordinates]
        return matching_attack.NoiseModel(sizes=np.bincount(ids, minlength=full.num_groups).astype(np.int64), group_of_coordinate=ids)

    def _client(self, positions, truth: dict, weight: float = 1.0) -> upload_observer.ClientCandidates:
        cands = [self.candidates(int(p)) for p in positions]
        counts = {m: len(v) for m, v in truth.items()} if self.settings.told else None
        return upload_observer.ClientCandidates(
            gradients=np.concatenate([c["gradients"] for c in cands]),
            coords=np.concatenate([c["coords"] for c in cands]),
            maps=np.concatenate([np.full(len(c["coords"]), c["map"]) for c in cands]),
            samples=sum(len(v) for v in truth.values()),
            counts=counts,
            weight=weight,
        )

    def _locate(self, y: np.ndarray, clients: list, positions: list) -> upload_observer.Located:
        """The observer's answer for `y` over `clients` (each holding the maps `positions[k]`),
        refined with the true local training where every client's samples fit in one batch."""
        located = upload_observer.locate(y, clients, self.observer_config)
        if not self.settings.refine or any(c.samples > self.config.batch_size for c in located.clients):
            return located
        samples = [[self.candidates(int(p)) for p in maps] for maps in positions]

        def simulate(k, atoms):
            x, y_ = (np.concatenate([c[key] for c in samples[k]])[atoms] for key in ("x", "y"))
            epochs = self.config.local_epochs  # One batch an epoch: the order does not matter.
            return self._cut(self.trainer.upload(np.tile(x, (epochs, 1, 1, 1)), np.tile(y_, (epochs, 1, 1, 1))))

        return upload_observer.refine(y, located, simulate, self.observer_config, shortlist=self.settings.refine)

    def _prior(self, positions, counts: dict) -> dict:
        """{map id: the prior set of `counts[map]` positions} of the maps at `positions`."""
        cands = [self.candidates(int(p)) for p in positions]
        return {c["map"]: set_scoring.prior_sets(c["outdoor"], counts.get(c["map"], 0), self.config.seed) for c in cands}

    def _scores(self, y: np.ndarray, answers: dict, positions, truth: dict) -> dict:
        """{attacker: SetScore} of the observer's `answers` ({name: {map: positions}}) and the baselines on `y`."""
        cands = [self.candidates(int(p)) for p in positions]
        constants = {c["map"]: c["constant"] for c in cands}
        out = {name: set_scoring.score_sets(found, truth, constants) for name, found in answers.items()}
        out["constant"] = set_scoring.score_sets({}, truth, constants)
        out["prior"] = set_scoring.score_sets(self._prior(positions, {m: len(v) for m, v in truth.items()}), truth, constants)
        if self.settings.baselines:
            noise, matched = self.noise_model(), {}
            for c in cands:
                mean = upload_baselines.single_sample_matching(y, c["uploads"], c["sigma"], c["coords"], c["calibration"], c["calibration_coords"], noise)
                matched[c["map"]] = np.repeat(mean[None], len(truth[c["map"]]), 0)
            out["matching"] = set_scoring.score_sets(matched, truth, constants)
            uploads, coords = np.concatenate([c["uploads"] for c in cands]), np.concatenate([c["coords"] for c in cands])
            maps = np.concatenate([np.full(len(c["coords"]), c["map"]) for c in cands])
            top = upload_baselines.correlation_top(y, uploads, coords, maps, {m: len(v) for m, v in truth.items()})
            out["correlation"] = set_scoring.score_sets(top, truth, constants)
        return out

    def _observe(self, uploads: np.ndarray, column: int, total: bool) -> np.ndarray:
        """The observer's view of the clients' `uploads` [K, d]: each privatized [K, d'] (noise stream
        `column`), or with `total` the round's sum [d'] (module docstring)."""
        if not total:
            return self._cut(self._privatize(uploads, self._stream(column)))
        cfg = self.config
        rng = seeds_lib.generator(cfg.seed, seeds_lib.DEPLOYMENT_OBSERVER, self.round, column)
        if DEFENSES[cfg.defense].aggregate_dp:  # Clipped clean uploads, noise z C on their (unweighted) sum.
            return self._cut(observed_sum(uploads, self._weights(), cfg.clip_norm, cfg.noise_multiplier * cfg.clip_norm, rng))
        return self._cut(observed_sum(self._privatize(uploads, self._stream(column)), self._weights(), None, 0.0, rng))

    def _weights(self) -> np.ndarray:
        """The clients' weights in the round's sum: their examples (the weighted mean, scaled to at
        most 1), or 1 under central and distributed DP (unweighted aggregators)."""
        if DEFENSES[self.config.defense].aggregate_dp:
            return np.ones(len(self.clients))
        examples = np.array([len(self.parts[int(k)]) for k in self.clients], np.float64)
        return examples / examples.max()

    def _answer(self, y: np.ndarray, ks: list, truths: list, weights, column: int, total: bool) -> dict:
        """{'search': its positions, 'observer': the search's or the prior set} for the observed `y`
        of clients `ks` (the fallback's twin rounds decide)."""
        clients = [self._client(self.parts[k], t, w) for k, t, w in zip(ks, truths, weights)]
        located = self._locate(y, clients, [self.parts[k] for k in ks])
        search = {m: v for p in located.positions for m, v in p.items()}
        counts = {m: len(v) for m, v in search.items()}
        prior = self._prior(np.concatenate([self.parts[k] for k in ks]), counts)
        if not self.settings.fallback:
            return {"observer": search, "search": search}
        gains = []
        for draw in range(self.settings.fallback):
            rng = seeds_lib.generator(self.config.seed, seeds_lib.DEPLOYMENT_OBSERVER, self.round, column, 100 + draw)
            twin_truths, samples = zip(*(self._twin_client(k, counts, rng) for k in ks))  # The counts it was told or chose.
            uploads = np.stack([self.trainer.upload(x, y_) for x, y_ in samples])
            observed = self._observe(uploads, 64 + draw, total)
            twin_y = observed if total else observed[0]
            twin_clients = [self._client(self.parts[k], t, w) for k, t, w in zip(ks, twin_truths, weights)]
            found = self._locate(twin_y, twin_clients, [self.parts[k] for k in ks])
            truth = {m: v for t in twin_truths for m, v in t.items()}
            constants = {c["map"]: c["constant"] for k in ks for c in (self.candidates(int(p)) for p in self.parts[k])}
            searched = set_scoring.score_sets({m: v for p in found.positions for m, v in p.items()}, truth, constants)
            prior_score = set_scoring.score_sets(
                self._prior(np.concatenate([self.parts[k] for k in ks]), {m: len(v) for m, v in truth.items()}), truth, constants
            )
            gains.append(prior_score.rmse_m**2 - searched.rmse_m**2)
        return {"observer": search if np.mean(gains) > 0 else prior, "search": search}

    def _twin_client(self, k: int, counts: dict, rng: np.random.Generator):
        """({map: positions}, (x, y) in a training order) of client k holding twin transmitters at
        `counts[map]` random candidates of each of its maps, its local epochs in random orders."""
        truth, xs, ys = {}, [], []
        for p in self.parts[k]:
            c = self.candidates(int(p))
            rows = rng.choice(len(c["coords"]), min(counts.get(c["map"], 0), len(c["coords"])), replace=False)
            truth[c["map"]] = c["coords"][rows]
            xs.append(c["x"][rows])
            ys.append(c["y"][rows])
        x, y = np.concatenate(xs), np.concatenate(ys)
        order = np.concatenate([rng.permutation(len(x)) for _ in range(self.config.local_epochs)])
        return truth, (x[order], y[order])

    def single_upload_cell(self, uploads: np.ndarray, column: int) -> tuple[dict, float]:
        """({attacker: SetScore} pooled over the attacked clients, seconds) of the observer of each
        client's upload (`uploads` [K, d] from `uploads`), its view privatized (noise stream `column`)."""
        t0 = time.monotonic()
        observed = self._observe(uploads, column, total=False)
        attacked = range(len(self.clients)) if not self.settings.clients else range(min(self.settings.clients, len(self.clients)))
        per_client = []
        for i in attacked:
            k = int(self.clients[i])
            truth = self.truth(k)
            answers = self._answer(observed[i], [k], [truth], [1.0], column, total=False)
            per_client.append(self._scores(observed[i], answers, self.parts[k], truth))
        pooled = {a: set_scoring.pooled([s[a] for s in per_client]) for a in per_client[0]}
        return pooled, time.monotonic() - t0

    def sum_cell(self, uploads: np.ndarray, column: int) -> tuple[dict, float]:
        """({attacker: SetScore} over every transmitter of the round, seconds) of the observer of the
        round's sum (`observed_sum` of the clients' views; module docstring)."""
        t0 = time.monotonic()
        y = self._observe(uploads, column, total=True)
        ks = [int(k) for k in self.clients]
        truths = [self.truth(k) for k in ks]
        answers = self._answer(y, ks, truths, self._weights(), column, total=True)
        truth = {m: v for t in truths for m, v in t.items()}
        return self._scores(y, answers, np.concatenate([self.parts[k] for k in ks]), truth), time.monotonic() - t0
