"""The digital-twin matching attacker: the strongest observer the threat model allows.

Threat model (as `attack.py`): the observer sees a client's privatized uploads of S local steps on
one sample, knows the public building map of that sample, the broadcast model, the defense (its
clip, its noise scales, its basis) and has the digital twin. With exactly that knowledge it can,
for every candidate transmitter position q on the map, simulate the sample the client would hold,
run the same S local steps from the broadcast model and clip them as a client would: the clean
uploads c_{q,s}. The observed uploads are f_s = c_{q*,s} + n_s, n_s ~ N(0, Sigma) independent per
step, so every candidate has the Gaussian likelihood

    log p(f | q) = -1/2 sum_s [ (f_s - c_{q,s})^T (Sigma_{q,s} + tau^2 I)^-1 (f_s - c_{q,s}) + log det(Sigma_{q,s} + tau^2 I) ]

and the posterior mean over the candidates (a prior spread evenly over them) is the estimate of
least expected squared error; the MAP estimate (the best candidate) is reported beside it.

The noise covariance is the defense's: Sigma = sum_g sigma_g^2 P_g over orthogonal projectors P_g
(coordinate masks of `ParameterGroups`, or the basis blocks V_j V_j^T and the residual
I - V V^T of `SubspaceGroups`), so the quadratic form splits into per-group squared distances
D_g = ||P_g (f_s - c_{q,s})||^2 computed once (`group_distances`), and any sigma and tau reuse them.
A defense whose sigma depends on the update (the adaptive allocator) gives each candidate its own
sigma, hence the log-determinant term.

Tempering. The truth is rarely a candidate (a grid has its own mismatch, and the twin is not the
real propagation), so an untempered likelihood is overconfident: with small noise it locks onto a
wrong candidate. tau^2, an extra variance on every coordinate, is chosen from a grid by the
posterior-mean error on calibration samples the observer simulates itself (twin transmitters at
other positions than the candidates', privatized with the defense's noise; `choose_tempering`).
tau^2 also covers the coordinates a defense leaves noise-free (Directed Uniform off its groups),
so nothing is divided by zero: tau^2 = 0 is only tried where every sigma is positive.

The metric is Eq. (8)'s RMSE in meters, read against the constant guess of the same observed
samples (`MatchingResult.ratio`). The uploads the observer simulates (clean, clipped, privatized)
are `matching_uploads`'; the coarse-to-fine search over candidates is `matching_search`'.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tff_radiomap.privacy.groups import SubspaceGroups

# tau^2 candidates, in units of the calibration samples' mean squared distance per coordinate to
# their nearest candidate (the grid's mismatch plus the noise), besides 0.
TEMPERING_GRID = tuple(10.0 ** (k / 2.0) for k in range(-8, 15))


@dataclasses.dataclass(frozen=True)
class NoiseModel:
    """The observer's model of a defense's noise on one flat upload of d coordinates: G orthogonal
    projector groups of ranks `sizes`, either coordinate groups (`group_of_coordinate` [d]) or the
    blocks of an orthonormal basis (`basis` [d, K], `block_of_column` [K]) and its residual (the
    last group)."""

    sizes: np.ndarray
    group_of_coordinate: np.ndarray | None = None
    basis: np.ndarray | None = None
    block_of_column: np.ndarray | None = None

    @property
    def num_groups(self) -> int:
        return len(self.sizes)

    @classmethod
    def of(cls, defense, shapes) -> "NoiseModel":
        """The noise model of a `ClientPerturbationFactory` (None: No Defense, one noise-free group)
        for uploads of tensors `shapes`."""
        d = int(sum(int(np.prod(s)) for s in shapes))
        groups = getattr(defense, "groups", None)
        if defense is None or groups is None:
            return cls(sizes=np.array([d], np.int64), group_of_coordinate=np.zeros(d, np.int32))
        if isinstance(groups, SubspaceGroups):
            basis = defense.basis_array() if hasattr(defense, "basis_array") else np.asarray(defense._eager_basis().numpy(), np.float32)
            return cls(sizes=groups.sizes, basis=basis, block_of_column=groups.block_of_column())
        ids = np.concatenate([np.asarray(a, np.int32).ravel() for a in groups.ids])
        if len(ids) != d:
            raise ValueError(f"the defense's groups cover {len(ids)} coordinates, the uploads {d}")
        return cls(sizes=groups.sizes, group_of_coordinate=ids)


def group_distances(observed: np.ndarray, candidates: np.ndarray, noise: NoiseModel) -> np.ndarray:
    """D [S, G, N_o, N_q]: ||P_g (observed[o, s] - candidates[q, s])||^2 for uploads [N, S, d].

    float64 throughout: the distances of near-equal uploads are small differences of large norms."""
    return group_distances_of([observed], candidates, noise)[0]


def group_distances_of(queries, candidates: np.ndarray, noise: NoiseModel, candidate_coef: np.ndarray | None = None) -> list[np.ndarray]:
    """`group_distances` of each upload set [N_i, S, d] in `queries` to the same candidates: each
    step of the candidates is converted to float64, split into groups, projected and its squared
    norms taken once for all the sets (the candidates are thousands of rows, the sets tens).
    `candidate_coef` [N, S, K]: the candidates' projections on the basis where the caller has them
    (`candidate_projections`), else computed here the same way."""
    steps, num_groups = candidates.shape[1], noise.num_groups
    outs = [np.empty((steps, num_groups, len(q), candidates.shape[0])) for q in queries]
    masks = None if noise.basis is not None or num_groups == 1 else [noise.group_of_coordinate == g for g in range(num_groups)]
    blocks = [] if noise.basis is None else [noise.block_of_column == j for j in range(num_groups - 1)]
    for s in range(steps):
        c = candidates[:, s].astype(np.float64)
        fs = [q[:, s].astype(np.float64) for q in queries]
        if noise.basis is None:
            for g in range(num_groups):
                cg = c if masks is None else c[:, masks[g]]
                c_norms = np.sum(cg**2, 1)
                for f, out in zip(fs, outs):
                    out[s, g] = _squared_distances(f if masks is None else f[:, masks[g]], cg, c_norms)
            continue
        c_norms = np.sum(c**2, 1)
        pc = (candidate_projections(candidates[:, s], noise) if candidate_coef is None else candidate_coef[:, s]).astype(np.float64)
        pc_blocks = [(pc[:, cols], np.sum(pc[:, cols] ** 2, 1)) for cols in blocks]
        for q, f, out in zip(queries, fs, outs):
            total = _squared_distances(f, c, c_norms)
            pf = (q[:, s] @ noise.basis).astype(np.float64)
            inside = np.zeros_like(total)
            for j, (cols, (pcj, pcj_norms)) in enumerate(zip(blocks, pc_blocks)):
                out[s, j] = _squared_distances(pf[:, cols], pcj, pcj_norms)
                inside += out[s, j]
            out[s, -1] = np.maximum(total - inside, 0.0)
    return outs


def candidate_projections(uploads: np.ndarray, noise: NoiseModel) -> np.ndarray:
    """V^T u of uploads [N, d] or [N, S, d] on the noise model's basis, float32 [N, (S,) K] (the
    distances' largest product, N x d x K; an update-dependent defense's scales take it too). Step
    by step: [N, d] x [d, K] products, not N small ones that would each read all of V."""
    if uploads.ndim == 3:
        return np.stack([uploads[:, s] @ noise.basis for s in range(uploads.shape[1])], axis=1)
    return uploads @ noise.basis


def _squared_distances(a: np.ndarray, b: np.ndarray, b_norms: np.ndarray | None = None) -> np.ndarray:
    """[N_a, N_b] ||a_i - b_j||^2 (rounding below zero cut at 0); `b_norms`: b's squared row norms
    if computed already."""
    if a.shape[1] == 0:
        return np.zeros((len(a), len(b)))
    if b_norms is None:
        b_norms = np.sum(b**2, 1)
    d2 = np.sum(a**2, 1)[:, None] + b_norms[None] - 2.0 * a @ b.T
    return np.maximum(d2, 0.0)


def log_likelihood(distances: np.ndarray, variances: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """[N_o, N_q] log p(f_o | q) up to a constant: distances D [S, G, N_o, N_q], per-candidate
    variances sigma^2 + tau^2 [N_q, S, G] (all positive), group ranks `sizes` [G]."""
    present = np.asarray(sizes) > 0  # An empty group has no coordinates (and may have sigma 0).
    v = np.transpose(variances, (1, 2, 0))[:, present, None, :]  # [S, G', 1, N_q]
    quadratic = np.sum(distances[:, present] / v, axis=(0, 1))
    log_det = np.sum(np.asarray(sizes, np.float64)[present][None, :, None] * np.log(v[:, :, 0, :]), axis=(0, 1))  # [N_q]
    return -0.5 * (quadratic + log_det[None])


def posterior_weights(log_lik: np.ndarray, log_prior: np.ndarray | None = None) -> np.ndarray:
    """[N_o, N_q] posterior probabilities of the candidates; `log_prior` [N_q] (None: uniform)."""
    if log_prior is not None:
        log_lik = log_lik + log_prior[None]
    w = np.exp(log_lik - log_lik.max(axis=1, keepdims=True))
    return w / w.sum(axis=1, keepdims=True)


def posterior(log_lik: np.ndarray, coords: np.ndarray, log_prior: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(posterior mean [N_o, 2], MAP [N_o, 2]) over candidates at `coords` [N_q, 2]; the MAP is the
    candidate of highest likelihood, the prior (`posterior_weights`) weighs only the mean."""
    return posterior_weights(log_lik, log_prior) @ coords, coords[np.argmax(log_lik, axis=1)]


