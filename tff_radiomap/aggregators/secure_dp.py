"""Secure aggregation with distributed DP: TFF's `DistributedDpSumFactory` as a mean of uploads.

Each client clips its update to L2 norm C, rotates it, scales and rounds it to integers, adds its
share of discrete Gaussian or Skellam noise, and reduces it modulo 2^bits; the server learns only
the modular sum (`federated_secure_sum_bitwidth`), undoes the scaling and the rotation, and divides
by the number of clients. An observer of one client's upload sees a masked value; the server sees
the sum with noise of standard deviation about z C a coordinate (`privacy.ddp_accounting` gives
its user-level epsilon). TFF 0.87 does not export the factory under `tff.aggregators`: it is taken
from its module.

Simulation: the secure intrinsics run as plain sums (no cryptography) in the package's contexts
(`runtime.workers`); that the process aggregates nothing else in the clear is checked statically
by `tff.test.assert_not_contains_unsecure_aggregation`. Its count of clients is summed securely
too (`SecureSumFactory`), so the mean adds no unsecure aggregation.

Composed into a learning process, the factory's computations nest deeper than protobuf's parser
allows (TFF 0.87 builds the process's `next` and fails with "DecodeError: Error parsing message"):
`flattened` rewrites an aggregation process into call-dominant form (one block of calls) first.
"""

from __future__ import annotations

import tensorflow_federated as tff
from tensorflow_federated.python.aggregators import distributed_dp
from tensorflow_federated.python.core.impl.compiler import transformations
from tensorflow_federated.python.core.impl.computation import computation_impl

MECHANISMS = tuple(distributed_dp.DP_MECHANISMS)  # 'distributed_dgauss', 'distributed_skellam'
MAX_CLIENTS_PER_ROUND = 2**16  # The secure count's bound: a round of more clients is refused.
# The chance that a coordinate of a round's sum wraps around modulo 2^bits, which TFF's scale is
# chosen for (its default, 1e-4, wraps ~12 of 125 000 coordinates a round: each off by 2^bits over
# the scale). At 1e-9 a 60-round run of 125 000 coordinates expects 0.0075 wraps in all.
MODCLIP_PROB = 1e-9


def ddp_sum_factory(noise_multiplier: float, clients_per_round: int, clip_norm: float, bits: int = 20, mechanism: str = "distributed_skellam"):
    """TFF's `DistributedDpSumFactory` with fixed clipping at `clip_norm` and the DFT rotation
    (it pads by at most one coordinate; 'hd' pads to a power of 2). Its scale keeps the chance of
    a modular wrap-around at `MODCLIP_PROB` a coordinate of the sum."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"mechanism={mechanism!r}: expected one of {MECHANISMS}")
    if not 1 <= bits <= 22:
        raise ValueError(f"bits={bits!r}: expected an integer in 1..22 (DistributedDpSumFactory's range)")
    return distributed_dp.DistributedDpSumFactory(
        noise_multiplier=noise_multiplier,
        expected_clients_per_round=clients_per_round,
        bits=bits,
        l2_clip=clip_norm,
        modclip_prob=MODCLIP_PROB,
        mechanism=mechanism,
        rotation_type="dft",
        auto_l2_clip=False,
    )


def ddp_mean_factory(noise_multiplier: float, clients_per_round: int, clip_norm: float, bits: int = 20, mechanism: str = "distributed_skellam"):
    """The mean of the round's uploads through `ddp_sum_factory`, its count summed securely: an
    unweighted factory (a weighted learning process averages its clients uniformly), marked
    `secure_aggregation`."""
    factory = tff.aggregators.UnweightedMeanFactory(
        value_sum_factory=ddp_sum_factory(noise_multiplier, clients_per_round, clip_norm, bits, mechanism),
        count_sum_factory=tff.aggregators.SecureSumFactory(MAX_CLIENTS_PER_ROUND),
    )
    # Read by `learning.radiounet_process.build_phase_process`: the clients' measurements are then
    # summed securely as well.
    factory.secure_aggregation = True
    return factory


def _flat(comp):
    return computation_impl.ConcreteComputation.from_building_block(transformations.to_call_dominant(comp.to_building_block()))


def flattened(process: tff.templates.AggregationProcess) -> tff.templates.AggregationProcess:
    """The same process with its computations in call-dominant form (shallow protos): what a
    learning process composed over DDP's deep computations needs. `next` keeps its
    `MeasuredProcessOutput` result."""
    flat_next = _flat(process.next)
    parameter = process.next.type_signature.parameter

    def output(out):
        return tff.templates.MeasuredProcessOutput(out[0], out[1], out[2])

    if len(parameter) == 3:  # A weighted process: (state, value, weight).

        @tff.federated_computation(parameter)
        def next_fn(state, value, weight):
            return output(flat_next(state, value, weight))

    else:

        @tff.federated_computation(parameter)
        def next_fn(state, value):
            return output(flat_next(state, value))

    return tff.templates.AggregationProcess(_flat(process.initialize), next_fn)
