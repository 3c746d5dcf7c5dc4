"""Client-side clipping and group-wise Gaussian noise as a `tff.aggregators` factory.

The four privacy defenses of paper 000 share one shape, implemented here once:

    client:  clip the update to L2 norm C (Eq. (17)); add N(0, sigma_g^2) to every coordinate of
             group g (Eqs. (18)-(19)); upload.
    inner:   aggregate the privatized uploads with an inner factory (a mean by default).
    server:  advance the defense's own state (round counter, allocator parameters).

The noise is added before upload, so an observer of individual uploads sees it (unlike TFF's
`DifferentiallyPrivateFactory`, which adds noise to the sum on the server). A subclass decides
only the per-group sigmas (`_client_sigmas`) and, optionally, server-side parameters
(`_initial_extras`, `_update_extras`) that are broadcast to clients.

One factory object serves both kinds of TFF pipeline: `create(value_type)` builds an unweighted
process (for `build_unweighted_fed_avg`), `create(value_type, weight_type)` a weighted one (for
`build_weighted_fed_avg`); the inner factory defaults to the matching mean.

Measurements (means over the round's clients): `norm_before_clip`, `clipped_fraction`,
`norm_after_clip`, `sigma` and `energy` per group, `budget_spent` (sum_g d_g sigma_g^2) and
`budget` (B), plus the inner factory's under `inner`.

State: `PerturbationState`, the extras broadcast to clients and the inner factory's state;
between rounds a driver reads and edits the extras with `get_extras` and `replace_extras`.

Randomness: with `seed=None` (the default) the noise comes from TensorFlow's unseeded generator,
fresh on every call. With an integer seed it is reproducible: the server state carries a seed that
advances every round, and each client mixes in a hash of its own clipped update so that clients of
one round draw different noise. Reproducible noise is for experiments; a deployment should keep
`seed=None`.
"""

from __future__ import annotations

import collections
import collections.abc
import dataclasses
from typing import Any

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_radiomap import seeds as seeds_lib
from tff_radiomap.aggregators import keyed, weighting
from tff_radiomap.privacy import budget as budget_lib
from tff_radiomap.privacy.groups import ParameterGroups


@dataclasses.dataclass(frozen=True)
class PerturbationState:
    """The state of a `ClientPerturbationFactory` process between rounds.

    TFF carries it as `OrderedDict(extras=..., inner=...)`: `as_value()` builds that value,
    `from_value` reads one (e.g. a learning process's `state.aggregator`).
      extras: the defense parameters the server broadcasts to clients every round (the factory's
        `initial_extras()`, e.g. eta, round_index and phase of the adaptive allocator), plus
        `seed` for a seeded factory; the factory's `_update_extras` advances them.
      inner: the inner factory's state.
    """

    extras: Any
    inner: Any

    @staticmethod
    def holds(value) -> bool:
        """True if `value` has this state's layout (a mapping with 'extras' and 'inner')."""
        return isinstance(value, collections.abc.Mapping) and "extras" in value and "inner" in value

    @classmethod
    def from_value(cls, value) -> PerturbationState:
        """The typed view of a state value (its extras copied into a fresh OrderedDict)."""
        return cls(extras=collections.OrderedDict(value["extras"]), inner=value["inner"])

    def as_value(self) -> collections.OrderedDict:
        """The value the process's `next` takes: OrderedDict(extras=..., inner=...)."""
        return collections.OrderedDict(extras=self.extras, inner=self.inner)

    def replace_extras(self, **updates) -> PerturbationState:
        """This state with the named extras replaced; raises KeyError for one it does not hold."""
        extras = collections.OrderedDict(self.extras)
        for key, value in updates.items():
            if key not in extras:
                raise KeyError(f"aggregator state has no extra {key!r}; it has {list(extras)}")
            extras[key] = value
        return dataclasses.replace(self, extras=extras)


