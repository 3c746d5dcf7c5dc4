r"""Writes a synthetic data set in RadioMapSeer's layout.

  python -m programs.make_dataset --output_dir=DIR --maps N --transmitters T --size 256 --seed S [--reality=shadowed]

Re-running with the same flags completes a partly written set (after a kill at any point) and
leaves finished maps alone; a different spec for an existing folder is refused (exit 2) unless
--overwrite, which deletes the old set first. --out is an alias of --output_dir.

--reality=shadowed adds what the twin's model lacks (`tff_radiomap/data/reality.py`): correlated
shadow fading (3GPP TR 38.901 UMi street canyon by default) and per-map corner and wall losses.
At the end the program prints the twin's mismatch (RMSE in dB of the twin's gains against the
data's, over the first --mismatch_maps maps) and records it in the set's twin_mismatch.json.
"""

import dataclasses

from absl import app, flags

from programs import common
from tff_radiomap.data import reality, synthetic, twin

FLAGS = flags.FLAGS
_SHADOWED = reality.ShadowedReality()
flags.DEFINE_string("output_dir", None, "Output root folder.")
flags.DEFINE_alias("out", "output_dir")
flags.DEFINE_integer("maps", 3, "Number of city maps.")
flags.DEFINE_integer("transmitters", 4, "Transmitters per map.")
flags.DEFINE_integer("size", 256, "Map size in pixels (1 m per pixel).")
flags.DEFINE_integer("seed", 0, "Random seed; the same seed gives the same files.")
flags.DEFINE_string("simulation", "DPM", "Name of the gain/ sub-folder to write.")
flags.DEFINE_integer("workers", 1, "Processes to generate maps in parallel.")
flags.DEFINE_bool("overwrite", False, "Delete a synthetic set already in --output_dir (any spec) and write this one afresh.")
flags.DEFINE_string("reality", "twin", f"What the gains are: {' or '.join(reality.REALITIES)} (the twin's model plus shadow fading and per-map losses).")
flags.DEFINE_float("shadow_std_los_db", _SHADOWED.shadow_std_los_db, "--reality=shadowed: shadow fading std (dB) in line of sight (3GPP UMi: 4).")
flags.DEFINE_float("shadow_std_nlos_db", _SHADOWED.shadow_std_nlos_db, "--reality=shadowed: shadow fading std (dB) out of line of sight (3GPP UMi: 7.82).")
flags.DEFINE_float("decorrelation_los_m", _SHADOWED.decorrelation_los_m, "--reality=shadowed: shadowing decorrelation distance (m) in LOS (3GPP UMi: 10).")
flags.DEFINE_float("decorrelation_nlos_m", _SHADOWED.decorrelation_nlos_m, "--reality=shadowed: shadowing decorrelation distance (m) in NLOS (3GPP UMi: 13).")
flags.DEFINE_float("corner_loss_spread_db", _SHADOWED.corner_loss_spread_db, "--reality=shadowed: std (dB) of each map's corner loss around the twin's.")
flags.DEFINE_float("wall_loss_spread_db", _SHADOWED.wall_loss_spread_db, "--reality=shadowed: std (dB) of each map's wall loss around the twin's.")
flags.DEFINE_integer("mismatch_maps", 8, "Maps over which to measure the twin's mismatch at the end (0: skip).")
SHADOW_FLAGS = [field.name for field in dataclasses.fields(reality.ShadowedReality)]


def _reality() -> reality.ShadowedReality | None:
    """The spec's reality from --reality and the shadowing flags (exits 2 naming a bad one)."""
    common.require(FLAGS.reality in reality.REALITIES, "reality", FLAGS.reality, f"one of {', '.join(reality.REALITIES)}")
    if FLAGS.reality == "twin":
        for name in SHADOW_FLAGS:
            common.require(not FLAGS[name].present, name, FLAGS[name].value, "no value with --reality=twin (it applies only with --reality=shadowed)")
        return None
    try:
        return reality.ShadowedReality(**{name: FLAGS[name].value for name in SHADOW_FLAGS})
    except ValueError as exc:  # Its message names the field, which is the flag.
        common.fail(f"--{exc}")


def main(argv):
    common.reject_extra_args(argv)
    common.require(FLAGS.output_dir, "output_dir", FLAGS.output_dir, "an output folder")
    common.require(FLAGS.maps >= 1, "maps", FLAGS.maps, "an integer >= 1")
    common.require(FLAGS.transmitters >= 1, "transmitters", FLAGS.transmitters, "an integer >= 1")
    common.require(32 <= FLAGS.size <= 4096, "size", FLAGS.size, "an integer in 32..4096")
    common.require(FLAGS.workers >= 1, "workers", FLAGS.workers, "an integer >= 1")
    common.require(FLAGS.simulation.isidentifier(), "simulation", FLAGS.simulation, "a folder name such as DPM")
    common.require(FLAGS.seed >= 0, "seed", FLAGS.seed, "an integer >= 0")
    common.require(FLAGS.mismatch_maps >= 0, "mismatch_maps", FLAGS.mismatch_maps, "an integer >= 0")
    spec = synthetic.DatasetSpec(FLAGS.maps, FLAGS.transmitters, FLAGS.size, FLAGS.seed, FLAGS.simulation, _reality())
    common.require_writable_dir(FLAGS.output_dir, "output_dir")
    if FLAGS.overwrite:
        synthetic.remove_dataset(FLAGS.output_dir)
    try:
        synthetic.generate_dataset(FLAGS.output_dir, spec, workers=FLAGS.workers, progress=True)
    except ValueError as exc:
        common.fail(str(exc))
    print(f"wrote {spec.maps} maps x {spec.transmitters} transmitters ({spec.size}x{spec.size}, reality: {FLAGS.reality}) to {FLAGS.output_dir}")
    maps = min(FLAGS.mismatch_maps, spec.maps)
    if maps:
        found = twin.record_mismatch(FLAGS.output_dir, maps, spec.simulation)
        print(
            f"twin mismatch: {found['twin_rmse_db']:.2f} dB RMSE over outdoor pixels at the data's transmitters (the twin as run, maps 0-{maps - 1}); "
            f"{found['reality_rmse_db']:.2f} dB from the reality alone (the twin's model on the data's own corners, all maps)"
        )


if __name__ == "__main__":
    app.run(main, flags_parser=common.parse_flags)
