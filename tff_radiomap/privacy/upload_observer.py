"""The observer of a deployment's uploads: where are the transmitters behind a client's real upload,
or behind a round's sum of uploads?

Threat model. A client uploads once a round, after local training on all its samples (E epochs at
batch B, tens to hundreds of Adam steps), privatized by the defense's client step; a secure
aggregation server sees only the round's sum. The observer sees that upload (or the sum), knows the
broadcast model, the clients' building maps, the defense, the local training's hyperparameters and,
by default, how many samples each client holds on each map (a weighted FedAvg server receives each
client's example count with its update; `ObserverConfig.told`), and has the digital twin. It
names a set of positions per map (`set_scoring` scores them).

The first-order model. Client k's upload is approximately a function of the sum of its samples'
gradients at the broadcast model theta_r, A_k = sum_i g_i. Adam divides each coordinate's step by
the root of its running second moment, so the upload keeps mostly the sign of the mean gradient
where the batches agree and shrinks where they disagree:

    u_k ~ alpha_k tanh(A_k / (n_k s)),    s = c sd (sqrt(max(1/B - 1/n_k, 0)) + floor)

sd the per-coordinate spread of the twin's candidate gradients on the client's maps, the square root
the batch-to-batch spread of a mean over B of n_k samples (zero when one batch holds them all: pure
sign), `floor` the drift of the gradient over the steps, and c a free multiplier (`scales`). Plain
SGD keeps the mean gradient itself (u_k ~ alpha_k A_k / n_k), FedSGD's one Adam step its sign. The
observed vector y (one upload, or the sum sum_k w_k u_k) is compared with the model
Y = sum_k w_k P_k / ||P_k|| by cosine, so that clipping (a scale) changes nothing.

The search. Each candidate q, a transmitter of the twin at a grid cell of one of the client's maps,
contributes its gradient g_q (`ClientCandidates.gradients`). Greedy forward selection adds, in
passes over the clients and their maps, each map's candidate that raises the cosine most, until
each map holds its count; then coordinate descent replaces each selected candidate by the best one
of its map given the others (`sweeps` passes, or until nothing changes). The multiplier c is the one
of `scales` whose final cosine is highest. Not told the counts, the observer adds a client's best
candidate of any of its maps, up to `max_per_map` a map, with n_k the number selected so far, and
keeps the prefix of the greedy path whose cosine was highest (the count rule); then it searches as
if told those counts. `refine` replaces the model by the true local training, simulated for each
tried set (exact where a client's samples fit in one batch; the observer does not know the order
of the batches otherwise).

The model ignores that the trajectory moves (each step's gradient is taken at theta_r) and the order
of the batches, which the observer does not know; how far it gets is measured, not assumed
(docs/deployment_observer.md).
"""

from __future__ import annotations

import dataclasses

import numpy as np

CHUNK = 64  # Candidates evaluated at once: one [CHUNK, d] float32 buffer.


@dataclasses.dataclass(frozen=True)
class ObserverConfig:
    """The observer's knowledge of the local training and its search settings (module docstring)."""

    optimizer: str = "adam"  # The client optimizer: 'adam' (tanh model) or 'sgd' (linear).
    batch_size: int = 16
    one_step: bool = False  # FedSGD: one step on the mean gradient of all the samples.
    told: bool = True  # Told each client's count per map; else the count rule.
    max_per_map: int = 64  # Not told: the most transmitters a map may get.
    scales: tuple[float, ...] = (1.0, 3.0)
    floor: float = 0.05
    sweeps: int = 3

    def __post_init__(self):
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"optimizer={self.optimizer!r}: expected 'adam' or 'sgd'")
        if self.batch_size < 1 or self.max_per_map < 1 or self.sweeps < 0 or not self.scales or min(self.scales) <= 0 or self.floor < 0:
            raise ValueError(f"{self}: expected batch_size, max_per_map >= 1, sweeps >= 0, positive scales, floor >= 0")


