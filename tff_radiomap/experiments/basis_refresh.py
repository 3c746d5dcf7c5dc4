"""The twin's leakage basis of the defenses on the leakage partition (Subspace Noise, Aligned
Noise, Adaptive with `adaptive_partition='leakage'`), kept at the current global model between
rounds: which runs read it (`uses_basis`, `client_scoped`), its partition of the upload
(`subspace_groups`), who owns which maps (`map_owners`, `client_rank`), where its files live
(`basis_path`, `owner_basis_dir`) and the refresher (`BasisRefresher`).
"""

from __future__ import annotations

import collections
import os
import time

import numpy as np

from tff_radiomap.aggregators import aligned_noise, client_subspace_noise, subspace_noise
from tff_radiomap.data import radiomapseer, twin
from tff_radiomap.experiments import shared_models
from tff_radiomap.models import phases
from tff_radiomap.models.phases import Phase
from tff_radiomap.privacy import aligned_allocation, groups, leakage, leakage_basis
from tff_radiomap.privacy import budget as budget_lib

CLIENT_SCOPED = ("subspace_client", "aligned")  # Defenses whose clients each use their own basis.


def uses_basis(config) -> bool:
    """Whether the run's defense reads the twin's leakage basis (`BasisRefresher`): Subspace Noise
    (either scope), Aligned Noise, and Adaptive with `adaptive_partition='leakage'` (its groups are
    the basis blocks and the residual; with 'paper', the paper's mask groups)."""
    return config.defense in ("subspace",) + CLIENT_SCOPED or (config.defense == "adaptive" and config.adaptive_partition == "leakage")


def client_scoped(config) -> bool:
    """Whether each client of the run uses its own basis (`aggregators.ClientSubspaceNoiseFactory`)."""
    return config.defense in CLIENT_SCOPED or (config.defense == "subspace" and config.basis_scope == "client")


def basis_path(basis_dir: str, phase: Phase) -> str:
    return os.path.join(basis_dir, f"phase{int(phase)}.bin")


def owner_basis_dir(basis_dir: str, phase: Phase) -> str:
    """The folder of the owners' bases of `phase` (client scope)."""
    return os.path.join(basis_dir, f"phase{int(phase)}")


def map_owners(config) -> dict[int, int]:
    """{map id: owner} of the run: client k (0..N-1, the maps `federated_data.FederatedRadioMaps.load`
    deals it) owns its training maps; each validation and test map, which no client holds, is an
    owner of its own after them (N, N+1, ..., in map order), so that an observer can privatize a
    trace on it as its holder would."""
    ids = radiomapseer.list_map_ids(config.data_root)
    split = radiomapseer.split_maps(len(ids), config.val_fraction, config.test_fraction, config.seed)
    parts = radiomapseer.partition_maps(split.train, config.num_clients, config.seed)
    owners = {int(ids[p]): k for k, part in enumerate(parts) for p in part}
    unheld = sorted(set(range(len(ids))) - {int(p) for p in split.train})
    owners.update({int(ids[p]): len(parts) + j for j, p in enumerate(unheld)})
    return owners


def client_rank(config) -> int:
    """K of a client's basis: basis_k_per_map x the most maps a client holds (a client with fewer
    maps takes more directions from each: `leakage_basis.owner_basis`)."""
    counts = collections.Counter(map_owners(config).values())
    return config.basis_k_per_map * max(counts[k] for k in range(config.num_clients))


def subspace_groups(config, phase: Phase, scope: str | None = None, blocks: int | None = None) -> groups.SubspaceGroups:
    """The leakage partition of `phase`'s upload: K directions in `blocks` blocks (default:
    `basis_blocks`; Aligned Noise: K, a direction each), and the residual; the basis itself comes
    at run time. K: maps * k_per_map with the federation's basis, `client_rank` with a client's
    (`scope`, default the run's)."""
    shapes = phases.uploaded_shapes(config.model_config(), phase)
    scope = scope or ("client" if client_scoped(config) else "federation")
    rank = client_rank(config) if scope == "client" else _num_maps(config.data_root) * config.basis_k_per_map
    blocks = blocks or (rank if config.defense == "aligned" else config.basis_blocks)
    return groups.SubspaceGroups(shapes, leakage_basis.block_sizes(rank, blocks))


def _num_maps(root: str) -> int:
    folder = os.path.join(root, "png", "buildings_complete")
    if not os.path.isdir(folder):
        raise radiomapseer.DataLayoutError(f"data root {root} lacks png/buildings_complete/")
    return sum(1 for f in os.listdir(folder) if f.endswith(".png") and f[:-4].isdigit())


def due_in_phase(config, round_num: int, every: int) -> bool:
    """True at the first round of round `round_num`'s phase and every `every` rounds of it."""
    phase_of = config.phase_for_round
    start = min(r for r in range(1, round_num + 1) if phase_of(r) == phase_of(round_num) and (r == 1 or phase_of(r - 1) != phase_of(r)))
    return (round_num - start) % every == 0


