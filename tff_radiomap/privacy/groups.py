"""Parameter groups over the uploaded update (paper 000, Eq. (11)).

The upload is a list of tensors (a model's trainable weights). A `ParameterGroups` assigns every
coordinate of every tensor to one group g in 0..G-1 (the binary masks M_g of Eq. (11) are
`ids == g`). For RadioUNet the groups are one transmitter-sensitive group per stage, holding the
kernel slices that read the transmitter raster channel directly (the first convolution of the
stage and every later convolution whose input concatenates the raw input), and one residual group
with everything else. They are found by walking the Keras graph from the input's transmitter
channel through concatenations, not from hard-coded indices.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

RESIDUAL = "residual"


@dataclasses.dataclass(frozen=True)
class ParameterGroups:
    """Group assignment of every uploaded coordinate.

    Attributes:
      names: the G group names.
      sensitive: per group, whether it is transmitter-sensitive.
      ids: per uploaded tensor (in upload order), an int32 array of the tensor's shape holding
        the group index of each coordinate.
    """

    names: tuple[str, ...]
    sensitive: tuple[bool, ...]
    ids: tuple[np.ndarray, ...]

    def __post_init__(self):
        if len(self.names) != len(self.sensitive):
            raise ValueError(f"{len(self.names)} group names but {len(self.sensitive)} sensitivity flags")
        for i, a in enumerate(self.ids):
            if a.size and (a.min() < 0 or a.max() >= len(self.names)):
                raise ValueError(f"tensor {i}: group ids outside 0..{len(self.names) - 1}")

    @property
    def num_groups(self) -> int:
        return len(self.names)

    @property
    def sizes(self) -> np.ndarray:
        """d_g, the number of coordinates in each group."""
        counts = np.zeros(self.num_groups, dtype=np.int64)
        for a in self.ids:
            counts += np.bincount(a.ravel(), minlength=self.num_groups)
        return counts

    @property
    def num_coordinates(self) -> int:
        """d, the number of uploaded coordinates."""
        return int(sum(a.size for a in self.ids))

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        return [tuple(a.shape) for a in self.ids]

    def masks(self) -> list[list[np.ndarray]]:
        """M_g for each group g: per tensor, a float32 0/1 array (Eq. (11))."""
        return [[(a == g).astype(np.float32) for a in self.ids] for g in range(self.num_groups)]

    def check_shapes(self, shapes: Sequence[Sequence[int]]) -> None:
        """Raises ValueError naming the first tensor whose shape differs from the groups'."""
        shapes = [tuple(int(d) for d in s) for s in shapes]
        if len(shapes) != len(self.ids):
            raise ValueError(f"upload has {len(shapes)} tensors, the parameter groups describe {len(self.ids)}")
        for i, (got, want) in enumerate(zip(shapes, self.shapes)):
            if got != want:
                raise ValueError(f"upload tensor {i} has shape {got}, the parameter groups expect {want}")

    @classmethod
    def single(cls, shapes: Sequence[Sequence[int]], name: str = "all", sensitive: bool = False) -> "ParameterGroups":
        """Every coordinate in one group."""
        return cls((name,), (sensitive,), tuple(np.zeros(tuple(s), np.int32) for s in shapes))


