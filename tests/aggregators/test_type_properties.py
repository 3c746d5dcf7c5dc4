"""Exact `initialize` / `next` type signatures of every factory, built by hand (TFF's test_type_properties)."""

import collections

import numpy as np
import pytest
import tensorflow_federated as tff

from tff_radiomap.aggregators import (
    AdaptiveGroupNoiseFactory,
    AdaptiveSubspaceNoiseFactory,
    ClipOnlyFactory,
    DirectedNoiseFactory,
    SubspaceNoiseFactory,
    SymmetricQuantizationFactory,
    TopKFactory,
    UniformNoiseFactory,
    central_gaussian_factory,
)
from tff_radiomap.privacy.groups import ParameterGroups, SubspaceGroups

F32, I32, I64 = np.float32, np.int32, np.int64
VALUE_TYPE = tff.to_type([tff.TensorType(F32, [2]), tff.TensorType(F32, [3])])
WEIGHT_TYPE = tff.TensorType(F32)
# TFF's means: the unweighted one holds an unnamed pair of empty sum states.
MEAN_STATE = {False: ((), ()), True: collections.OrderedDict(value_sum_process=(), weight_sum_process=())}
MEAN_MEASUREMENTS = {False: collections.OrderedDict(mean_value=(), mean_count=()), True: collections.OrderedDict(mean_value=(), mean_weight=())}


def _groups():
    """Two groups over the 5 entries: 'tx' (2, sensitive) and 'residual' (3)."""
    return ParameterGroups(("tx", "residual"), (True, False), (np.array([0, 1], np.int32), np.array([1, 1, 0], np.int32)))


def _subspace_groups():
    """Two one-column blocks of a basis of R^5 and the residual: 3 groups."""
    basis, _ = np.linalg.qr(np.random.default_rng(1).normal(size=(5, 2)))
    return SubspaceGroups(((2,), (3,)), (1, 1), basis=basis.astype(np.float32))


def _create(factory, weighted: bool):
    return factory.create(VALUE_TYPE, WEIGHT_TYPE) if weighted else factory.create(VALUE_TYPE)


def _assert_types(process, state, measurements, weighted: bool):
    """process.initialize: () -> state@SERVER; process.next: (state, value@CLIENTS[, weight@CLIENTS])
    -> <state, result=value@SERVER, measurements@SERVER>."""
    server_state = tff.FederatedType(state, tff.SERVER)
    parameter = collections.OrderedDict(state=server_state, value=tff.FederatedType(VALUE_TYPE, tff.CLIENTS))
    if weighted:
        parameter["weight"] = tff.FederatedType(WEIGHT_TYPE, tff.CLIENTS)
    result = tff.templates.MeasuredProcessOutput(
        state=server_state, result=tff.FederatedType(VALUE_TYPE, tff.SERVER), measurements=tff.FederatedType(measurements, tff.SERVER)
    )
    process.initialize.type_signature.check_equivalent_to(tff.FunctionType(parameter=None, result=server_state))
    process.next.type_signature.check_equivalent_to(tff.FunctionType(parameter=parameter, result=result))


# -- the client-perturbation defenses: state <extras, inner>, measurements <defense, inner> ----------
def _defense_measurements(num_groups: int, weighted: bool):
    defense = collections.OrderedDict(
        norm_before_clip=F32,
        norm_after_clip=F32,
        clipped_fraction=F32,
        sigma=tff.TensorType(F32, [num_groups]),
        energy=tff.TensorType(F32, [num_groups]),
        budget_spent=F32,
        budget=F32,
    )
    return collections.OrderedDict(defense=defense, inner=MEAN_MEASUREMENTS[weighted])


def _eta(num_groups: int, summary_size: int, hidden: int = 2):
    """f_eta's parameters: summary [summary_size] -> hidden -> one logit a group."""
    return collections.OrderedDict(
        w1=tff.TensorType(F32, [summary_size, hidden]),
        b1=tff.TensorType(F32, [hidden]),
        w2=tff.TensorType(F32, [hidden, num_groups]),
        b2=tff.TensorType(F32, [num_groups]),
    )