class BasisRefresher:
    """Keeps the subspace defenses' leakage bases at the current global model.

    At the first round of each phase and every `basis_every` rounds of it, before the round (so
    that its attack and its clients see the same defense), the uploads of the phase's model on the
    defender's twin samples (every public map, `basis_positions` positions each, none a sample of
    the data set) give the bases, written to the run's basis folder, read there by the clients
    inside the TFF computation and set on the observer's factories. On resume the bases of the
    last refresh are read back from their files.

    Federation scope: one V for every client (`leakage_basis.leakage_basis`, `basis_path`). Client
    scope (`client_scoped`): one V_o per owner (`map_owners`: every client, and every map no client
    holds) from its own maps' uploads (`leakage_basis.owner_basis`, `owner_basis_dir`); for Aligned
    Noise also each owner's sigmas, the closed-form allocation (`privacy.aligned_allocation`) of
    the variance of its uploads along each direction and the loss increase per unit noise energy
    there, measured on its own twin samples (`leakage.direction_costs`).
    """

    COST_ENERGY = 1.0  # E of the loss-per-energy measurements, squared weight units (the audit's scale).
    RESIDUAL_DRAWS = 2  # Antithetic pairs for the residual's loss per energy.

    def __init__(self, config, basis_dir: str, factories: dict):
        self.config, self.basis_dir, self.factories = config, basis_dir, factories
        root = config.twin_root or twin.ensure_twin(config.data_root, config.basis_positions, seed=0, workers=2)
        data = radiomapseer.RadioMapSeer(radiomapseer.LoaderConfig(root=root, resolution=config.resolution))
        if len(data.map_ids) != _num_maps(config.data_root) or data.num_transmitters < config.basis_positions:
            raise radiomapseer.DataLayoutError(
                f"twin {root} has {len(data.map_ids)} maps x {data.num_transmitters} positions; expected the "
                f"{_num_maps(config.data_root)} maps of {config.data_root} x at least basis_positions={config.basis_positions}"
            )
        a = data.arrays(np.arange(len(data.map_ids)))
        keep = a["tx"] < config.basis_positions
        self.x, self.y, self.map_of = a["x"][keep], a["y"][keep], a["map_id"][keep]
        self.scoped = client_scoped(config)
        if self.scoped:
            owners = map_owners(config)
            self.owner_of_row = np.array([owners[int(m)] for m in self.map_of])
            self.num_owners = max(owners.values()) + 1
            self.rank = client_rank(config)
            fewest = min(np.sum(self.owner_of_row == k) // config.basis_positions for k in range(config.num_clients))
            if -(-self.rank // fewest) >= config.basis_positions:
                raise ValueError(
                    f"basis_positions={config.basis_positions}: a client with {fewest} map(s) takes {-(-self.rank // fewest)} directions "
                    f"from each, more than its twin positions give (client rank {self.rank} = basis_k_per_map x the most maps a client holds)"
                )
        self._loaded = set()
        self._losses = {}

    def due(self, round_num: int) -> bool:
        return due_in_phase(self.config, round_num, self.config.basis_every)

    def before_round(self, trainer, state, round_num: int) -> dict:
        """Refreshes the bases if due (else makes sure the observer has the current ones); the
        round's measurements `basis_refreshed` and `basis_seconds`."""
        phase = self.config.phase_for_round(round_num)
        if not self.due(round_num):
            if phase not in self._loaded:  # Resumed between refreshes: the files hold the last one.
                self._set(phase, self._read(phase))
            return {"basis_refreshed": 0, "basis_seconds": 0.0}
        t0 = time.monotonic()
        refresh = self.compute(phase, trainer.network_weights(state))
        self._write(phase, refresh)
        self._set(phase, refresh)
        return {"basis_refreshed": 1, "basis_seconds": time.monotonic() - t0}

    def install(self, phase: Phase, weights) -> None:
        """Sets the observer's factory of `phase` to the bases of the model holding `weights`
        (re-scoring a saved round; nothing is written)."""
        self._set(phase, self.compute(phase, weights))

    def placeholder(self, phases) -> None:
        """Writes stand-in bases (unit vectors; Aligned: Uniform's sigmas) for each phase in
        `phases` that has none yet, so that the warm-up run of a later phase's computation
        (`PhasedProcess.warm_up`) finds its files; the phase's first round refreshes them before
        any of its rounds runs."""
        for phase in phases:
            g = subspace_groups(self.config, phase)
            if not self.scoped:
                if not os.path.exists(basis_path(self.basis_dir, phase)):
                    os.makedirs(self.basis_dir, exist_ok=True)
                    subspace_noise.write_basis(basis_path(self.basis_dir, phase), np.eye(g.num_coordinates, g.rank, dtype=np.float32))
                continue
            folder = owner_basis_dir(self.basis_dir, phase)
            if os.path.isdir(folder):
                continue
            eye = np.eye(g.num_coordinates, g.rank, dtype=np.float32)
            uniform = np.full(g.num_groups, self.config.clip_norm * self.config.noise_multiplier, np.float32)
            self._write(
                phase, {"bases": {o: eye for o in range(self.num_owners)}, "sigmas": {o: uniform for o in range(self.num_owners)} if self._aligned else None}
            )

    @property
    def _aligned(self) -> bool:
        return self.config.defense == "aligned"

    def compute(self, phase: Phase, weights):
        """For the phase's model holding `weights`: V [d, K] (federation scope), or
        {"bases": {owner: V_o}, "sigmas": {owner: sigma_o [K + 1]} or None} (client scope)."""
        cfg = self.config
        collector = shared_models.upload_collector(cfg.model_config(), phase, cfg.client_optimizer, cfg.client_learning_rate)
        phases.set_phase_weights(collector.model, weights, phase)
        uploads = collector.collect(self.x, self.y)
        if not np.all(np.isfinite(uploads)):
            raise FloatingPointError("the twin's uploads are not finite: the global model diverged")
        if not self.scoped:
            basis, _ = leakage_basis.leakage_basis(uploads, self.map_of, cfg.basis_k_per_map)
            return basis
        bases, sigmas = {}, {} if self._aligned else None
        for o in range(self.num_owners):
            rows = self.owner_of_row == o
            # A map no client holds: its own basis_k_per_map directions, as in a client holding the most maps.
            per_map = cfg.basis_k_per_map if o >= cfg.num_clients else None
            basis, variance, residual = leakage_basis.owner_basis(uploads[rows], self.map_of[rows], self.rank, per_map, seed=o)
            bases[o] = basis
            if self._aligned:
                sigmas[o] = self._aligned_sigmas(phase, weights, basis, variance, residual, rows, seed=o)
        return {"bases": bases, "sigmas": sigmas}

    def _aligned_sigmas(self, phase, weights, basis, variance, residual, rows, seed: int) -> np.ndarray:
        """An owner's sigmas [K + 1]: the closed-form allocation of B over its K directions and
        the residual."""
        cfg = self.config
        g = subspace_groups(cfg, phase)
        budget = budget_lib.total_budget(g.num_coordinates, cfg.clip_norm, cfg.noise_multiplier)
        if budget == 0:
            return np.zeros(g.num_groups)
        model = shared_models.phase_model(cfg.model_config(), phase)
        phases.set_phase_weights(model, weights, phase)
        if phase not in self._losses:
            self._losses[phase] = leakage.WeightNoiseLoss(model, self.x[rows], self.y[rows])
        loss = self._losses[phase]
        loss.reset(self.x[rows], self.y[rows])
        cost = leakage.direction_costs(loss, basis, self.COST_ENERGY, self.RESIDUAL_DRAWS, np.random.default_rng([cfg.seed, seed]))
        lam = np.append(variance, residual)
        return np.sqrt(aligned_allocation.aligned_variances(lam, cost, g.sizes, budget, cfg.aligned_tradeoff))

    def _write(self, phase: Phase, refresh) -> None:
        if not self.scoped:
            os.makedirs(self.basis_dir, exist_ok=True)
            subspace_noise.write_basis(basis_path(self.basis_dir, phase), refresh)
            return
        folder = owner_basis_dir(self.basis_dir, phase)
        os.makedirs(folder, exist_ok=True)
        for o, basis in refresh["bases"].items():
            subspace_noise.write_basis(client_subspace_noise.owner_basis_path(folder, o), basis)
        for o, sigma in (refresh["sigmas"] or {}).items():
            aligned_noise.write_sigmas(aligned_noise.owner_sigma_path(folder, o), sigma)

    def _basis_shape(self, phase: Phase) -> tuple[int, int]:
        """(d, K) of a basis file of `phase` (an owner's K under client scope)."""
        g = subspace_groups(self.config, phase)
        return g.num_coordinates, g.rank

    def _read(self, phase: Phase):
        """The last refresh of `phase`, from its files."""
        missing = "the subspace basis of the last refresh is missing; the run cannot resume exactly (start again with --overwrite)"
        if not self.scoped:
            path = basis_path(self.basis_dir, phase)
            if not os.path.exists(path):
                raise FileNotFoundError(f"{path}: {missing}")
            return subspace_noise.read_basis(path, self._basis_shape(phase)).numpy()
        folder = owner_basis_dir(self.basis_dir, phase)
        paths = [client_subspace_noise.owner_basis_path(folder, o) for o in range(self.num_owners)]
        paths += [aligned_noise.owner_sigma_path(folder, o) for o in range(self.num_owners)] if self._aligned else []
        absent = [p for p in paths if not os.path.exists(p)]
        if absent:
            raise FileNotFoundError(f"{absent[0]}: {missing}")
        bases = {o: subspace_noise.read_basis(paths[o], self._basis_shape(phase)).numpy() for o in range(self.num_owners)}
        sigmas = {o: aligned_noise.read_sigmas(paths[self.num_owners + o]).numpy() for o in range(self.num_owners)} if self._aligned else None
        return {"bases": bases, "sigmas": sigmas}

    def _set(self, phase: Phase, refresh) -> None:
        factory = self.factories.get(phase)
        if factory is not None:
            if not self.scoped:
                factory.set_basis(refresh)
            else:
                if refresh["sigmas"] is not None:
                    factory.set_owner_sigmas(refresh["sigmas"])
                factory.set_owner_bases(refresh["bases"])
        self._loaded.add(phase)