def tempering_grid(distances: np.ndarray, sizes: np.ndarray, sigma2: np.ndarray) -> list[float]:
    """tau^2 values to try: 0 where every group with coordinates has noise, then `TEMPERING_GRID`
    times the samples' mean squared distance per coordinate to their nearest candidate."""
    per_coordinate = np.min(np.sum(distances, axis=(0, 1)), axis=1) / (distances.shape[0] * float(np.sum(sizes)))
    scale = float(np.mean(per_coordinate))
    if not scale > 0:
        scale = max(float(np.max(sigma2)), 1e-30)
    present = sizes > 0
    grid = [scale * t for t in TEMPERING_GRID]
    return ([0.0] if np.all(sigma2[..., present] > 0) else []) + grid


def choose_tempering(
    distances: np.ndarray, sigma2: np.ndarray, sizes: np.ndarray, coords: np.ndarray, truth: np.ndarray, log_prior: np.ndarray | None = None
) -> tuple[float, float]:
    """(tau^2, its posterior-mean RMSE) of the calibration samples with known positions `truth`
    [N_c, 2]: the tau^2 of `tempering_grid` whose posterior mean errs least (the first on ties)."""
    best = None
    for tau2 in tempering_grid(distances, sizes, sigma2):
        mean, _ = posterior(log_likelihood(distances, sigma2 + tau2, sizes), coords, log_prior)
        err = rmse(mean, truth)
        if best is None or err < best[1]:
            best = (tau2, err)
    return best


