"""The defenses of paper 000 (Section III-B and ours), one registry row each, read by the runner
(`privacy_radiomap`), Table I (`privacy_table`) and the front (`privacy_front`).

A row says how a defense trains (the protocol), which `tff.aggregators` factory aggregates a
phase's uploads, what Table I calls it, which configuration fields it reads (the fields only some
defenses read: a run of another defense is the same run whatever they hold), and where it stands
in cost (concurrent runs start costliest first). A new defense is one `register_defense(...)` call.

Each noise defense clips at C = `clip_norm` and spends the budget B = d (C nu)^2 over the groups
of the upload of its phase (`privacy.groups.radiounet_groups`, or the leakage partition of
`basis_refresh.subspace_groups`), so B counts the coordinates actually uploaded.

Two rows protect the aggregate rather than the uploads, with TFF's own factories: `central_dp`
(DP-FedAvg: clients clip, the server adds N(0, (z C)^2) to the sum; the uploads themselves are
clipped and clean, so the observer of individual uploads sees Clip Only's) and `ddp` (secure
aggregation with distributed DP: the observer of individual uploads sees nothing it can use, the
server the noisy sum). For them `noise_multiplier` is z, the noise on the sum over C. What the
observer of individual uploads sees is a row's `upload_view` (`upload_views`); what the trainer
aggregates with is its `model_aggregator` (`phase_factories`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tff_radiomap.aggregators import (
    AdaptiveGroupNoiseFactory,
    AlignedNoiseFactory,
    ClientSubspaceNoiseFactory,
    AdaptiveSubspaceNoiseFactory,
    ClipOnlyFactory,
    DirectedNoiseFactory,
    central_gaussian_factory,
    SubspaceNoiseFactory,
    UniformNoiseFactory,
)
from tff_radiomap.aggregators import secure_dp
from tff_radiomap.experiments import basis_refresh
from tff_radiomap.models.phases import Phase
from tff_radiomap.privacy import groups

PROTOCOLS = ("two_stage", "fedsgd")
# (config, phase, basis_dir) -> the phase's aggregation factory, or None for the weighted mean.
AggregatorFn = Callable[[object, Phase, "str | None"], object]
NOISE_FIELDS = ("noise_multiplier", "fresh_noise")
DDP_FIELDS = ("ddp_mechanism", "ddp_bits")
AGGREGATE_MECHANISMS = ("central", "distributed")
ALLOCATOR_FIELDS = ("sigma_min", "adaptive_partition", "allocator_lambda_p", "allocator_lambda_h", "allocator_every")


@dataclasses.dataclass(frozen=True)
class Defense:
    """A row of the registry.

    protocol: 'two_stage' (No Defense's protocol) or 'fedsgd'.
    model_aggregator: (config, phase, basis_dir) -> a `tff.aggregators` factory for the uploads of
      that phase, or None for the plain example-weighted mean; `basis_dir` is the run's folder of
      subspace bases (only the defenses on the leakage partition use it).
    label: its name in tables and figures (default: its registry name).
    reads: the configuration fields that only some defenses read and this one does.
    cost_rank: 0 for the costliest run at the CPU default, larger for cheaper ones.
    upload_view: the factory whose client step an observer of individual uploads sees, where it is
      not `model_aggregator` (central DP: Clip Only's); None: `model_aggregator`.
    uploads_observable: False where an observer of individual uploads sees nothing it can use
      (secure aggregation): the run does not attack them.
    aggregate_dp: 'central' or 'distributed' where the defense's guarantee is on the aggregate the
      server releases (its epsilon: `privacy_accounting.aggregate_summary`); '' for none.
    """

    protocol: str
    model_aggregator: AggregatorFn
    description: str
    label: str = ""
    reads: tuple[str, ...] = ()
    cost_rank: int = 0
    upload_view: AggregatorFn | None = None
    uploads_observable: bool = True
    aggregate_dp: str = ""


DEFENSES: dict[str, Defense] = {}


def register_defense(name: str, defense: Defense) -> None:
    if defense.protocol not in PROTOCOLS:
        raise ValueError(f"defense {name!r}: protocol={defense.protocol!r}, expected one of {PROTOCOLS}")
    if name in DEFENSES:
        raise ValueError(f"defense {name!r} is registered already")
    if defense.aggregate_dp not in ("",) + AGGREGATE_MECHANISMS:
        raise ValueError(f"defense {name!r}: aggregate_dp={defense.aggregate_dp!r}, expected '' or one of {AGGREGATE_MECHANISMS}")
    DEFENSES[name] = defense


def make_factory(name: str, config, phase: Phase, basis_dir: str | None = None):
    """The aggregation factory of defense `name` for the uploads of `phase` (None: weighted mean)."""
    if name not in DEFENSES:
        raise ValueError(f"defense {name!r}: expected one of {sorted(DEFENSES)}")
    return DEFENSES[name].model_aggregator(config, phase, basis_dir)


def _phases(defense: Defense) -> tuple[Phase, ...]:
    return (Phase.JOINT,) if defense.protocol == "fedsgd" else (Phase.STAGE1, Phase.STAGE2)


def phase_factories(config, basis_dir: str | None = None) -> dict:
    """{phase: the defense's aggregation factory for that phase's uploads, or None} of the run."""
    defense = DEFENSES[config.defense]
    return {p: defense.model_aggregator(config, p, basis_dir) for p in _phases(defense)}


def upload_views(config, basis_dir: str | None = None) -> dict:
    """{phase: the factory whose client step an observer of individual uploads sees, or None (the
    upload as trained)}: what the attacks simulate and the per-upload accounting counts. Empty for a
    defense whose uploads are not observable (`uploads_observable`)."""
    defense = DEFENSES[config.defense]
    if not defense.uploads_observable:
        return {}
    view = defense.upload_view or defense.model_aggregator
    return {p: view(config, p, basis_dir) for p in _phases(defense)}


def unread_fields(name: str) -> set[str]:
    """Configuration fields some defense reads and defense `name` does not."""
    return {f for d in DEFENSES.values() for f in d.reads} - set(DEFENSES[name].reads)


def labels() -> dict[str, str]:
    return {name: d.label or name for name, d in DEFENSES.items()}


def noise_defenses() -> tuple[str, ...]:
    """The defenses that add noise (they read `noise_multiplier`)."""
    return tuple(name for name, d in DEFENSES.items() if "noise_multiplier" in d.reads)


def cost_order() -> tuple[str, ...]:
    """Defense names from the costliest run to the cheapest (the order concurrent runs start in)."""
    return tuple(sorted(DEFENSES, key=lambda name: DEFENSES[name].cost_rank))


# ---------------------------------------------------------------------------------------------
# The factories. The noise is seeded from `config.seed`, or unseeded with `config.fresh_noise`.
def _seed(config):
    return None if config.fresh_noise else config.seed


def _none(config, phase, basis_dir=None):
    return None


def _clip(config, phase, basis_dir=None):
    return ClipOnlyFactory(config.clip_norm)


def _uniform(config, phase, basis_dir=None):
    g = groups.radiounet_groups(config.model_config(), phase)
    return UniformNoiseFactory(config.clip_norm, config.noise_multiplier, groups=g, seed=_seed(config))


def _central_dp(config, phase, basis_dir=None):
    return central_gaussian_factory(config.noise_multiplier, config.clients_per_round, config.clip_norm)


def _ddp(config, phase, basis_dir=None):
    return secure_dp.ddp_mean_factory(config.noise_multiplier, config.clients_per_round, config.clip_norm, config.ddp_bits, config.ddp_mechanism)


def _directed(config, phase, basis_dir=None):
    g = groups.radiounet_groups(config.model_config(), phase)
    return DirectedNoiseFactory(config.clip_norm, config.noise_multiplier, groups=g, seed=_seed(config))


def _subspace(config, phase, basis_dir=None):
    if config.basis_scope == "client":
        return _subspace_client(config, phase, basis_dir)
    if basis_dir is None:
        raise ValueError("the subspace defense needs a basis folder (basis_dir)")
    return SubspaceNoiseFactory(
        config.clip_norm,
        config.noise_multiplier,
        basis_refresh.subspace_groups(config, phase),
        share=config.subspace_share,
        basis_path=basis_refresh.basis_path(basis_dir, phase),
        seed=_seed(config),
    )


def _client_basis_dir(config, phase, basis_dir, name):
    if basis_dir is None:
        raise ValueError(f"the {name} defense needs a basis folder (basis_dir)")
    return basis_refresh.owner_basis_dir(basis_dir, phase)


def _subspace_client(config, phase, basis_dir=None):
    return ClientSubspaceNoiseFactory(
        config.clip_norm,
        config.noise_multiplier,
        basis_refresh.subspace_groups(config, phase, scope="client"),
        _client_basis_dir(config, phase, basis_dir, "subspace_client"),
        basis_refresh.map_owners(config),
        share=config.subspace_share,
        seed=_seed(config),
    )


def _aligned(config, phase, basis_dir=None):
    return AlignedNoiseFactory(
        config.clip_norm,
        config.noise_multiplier,
        basis_refresh.subspace_groups(config, phase),
        _client_basis_dir(config, phase, basis_dir, "aligned"),
        basis_refresh.map_owners(config),
        seed=_seed(config),
    )


def _adaptive(config, phase, basis_dir=None):
    common = dict(total_rounds=config.rounds, phase=int(phase == Phase.STAGE2), sigma_min=config.sigma_min, seed=_seed(config))
    if config.adaptive_partition == "leakage":
        if basis_dir is None:
            raise ValueError("the adaptive defense on the leakage partition needs a basis folder (basis_dir)")
        return AdaptiveSubspaceNoiseFactory(
            config.clip_norm,
            config.noise_multiplier,
            basis_refresh.subspace_groups(config, phase),
            basis_path=basis_refresh.basis_path(basis_dir, phase),
            **common,
        )
    g = groups.radiounet_groups(config.model_config(), phase)
    return AdaptiveGroupNoiseFactory(config.clip_norm, config.noise_multiplier, groups=g, **common)


# Cost ranks at the CPU default: Adaptive trains its allocator; Subspace recomputes its basis on
# the twin every basis_every rounds (its place is a guess, not measured); FedSGD's clients take one
# step per batch; Uniform Noise's attacks stop when its model diverges.
register_defense("none", Defense("two_stage", _none, "No Defense: two-stage protocol, weighted mean", "No Defense", cost_rank=4))
register_defense("fedsgd", Defense("fedsgd", _none, "FedSGD: one local gradient step, both stages", "FedSGD", cost_rank=2))
register_defense("clip", Defense("two_stage", _clip, "Clip Only: client-side L2 clipping at C", "Clip Only", cost_rank=5))
register_defense(
    "uniform",
    Defense(
        "two_stage",
        _uniform,
        "Uniform Noise: clip, then N(0, (C nu)^2) on every coordinate (TF-Privacy Gaussian query)",
        "Uniform Noise",
        NOISE_FIELDS,
        cost_rank=6,
    ),
)
register_defense(
    "directed",
    Defense(
        "two_stage",
        _directed,
        "Directed Uniform: clip, then the whole budget on the transmitter-sensitive groups",
        "Directed Uniform",
        NOISE_FIELDS,
        cost_rank=3,
    ),
)
register_defense(
    "adaptive",
    Defense(
        "two_stage",
        _adaptive,
        "Adaptive: clip, then the budget split by the learned allocator (Eqs. (12)-(16))",
        "Adaptive (proposed)",
        NOISE_FIELDS + ALLOCATOR_FIELDS,
        cost_rank=0,
    ),
)
register_defense(
    "subspace",
    Defense(
        "two_stage",
        _subspace,
        "Subspace Noise: clip, then a share of the budget in the twin's leakage subspace, the rest on its complement",
        "Subspace Noise",
        NOISE_FIELDS + ("subspace_share", "basis_scope"),
        cost_rank=1,
    ),
)
# The front's row for Subspace Noise with each client's own basis: `subspace` with basis_scope='client'.
register_defense(
    "subspace_client",
    Defense(
        "two_stage",
        _subspace_client,
        "Subspace Noise (client): a share of the budget in the uploading client's own leakage basis, the rest on its complement",
        "Subspace (client)",
        NOISE_FIELDS + ("subspace_share",),
        cost_rank=1,
    ),
)
register_defense(
    "aligned",
    Defense(
        "two_stage",
        _aligned,
        "Aligned Noise: the closed-form allocation over the client's own leakage directions and the residual",
        "Aligned",
        NOISE_FIELDS + ("aligned_tradeoff",),
        cost_rank=1,
    ),
)
register_defense(
    "central_dp",
    Defense(
        "two_stage",
        _central_dp,
        "Central DP (DP-FedAvg): clients clip at C, the server adds N(0, (z C)^2) to the sum (TFF's DifferentiallyPrivateFactory.gaussian_fixed)",
        "Central DP",
        ("noise_multiplier",),
        cost_rank=5,
        upload_view=_clip,
        aggregate_dp="central",
    ),
)
register_defense(
    "ddp",
    Defense(
        "two_stage",
        _ddp,
        "Distributed DP: secure aggregation of clipped, discretized uploads, each with its share of noise of z C on the sum (TFF's DistributedDpSumFactory)",
        "Distributed DP",
        ("noise_multiplier",) + DDP_FIELDS,
        cost_rank=3,
        uploads_observable=False,
        aggregate_dp="distributed",
    ),
)