@dataclasses.dataclass
class ClientCandidates:
    """One observed client: its candidates' gradients at the broadcast model [N, d] (float32, the
    observer's coordinates), their positions [N, 2] (m) and map ids [N], the samples it trains on,
    its counts per map ({map id: count}; None when the observer is not told) and its weight in the
    observed vector (1 for a single upload; in a sum the aggregation's: its examples or 1)."""

    gradients: np.ndarray
    coords: np.ndarray
    maps: np.ndarray
    samples: int
    counts: dict | None = None
    weight: float = 1.0

    def __post_init__(self):
        if not (len(self.gradients) == len(self.coords) == len(self.maps)):
            raise ValueError(f"{len(self.gradients)} gradients, {len(self.coords)} positions, {len(self.maps)} map ids: expected one each per candidate")
        if self.counts is not None:
            unknown = set(self.counts) - set(np.unique(self.maps).tolist())
            if unknown or sum(self.counts.values()) != self.samples:
                raise ValueError(f"counts {self.counts}: expected maps among the candidates' and a total of samples={self.samples}")
        self.spread = self.gradients.std(0, dtype=np.float64).astype(np.float32)
        self.spread += np.float32(1e-3) * np.float32(self.spread.mean() + 1e-30)


@dataclasses.dataclass
class Located:
    """The observer's answer: per client {map id: positions [k, 2]}, the cosine of its model, the
    multiplier c chosen, and the search's own record: the selected candidates' indices per client
    and the clients with their counts (those the count rule chose, if not told)."""

    positions: list
    fit: float
    scale: float
    atoms: list
    clients: list


class _Search:
    """The state of one search: each client's selected candidates, their gradient sum A_k and
    model P_k, and the model of the observed vector Y = sum_k w_k P_k / ||P_k||."""

    def __init__(self, y: np.ndarray, clients: list, config: ObserverConfig, scale: float):
        self.y = (y / max(np.linalg.norm(y), 1e-30)).astype(np.float32)
        self.clients, self.config, self.scale = clients, config, scale
        self.atoms = [[] for _ in clients]
        self.sums = [np.zeros_like(self.y) for _ in clients]
        self.parts = [np.zeros_like(self.y) for _ in clients]  # w_k P_k / ||P_k||.
        self.total = np.zeros_like(self.y)

    def _factor(self, k: int, n: int):
        """What multiplies a gradient sum before the model's squashing: 1 / (n s) (Adam), 1 / n (SGD)."""
        if self.config.optimizer == "sgd":
            return np.float32(1.0 / n)
        noise = 0.0 if self.config.one_step else np.sqrt(max(1.0 / self.config.batch_size - 1.0 / n, 0.0))
        return (1.0 / (np.float32(n * self.scale * (noise + self.config.floor)) * self.clients[k].spread)).astype(np.float32)

    def _model(self, k: int, sums: np.ndarray, n: int, out: np.ndarray | None = None) -> np.ndarray:
        """P_k of gradient sums [.., d] for n samples (module docstring), in `out` if given."""
        out = np.multiply(sums, self._factor(k, n), out=out)
        return out if self.config.optimizer == "sgd" else np.tanh(out, out=out)

    def samples(self, k: int) -> int:
        c = self.clients[k]
        return c.samples if self.config.told else max(len(self.atoms[k]), 1)

    def fit(self) -> float:
        norm = np.linalg.norm(self.total)
        return float(self.y @ self.total / norm) if norm > 0 else 0.0

    def scores(self, k: int, base: np.ndarray, n: int, rows: np.ndarray) -> np.ndarray:
        """The cosine of the model with client k's gradient sum `base` + g_q, for the candidates `rows`."""
        c = self.clients[k]
        rest = self.total - self.parts[k]
        y_rest, rest2, w = float(self.y @ rest), float(rest @ rest), float(c.weight)
        out, buffer = np.empty(len(rows)), np.empty((min(CHUNK, len(rows)), len(self.y)), np.float32)
        for a in range(0, len(rows), CHUNK):
            p = buffer[: len(rows[a : a + CHUNK])]
            np.take(c.gradients, rows[a : a + CHUNK], axis=0, out=p)
            p += base[None]
            self._model(k, p, n, out=p)
            norms = np.maximum(np.sqrt(np.einsum("ij,ij->i", p, p)), 1e-30)
            num = y_rest + w * (p @ self.y) / norms
            den2 = rest2 + 2.0 * w * (p @ rest) / norms + w * w
            out[a : a + CHUNK] = num / np.sqrt(np.maximum(den2, 1e-30))
        return out

    def set_atoms(self, k: int, atoms: list) -> None:
        c = self.clients[k]
        self.atoms[k] = list(atoms)
        self.sums[k] = c.gradients[atoms].sum(0) if atoms else np.zeros_like(self.y)
        p = self._model(k, self.sums[k], self.samples(k)) if atoms else np.zeros_like(self.y)
        norm = np.linalg.norm(p)
        self.total -= self.parts[k]
        self.parts[k] = np.float32(c.weight) * p / norm if norm > 0 else np.zeros_like(self.y)
        self.total += self.parts[k]

    def allowed(self, k: int, exclude: list, quota: dict | None) -> np.ndarray:
        """Candidates of client k not in `exclude` and on a map whose quota is not full."""
        c = self.clients[k]
        ok = np.ones(len(c.maps), bool)
        ok[exclude] = False
        if quota is not None:
            held = {m: 0 for m in quota}
            for q in exclude:
                held[int(c.maps[q])] = held.get(int(c.maps[q]), 0) + 1
            full = [m for m in quota if held[m] >= quota[m]]
            ok &= ~np.isin(c.maps, full)
        return np.flatnonzero(ok)