def rmse(pred: np.ndarray, truth: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.sum((np.asarray(pred, np.float64) - truth) ** 2, axis=1))))


@dataclasses.dataclass(frozen=True)
class MapDistances:
    """One observed map, reduced to what the likelihood needs: the per-group squared distances
    (`group_distances`) of the observed uploads [S, G, N_o, N_q] and of the calibration uploads
    [S, G, N_c, N_q] (both privatized) to the candidates' clipped clean uploads, the candidates'
    sigma [N_q, S, G], the positions of all three, and the candidates' log prior weights [N_q]
    (None: uniform; a candidate standing for several grid cells weighs their count,
    `matching_search.cell_counts`)."""

    observed: np.ndarray
    observed_coords: np.ndarray
    calibration: np.ndarray
    calibration_coords: np.ndarray
    candidate_coords: np.ndarray
    candidate_sigma: np.ndarray
    candidate_log_prior: np.ndarray | None = None

    @classmethod
    def of(cls, observed, observed_coords, calibration, calibration_coords, candidate_chunks, candidate_coords, noise: NoiseModel) -> "MapDistances":
        """From observed and calibration uploads [N, S, d] and the candidates' (clipped uploads
        [n, S, d], sigma [n, S, G][, projections [n, S, K] (`candidate_projections`)]) chunk by
        chunk, in `candidate_coords`' order: a map's candidate uploads (thousands x S x d floats)
        are never held at once."""
        d_obs, d_cal, sigma = [], [], []
        for uploads, sg, *coef in candidate_chunks:
            to_observed, to_calibration = group_distances_of([observed, calibration], uploads, noise, *coef)
            d_obs.append(to_observed)
            d_cal.append(to_calibration)
            sigma.append(np.asarray(sg, np.float64))
        d_obs, d_cal, sigma = np.concatenate(d_obs, axis=3), np.concatenate(d_cal, axis=3), np.concatenate(sigma)
        if d_obs.shape[3] != len(candidate_coords):
            raise ValueError(f"{d_obs.shape[3]} candidate uploads for {len(candidate_coords)} candidate positions")
        return cls(
            d_obs, np.asarray(observed_coords, np.float64), d_cal, np.asarray(calibration_coords, np.float64), np.asarray(candidate_coords, np.float64), sigma
        )

    def joined(self, other: "MapDistances", log_prior: np.ndarray | None = None) -> "MapDistances":
        """These candidates followed by `other`'s (the same observed and calibration uploads), with
        the prior `log_prior` over all of them."""
        return dataclasses.replace(
            self,
            observed=np.concatenate([self.observed, other.observed], axis=3),
            calibration=np.concatenate([self.calibration, other.calibration], axis=3),
            candidate_coords=np.concatenate([self.candidate_coords, other.candidate_coords]),
            candidate_sigma=np.concatenate([self.candidate_sigma, other.candidate_sigma]),
            candidate_log_prior=log_prior,
        )

    def tempering(self, sizes: np.ndarray) -> float:
        """tau^2 chosen on the calibration samples (`choose_tempering`)."""
        sigma2 = self.candidate_sigma**2
        return choose_tempering(self.calibration, sigma2, sizes, self.candidate_coords, self.calibration_coords, self.candidate_log_prior)[0]