def _ref(t):
    return t.ref() if hasattr(t, "ref") else id(t)


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def transmitter_channel_slices(model: tf.keras.Model, input_index: int = 0, channel: int = 1) -> dict[str, tuple[int, list[int]]]:
    """Kernels reading the raw transmitter channel, and at which input-channel positions.

    Follows channel `channel` of `model.inputs[input_index]` through Concatenate layers (its
    position shifts by the channels concatenated before it); any other layer mixes channels, so
    its output carries no raw transmitter channel. Returns {kernel variable name: (input-channel
    axis of the kernel, [positions])} for every Conv/Dense layer whose input carries it (the axis
    is -1 for transposed convolutions, whose kernels are [h, w, out, in], else -2).
    """
    positions = {_ref(model.inputs[input_index]): [channel]}
    found: dict[str, tuple[int, list[int]]] = {}
    for layer in model.layers:
        if isinstance(layer, tf.keras.layers.InputLayer):
            continue
        inputs = _as_list(layer.input)
        if isinstance(layer, tf.keras.layers.Concatenate):
            offset, carried = 0, []
            for t in inputs:
                carried += [offset + p for p in positions.get(_ref(t), [])]
                offset += int(t.shape[-1])
            if carried:
                positions[_ref(layer.output)] = carried
            continue
        carried = sorted({p for t in inputs for p in positions.get(_ref(t), [])})
        kernel = getattr(layer, "kernel", None)
        if carried and kernel is not None:
            axis = -1 if isinstance(layer, tf.keras.layers.Conv2DTranspose) else -2
            found[kernel.name] = (axis, carried)
        elif carried and isinstance(layer, (tf.keras.layers.Activation, tf.keras.layers.Dropout)):
            positions[_ref(layer.output)] = carried  # Channel-wise layers keep positions.
    return found


def groups_for_variables(
    variables: Sequence[tf.Variable],
    sensitive_slices: dict[str, tuple[int, list[int]]],
    group_of_kernel: dict[str, str],
) -> ParameterGroups:
    """Builds groups over `variables` (the upload, in order).

    `sensitive_slices` maps a kernel name to (input-channel axis, positions) that read the
    transmitter raster (see `transmitter_channel_slices`); `group_of_kernel` maps the same names to their sensitive group's name
    (e.g. 'stage1_transmitter'). Every other coordinate goes to the residual group. Sensitive
    groups come first, in sorted order, then the residual group.
    """
    sensitive_names = sorted(set(group_of_kernel.values()))
    names = tuple(sensitive_names) + (RESIDUAL,)
    index = {n: i for i, n in enumerate(names)}
    ids = []
    for v in variables:
        a = np.full(tuple(v.shape), index[RESIDUAL], dtype=np.int32)
        if v.name in sensitive_slices:
            axis, positions = sensitive_slices[v.name]
            sl = [slice(None)] * a.ndim
            sl[axis] = positions
            a[tuple(sl)] = index[group_of_kernel[v.name]]
        ids.append(a)
    return ParameterGroups(names, tuple(n != RESIDUAL for n in names), tuple(ids))


def radiounet_groups(config, phase) -> ParameterGroups:
    """Groups over the update a RadioUNet client uploads in `phase` (a `keras_wrap.Phase`).

    One transmitter-sensitive group per stage ('stage1_transmitter', 'stage2_transmitter'), found
    by following the transmitter channel of each stage's raw input `x` (channel 1) through its
    concatenations, and the residual group. A stage that is not uploaded in `phase` leaves its
    group empty (d_g = 0), so the budget goes to the groups that are uploaded.
    """
    from tff_radiomap.learning import keras_wrap

    # Built eagerly: a model made inside a tf.Graph would invalidate the caller's eager models.
    model = keras_wrap.build_phase_model(config, phase)
    slices = {}
    for stage in _nested_models(model, ("stage1", "stage2")):
        slices.update(transmitter_channel_slices(stage))
    group_of = {name: ("stage1_transmitter" if name.startswith("s1_") else "stage2_transmitter") for name in slices}
    groups = groups_for_variables(model.trainable_variables, slices, group_of)
    # Keep both stage groups present in the names even when one is not uploaded.
    names = ("stage1_transmitter", "stage2_transmitter", RESIDUAL)
    remap = np.array([names.index(n) for n in groups.names], np.int32)
    return ParameterGroups(names, (True, True, False), tuple(remap[a] for a in groups.ids))


def _nested_models(model: tf.keras.Model, names) -> list[tf.keras.Model]:
    """`model` itself and every Keras model nested in it whose name is in `names`."""
    found, stack = [], [model]
    while stack:
        m = stack.pop()
        if m.name in names:
            found.append(m)
        stack.extend(layer for layer in getattr(m, "layers", []) if isinstance(layer, tf.keras.Model))
    return found
