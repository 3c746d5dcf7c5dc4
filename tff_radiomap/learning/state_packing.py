"""A training state as a few flat arrays, one per dtype, for `tff.program.FileProgramStateManager`.

The state manager writes each leaf as its own SavedModel variable; a RadioUNet learning state has
a hundred leaves or more, which makes each save take a second or two. Packed, a save takes tens
of milliseconds. `unpack` needs a template of the same structure (shapes and dtypes).
"""

from __future__ import annotations

import collections

import numpy as np
import tensorflow as tf


def pack(structure) -> collections.OrderedDict:
    """{dtype name: 1-D concatenation of the leaves of that dtype, in `tf.nest.flatten` order}."""
    groups = collections.OrderedDict()
    for leaf in tf.nest.flatten(structure):
        leaf = np.asarray(leaf)
        groups.setdefault(leaf.dtype.name, []).append(leaf.ravel())
    return collections.OrderedDict((name, np.concatenate(parts)) for name, parts in sorted(groups.items()))


def unpack(packed, template):
    """Inverse of `pack`: the leaves of `packed` in the structure, shapes and dtypes of `template`."""
    offsets = collections.defaultdict(int)
    leaves = []
    for leaf in tf.nest.flatten(template):
        leaf = np.asarray(leaf)
        name = leaf.dtype.name
        if name not in packed:
            raise ValueError(f"saved state holds no {name} values; expected a state shaped like the template")
        start = offsets[name]
        flat = np.asarray(packed[name])
        if start + leaf.size > flat.size:
            raise ValueError(f"saved state holds {flat.size} {name} values, the template needs more")
        leaves.append(flat[start : start + leaf.size].reshape(leaf.shape).astype(leaf.dtype))
        offsets[name] = start + leaf.size
    for name, used in offsets.items():
        if used != np.asarray(packed[name]).size:
            raise ValueError(f"saved state holds {np.asarray(packed[name]).size} {name} values, the template {used}")
    return tf.nest.pack_sequence_as(template, leaves)
