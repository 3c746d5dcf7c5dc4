"""`make demo`: generate (once) the default synthetic RadioMapSeer set and print its summary."""

import json

from absl import app, flags

from programs import common
from tff_radiomap.data import default_set, radiomapseer

FLAGS = flags.FLAGS
flags.DEFINE_integer("resolution", 64, "Resolution the loader reads the set at.")


def main(argv):
    common.reject_extra_args(argv)
    root = default_set.ensure_default_dataset()
    data = radiomapseer.RadioMapSeer(radiomapseer.LoaderConfig(root=root, resolution=FLAGS.resolution))
    print(json.dumps(data.summary(), indent=2))


if __name__ == "__main__":
    app.run(main)