def _greedy(search: _Search, quotas: list, per_map: bool) -> list:
    """Forward selection in passes until each quota {map: count} is met: a pass adds to each client
    the best candidate of each map with room (`per_map`: the cost of a map's candidates an
    addition), or its best candidate of any map with room. Returns per client the cosine after
    each of its additions (the path the count rule reads)."""
    paths = [[] for _ in search.clients]
    while True:
        added = False
        for k, quota in enumerate(quotas):
            for group in [[m] for m in quota] if per_map else [list(quota)]:
                rows = search.allowed(k, search.atoms[k], quota)
                rows = rows[np.isin(search.clients[k].maps[rows], group)]
                if not len(rows):
                    continue
                n = search.clients[k].samples if search.config.told else len(search.atoms[k]) + 1
                scores = search.scores(k, search.sums[k], n, rows)
                search.set_atoms(k, search.atoms[k] + [int(rows[np.argmax(scores)])])
                paths[k].append(search.fit())
                added = True
        if not added:
            return paths


def _sweep(search: _Search) -> int:
    """One pass of coordinate descent: each selected candidate replaced by the best of its map
    given the others, where that raises the cosine. Returns the number replaced."""
    changed = 0
    for k, c in enumerate(search.clients):
        for i in range(len(search.atoms[k])):
            atoms = search.atoms[k]
            others = atoms[:i] + atoms[i + 1 :]
            rows = np.flatnonzero(c.maps == c.maps[atoms[i]])
            rows = rows[~np.isin(rows, others)]
            scores = search.scores(k, search.sums[k] - c.gradients[atoms[i]], search.samples(k), rows)
            best = int(rows[np.argmax(scores)])
            if best != atoms[i] and scores.max() > search.fit() + 1e-7:
                search.set_atoms(k, others[:i] + [best] + others[i:])
                changed += 1
    return changed


def _counts_from_path(search: _Search, k: int, path: list) -> dict:
    """The count rule: the maps of the greedy prefix of highest cosine."""
    keep = int(np.argmax(path)) + 1 if path else 0
    maps = search.clients[k].maps[search.atoms[k][:keep]]
    return {int(m): int(np.sum(maps == m)) for m in np.unique(maps)}


def _search(y: np.ndarray, clients: list, config: ObserverConfig, scale: float) -> _Search:
    search = _Search(y, clients, config, scale)
    if config.told:
        quotas = [dict(c.counts) for c in clients]
    else:
        quotas = [{int(m): config.max_per_map for m in np.unique(c.maps)} for c in clients]
        paths = _greedy(search, quotas, per_map=False)
        counts = [_counts_from_path(search, k, p) for k, p in enumerate(paths)]
        told = [dataclasses.replace(c, counts=n, samples=max(sum(n.values()), 1)) for c, n in zip(clients, counts)]
        search = _Search(y, told, dataclasses.replace(config, told=True), scale)
        quotas = counts
    _greedy(search, quotas, per_map=True)
    for _ in range(config.sweeps):
        if not _sweep(search):
            break
    return search


