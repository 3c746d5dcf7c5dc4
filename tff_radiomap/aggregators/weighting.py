"""One implementation, two kinds of process: the weighted and unweighted `next` of a factory.

A factory of this package subclasses both `tff.aggregators.UnweightedAggregationFactory` and
`tff.aggregators.WeightedAggregationFactory`: `create(value_type)` builds an unweighted process,
`create(value_type, weight_type)` a weighted one. Its round is written once, as
`next_impl(state, value, weight=None)`; `next_computation` wraps it in the federated
computation of the right signature, as TFF's own `robust._make_wrapper` does for its two factory
classes. `inner_process` picks and creates the inner factory of the matching kind; `as_weighted`
makes a model aggregator of either kind weighted (what a learning process takes).
"""

from __future__ import annotations

from typing import Callable

import tensorflow_federated as tff

_Weighted = tff.aggregators.WeightedAggregationFactory
_Unweighted = tff.aggregators.UnweightedAggregationFactory


def inner_process(owner, inner_factory, value_type, weight_type=None) -> tff.templates.AggregationProcess:
    """The process of `inner_factory` for `value_type` (weighted iff `weight_type` is given).

    `inner_factory` None: TFF's mean of the matching kind. Raises TypeError when the factory is
    not of that kind (`owner`, the outer factory, names the culprit in the message).
    """
    weighted = weight_type is not None
    if inner_factory is None:
        inner_factory = tff.aggregators.MeanFactory() if weighted else tff.aggregators.UnweightedMeanFactory()
    wanted = _Weighted if weighted else _Unweighted
    if not isinstance(inner_factory, wanted):
        kind = "weighted" if weighted else "unweighted"
        raise TypeError(f"{type(owner).__name__} was created as {kind}, but its inner factory {inner_factory!r} is not a {wanted.__name__}")
    return inner_factory.create(value_type, weight_type) if weighted else inner_factory.create(value_type)


def inner_next(process: tff.templates.AggregationProcess, state, value, weight=None) -> tff.templates.MeasuredProcessOutput:
    """`process.next` with the weight iff there is one (inside a federated computation)."""
    return process.next(state, value) if weight is None else process.next(state, value, weight)


def next_computation(next_impl: Callable, state_type, value_type, weight_type=None) -> tff.Computation:
    """`next_impl(state, value[, weight])` as the `next` of an `AggregationProcess`.

    The computation takes (state: `state_type`, value: `value_type`@CLIENTS) and, iff
    `weight_type` is given, weight: `weight_type`@CLIENTS.
    """
    value_at_clients = tff.FederatedType(value_type, tff.CLIENTS)
    if weight_type is None:

        @tff.federated_computation(state_type, value_at_clients)
        def next_fn(state, value):
            return next_impl(state, value)

    else:

        @tff.federated_computation(state_type, value_at_clients, tff.FederatedType(weight_type, tff.CLIENTS))
        def next_fn(state, value, weight):
            return next_impl(state, value, weight)

    return next_fn


AggregationFactory = tff.aggregators.WeightedAggregationFactory | tff.aggregators.UnweightedAggregationFactory


def as_weighted(model_aggregator: AggregationFactory | None) -> tuple[tff.aggregators.WeightedAggregationFactory, str]:
    """(weighted factory, client weighting it applies: 'num_examples' or 'uniform')."""
    if model_aggregator is None:
        # no_nan_division: a round whose every update was zeroed (weight 0) leaves the model as is.
        return tff.aggregators.MeanFactory(no_nan_division=True), "num_examples"
    if isinstance(model_aggregator, tff.aggregators.WeightedAggregationFactory):
        return model_aggregator, "num_examples"
    if isinstance(model_aggregator, tff.aggregators.UnweightedAggregationFactory):
        return tff.aggregators.as_weighted_aggregator(model_aggregator), "uniform"
    raise TypeError(f"model_aggregator={model_aggregator!r}: expected a tff.aggregators.WeightedAggregationFactory or UnweightedAggregationFactory")
