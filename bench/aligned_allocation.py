"""Aligned Noise's allocation on a model state: per owner, the share of the twin's within-map variance
its basis captures, the share of B the closed form puts in it, and the sigmas against Uniform's.

    python -m bench.aligned_allocation [--noise_multiplier=0.01] [--seed=0] [--owners=0,2,14]

The model is the round-1 broadcast (the initial weights of `--seed`) on the default data set; the
refresh is the run's own (`basis_refresh.BasisRefresher.compute`), with the run's defaults.
Prints one line per owner and the refresh's seconds.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from tff_radiomap.data import default_set
from tff_radiomap.experiments import basis_refresh, shared_models
from tff_radiomap.experiments.privacy_config import ExperimentConfig
from tff_radiomap.models import phases
from tff_radiomap.models.phases import Phase
from tff_radiomap.privacy import budget as budget_lib
from tff_radiomap.privacy import leakage_basis


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.aligned_allocation")
    parser.add_argument("--noise_multiplier", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--owners", default="0,2,14", help="Owners to print (clients first, then the maps no client holds).")
    args = parser.parse_args(argv)
    config = ExperimentConfig(data_root=default_set.ensure_default_dataset(), seed=args.seed, defense="aligned", noise_multiplier=args.noise_multiplier)
    refresher = basis_refresh.BasisRefresher(config, "/nonexistent", {})
    weights = phases.initial_weights(config.model_config(), config.seed)
    t0 = time.monotonic()
    refresh = refresher.compute(Phase.STAGE1, weights)
    seconds = time.monotonic() - t0
    groups = basis_refresh.subspace_groups(config, Phase.STAGE1)
    budget = budget_lib.total_budget(groups.num_coordinates, config.clip_norm, config.noise_multiplier)
    # The twin's uploads again, for the captured share (the refresh does not keep them).
    collector = shared_models.upload_collector(config.model_config(), Phase.STAGE1, config.client_optimizer, config.client_learning_rate)
    phases.set_phase_weights(collector.model, weights, Phase.STAGE1)
    uploads = collector.collect(refresher.x, refresher.y)
    for owner in (int(o) for o in args.owners.split(",")):
        rows = refresher.owner_of_row == owner
        per_map = config.basis_k_per_map if owner >= config.num_clients else None
        _, variance, residual = leakage_basis.owner_basis(uploads[rows], refresher.map_of[rows], refresher.rank, per_map, seed=owner)
        captured = variance.sum() / (variance.sum() + residual * (groups.num_coordinates - refresher.rank))
        sigma = refresh["sigmas"][owner].astype(np.float64)
        energy = groups.sizes * sigma**2
        print(
            f"owner {owner} ({int(np.sum(rows)) // config.basis_positions} maps): basis holds {captured:.2f} of the within-map variance; "
            f"{energy[:-1].sum() / budget:.2f} of B in it; sigma along it {sigma[:-1].min():.4g}-{sigma[:-1].max():.4g}, "
            f"residual {sigma[-1]:.4g} (Uniform: {config.clip_norm * config.noise_multiplier:.4g})"
        )
    print(f"refresh of {refresher.num_owners} owners: {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
