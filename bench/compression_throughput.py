"""Top-K and quantization encode/decode throughput, against a numpy `argpartition` reference.

  .venv/bin/python -m bench.compression_throughput [--sizes=125098,1000000 --k_fraction=0.05 --bits=8 --repeats=9]

For each upload size d (125,098: RadioUNet stage 1 at 64x64 x0.25; 1,000,000), on a random vector:
  - top_k: `aggregators.top_k.top_k_flat` (encode: the K largest magnitudes; decode: scattered back
    into d zeros), in a `tf.function`, against numpy `argpartition` + fancy-index scatter;
  - quantize: `aggregators.quantization.quantize` + `dequantize` (b-bit symmetric, one scale), in a
    `tf.function`, against the same arithmetic in numpy;
  - top_k+quantize: both, as EPFL-REMNet's upload (quantize the K kept values).
Each in turn within a repeat; prints median microseconds, millions of input values a second, and
the median ratio ours / numpy. The outputs are checked equal to numpy's first.
"""

import collections
import os
import statistics
import time

import numpy as np
import tensorflow as tf
from absl import app, flags

from tff_radiomap.aggregators import quantization, top_k

FLAGS = flags.FLAGS
flags.DEFINE_list("sizes", ["125098", "1000000"], "Upload sizes d.")
flags.DEFINE_float("k_fraction", 0.05, "K / d.")
flags.DEFINE_integer("bits", 8, "Quantization bits.")
flags.DEFINE_integer("repeats", 9, "Timed calls per method (after a warm-up).")


def numpy_top_k(x, k):
    keep = np.argpartition(np.abs(x), len(x) - k)[len(x) - k :]
    out = np.zeros_like(x)
    out[keep] = x[keep]
    return out


def numpy_quantize_dequantize(x, bits):
    levels = 2 ** (bits - 1) - 1
    scale = np.max(np.abs(x)) / levels
    q = np.clip(np.round(x / scale), -levels, levels).astype(np.int32) if scale > 0 else np.zeros(x.shape, np.int32)
    return q.astype(np.float32) * np.float32(scale)


def methods(d: int, k: int, bits: int):
    @tf.function
    def tf_top_k(x):
        return top_k.top_k_flat(x, k)

    @tf.function
    def tf_quantize(x):
        q, scales = quantization.quantize([x], bits)
        return quantization.dequantize(q, scales)[0]

    @tf.function
    def tf_both(x):
        sparse = top_k.top_k_flat(x, k)
        q, scales = quantization.quantize([sparse], bits)
        return quantization.dequantize(q, scales)[0]

    return collections.OrderedDict(
        top_k=(lambda x: tf_top_k(x).numpy(), lambda x: numpy_top_k(x, k)),
        quantize=(lambda x: tf_quantize(x).numpy(), lambda x: numpy_quantize_dequantize(x, bits)),
        top_k_quantize=(lambda x: tf_both(x).numpy(), lambda x: numpy_quantize_dequantize(numpy_top_k(x, k), bits)),
    )


def main(argv):
    del argv
    rng = np.random.default_rng(0)
    print(f"K = {FLAGS.k_fraction} d, {FLAGS.bits} bits; medians of {FLAGS.repeats}; load average {os.getloadavg()[0]:.2f}")
    print(f"  {'d':>9s} {'method':15s} {'ours us':>9s} {'numpy us':>9s} {'ours Mval/s':>11s} {'numpy Mval/s':>12s} {'ours/numpy':>10s}")
    for d in (int(s) for s in FLAGS.sizes):
        x = rng.standard_normal(d).astype(np.float32)
        xt = tf.constant(x)
        k = top_k.num_kept(d, k_fraction=FLAGS.k_fraction)
        for name, (ours, ref) in methods(d, k, FLAGS.bits).items():
            np.testing.assert_allclose(ours(xt), ref(x), rtol=1e-6, atol=1e-7)  # Also the warm-up (trace).
            times = collections.defaultdict(list)
            for _ in range(FLAGS.repeats):
                for label, fn, arg in (("ours", ours, xt), ("numpy", ref, x)):
                    t0 = time.perf_counter()
                    fn(arg)
                    times[label].append(time.perf_counter() - t0)
            t_ours, t_np = statistics.median(times["ours"]), statistics.median(times["numpy"])
            ratio = statistics.median(a / b for a, b in zip(times["ours"], times["numpy"]))
            print(f"  {d:9,d} {name:15s} {t_ours * 1e6:9.0f} {t_np * 1e6:9.0f} {d / t_ours / 1e6:11.1f} {d / t_np / 1e6:12.1f} {ratio:10.2f}")


if __name__ == "__main__":
    app.run(main)
