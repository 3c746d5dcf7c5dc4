"""Subspace Noise with each client's own leakage basis (`--basis_scope=client`).

The leak is map-specific (bench/RESULTS.md, "The leakage audit"): a client's upload varies with the
transmitter along its own maps' directions only. So each client k has its own basis V_k [d, K]
(the top twin directions of the maps it holds; `leakage_basis.owner_basis`) and adds

    V_k z_s + (I - V_k V_k^T) z_r,   z_s ~ N(0, sigma_s^2 I_K),  z_r ~ N(0, sigma_r^2 I_d),

with K sigma_s^2 = share * B and (d - K) sigma_r^2 = (1 - share) * B, B = d (C nu)^2, as Subspace
Noise does with the federation's basis. Every client's basis has the same rank K, so one
`SubspaceGroups` describes every upload.

Which basis is the client's: the factory is keyed (`aggregators.keyed`): it aggregates
<update, client> values and client k reads `owner_basis_path(basis_dir, k)` (written between
rounds by the refresher, `experiments.basis_refresh.BasisRefresher`) inside the computation:
each client reads its own K columns, not the federation's. Owners beyond the clients (maps no
client holds, whose samples an observer may still simulate) have bases of their own, so that an
observer can privatize a trace on any map as that map's holder would: `map_owners` maps every map
id to its owner, and `observe_map(m)` sets the eager path (`privatize`, `privatize_batch`,
`whiten_batch`, `sigmas`) to the owner of map m.

Privacy claim: as `SubspaceNoiseFactory` (the least-noised direction's Gaussian event); the
sigmas are the same for every owner.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from tff_radiomap.aggregators import keyed
from tff_radiomap.aggregators.subspace_noise import SubspaceNoiseFactory, read_basis
from tff_radiomap.privacy.groups import SubspaceGroups


def owner_basis_path(basis_dir: str, owner: int) -> str:
    """Owner `owner`'s basis file in `basis_dir` (`subspace_noise.write_basis` layout)."""
    return os.path.join(basis_dir, f"owner{int(owner)}.bin")


class ClientSubspaceNoiseFactory(SubspaceNoiseFactory):
    """Clip at C, then `share` of B in the uploading client's own basis, the rest on its complement.

    groups: the `SubspaceGroups` of every client's upload (rank K; the bases come at run time);
    basis_dir: the folder of the owners' basis files; map_owners: {map id: owner} (clients are
    owners 0..N-1, their index in the federation, as in their keys).
    """

    keyed = True

    def __init__(
        self,
        clip_norm: float,
        noise_multiplier: float,
        groups: SubspaceGroups,
        basis_dir: str,
        map_owners: Mapping[int, int],
        share: float = 0.25,
        inner_factory=None,
        seed=None,
    ):
        if not basis_dir:
            raise ValueError(f"{type(self).__name__} needs basis_dir, the folder of the owners' bases")
        if not map_owners:
            raise ValueError(f"{type(self).__name__} needs map_owners, the owner of every map")
        super().__init__(clip_norm, noise_multiplier, groups, share=share, basis_path=basis_dir, inner_factory=inner_factory, seed=seed)
        self.basis_dir = basis_dir
        self.map_owners = {int(m): int(o) for m, o in map_owners.items()}
        self.num_owners = max(self.map_owners.values()) + 1
        self._owner_bases: dict[int, np.ndarray] = {}
        self.observed_owner: int | None = None

    # -- between rounds: the refresher's bases, and which owner the observer looks at ------------
    def set_owner_bases(self, bases: Mapping[int, np.ndarray]) -> None:
        """Every owner's V [d, K] for the eager path (the clients read their files)."""
        missing = sorted(set(range(self.num_owners)) - set(int(o) for o in bases))
        if missing:
            raise ValueError(f"owner bases missing for owners {missing}")
        for o, basis in bases.items():
            if basis.shape != (self.groups.num_coordinates, self.groups.rank):
                raise ValueError(f"owner {o}'s basis is {basis.shape}, expected {(self.groups.num_coordinates, self.groups.rank)}")
        self._owner_bases = {int(o): np.asarray(b, np.float32) for o, b in bases.items()}
        if self.observed_owner is not None:
            self.observe_owner(self.observed_owner)

    def owner_of(self, map_id: int) -> int:
        if int(map_id) not in self.map_owners:
            raise KeyError(f"map {map_id} has no owner in this defense (maps {min(self.map_owners)}..{max(self.map_owners)})")
        return self.map_owners[int(map_id)]

    def observe_map(self, map_id: int) -> int:
        """Sets the eager path to the owner of map `map_id`; returns that owner."""
        return self.observe_owner(self.owner_of(map_id))

    def observe_owner(self, owner: int) -> int:
        if int(owner) not in self._owner_bases:
            raise ValueError(f"owner {owner} has no basis yet (set_owner_bases first)")
        self.observed_owner = int(owner)
        self.set_basis(self._owner_bases[int(owner)])
        return int(owner)

    # -- inside the TFF computation: the client's own file ---------------------------------------
    def _owner_file(self, extras, suffix: str = ".bin"):
        """TF: the uploading client's file in `basis_dir` (`owner_basis_path` with the key's owner)."""
        key = tf.strings.as_string(tf.cast(extras[keyed.CLIENT], tf.int32))
        return tf.strings.join([os.path.join(self.basis_dir, "owner"), key, suffix])

    def _basis(self, extras=None):
        if self._privatizing:
            return self._eager_basis()
        if extras is None or keyed.CLIENT not in extras:
            raise ValueError(f"{type(self).__name__} reads the client's basis by its key: the upload must be keyed (aggregators.keyed)")
        return read_basis(self._owner_file(extras), self._basis_shape())

    def _eager_basis(self):
        if self._basis_var is None:
            raise ValueError(f"{type(self).__name__}: no observed owner (observe_map or observe_owner first)")
        return self._basis_var
