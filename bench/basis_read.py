"""What reading the leakage basis costs the clients' aggregation: the raw layout against the earlier
serialized one.

    python -m bench.basis_read [--coordinates=125098] [--rank=384] [--clients=6] [--repeats=5]

An Adaptive (leakage partition) aggregation of `--clients` uploads of the CPU default's stage-1
size reads V [d, K] (192 MB at the default) once a client, inside the TFF computation. This times
`process.next` with V in a `subspace_noise.write_basis` file (raw float32) and in a
`tf.io.serialize_tensor` file (the layout before, still read), beside a Uniform Noise aggregation
of the same uploads, and checks that both layouts give the same aggregate. Prints seconds a round.
Set OMP_NUM_THREADS and the like to 1 for a front run's setting.
"""

from __future__ import annotations

import os
import tempfile
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_integer("coordinates", 125098, "d: coordinates of the upload (the CPU default's stage 1).")
flags.DEFINE_integer("rank", 384, "K: columns of the basis (48 maps x 8).")
flags.DEFINE_integer("clients", 6, "Uploads a round.")
flags.DEFINE_integer("repeats", 5, "Rounds timed after one warm-up round.")


def main(argv):
    del argv
    import numpy as np
    import tensorflow_federated as tff

    from tff_radiomap import runtime
    from tff_radiomap.aggregators import UniformNoiseFactory
    from tff_radiomap.aggregators.adaptive_noise import AdaptiveSubspaceNoiseFactory
    from tff_radiomap.aggregators.subspace_noise import write_basis, write_tensor
    from tff_radiomap.privacy.groups import SubspaceGroups

    d, k = FLAGS.coordinates, FLAGS.rank
    rng = np.random.default_rng(0)
    basis = (rng.standard_normal((d, k)) / np.sqrt(d)).astype(np.float32)  # Near-orthonormal; the cost is the read.
    uploads = [[(1e-3 * rng.standard_normal(d)).astype(np.float32)] for _ in range(FLAGS.clients)]
    value_type = tff.types.to_type([(np.float32, (d,))])
    groups = SubspaceGroups(shapes=((d,),), block_sizes=(k,))
    local = runtime.install_local_context()
    try:
        with tempfile.TemporaryDirectory() as folder:
            raw, serialized = os.path.join(folder, "raw.bin"), os.path.join(folder, "serialized.bin")
            write_basis(raw, basis)
            write_tensor(serialized, basis)
            factories = {
                "uniform": UniformNoiseFactory(1.0, 0.01, seed=0),
                "adaptive, raw basis file": AdaptiveSubspaceNoiseFactory(1.0, 0.01, groups, basis_path=raw, seed=0),
                "adaptive, serialized basis file": AdaptiveSubspaceNoiseFactory(1.0, 0.01, groups, basis_path=serialized, seed=0),
            }
            results = {}
            for name, factory in factories.items():
                process = factory.create(value_type)
                out = process.next(process.initialize(), uploads)
                results[name] = np.asarray(out.result[0])
                start = time.perf_counter()
                for _ in range(FLAGS.repeats):
                    out = process.next(out.state, uploads)
                print(f"{name}: {(time.perf_counter() - start) / FLAGS.repeats:.3f} s a round of {FLAGS.clients} uploads", flush=True)
            gap = float(np.max(np.abs(results["adaptive, raw basis file"] - results["adaptive, serialized basis file"])))
            print(f"largest difference of the two layouts' aggregates: {gap:.3g}")
    finally:
        local.close()


if __name__ == "__main__":
    app.run(main)
