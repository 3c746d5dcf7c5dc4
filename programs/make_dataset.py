r"""Writes a synthetic data set in RadioMapSeer's layout.

  python -m programs.make_dataset --output_dir=DIR --maps N --transmitters T --size 256 --seed S

Re-running with the same flags completes a partly written set (after a kill at any point) and
leaves finished maps alone; a different spec for an existing folder is refused (exit 2) unless
--overwrite, which deletes the old set first. --out is an alias of --output_dir.
"""

from absl import app, flags

from programs import common
from tff_radiomap.data import synthetic

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", None, "Output root folder.")
flags.DEFINE_alias("out", "output_dir")
flags.DEFINE_integer("maps", 3, "Number of city maps.")
flags.DEFINE_integer("transmitters", 4, "Transmitters per map.")
flags.DEFINE_integer("size", 256, "Map size in pixels (1 m per pixel).")
flags.DEFINE_integer("seed", 0, "Random seed; the same seed gives the same files.")
flags.DEFINE_string("simulation", "DPM", "Name of the gain/ sub-folder to write.")
flags.DEFINE_integer("workers", 1, "Processes to generate maps in parallel.")
flags.DEFINE_bool("overwrite", False, "Delete a synthetic set already in --output_dir (any spec) and write this one afresh.")


def main(argv):
    common.reject_extra_args(argv)
    common.require(FLAGS.output_dir, "output_dir", FLAGS.output_dir, "an output folder")
    common.require(FLAGS.maps >= 1, "maps", FLAGS.maps, "an integer >= 1")
    common.require(FLAGS.transmitters >= 1, "transmitters", FLAGS.transmitters, "an integer >= 1")
    common.require(32 <= FLAGS.size <= 4096, "size", FLAGS.size, "an integer in 32..4096")
    common.require(FLAGS.workers >= 1, "workers", FLAGS.workers, "an integer >= 1")
    common.require(FLAGS.simulation.isidentifier(), "simulation", FLAGS.simulation, "a folder name such as DPM")
    common.require(FLAGS.seed >= 0, "seed", FLAGS.seed, "an integer >= 0")
    common.require_writable_dir(FLAGS.output_dir, "output_dir")
    spec = synthetic.DatasetSpec(FLAGS.maps, FLAGS.transmitters, FLAGS.size, FLAGS.seed, FLAGS.simulation)
    if FLAGS.overwrite:
        synthetic.remove_dataset(FLAGS.output_dir)
    try:
        synthetic.generate_dataset(FLAGS.output_dir, spec, workers=FLAGS.workers, progress=True)
    except ValueError as exc:
        common.fail(str(exc))
    print(f"wrote {spec.maps} maps x {spec.transmitters} transmitters ({spec.size}x{spec.size}) to {FLAGS.output_dir}")


if __name__ == "__main__":
    app.run(main, flags_parser=common.parse_flags)
