"""Prints what batching the matching attacker's candidate traces across candidates could buy.

  python -m bench.trace_batching [--candidates 64 --repeats 5 --threads 1]

A candidate trace is S single-sample local steps; from the second step on, every candidate has its
own weights, which `vectorized_map` cannot batch for Conv2D (its converter needs loop-invariant
filters). This times, for every convolution of the stage-1 model at the CPU default (64x64, width
0.25), one forward pass and the gradients with respect to the input and the kernel (a training
step's backward pass through the layer) of N candidates three ways:

  loop     one single-sample convolution per candidate, each with its own kernel (what the
           attacker does now, in one traced graph);
  grouped  one grouped convolution over the N candidates stacked along the channels, each group
           with its own kernel (Conv2D layers only: TF 2.14 has no grouped transposed convolution);
  shared   the N samples as one batch through one kernel: the most any batching could buy, as
           the first step, whose weights all candidates share, could be batched.

Reported: milliseconds per layer and the totals, and loop / grouped and loop / shared. One
process; `--threads` sets TF's intra- and inter-op threads (1 as in the front's runs).
"""

import argparse
import time

import tensorflow as tf

from tff_radiomap.models import radiounet


def _timed(fn, args, repeats: int) -> float:
    fn(*args)  # trace and warm up
    start = time.perf_counter()
    for _ in range(repeats):
        fn(*args)
    return (time.perf_counter() - start) / repeats * 1000.0


def _conv_fns(n: int, shape, kernel, transposed: bool):
    """(loop, grouped or None, shared) for one layer; inputs x [n, h, w, c_in], kernels [n, *kernel]."""
    h, w = int(shape[1]), int(shape[2])

    def forward(x, k):
        if transposed:
            out = tf.stack([tf.shape(x)[0], 2 * h, 2 * w, kernel[2]])
            return tf.nn.conv2d_transpose(x, k, out, 2, "SAME")
        return tf.nn.conv2d(x, k, 1, "SAME")

    def grad(x, k):
        with tf.GradientTape() as tape:
            tape.watch([x, k])
            loss = tf.reduce_sum(tf.square(forward(x, k)))
        dx, dk = tape.gradient(loss, [x, k])
        return dk + tf.reduce_sum(dx)  # both gradients, as a training step's backward pass needs

    @tf.function
    def loop(x, ks):
        out = tf.TensorArray(tf.float32, size=n)
        for i in tf.range(n):
            out = out.write(i, grad(x[i : i + 1], ks[i]))
        return out.stack()

    @tf.function
    def shared(x, ks):
        return grad(x, ks[0])

    grouped = None
    if not transposed:
        c_in, c_out = kernel[2], kernel[3]

        @tf.function
        def grouped(x, ks):
            xg = tf.reshape(tf.transpose(x, [1, 2, 0, 3]), [1, h, w, n * c_in])
            kg = tf.reshape(tf.transpose(ks, [1, 2, 3, 0, 4]), [kernel[0], kernel[1], c_in, n * c_out])
            return grad(xg, kg)

    return loop, grouped, shared


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=64, help="Candidates N batched at once (the attacker's chunk: 64).")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    if args.candidates < 1 or args.repeats < 1 or args.threads < 1:
        parser.error("--candidates, --repeats and --threads must be positive integers")
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    n = args.candidates
    model = radiounet.build_stage1(radiounet.RadioUNetConfig())
    totals = {"loop": 0.0, "grouped": 0.0, "shared": 0.0}
    print(f"stage-1 model at the CPU default, {n} candidates, {args.threads} thread(s); ms for the forward pass and both gradients")
    print(f"{'layer':<22} {'input':<14} {'kernel':<16} {'loop':>8} {'grouped':>8} {'shared':>8}")
    for layer in model.layers:
        if not isinstance(layer, tf.keras.layers.Conv2D):  # Conv2DTranspose is a Conv2D too
            continue
        transposed = isinstance(layer, tf.keras.layers.Conv2DTranspose)
        shape, kernel = layer.input_shape, tuple(int(d) for d in layer.kernel.shape)
        x = tf.random.normal([n, *shape[1:]])
        ks = tf.random.normal([n, *kernel])
        loop, grouped, shared = _conv_fns(n, shape, kernel, transposed)
        t_loop, t_shared = _timed(loop, (x, ks), args.repeats), _timed(shared, (x, ks), args.repeats)
        t_grouped = _timed(grouped, (x, ks), args.repeats) if grouped else None
        totals["loop"] += t_loop
        totals["shared"] += t_shared
        totals["grouped"] += t_grouped if t_grouped is not None else t_loop
        grouped_text = f"{t_grouped:8.1f}" if t_grouped is not None else f"{'n/a':>8}"
        print(f"{layer.name:<22} {str(tuple(shape[1:])):<14} {str(kernel):<16} {t_loop:8.1f} {grouped_text} {t_shared:8.1f}")
    print(f"{'total':<54} {totals['loop']:8.1f} {totals['grouped']:8.1f} {totals['shared']:8.1f}")
    print(f"loop / grouped (transposed layers looped): {totals['loop'] / totals['grouped']:.2f}x")
    print(f"loop / shared (the ceiling of any batching): {totals['loop'] / totals['shared']:.2f}x")


if __name__ == "__main__":
    main()