class ClientPerturbationFactory(tff.aggregators.UnweightedAggregationFactory, tff.aggregators.WeightedAggregationFactory):
    """Base: clip at `clip_norm`, add per-group noise on the client, aggregate with `inner_factory`.

    A subclass with `keyed = True` takes keyed values (`aggregators.keyed`): its `_perturb` then
    finds the uploading client's key in `extras["client"]`.
    """

    keyed = False

    def __init__(
        self,
        clip_norm: float,
        noise_multiplier: float = 0.0,
        groups: ParameterGroups | None = None,
        inner_factory=None,
        seed: int | None = None,
    ):
        if not np.isfinite(clip_norm) or clip_norm <= 0:
            raise ValueError(f"clip_norm={clip_norm}: expected a positive finite number")
        if not np.isfinite(noise_multiplier) or noise_multiplier < 0:
            raise ValueError(f"noise_multiplier={noise_multiplier}: expected a non-negative finite number")
        self.clip_norm = float(clip_norm)
        self.noise_multiplier = float(noise_multiplier)
        self.groups = groups
        self.inner_factory = inner_factory
        self.seed = seed

    # -- hooks for subclasses -----------------------------------------------------------------
    def _initial_extras(self, groups: ParameterGroups) -> collections.OrderedDict:
        """Server-held defense parameters (numpy values), broadcast to clients every round."""
        return collections.OrderedDict()

    def _update_extras(self, extras):
        """Server-side update of the extras after a round (TF code)."""
        return extras

    def _client_sigmas(self, extras, clipped_flat, group_ids, groups: ParameterGroups):
        """Per-group sigma [G] for one client's clipped update (TF code)."""
        raise NotImplementedError

    def _perturb(self, extras, clipped, group_ids, groups: ParameterGroups, seeds):
        """Adds the group-wise noise of Eqs. (18)-(19); returns (noised list, sigma [G]).

        `seeds` is None (unseeded noise) or a list of 2 * len(clipped) stateless seeds.
        """
        sigma = tf.cast(self._client_sigmas(extras, clipped, group_ids, groups), tf.float32)
        seeds = seeds or [None] * len(clipped)
        noised = [c + self._noise(tf.shape(c), tf.gather(sigma, i), s) for c, i, s in zip(clipped, group_ids, seeds)]
        return noised, sigma

    def _clip(self, flat):
        """Global L2 clipping (Eq. (17)); returns (clipped list, norm before clipping)."""
        clipped, norm = tf.clip_by_global_norm(flat, self.clip_norm)
        return clipped, norm

    def _noise(self, shape, sigma, seed):
        """Standard normal noise scaled per coordinate by `sigma` (a tensor of `shape`)."""
        if seed is None:
            return tf.random.normal(shape) * sigma
        return tf.random.stateless_normal(shape, seed=seed) * sigma

    # -- the privacy claim ------------------------------------------------------------------------
    def fixed_sigmas(self) -> np.ndarray | None:
        """Per-group sigma [G] when it depends on neither the update nor the round's extras (what
        an observer's likelihood and `dp_event` use), else None. The base: unknown (None)."""
        return None

    def dp_event(self):
        """The `dp_accounting.DpEvent` of one upload against an observer of individual uploads
        (add/remove adjacency of the client's update, sensitivity C), or None: no guarantee.

        With fixed noise that covers every direction (every group with coordinates has sigma > 0),
        the upload is a Gaussian mechanism with covariance Sigma = sum_g sigma_g^2 P_g: the clip
        bounds the update's norm in every direction, so its privacy loss is that of the
        least-noised direction, `GaussianDpEvent(min_g sigma_g / C)`. Noise that leaves a direction
        bare (Clip Only, Directed Uniform off its groups), or whose scale depends on the update,
        claims none. `privacy.accounting.PerClientAccountant` composes the events over a client's
        uploads.
        """
        sigmas = self.fixed_sigmas()
        if sigmas is None or self.groups is None:
            return None
        return self._least_noised_event(sigmas)

    def _least_noised_event(self, sigmas):
        """`GaussianDpEvent(min_g sigma_g / C)` over the groups with coordinates; None if one of
        them is noise-free."""
        present = np.asarray(self.groups.sizes) > 0
        least = float(np.min(np.asarray(sigmas, np.float64)[present]))
        return dp_accounting.GaussianDpEvent(least / self.clip_norm) if least > 0 else None

    # Whether `client_dp_event` differs by client and moves between rounds (the accountant then
    # asks it for every upload rather than fixing one event per phase).
    per_client_events = False

    def client_dp_event(self, client: int):
        """The event of one upload by client `client` under the defense as it stands: `dp_event()`
        for a defense whose noise is every client's alike."""
        return self.dp_event()

    # -- what a defense-aware observer does ------------------------------------------------------
    def aware_variants(self) -> tuple[str, ...]:
        """Views a defense-aware observer takes of a privatized upload besides the plain one:
        'whitened' (each group scaled by 1 / its sigma, the noise covariance's inverse square
        root, up to a common factor; with noise-free groups, the noised ones removed) and
        'projected' (only the least-noised groups kept). A defense whose noise is the same on every
        coordinate has none."""
        return ("whitened", "projected")

    def aware_weights(self, sigma, variant: str):
        """Per-group weights ([G], or [N, G] row by row) of view `variant` for per-group noise scales
        `sigma` (TF code)."""
        sigma = tf.convert_to_tensor(sigma, tf.float32)
        present = tf.constant(self.groups.sizes > 0) if self.groups is not None else tf.ones_like(sigma, tf.bool)
        s_min = tf.reduce_min(tf.where(present, sigma, tf.fill(tf.shape(sigma), np.float32(np.inf))), axis=-1, keepdims=True)
        least = tf.cast(sigma <= s_min * (1.0 + 1e-6), tf.float32)
        if variant == "projected":
            return least
        if variant == "whitened":
            return tf.where(s_min > 0, s_min / tf.maximum(sigma, 1e-30), least)
        raise ValueError(f"aware view {variant!r}: expected one of {self.aware_variants()}")

    def whiten(self, flat, weights):
        """The upload (a list of tensors) with group g's part scaled by weights[g] (TF code)."""
        groups = self.groups or ParameterGroups.single([tuple(t.shape) for t in flat])
        return [u * tf.gather(weights, tf.constant(ids)) for u, ids in zip(flat, groups.ids)]

    # -- outside TFF ---------------------------------------------------------------------------
    def initial_extras(self) -> collections.OrderedDict:
        """The defense parameters a fresh process starts with (what `privatize` uses by default)."""
        return self._initial_extras(self.groups)

    def privatize(self, flat, extras=None, seed=None):
        """Clip and perturb one upload outside TFF (eager TF), exactly as a client would.

        Used by the attack to privatize observed traces. `flat` is a list of tensors matching the
        factory's groups; `extras` are defense parameters (default: `initial_extras()`); `seed` an
        int or a pair (Python or int64 tensor) for reproducible noise. Returns (noised list, sigma [G]).
        """
        groups = self.groups or ParameterGroups.single([tuple(t.shape) for t in flat])
        groups.check_shapes([tuple(t.shape) for t in flat])
        extras = self.initial_extras() if extras is None else extras
        extras = tf.nest.map_structure(tf.convert_to_tensor, extras)
        clipped, _ = self._clip([tf.convert_to_tensor(t, tf.float32) for t in flat])
        seeds = None
        if seed is not None:  # An int s gives the per-tensor seeds [s, i]; a pair (a, b) seeds.fold_in((a, b), i).
            seed = tf.cast(tf.convert_to_tensor(seed), tf.int64)
            if seed.shape.rank == 0:
                seed = tf.stack([seed, tf.constant(0, tf.int64)])
            seeds = [seeds_lib.fold_in(seed, i) for i in range(2 * len(flat))]
        return self._perturb(extras, clipped, [tf.constant(a) for a in groups.ids], groups, seeds)

    # -- the TFF process ----------------------------------------------------------------------
    def budget(self, groups: ParameterGroups | None = None) -> float:
        """B = d (C nu)^2 for the given (or the factory's) groups.

        Raises ValueError when neither is given: d, the number of coordinates, is then only known
        to `create(value_type)`.
        """
        groups = groups or self.groups
        if groups is None:
            raise ValueError(
                f"{type(self).__name__}(clip_norm={self.clip_norm}, noise_multiplier={self.noise_multiplier}).budget(): "
                "B = d (C nu)^2 needs the number of coordinates d; pass groups= here or to the factory "
                "(ParameterGroups.single(shapes) for one group)"
            )
        return budget_lib.total_budget(groups.num_coordinates, self.clip_norm, self.noise_multiplier)

    def _groups_for(self, value_type) -> tuple[list, ParameterGroups]:
        tensor_types = list(tff.structure.flatten(value_type))
        for t in tensor_types:
            if not np.issubdtype(t.dtype, np.floating):
                raise TypeError(f"{type(self).__name__} needs floating-point values, got {t}")
        shapes = [tuple(t.shape) for t in tensor_types]
        groups = self.groups or ParameterGroups.single(shapes)
        groups.check_shapes(shapes)
        return tensor_types, groups

    def create(self, value_type, weight_type=None) -> tff.templates.AggregationProcess:
        # A keyed factory takes <update, client> (`aggregators.keyed`) and aggregates the update.
        update_type = keyed.update_type(value_type) if self.keyed else value_type
        tensor_types, groups = self._groups_for(update_type)
        inner_process = weighting.inner_process(self, self.inner_factory, update_type, weight_type)
        budget = np.float32(self.budget(groups))
        sizes = groups.sizes.astype(np.float32)
        extras0 = self._initial_extras(groups)
        if self.seed is not None:
            extras0["seed"] = np.array([self.seed, 0], np.int64)
        defense = self

        @tff.tensorflow.computation
        def initial_extras():
            return tf.nest.map_structure(tf.constant, extras0)

        extras_type = initial_extras.type_signature.result

        @tff.tensorflow.computation(value_type, extras_type)
        def client_perturb(value, extras):
            if defense.keyed:  # The key reaches the defense with the broadcast extras.
                extras = collections.OrderedDict(extras, **{keyed.CLIENT: value[keyed.CLIENT]})
                value = value[keyed.UPDATE]
            flat = tf.nest.flatten(value)
            ids = [tf.constant(a) for a in groups.ids]
            clipped, norm = defense._clip(flat)
            seeds = None
            if "seed" in extras:
                salt = _update_hash(clipped)
                seeds = [seeds_lib.fold_in((tf.bitwise.bitwise_xor(extras["seed"][0], salt), extras["seed"][1]), i) for i in range(2 * len(flat))]
            noised, sigma = defense._perturb(extras, clipped, ids, groups, seeds)
            after = tf.linalg.global_norm(clipped)
            measurements = collections.OrderedDict(
                norm_before_clip=norm,
                norm_after_clip=after,
                clipped_fraction=tf.cast(norm > defense.clip_norm, tf.float32),
                sigma=sigma,
                energy=tf.constant(sizes) * tf.square(sigma),
                budget_spent=budget_lib.spent_budget(sigma, sizes),
                budget=tf.constant(budget),
            )
            return tf.nest.pack_sequence_as(value, noised), measurements

        @tff.tensorflow.computation(extras_type)
        def update_extras(extras):
            new = defense._update_extras(extras)
            if "seed" in extras:
                new = collections.OrderedDict(new)
                new["seed"] = extras["seed"] + tf.constant([0, 1], tf.int64)
            return new

        @tff.federated_computation
        def init_fn():
            return tff.federated_zip(PerturbationState(extras=tff.federated_eval(initial_extras, tff.SERVER), inner=inner_process.initialize()).as_value())

        def next_impl(state, value, weight=None):
            # Client work: broadcast the defense parameters, clip and perturb every upload.
            client_extras = tff.federated_broadcast(state.extras)
            noised, client_measurements = tff.federated_map(client_perturb, (value, client_extras))
            # Inner aggregation of the privatized uploads.
            inner_out = weighting.inner_next(inner_process, state.inner, noised, weight)
            # Server work: advance the defense's state.
            new_state = PerturbationState(extras=tff.federated_map(update_extras, state.extras), inner=inner_out.state).as_value()
            measurements = collections.OrderedDict(defense=tff.federated_mean(client_measurements), inner=inner_out.measurements)
            return tff.templates.MeasuredProcessOutput(
                state=tff.federated_zip(new_state), result=inner_out.result, measurements=tff.federated_zip(measurements)
            )

        return tff.templates.AggregationProcess(init_fn, weighting.next_computation(next_impl, init_fn.type_signature.result, value_type, weight_type))


def _update_hash(flat) -> tf.Tensor:
    """An int64 fingerprint of a list of float tensors (for per-client noise seeds)."""
    parts = [tf.reduce_sum(tf.cast(tf.bitcast(tf.reshape(t, [-1]), tf.int32), tf.int64) * (2 * i + 1)) for i, t in enumerate(flat)]
    return tf.add_n(parts) if parts else tf.constant(0, tf.int64)


def get_extras(aggregator_state) -> collections.OrderedDict:
    """The defense extras of a `ClientPerturbationFactory` process's state (e.g. the
    `state.aggregator` of a learning process built with such a factory)."""
    return PerturbationState.from_value(aggregator_state).extras


def replace_extras(aggregator_state, **updates) -> collections.OrderedDict:
    """`aggregator_state` with some defense extras replaced (e.g. the allocator's `eta`), in the
    layout the process takes back; raises KeyError for an extra the state does not hold."""
    return PerturbationState.from_value(aggregator_state).replace_extras(**updates).as_value()