FIXED_NOISE = {  # name: (factory, groups G)
    "clip_only": (lambda: ClipOnlyFactory(1.0), 1),
    "uniform_noise": (lambda: UniformNoiseFactory(1.0, 1.0), 1),
    "directed_noise": (lambda: DirectedNoiseFactory(1.0, 1.0, _groups()), 2),
    "subspace_noise": (lambda: SubspaceNoiseFactory(1.0, 1.0, _subspace_groups()), 3),
}


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("name", sorted(FIXED_NOISE))
def test_type_properties_fixed_noise_defenses(name, weighted):
    make, num_groups = FIXED_NOISE[name]
    state = collections.OrderedDict(extras=collections.OrderedDict(), inner=MEAN_STATE[weighted])
    _assert_types(_create(make(), weighted), state, _defense_measurements(num_groups, weighted), weighted)


@pytest.mark.parametrize("weighted", [False, True])
def test_type_properties_seeded_defense_carries_its_seed(weighted):
    state = collections.OrderedDict(extras=collections.OrderedDict(seed=tff.TensorType(I64, [2])), inner=MEAN_STATE[weighted])
    _assert_types(_create(UniformNoiseFactory(1.0, 1.0, seed=7), weighted), state, _defense_measurements(1, weighted), weighted)


ADAPTIVE = {  # name: (factory, groups G, summary size of Psi for G groups)
    "adaptive_group_noise": (lambda: AdaptiveGroupNoiseFactory(1.0, 1.0, _groups(), hidden=2), 2, 11),
    "adaptive_subspace_noise": (lambda: AdaptiveSubspaceNoiseFactory(1.0, 1.0, _subspace_groups(), hidden=2), 3, 15),
}


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("name", sorted(ADAPTIVE))
def test_type_properties_adaptive_defenses(name, weighted):
    make, num_groups, summary_size = ADAPTIVE[name]
    extras = collections.OrderedDict(eta=_eta(num_groups, summary_size), round_index=I32, phase=I32)
    state = collections.OrderedDict(extras=extras, inner=MEAN_STATE[weighted])
    _assert_types(_create(make(), weighted), state, _defense_measurements(num_groups, weighted), weighted)


# -- the encoding stages: the inner state, measurements <inner, wire, uplink_bytes> -----------------
def _quantization_wire():
    return collections.OrderedDict(value_bytes=I64, scale_bytes=I64, bytes_per_client=I64)


def _top_k_wire():
    return collections.OrderedDict(kept=I64, index_bytes=I64, value_bytes=I64, side_bytes=I64, bytes_per_client=I64)


def _stage_measurements(inner, wire):
    return collections.OrderedDict(inner=inner, wire=wire, uplink_bytes=I64)


@pytest.mark.parametrize("weighted", [False, True])
def test_type_properties_symmetric_quantization(weighted):
    measurements = _stage_measurements(MEAN_MEASUREMENTS[weighted], _quantization_wire())
    _assert_types(_create(SymmetricQuantizationFactory(8), weighted), MEAN_STATE[weighted], measurements, weighted)


@pytest.mark.parametrize("weighted", [False, True])
def test_type_properties_top_k(weighted):
    measurements = _stage_measurements(MEAN_MEASUREMENTS[weighted], _top_k_wire())
    _assert_types(_create(TopKFactory(2), weighted), MEAN_STATE[weighted], measurements, weighted)


@pytest.mark.parametrize("weighted", [False, True])
def test_type_properties_top_k_around_quantization(weighted):
    inner = _stage_measurements(MEAN_MEASUREMENTS[weighted], _quantization_wire())
    factory = TopKFactory(2, inner_factory=SymmetricQuantizationFactory(8))
    _assert_types(_create(factory, weighted), MEAN_STATE[weighted], _stage_measurements(inner, _top_k_wire()), weighted)


# -- central DP: TFF's DifferentiallyPrivateFactory (unweighted only) ------------------------------
def test_type_properties_central_gaussian():
    state = collections.OrderedDict(
        query_state=collections.OrderedDict(numerator_state=collections.OrderedDict(l2_norm_clip=F32, stddev=F32), denominator=F32),
        agg_state=(),
        dp_event=collections.OrderedDict(module_name=np.str_, class_name=np.str_, noise_multiplier=F32),
        is_init_state=np.bool_,
    )
    measurements = collections.OrderedDict(dp_query_metrics=(), dp=())
    _assert_types(central_gaussian_factory(1.0, 3, 1.0).create(VALUE_TYPE), state, measurements, weighted=False)
