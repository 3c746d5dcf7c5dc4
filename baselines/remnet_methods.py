"""The methods of the EPFL-REMNet comparison, by name: the proposal, its ablations, the baselines."""

from __future__ import annotations

from baselines.ditto import ditto
from baselines.fedavg import fedavg
from baselines.fedfly import fedfly
from baselines.fedrep import fedrep
from baselines.personalized import personalized
from baselines.pfedgp import pfedgp
from tff_radiomap.learning import epfl_ablations, local_model
from tff_radiomap.learning.epfl_remnet import EpflRemnetConfig
from tff_radiomap.learning.rem_runner import Method

EPFL = "epfl_remnet"
BASELINES = ("fedavg", "fedfly", "pfedgp", "pfl_uncompressed", "fedrep", "ditto")
STACKED_ONLY = ("fedrep", "ditto")  # Schedules only the stacked clients (epfl_stacked) run.
ABLATIONS = tuple(epfl_ablations.ABLATIONS)
METHODS = (EPFL,) + BASELINES + ABLATIONS
EPFL_AND_BASELINES = (EPFL,) + BASELINES


def epfl_remnet(config: EpflRemnetConfig, name: str = EPFL) -> Method:
    return Method(name, config, local_model.remnet_local_model(config.model, config.split_head))


def method(name: str, base: EpflRemnetConfig) -> Method:
    """The method `name` built around EPFL-REMNet's configuration `base`."""
    builders = {"fedavg": fedavg, "fedfly": fedfly, "pfedgp": pfedgp, "pfl_uncompressed": personalized, "fedrep": fedrep, "ditto": ditto}
    if name == EPFL:
        return epfl_remnet(base)
    if name in builders:
        return builders[name](base)
    if name in epfl_ablations.ABLATIONS:
        return epfl_remnet(epfl_ablations.ablated(base, name), name)
    raise ValueError(f"method={name!r}: expected one of {METHODS}")
