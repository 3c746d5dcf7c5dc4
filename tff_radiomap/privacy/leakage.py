"""Where does my model leak? An audit of one model state, group by group (paper 000, Eq. (11)).

For a global model (the one broadcast in some round) and a phase, the observer of Section III sees a
client's signed first upload u [d] (the first part of the fingerprint, Eq. (7)) for one sample.
Given a partition of the upload into groups g, with projectors P_g summing to the identity (binary
masks M_g, or the subspace groups of a leakage basis V and its orthogonal complement), the audit
measures per group:

  (a) attack_rmse_m, ratio: the ridge attack (`ridge_attacker.LocalizationAttacker`) fitted on the group's
      part of the upload alone (a mask group: its coordinates; a subspace block V_g: the
      coefficients V_g^T u; the complement: (I - V V^T) u) and its ratio to the constant guess,
      with disjoint training and held-out samples of the data set (`attack.split_traces`);
  (b) variance_share: sum over the group's coordinates (directions) of the between-sample variance
      of u, over the total: what an observer reads;
  (c) squared_mean_share: ||P_g mean(u)||^2 / ||mean(u)||^2: what averaging over clients keeps;
  (d) loss_per_energy: (validation MSE with noise n in the group added to the model's weights,
      minus the clean MSE) / E, n ~ N(0, (E / d_g) I) on the group (E = E[||n||^2]), averaged over
      the energies and draws. Each draw is evaluated at +n and -n and the two averaged, which
      cancels the first-order term g^T n (its spread at small E is far larger than the
      second-order mean 0.5 E tr(P_g H P_g) / d_g that is measured).

and for the whole upload (e) the spectrum: the attack after projecting out the top-k columns of
the leakage basis V (`leakage_basis.leakage_basis`, estimated on the defender's twin: the same
maps at transmitter positions of its own, never a sample the attacker is scored on), and the share
of the held-out uploads' within-map variance that span(V) captures (`captured_share`).

Shares (b), (c) sum to 1 over a partition. The attack numbers are the plain attacker's; an
attacker aware of a defense's basis is scored elsewhere (`probes/subspace_aware_attacker.py`).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from tff_radiomap.models import phases, radiounet
from tff_radiomap.models.phases import Phase
from tff_radiomap.privacy import attack, leakage_basis, ridge_attacker
from tff_radiomap.privacy import groups as groups_lib

PARTITIONS = ("paper", "layers", "leakage")
ALL = -1  # In `AuditConfig.ks`: every column of the basis.


# ---------------------------------------------------------------------------------------------
# Groups as projectors of the flattened upload (numpy).
@dataclasses.dataclass(frozen=True)
class GroupView:
    """One group of a partition, as the projector P_g of the flattened upload (length d).

    kind 'mask': P_g keeps the coordinates `index`; 'span': P_g = B B^T with `basis` B [d, d_g]
    orthonormal; 'complement': P_g = I - V V^T with `basis` V [d, K].
    """

    name: str
    kind: str
    size: int
    index: np.ndarray | None = dataclasses.field(default=None, compare=False)
    basis: np.ndarray | None = dataclasses.field(default=None, compare=False)

    def features(self, u: np.ndarray) -> np.ndarray:
        """What the observer reads from the group: [N, d_g] coordinates or coefficients B^T u;
        for the complement the projected upload (I - V V^T) u [N, d]."""
        if self.kind == "mask":
            return u[:, self.index]
        if self.kind == "span":
            return u @ self.basis
        return u - (u @ self.basis) @ self.basis.T

    def energy(self, u: np.ndarray) -> np.ndarray:
        """[N] ||P_g u_i||^2 of rows u [N, d] (float64)."""
        if self.kind == "mask":
            return np.sum(np.square(u[:, self.index], dtype=np.float64), axis=1)
        inside = np.sum(np.square((u @ self.basis).astype(np.float64)), axis=1)
        return inside if self.kind == "span" else np.sum(np.square(u, dtype=np.float64), axis=1) - inside

    def noise(self, rng: np.random.Generator, energy: float, d: int) -> np.ndarray:
        """[d] Gaussian noise confined to the group with E||n||^2 = `energy` (sigma^2 = E / d_g)."""
        sigma = np.sqrt(energy / self.size)
        if self.kind == "mask":
            n = np.zeros(d)
            n[self.index] = rng.normal(0.0, sigma, self.size)
            return n
        if self.kind == "span":
            return self.basis.astype(np.float64) @ rng.normal(0.0, sigma, self.size)
        z = rng.normal(0.0, sigma, d)
        v = self.basis.astype(np.float64)
        return z - v @ (v.T @ z)


def views_of(groups) -> list[GroupView]:
    """The non-empty groups of a `ParameterGroups` (masks) or a `SubspaceGroups` with its basis."""
    if isinstance(groups, groups_lib.SubspaceGroups):
        if groups.basis is None:
            raise ValueError("SubspaceGroups without a basis: pass groups.with_basis(V)")
        ends = np.cumsum((0,) + tuple(groups.block_sizes))
        views = [GroupView(n, "span", int(b - a), basis=groups.basis[:, a:b]) for n, a, b in zip(groups.names, ends[:-1], ends[1:])]
        return views + [GroupView(groups.names[-1], "complement", int(groups.sizes[-1]), basis=groups.basis)]
    ids = np.concatenate([a.ravel() for a in groups.ids])
    views = [GroupView(n, "mask", int(np.sum(ids == g)), index=np.flatnonzero(ids == g)) for g, n in enumerate(groups.names)]
    return [v for v in views if v.size > 0]


def variance_shares(uploads: np.ndarray, views: list[GroupView]) -> np.ndarray:
    """(b) per group: sum of the between-sample variance of u along its coordinates / directions,
    over the total variance of u [N, d]."""
    centred = uploads - uploads.mean(0, dtype=np.float64).astype(uploads.dtype)
    total = float(np.sum(np.square(centred, dtype=np.float64)))
    return np.array([float(np.sum(v.energy(centred))) / total for v in views])


def squared_mean_shares(uploads: np.ndarray, views: list[GroupView]) -> np.ndarray:
    """(c) per group: ||P_g mean(u)||^2 / ||mean(u)||^2."""
    mean = uploads.mean(0, dtype=np.float64).astype(uploads.dtype)[None]
    total = float(np.sum(np.square(mean, dtype=np.float64)))
    return np.array([float(v.energy(mean)[0]) / total for v in views])


def attack_features(f_train, c_train, f_test, c_test, alphas=attack.AttackConfig.ridge_alphas, seed: int = 0) -> attack.AttackResult:
    """(a) the ridge attack from features [N, F] to coordinates [N, 2] m, scored on held-out ones."""
    c_train, c_test = np.asarray(c_train, np.float64), np.asarray(c_test, np.float64)
    attacker = ridge_attacker.LocalizationAttacker(alphas, seed=seed).fit(f_train, c_train)
    rmse = lambda p: float(np.sqrt(np.mean(np.sum((p - c_test) ** 2, axis=1))))  # noqa: E731
    return attack.AttackResult(rmse(attacker.predict(f_test)), rmse(c_train.mean(0)[None]), len(f_train), len(f_test), attacker.alpha)


def spectrum_ks(ks, rank: int) -> list[int]:
    """The grid of k (ALL: `rank`), each clipped to `rank`, sorted, without repeats."""
    return sorted({rank if k == ALL else min(int(k), rank) for k in ks})


def spectrum(
    u_train, c_train, u_test, c_test, basis: np.ndarray, ks, alphas=attack.AttackConfig.ridge_alphas, seed: int = 0
) -> list[tuple[int, attack.AttackResult]]:
    """(e) [(k, attack on u - V_k V_k^T u)] for k in `ks` (see `spectrum_ks`), V_k the first k columns."""
    out = []
    for k in spectrum_ks(ks, basis.shape[1]):
        v = basis[:, :k]
        project = (lambda u: u - (u @ v) @ v.T) if k else (lambda u: u)  # noqa: E731
        out.append((k, attack_features(project(u_train), c_train, project(u_test), c_test, alphas, seed)))
    return out


def loss_per_energy(loss, view: GroupView, d: int, energies, draws: int, rng: np.random.Generator) -> float:
    """(d) mean over energies E and draws of ((loss(n) + loss(-n)) / 2 - loss(0)) / E, n the
    group's noise at energy E; `loss(delta)` is the loss with the flat weight perturbation delta [d]
    (None: unperturbed)."""
    clean = loss(None)
    values = []
    for energy in energies:
        for _ in range(draws):
            n = view.noise(rng, energy, d)
            values.append((0.5 * (loss(n) + loss(-n)) - clean) / energy)
    return float(np.mean(values))


def direction_costs(loss, basis: np.ndarray, energy: float, residual_draws: int, rng: np.random.Generator) -> np.ndarray:
    """[K + 1] (d) along each column v of `basis` [d, K], then on its residual: the loss increase per
    unit noise energy, clamped at 0. A column's is measured at n = +-sqrt(E) v, exact to second
    order (0.5 v^T H v); the residual's as `loss_per_energy` (random directions, `residual_draws`
    antithetic pairs at energy E)."""
    clean = loss(None)
    costs = []
    for i in range(basis.shape[1]):
        n = np.sqrt(energy) * basis[:, i].astype(np.float64)
        costs.append((0.5 * (loss(n) + loss(-n)) - clean) / energy)
    residual = GroupView("residual", "complement", basis.shape[0] - basis.shape[1], basis=basis)
    costs.append(loss_per_energy(loss, residual, basis.shape[0], (energy,), residual_draws, rng))
    return np.maximum(np.asarray(costs, np.float64), 0.0)


class WeightNoiseLoss:
    """Validation MSE (Eq. (3)) of `model` (a phase model holding the audited weights) with a flat
    perturbation [d] added to its trainable weights; the weights are restored after each call."""

    def __init__(self, model: tf.keras.Model, x: np.ndarray, y: np.ndarray, batch_size: int = 128):
        self._variables = model.trainable_variables
        self._batch_size = batch_size
        self._squared = tf.function(lambda x, y: tf.reduce_sum(tf.reduce_mean(tf.math.squared_difference(model(x, training=False), y), axis=[1, 2, 3])))
        self.reset(x, y)

    def reset(self, x: np.ndarray, y: np.ndarray) -> None:
        """Measures on samples x, y from now on, about the model's weights as they are now (one
        traced function serves every reset)."""
        self._start = [v.numpy() for v in self._variables]
        self._data = tf.data.Dataset.from_tensor_slices((x.astype(np.float32), y.astype(np.float32))).batch(self._batch_size).cache()
        self._count = len(x)
        self._clean = None

    def __call__(self, delta: np.ndarray | None) -> float:
        if delta is None:
            if self._clean is None:
                self._clean = self._mse()
            return self._clean
        offsets = np.cumsum([0] + [w.size for w in self._start])
        for v, w, a, b in zip(self._variables, self._start, offsets[:-1], offsets[1:]):
            v.assign(w + delta[a:b].reshape(w.shape).astype(w.dtype))
        try:
            return self._mse()
        finally:
            for v, w in zip(self._variables, self._start):
                v.assign(w)

    def _mse(self) -> float:
        return float(sum(float(self._squared(x, y)) for x, y in self._data)) / self._count


# ---------------------------------------------------------------------------------------------
# The audited model state.
@dataclasses.dataclass(frozen=True)
class ModelState:
    """A global model and what its clients train with; `source` says where it came from."""

    model_config: radiounet.RadioUNetConfig
    weights: phases.NetworkWeights = dataclasses.field(compare=False, repr=False)
    source: str
    client_optimizer: str = "adam"
    client_learning_rate: float = 1e-3
    split_seed: int = 0  # The map split whose validation maps (d) is measured on.
    val_fraction: float = 0.15
    test_fraction: float = 0.15


def initial_state(seed: int, resolution: int = 64, width: float = 0.25, stage2_output: str = "linear") -> ModelState:
    """The initial weights of `seed`: the model broadcast in round 1 of a run with that seed
    (`stage2_output` as `privacy_radiomap.ExperimentConfig`'s default)."""
    config = radiounet.RadioUNetConfig(resolution=resolution, width=width, stage2_output=stage2_output)
    return ModelState(config, phases.initial_weights(config, seed), f"initial weights of seed {seed} (round 1)", split_seed=seed)


@dataclasses.dataclass(frozen=True)
class AuditConfig:
    partitions: tuple[str, ...] = PARTITIONS
    train_traces: int = 1280
    test_traces: int = 256
    k_per_map: int = 8  # Leakage directions per twin map (basis rank K = maps * k_per_map).
    blocks: int = 4  # Subspace groups of the 'leakage' partition (consecutive columns of V).
    ks: tuple[int, ...] = (0, 25, 50, 100, 200, 400, ALL)
    energies: tuple[float, ...] = (0.1, 1.0)  # E of (d), in squared weight units (||w||^2 is 240 at round 1 of the CPU default).
    draws: int = 2  # Antithetic pairs per energy.
    val_samples: int = 256
    ridge_alphas: tuple[float, ...] = attack.AttackConfig.ridge_alphas
    seed: int = 0

    def __post_init__(self):
        checks = [
            (bool(self.partitions) and set(self.partitions) <= set(PARTITIONS), "partitions", f"a non-empty subset of {PARTITIONS}"),
            (self.train_traces >= 10, "train_traces", "an integer >= 10"),
            (self.test_traces >= 1, "test_traces", "an integer >= 1"),
            (self.k_per_map >= 1, "k_per_map", "an integer >= 1"),
            (self.blocks >= 1, "blocks", "an integer >= 1"),
            (bool(self.ks) and all(k == ALL or k >= 0 for k in self.ks), "ks", "non-negative integers or 'all'"),
            (bool(self.energies) and all(np.isfinite(e) and e > 0 for e in self.energies), "energies", "positive numbers"),
            (self.draws >= 1, "draws", "an integer >= 1"),
            (self.val_samples >= 1, "val_samples", "an integer >= 1"),
        ]
        for ok, name, expected in checks:
            if not ok:
                raise ValueError(f"{name}={getattr(self, name)!r}: expected {expected}")


@dataclasses.dataclass(frozen=True)
class GroupRow:
    partition: str
    group: str
    size: int
    attack_rmse_m: float
    ratio: float
    variance_share: float
    squared_mean_share: float
    loss_per_energy: float


@dataclasses.dataclass(frozen=True)
class AuditResult:
    groups: list[GroupRow]
    spectrum: list[tuple[int, attack.AttackResult]]
    summary: dict  # State, phase, d, basis rank, captured share, clean loss, attack on the whole upload.


class DataTooSmallError(ValueError):
    """The data set holds fewer samples than the attack's training and held-out traces."""


def partition_views(name: str, state: ModelState, phase: Phase, model: tf.keras.Model, basis: np.ndarray, blocks: int) -> list[GroupView]:
    """The groups of partition `name`: 'paper' (`radiounet_groups`), 'layers' (`layer_groups`) or
    'leakage' (`SubspaceGroups` of `blocks` blocks of the twin basis, then the residual)."""
    if name == "paper":
        return views_of(groups_lib.radiounet_groups(state.model_config, phase))
    if name == "layers":
        return views_of(groups_lib.layer_groups(model.trainable_variables))
    shapes = tuple(tuple(v.shape) for v in model.trainable_variables)
    sizes = leakage_basis.block_sizes(basis.shape[1], min(blocks, basis.shape[1]))
    return views_of(groups_lib.SubspaceGroups(shapes, sizes, basis=basis))


def audit(state: ModelState, phase: Phase, data, twin, config: AuditConfig = AuditConfig(), log=print, *, optimizer, local_updates) -> AuditResult:
    """Runs (a)-(e) on `state` in `phase`. `data`, `twin`: `radiomapseer.RadioMapSeer` of the data
    set (the attacker's pool and the validation maps) and of its twin (the basis). `optimizer`:
    the client optimizer of `state` (its `client_optimizer` at `client_learning_rate`);
    `local_updates(model, optimizer, x, y, steps)`: the clients' local steps
    (`learning.local_training.local_updates`)."""
    from tff_radiomap.data import radiomapseer

    model = phases.build_phase_model(state.model_config, phase)
    phases.set_phase_weights(model, state.weights, phase)
    collector = leakage_basis.UploadCollector(model, optimizer, local_updates)

    pool = data.arrays(np.arange(len(data.map_ids)))
    try:
        train, test = attack.split_traces(
            len(pool["x"]), attack.AttackConfig(train_traces=config.train_traces, test_traces=config.test_traces, seed=config.seed)
        )
    except ValueError as exc:
        raise DataTooSmallError(
            f"train_traces + test_traces = {config.train_traces + config.test_traces}: the data set holds {len(pool['x'])} samples"
        ) from exc
    u_train, u_test = collector.collect(pool["x"][train], pool["y"][train]), collector.collect(pool["x"][test], pool["y"][test])
    c_train, c_test = pool["coords_m"][train], pool["coords_m"][test]
    if not (np.all(np.isfinite(u_train)) and np.all(np.isfinite(u_test))):
        raise FloatingPointError("uploads are not finite: the model's local step diverged")
    twin_pool = twin.arrays(np.arange(len(twin.map_ids)))
    basis, _ = leakage_basis.leakage_basis(collector.collect(twin_pool["x"], twin_pool["y"]), twin_pool["map_id"], config.k_per_map)
    d = u_train.shape[1]
    log(f"uploads: {len(u_train)} train / {len(u_test)} held-out, d = {d}; twin basis rank {basis.shape[1]} from {len(twin_pool['x'])} twin uploads")

    split = radiomapseer.split_maps(len(data.map_ids), state.val_fraction, state.test_fraction, state.split_seed)
    val = data.arrays(split.val)
    pick = np.sort(np.random.default_rng(config.seed).permutation(len(val["x"]))[: config.val_samples])
    loss = WeightNoiseLoss(model, val["x"][pick], val["y"][pick])

    uploads = np.concatenate([u_train, u_test])
    rows = []
    for p_index, name in enumerate(config.partitions):
        views = partition_views(name, state, phase, model, basis, config.blocks)
        var, mean2 = variance_shares(uploads, views), squared_mean_shares(uploads, views)
        for g_index, (view, vs, ms) in enumerate(zip(views, var, mean2)):
            result = attack_features(view.features(u_train), c_train, view.features(u_test), c_test, config.ridge_alphas, config.seed)
            rng = np.random.default_rng([config.seed, p_index, g_index])
            harm = loss_per_energy(loss, view, d, config.energies, config.draws, rng)
            rows.append(GroupRow(name, view.name, view.size, result.rmse_m, result.ratio, float(vs), float(ms), harm))
            log(f"{name:8s} {view.name:40s} d={view.size:7d} ratio={result.ratio:.3f} var={vs:.4f} mean2={ms:.4f} loss/E={harm:.3g}")
    curve = spectrum(u_train, c_train, u_test, c_test, basis, config.ks, config.ridge_alphas, config.seed)
    for k, r in curve:
        log(f"spectrum k={k:4d}: {r.rmse_m:.2f} m, ratio {r.ratio:.3f}")
    summary = {
        "state": state.source,
        "phase": int(phase),
        "d": int(d),
        "basis_rank": int(basis.shape[1]),
        "twin_uploads": int(len(twin_pool["x"])),
        "captured_share_held_out": leakage_basis.captured_share(u_test, pool["map_id"][test], basis),
        "constant_rmse_m": curve[0][1].constant_rmse_m,
        "clean_val_mse": loss(None),
        "val_samples": int(len(pick)),
        "config": dataclasses.asdict(config),
    }
    return AuditResult(rows, curve, summary)