def locate(observed: np.ndarray, clients: list, config: ObserverConfig = ObserverConfig()) -> Located:
    """Where the transmitters behind `observed` [d] (one client's upload, or a sum of uploads over
    `clients`) are: per client {map id: positions [k, 2]} (module docstring)."""
    if not clients:
        raise ValueError("no client to locate")
    observed = np.asarray(observed, np.float32).ravel()
    for c in clients:
        if c.gradients.shape[1] != observed.size:
            raise ValueError(f"candidate gradients of {c.gradients.shape[1]} coordinates, an observed vector of {observed.size}")
        if config.told and c.counts is None:
            raise ValueError("a told observer needs each client's counts per map (ClientCandidates.counts)")
    best = None
    for scale in config.scales if config.optimizer == "adam" else config.scales[:1]:
        search = _search(observed, clients, config, scale)
        if best is None or search.fit() > best.fit():
            best = search
    return _located(best.clients, best.atoms, best.fit(), best.scale)


def _located(clients: list, atoms: list, fit: float, scale: float) -> Located:
    positions = []
    for c, chosen in zip(clients, atoms):
        chosen = np.asarray(chosen, np.int64)
        positions.append({int(m): c.coords[chosen[c.maps[chosen] == m]] for m in np.unique(c.maps)})
    return Located(positions, fit, scale, [list(a) for a in atoms], clients)


def _spacing(coords: np.ndarray) -> float:
    """The grid's spacing: the median distance of a candidate to its nearest other one."""
    if len(coords) < 2:
        return 0.0
    gap = np.sum((coords[:, None, :] - coords[None]) ** 2, 2)
    np.fill_diagonal(gap, np.inf)
    return float(np.median(np.sqrt(gap.min(1))))


def refine(
    observed: np.ndarray, located: Located, simulate, config: ObserverConfig = ObserverConfig(), shortlist: int = 8, reach: float = 2.5, sweeps: int = 2
) -> Located:
    """`located` refined with the true local training: `simulate(k, atoms)` is client k's upload
    (on the observer's coordinates) had it held the candidates `atoms`. Coordinate descent on the
    cosine of y with sum_k w_k U_k / ||U_k||: each selected candidate tries the `shortlist` best
    replacements on its map by the first-order model and every candidate within `reach` grid
    spacings of it, each simulated; the best is kept where it raises the cosine. Exact where the upload is a function of the set alone (a client whose samples
    fit in one batch: the order of its batches does not matter); else `simulate` can only guess the
    order, and the refinement chases its noise."""
    y = np.asarray(observed, np.float32).ravel()
    y = y / max(np.linalg.norm(y), 1e-30)
    clients, atoms = located.clients, [list(a) for a in located.atoms]
    search = _Search(y, clients, dataclasses.replace(config, told=True), located.scale)
    parts = []
    for k, c in enumerate(clients):
        search.set_atoms(k, atoms[k])
        u = np.asarray(simulate(k, atoms[k]), np.float32)
        parts.append(np.float32(c.weight) * u / max(np.linalg.norm(u), 1e-30))
    total = np.sum(parts, axis=0)

    def cosine(v):
        return float(y @ v / max(np.linalg.norm(v), 1e-30))

    spacing = {int(m): _spacing(c.coords[c.maps == m]) for c in clients for m in np.unique(c.maps)}

    for _ in range(sweeps):
        changed = 0
        for k, c in enumerate(clients):
            for i in range(len(atoms[k])):
                others = atoms[k][:i] + atoms[k][i + 1 :]
                rows = np.flatnonzero(c.maps == c.maps[atoms[k][i]])
                rows = rows[~np.isin(rows, atoms[k])]
                scores = search.scores(k, search.sums[k] - c.gradients[atoms[k][i]], c.samples, rows)
                near = np.sqrt(np.sum((c.coords[rows] - c.coords[atoms[k][i]]) ** 2, 1)) <= reach * spacing[int(c.maps[atoms[k][i]])]
                tries = np.union1d(rows[np.argsort(-scores, kind="stable")[:shortlist]], rows[near])
                best, best_fit = None, cosine(total)
                for q in tries:
                    u = np.asarray(simulate(k, others[:i] + [int(q)] + others[i:]), np.float32)
                    part = np.float32(c.weight) * u / max(np.linalg.norm(u), 1e-30)
                    fit = cosine(total - parts[k] + part)
                    if fit > best_fit + 1e-7:
                        best, best_fit = (int(q), part), fit
                if best is not None:
                    atoms[k] = others[:i] + [best[0]] + others[i:]
                    total, parts[k] = total - parts[k] + best[1], best[1]
                    search.set_atoms(k, atoms[k])
                    changed += 1
        if not changed:
            break
    return _located(clients, atoms, cosine(total), located.scale)
