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
import functools
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from tff_radiomap.models import phases

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
    """Groups over the update a RadioUNet client uploads in `phase` (a `phases.Phase`).

    One transmitter-sensitive group per stage ('stage1_transmitter', 'stage2_transmitter'), found
    by following the transmitter channel of each stage's raw input `x` (channel 1) through its
    concatenations, and the residual group. A stage that is not uploaded in `phase` leaves its
    group empty (d_g = 0), so the budget goes to the groups that are uploaded. Computed once per
    (config, phase) and process; the id arrays are read-only.
    """
    return _radiounet_groups(config, int(phase))


@functools.lru_cache(maxsize=None)
def _radiounet_groups(config, phase: int) -> ParameterGroups:

    phase = phases.Phase(phase)

    # Built eagerly: a model made inside a tf.Graph would invalidate the caller's eager models.
    model = phases.build_phase_model(config, phase)
    slices = {}
    for stage in _nested_models(model, ("stage1", "stage2")):
        slices.update(transmitter_channel_slices(stage))
    group_of = {name: ("stage1_transmitter" if name.startswith("s1_") else "stage2_transmitter") for name in slices}
    groups = groups_for_variables(model.trainable_variables, slices, group_of)
    # Keep both stage groups present in the names even when one is not uploaded.
    names = ("stage1_transmitter", "stage2_transmitter", RESIDUAL)
    remap = np.array([names.index(n) for n in groups.names], np.int32)
    ids = tuple(remap[a] for a in groups.ids)
    for a in ids:
        a.setflags(write=False)
    return ParameterGroups(names, (True, True, False), ids)


def _nested_models(model: tf.keras.Model, names) -> list[tf.keras.Model]:
    """`model` itself and every Keras model nested in it whose name is in `names`."""
    found, stack = [], [model]
    while stack:
        m = stack.pop()
        if m.name in names:
            found.append(m)
        stack.extend(layer for layer in getattr(m, "layers", []) if isinstance(layer, tf.keras.Model))
    return found


def layer_groups(variables: Sequence[tf.Variable]) -> ParameterGroups:
    """One group per uploaded tensor (the 'layers' partition), named by the variable; none sensitive."""
    names = tuple(v.name for v in variables)
    ids = tuple(np.full(tuple(v.shape), i, np.int32) for i, v in enumerate(variables))
    return ParameterGroups(names, (False,) * len(names), ids)


@dataclasses.dataclass(frozen=True)
class SubspaceGroups:
    """Groups that are subspaces of the flattened upload (Eq. (11) with projectors for masks).

    The upload u (its tensors flattened and concatenated, length d) is split by an orthonormal basis
    V [d, K] into J blocks of columns (the subspace groups, projectors P_j = V_j V_j^T, d_j their
    rank) and the residual group, the orthogonal complement of span(V) (projector I - V V^T, rank
    d - K). The projectors sum to the identity, so Eqs. (9), (15), (16) hold as for masks with d_g the
    ranks: sigma_g = sqrt(E_g / d_g), noise V_j z_j with z_j ~ N(0, sigma_j^2 I) on a block and
    (I - V V^T) z with z ~ N(0, sigma^2 I_d) on the residual.

    Attributes:
      shapes: the upload's tensor shapes, in order.
      block_sizes: d_j of each subspace block (columns of V, in order).
      names: J block names then the residual's.
      basis: V, float32 [d, K] with orthonormal columns; None when it is supplied later (the
        factory reads it from a file at run time), then only sizes are known.
    """

    shapes: tuple[tuple[int, ...], ...]
    block_sizes: tuple[int, ...]
    names: tuple[str, ...] = ()
    basis: np.ndarray | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self):
        if not self.block_sizes or min(self.block_sizes) < 1:
            raise ValueError(f"block_sizes={self.block_sizes}: expected one or more positive sizes")
        d, k = self.num_coordinates, self.rank
        if k >= d:
            raise ValueError(f"subspace of rank {k} leaves no residual in an upload of {d} coordinates")
        if not self.names:
            names = tuple(f"leak{j}" for j in range(len(self.block_sizes))) + (RESIDUAL,)
            object.__setattr__(self, "names", names)
        if len(self.names) != len(self.block_sizes) + 1:
            raise ValueError(f"{len(self.names)} names for {len(self.block_sizes)} blocks and the residual")
        if self.basis is not None:
            check_orthonormal(self.basis, d, k)

    @property
    def rank(self) -> int:
        return int(sum(self.block_sizes))

    @property
    def num_groups(self) -> int:
        return len(self.block_sizes) + 1

    @property
    def num_coordinates(self) -> int:
        return int(sum(int(np.prod(s)) for s in self.shapes))

    @property
    def sizes(self) -> np.ndarray:
        """d_g: the rank of each group's projector (blocks, then d - K for the residual)."""
        return np.array(list(self.block_sizes) + [self.num_coordinates - self.rank], np.int64)

    @property
    def sensitive(self) -> tuple[bool, ...]:
        return (True,) * len(self.block_sizes) + (False,)

    @property
    def ids(self) -> tuple[np.ndarray, ...]:
        """Every coordinate in the residual's mask: the blocks are carved out by projection."""
        return tuple(np.full(s, self.num_groups - 1, np.int32) for s in self.shapes)

    def block_of_column(self) -> np.ndarray:
        """[K] the block index of each column of V."""
        return np.repeat(np.arange(len(self.block_sizes)), self.block_sizes).astype(np.int32)

    def check_shapes(self, shapes: Sequence[Sequence[int]]) -> None:
        ParameterGroups.check_shapes(self, shapes)  # Same check, on self.shapes.

    def with_basis(self, basis: np.ndarray) -> "SubspaceGroups":
        return dataclasses.replace(self, basis=np.ascontiguousarray(basis, np.float32))


def check_orthonormal(basis: np.ndarray, num_coordinates: int, rank: int, tolerance: float = 1e-3) -> None:
    """Raises ValueError unless `basis` is [num_coordinates, rank] with orthonormal columns."""
    basis = np.asarray(basis)
    if basis.shape != (num_coordinates, rank):
        raise ValueError(f"subspace basis has shape {basis.shape}, expected ({num_coordinates}, {rank})")
    if not np.all(np.isfinite(basis)):
        raise ValueError("subspace basis has non-finite entries")
    gram = (basis.T.astype(np.float32) @ basis.astype(np.float32)).astype(np.float64)  # float32: d terms err ~1e-5 << tolerance.
    error = float(np.max(np.abs(gram - np.eye(rank)))) if rank else 0.0
    if error > tolerance:
        raise ValueError(f"subspace basis is not orthonormal: max |V^T V - I| = {error:.3g} (tolerance {tolerance}); orthonormalize it (e.g. np.linalg.qr)")
