"""EPFL-REMNet's model: a shared MLP backbone and a lightweight personalized head (Sec. II-A).

Backbone f_theta: R^(2+P) -> R^512, Eq. (5): z = N3(A(W3 N2(A(W2 N1(A(W1 x)))))), A = SiLU,
N_n = LayerNorm. Each layer is a Dense (with bias) `backbone_dense_{n}`, its SiLU, and
`backbone_norm_{n}`; the last width is the 512-d representation.

Heads g_phi: R^512 -> R^M:
  - 'linear' (single-layer head, Eq. (6)): `head_out`;
  - 'mlp' (two-layer head, Eq. (7)): `head_dropout` (D), `head_hidden` (W1, SiLU as sigma),
    `head_out` (W2, b2).
`build_remnet` nests the two as sub-models named `backbone` and `head`; every backbone layer's
name starts with `backbone_`, every head layer's with `head_`, so parameter groups are found by
name (`backbone_variables`, `head_variables`, `weight_keys`).

Loss: Huber on the z-scored labels (Eq. (8)), `huber_loss(config)`.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

HEADS = ("linear", "mlp")
BACKBONE_PREFIX = "backbone_"
HEAD_PREFIX = "head_"


@dataclasses.dataclass(frozen=True)
class RemNetConfig:
    """Sizes of the model. The paper fixes the 512-d representation; the hidden widths are ours."""

    input_dim: int = 102  # 2 coordinates + P = 100 environmental features.
    outputs: int = 4  # M base stations.
    backbone_units: tuple[int, ...] = (64, 64, 512)  # Hidden widths: ours (CPU scale).
    head: str = "linear"
    head_hidden: int = 128
    head_dropout: float = 0.1
    huber_delta: float = 1.0

    def __post_init__(self):
        if self.head not in HEADS:
            raise ValueError(f"head={self.head!r}: expected one of {HEADS}")
        if len(self.backbone_units) != 3 or min(self.backbone_units) < 1:
            raise ValueError(f"backbone_units={self.backbone_units}: expected three positive widths (Eq. (5))")
        if self.input_dim < 1 or self.outputs < 1:
            raise ValueError(f"input_dim={self.input_dim}, outputs={self.outputs}: expected positive sizes")
        if not 0.0 <= self.head_dropout < 1.0:
            raise ValueError(f"head_dropout={self.head_dropout}: expected a rate in [0, 1)")

    @property
    def representation_dim(self) -> int:
        return self.backbone_units[-1]


def build_backbone(config: RemNetConfig, name: str = "backbone") -> tf.keras.Model:
    """f_theta as a Keras model [batch, input_dim] -> [batch, representation_dim]."""
    x = inputs = tf.keras.Input(shape=(config.input_dim,), name=f"{BACKBONE_PREFIX}input")
    for n, units in enumerate(config.backbone_units, start=1):
        x = tf.keras.layers.Dense(units, activation=tf.nn.silu, name=f"{BACKBONE_PREFIX}dense_{n}")(x)
        x = tf.keras.layers.LayerNormalization(name=f"{BACKBONE_PREFIX}norm_{n}")(x)
    return tf.keras.Model(inputs, x, name=name)


def build_head(config: RemNetConfig, name: str = "head") -> tf.keras.Model:
    """g_phi as a Keras model [batch, representation_dim] -> [batch, outputs]."""
    z = inputs = tf.keras.Input(shape=(config.representation_dim,), name=f"{HEAD_PREFIX}input")
    if config.head == "mlp":
        z = tf.keras.layers.Dropout(config.head_dropout, name=f"{HEAD_PREFIX}dropout")(z)
        z = tf.keras.layers.Dense(config.head_hidden, activation=tf.nn.silu, name=f"{HEAD_PREFIX}hidden")(z)
    out = tf.keras.layers.Dense(config.outputs, name=f"{HEAD_PREFIX}out")(z)
    return tf.keras.Model(inputs, out, name=name)


def build_remnet(config: RemNetConfig) -> tf.keras.Model:
    """g_phi(f_theta(x)): the sub-models `backbone` and `head` in one Keras model."""
    inputs = tf.keras.Input(shape=(config.input_dim,), name="input")
    backbone, head = build_backbone(config), build_head(config)
    return tf.keras.Model(inputs, head(backbone(inputs)), name="remnet")


def backbone_variables(model: tf.keras.Model) -> list[tf.Variable]:
    """Trainable variables of the backbone (layers `backbone_*`) of a `build_remnet` model."""
    return model.get_layer("backbone").trainable_variables


def head_variables(model: tf.keras.Model) -> list[tf.Variable]:
    """Trainable variables of the head (layers `head_*`) of a `build_remnet` model."""
    return model.get_layer("head").trainable_variables


def weight_keys(part: tf.keras.Model) -> list[str]:
    """Readable keys of a sub-model's trainable weights, in order: 'backbone_dense_1.kernel', ..."""
    return [f"{layer.name}.{w.name.split('/')[-1].split(':')[0]}" for layer in part.layers for w in layer.trainable_weights]


def huber_loss(config: RemNetConfig) -> tf.keras.losses.Loss:
    """The training loss (Eq. (8)): Huber with `huber_delta`, mean over outputs and batch."""
    return tf.keras.losses.Huber(delta=config.huber_delta)