@dataclasses.dataclass(frozen=True)
class MatchingResult:
    """Posterior-mean and MAP RMSE (m) over the observed samples, and the constant guess on them."""

    rmse_m: float
    map_rmse_m: float
    constant_rmse_m: float
    nearest_rmse_m: float  # The grid's floor: every observed sample at its nearest candidate.
    tempering: tuple[float, ...]  # tau^2 chosen per map.
    observed: int
    candidates: int

    @property
    def ratio(self) -> float:
        return self.rmse_m / self.constant_rmse_m

    @property
    def best_rmse_m(self) -> float:
        return min(self.rmse_m, self.map_rmse_m)


def match(maps, noise: NoiseModel, constant_position: np.ndarray) -> MatchingResult:
    """The matching attack on every observed map (`MapDistances`, an iterable): tempering chosen on
    the map's calibration samples, then the posterior over its candidates for each observed sample."""
    errors, map_errors, nearest, temperings, truth_all, candidates = [], [], [], [], [], 0
    sizes = noise.sizes
    for m in maps:
        tau2 = m.tempering(sizes)
        mean, best = posterior(log_likelihood(m.observed, m.candidate_sigma**2 + tau2, sizes), m.candidate_coords, m.candidate_log_prior)
        errors.append(np.sum((mean - m.observed_coords) ** 2, 1))
        map_errors.append(np.sum((best - m.observed_coords) ** 2, 1))
        gap = m.observed_coords[:, None, :] - m.candidate_coords[None]
        nearest.append(np.min(np.sum(gap**2, 2), 1))
        temperings.append(float(tau2))
        truth_all.append(m.observed_coords)
        candidates += len(m.candidate_coords)
    truth = np.concatenate(truth_all)
    return MatchingResult(
        rmse_m=float(np.sqrt(np.mean(np.concatenate(errors)))),
        map_rmse_m=float(np.sqrt(np.mean(np.concatenate(map_errors)))),
        constant_rmse_m=rmse(np.broadcast_to(constant_position, truth.shape), truth),
        nearest_rmse_m=float(np.sqrt(np.mean(np.concatenate(nearest)))),
        tempering=tuple(temperings),
        observed=len(truth),
        candidates=candidates,
    )
