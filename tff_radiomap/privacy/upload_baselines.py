"""The baselines the observer of a deployment's uploads (`upload_observer`) is read against.

Besides the constant guess and the prior set (`set_scoring`), two observers that use the upload:

- `single_sample_matching`: today's twin-matching attacker (`matching_attack`) applied to the
  upload as if it were the last upload of one sample's single-sample trace on a map: the map's
  candidates' single-sample uploads (clean, clipped), the defense's Gaussian likelihood tempered on
  the observer's off-grid calibration traces, the posterior mean. It names one position a map; every
  transmitter of the map gets it.
- `correlation_top`: on each map, the candidates whose own single-sample update has the highest
  cosine with the upload, as many as the map's transmitters.
"""

from __future__ import annotations

import numpy as np

from tff_radiomap.privacy import matching_attack


def correlation_top(observed: np.ndarray, uploads: np.ndarray, coords: np.ndarray, maps: np.ndarray, counts: dict) -> dict:
    """{map id: positions [k, 2]}: on each map, the `counts[map]` candidates whose update
    (`uploads` [N, d]) has the highest cosine with `observed` [d]; `coords` [N, 2], `maps` [N]."""
    y = np.asarray(observed, np.float32).ravel()
    cosine = (uploads @ y) / np.maximum(np.linalg.norm(uploads, axis=1) * np.linalg.norm(y), 1e-30)
    out = {}
    for m, k in counts.items():
        rows = np.flatnonzero(maps == m)
        out[int(m)] = coords[rows[np.argsort(-cosine[rows], kind="stable")[:k]]]
    return out


def single_sample_matching(
    observed: np.ndarray,
    candidates: np.ndarray,
    candidate_sigma: np.ndarray,
    candidate_coords: np.ndarray,
    calibration: np.ndarray,
    calibration_coords: np.ndarray,
    noise: matching_attack.NoiseModel,
) -> np.ndarray:
    """[2] the matching attacker's posterior mean for `observed` [d] taken as a one-step trace:
    candidates' clipped single-sample uploads [N, d] with their noise scales [N, G] at positions
    [N, 2], the tempering chosen on privatized calibration uploads [N_c, d] at known positions."""
    found = matching_attack.MapDistances.of(
        np.asarray(observed, np.float32).reshape(1, 1, -1),
        np.zeros((1, 2)),
        calibration[:, None],
        calibration_coords,
        [(candidates[:, None], np.asarray(candidate_sigma, np.float64)[:, None])],
        candidate_coords,
        noise,
    )
    tau2 = found.tempering(noise.sizes)
    mean, _ = matching_attack.posterior(
        matching_attack.log_likelihood(found.observed, found.candidate_sigma**2 + tau2, noise.sizes), found.candidate_coords, found.candidate_log_prior
    )
    return mean[0]
