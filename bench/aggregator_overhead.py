"""Seconds per aggregation of each of our `tff.aggregators` factories against TFF's own.

  .venv/bin/python -m bench.aggregator_overhead [--resolution=64 --width=0.25 --clients=6 --repeats=7]

One aggregation = one `next` of the factory's `AggregationProcess` on the TFF worker, on C client
updates shaped like RadioUNet's stage-1 upload (the same random updates for every factory), with
sample-count weights where the factory is weighted. Factories: TFF's `MeanFactory` (the plain
weighted mean: the baseline) and `DifferentiallyPrivateFactory.gaussian_fixed` (central DP), and
ours: Clip Only, Uniform Noise, Directed Uniform, Adaptive (C = 1, nu = 3, RadioUNet's parameter
groups), Top-K (k_fraction 0.05) and 8-bit symmetric quantization, each over the weighted mean.
The factories are timed in turn within each repeat; prints the median seconds and the median of
the per-repeat differences and ratios against `MeanFactory` and against `gaussian_fixed`.
"""

import collections
import os
import statistics
import time

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
from absl import app, flags

from tff_radiomap import runtime
from tff_radiomap.models import phases
from tff_radiomap.aggregators import (
    AdaptiveGroupNoiseFactory,
    ClipOnlyFactory,
    DirectedNoiseFactory,
    SymmetricQuantizationFactory,
    TopKFactory,
    UniformNoiseFactory,
    central_gaussian_factory,
)

from tff_radiomap.models.phases import Phase
from tff_radiomap.models import radiounet
from tff_radiomap.privacy import groups as groups_lib

FLAGS = flags.FLAGS
flags.DEFINE_integer("resolution", 64, "Map side in pixels.")
flags.DEFINE_float("width", 0.25, "RadioUNet width multiplier.")
flags.DEFINE_integer("clients", 6, "Client updates per aggregation.")
flags.DEFINE_integer("repeats", 7, "Timed aggregations per factory (after one warm-up).")

CLIP, NU = 1.0, 3.0


def factories(config, num_clients: int) -> dict:
    groups = groups_lib.radiounet_groups(config, Phase.STAGE1)
    return collections.OrderedDict(
        mean=tff.aggregators.MeanFactory(),
        gaussian_fixed=central_gaussian_factory(NU, num_clients, CLIP),
        clip=ClipOnlyFactory(CLIP),
        uniform=UniformNoiseFactory(CLIP, NU, groups=groups, seed=0),
        directed=DirectedNoiseFactory(CLIP, NU, groups=groups, seed=0),
        adaptive=AdaptiveGroupNoiseFactory(CLIP, NU, groups=groups, total_rounds=50, seed=0),
        top_k=TopKFactory(k_fraction=0.05),
        quantization=SymmetricQuantizationFactory(bits=8),
    )


def main(argv):
    del argv
    runtime.install_local_context()
    config = radiounet.RadioUNetConfig(FLAGS.resolution, FLAGS.width)
    with phases.keras_graph():
        shapes = [v.shape.as_list() for v in phases.build_phase_model(config, Phase.STAGE1).trainable_variables]
    value_type = tff.types.tensorflow_to_type([tf.TensorSpec(s, tf.float32) for s in shapes])
    rng = np.random.default_rng(0)
    updates = [[(1e-3 * rng.standard_normal(s)).astype(np.float32) for s in shapes] for _ in range(FLAGS.clients)]
    weights = [float(64 + 8 * i) for i in range(FLAGS.clients)]

    calls = collections.OrderedDict()
    for name, factory in factories(config, FLAGS.clients).items():
        if isinstance(factory, tff.aggregators.WeightedAggregationFactory):
            process = factory.create(value_type, tff.TensorType(np.float32))
            calls[name] = (process, lambda p, s: p.next(s, updates, weights))
        else:
            process = factory.create(value_type)
            calls[name] = (process, lambda p, s: p.next(s, updates))
    phases.restore_eager_keras()
    states = {name: process.initialize() for name, (process, _) in calls.items()}
    seconds = collections.defaultdict(list)
    for repeat in range(FLAGS.repeats + 1):
        for name, (process, call) in calls.items():
            t0 = time.perf_counter()
            states[name] = call(process, states[name]).state
            if repeat:  # Repeat 0 loads the computation into the worker.
                seconds[name].append(time.perf_counter() - t0)

    count = sum(int(np.prod(s)) for s in shapes)
    print(
        f"aggregation of {FLAGS.clients} RadioUNet stage-1 updates ({count:,} floats each, "
        f"{FLAGS.resolution}x{FLAGS.resolution}, width x{FLAGS.width}); medians of {FLAGS.repeats}; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(f"  {'factory':14s} {'seconds':>8s} {'- mean':>8s} {'/ mean':>7s} {'/ gaussian_fixed':>17s}")
    for name, s in seconds.items():
        minus = statistics.median(a - b for a, b in zip(s, seconds["mean"]))
        ratio = statistics.median(a / b for a, b in zip(s, seconds["mean"]))
        ratio_dp = statistics.median(a / b for a, b in zip(s, seconds["gaussian_fixed"]))
        print(f"  {name:14s} {statistics.median(s):8.3f} {minus:+8.3f} {ratio:7.2f} {ratio_dp:17.2f}")


if __name__ == "__main__":
    app.run(main)
