"""Two-stage RadioUNet (the authors' RadioWNet), Eqs. (1)-(2), as Keras models.

Stage 1 maps x = [buildings, transmitter raster] to a coarse map, y1 = f_theta1(x) (Eq. (1));
stage 2 maps [y1, x] to the refined map, y = f_theta2(x, y1) (Eq. (2)). Both stages are U-Nets with
the authors' layer table (github RonLevie/RadioUNet, `lib/modules.py`); every convolution is
followed by a ReLU, the output included, and uses "same" padding.

    encoder  kernel  pool   stage-1 width  stage-2 width
    enc0       3      -           6             20      (named `s{1,2}_input_conv`)
    enc1       5      2          40             30
    enc2       5      2          50             40
    enc3       5      -          60             50
    enc4       5      2         100             60
    enc5       3      -         100             70
    enc6       5      2         150             90
    enc7       5      2         300            110
    enc8       5      2         500            150

Decoder layer `dec{i}` mirrors `enc{i}`: a stride-2 transposed convolution where `enc{i}` pools
(kernel 4 for i >= 6, kernel 6 below), a plain convolution where it does not (kernel 3 for dec5,
5 for dec3). Its output is concatenated (`skip{i}`) with the output of `enc{i-1}`. Widths of
dec8..dec1: 300, 150, 100, 100, 60, 50, 40, 20 (stage 1) and 110, 90, 70, 60, 50, 40, 30, 20
(stage 2). After dec1 the stage input is concatenated again; a 5x5 convolution of width 20
(`s{1,2}_input_fuse_conv`) follows, the stage input is concatenated once more, and a 5x5
convolution gives the 1-channel output (`s{1,2}_output_conv`). The input of stage 2 is
[y1, x] (3 channels).

`RadioUNetConfig.stage2_output="linear"` drops the ReLU of stage 2's output convolution (the only
departure from the authors' table). A ReLU output has an absorbing state: once every pre-activation
is negative the map is a constant 0 and no gradient reaches the stage again. Federated training
falls into it at stage 2's first round for some seeds (bench/RESULTS.md, "Stage 2's output made linear: seed 1's dead stage 2");
a linear output keeps the direct path from y1 and the stage input open. Stage 1 is unchanged, so
its rounds are the same with either setting.

Scaling, so that one builder gives the CPU default and the paper scale:
  - `width` multiplies every hidden width (rounded half up, at least 1);
  - the depth adapts to the resolution: the encoder keeps its first layers up to `depth` pooling
    steps, depth = min(6, log2(resolution / min_bottleneck)), so the bottleneck is never smaller
    than `min_bottleneck` pixels a side. At 256x256 all 6 pools are used (4x4 bottleneck, the
    authors' network); at 64x64 the encoder stops after enc6 (4 pools).

Layer names (the prefix is `s1_` for stage 1, `s2_` for stage 2):
    s1_input_conv          enc0, the first convolution; reads the raw input (transmitter channel)
    s1_enc{i}, s1_pool{i}  encoder convolution i >= 1 and its max-pool
    s1_dec{i}, s1_skip{i}  decoder layer mirroring enc{i}, and the concatenation after it
    s1_input_skip          concatenation of the raw stage input after dec1 (and after the fuse conv)
    s1_input_fuse_conv     convolution whose input holds the raw stage input
    s1_output_conv         output convolution; its input holds the raw stage input

Transmitter-sensitive layers (the parameter groups directly coupled to the transmitter channel:
the first convolution of each stage and every layer that concatenates the raw input) are
`TRANSMITTER_SENSITIVE_LAYERS`, i.e. `s{1,2}_input_conv`, `s{1,2}_input_fuse_conv`,
`s{1,2}_output_conv`; `transmitter_sensitive_layers(stage)` lists them per stage.
"""

from __future__ import annotations

import dataclasses
import math

import tensorflow as tf

ENCODER_KERNELS = (3, 5, 5, 5, 5, 3, 5, 5, 5)
ENCODER_POOLS = (False, True, True, False, True, False, True, True, True)
STAGE_WIDTHS = {
    # stage: (encoder widths enc0..enc8, decoder widths dec8..dec1, fuse conv width)
    1: ((6, 40, 50, 60, 100, 100, 150, 300, 500), (300, 150, 100, 100, 60, 50, 40, 20), 20),
    2: ((20, 30, 40, 50, 60, 70, 90, 110, 150), (110, 90, 70, 60, 50, 40, 30, 20), 20),
}
MAX_DEPTH = sum(ENCODER_POOLS)
STAGE2_OUTPUTS = ("relu", "linear")
INPUT_CHANNELS = 2  # buildings, transmitter raster

SENSITIVE_SUFFIXES = ("input_conv", "input_fuse_conv", "output_conv")
TRANSMITTER_SENSITIVE_LAYERS = tuple(f"s{s}_{suffix}" for s in (1, 2) for suffix in SENSITIVE_SUFFIXES)


def transmitter_sensitive_layers(stage: int) -> tuple[str, ...]:
    """Names of the layers of `stage` (1 or 2) directly coupled to the transmitter channel."""
    if stage not in STAGE_WIDTHS:
        raise ValueError(f"stage={stage!r}: expected 1 or 2")
    return tuple(f"s{stage}_{suffix}" for suffix in SENSITIVE_SUFFIXES)


@dataclasses.dataclass(frozen=True)
class RadioUNetConfig:
    """Shape of the network. The defaults are the CPU default (64x64, width x0.25)."""

    resolution: int = 64
    width: float = 0.25
    min_bottleneck: int = 4  # Smallest feature map side the encoder may pool down to.
    stage2_output: str = "relu"  # Stage 2's output activation: "relu" (the authors') or "linear".

    def __post_init__(self):
        if not isinstance(self.resolution, int) or self.resolution < 2 * self.min_bottleneck:
            raise ValueError(f"resolution={self.resolution!r}: expected an integer >= {2 * self.min_bottleneck}")
        if not self.width > 0:
            raise ValueError(f"width={self.width!r}: expected a positive width multiplier")
        if self.min_bottleneck < 1:
            raise ValueError(f"min_bottleneck={self.min_bottleneck!r}: expected an integer >= 1")
        if self.stage2_output not in STAGE2_OUTPUTS:
            raise ValueError(f"stage2_output={self.stage2_output!r}: expected one of {STAGE2_OUTPUTS}")
        if self.resolution % (2**self.depth):
            raise ValueError(f"resolution={self.resolution}: expected a multiple of 2**depth = {2**self.depth} (depth {self.depth} pooling steps)")

    @property
    def depth(self) -> int:
        """Number of 2x2 pooling steps: min(6, floor(log2(resolution / min_bottleneck)))."""
        return min(MAX_DEPTH, int(math.floor(math.log2(self.resolution / self.min_bottleneck))))

    @property
    def encoder_layers(self) -> int:
        """How many of enc0..enc8 the encoder keeps at this depth."""
        pools = 0
        for i, pooled in enumerate(ENCODER_POOLS):
            pools += pooled
            if pools > self.depth:
                return i
        return len(ENCODER_POOLS)

    def scaled(self, channels: int) -> int:
        return max(1, int(math.floor(channels * self.width + 0.5)))


@dataclasses.dataclass(frozen=True)
class RadioUNet:
    """The built network: two stage models sharing layers with the end-to-end `wnet`.

    stage1: x [N,r,r,2] -> coarse [N,r,r,1].
    stage2: (x [N,r,r,2], coarse [N,r,r,1]) -> refined [N,r,r,1].
    wnet:   x -> (coarse, refined).
    """

    config: RadioUNetConfig
    stage1: tf.keras.Model
    stage2: tf.keras.Model
    wnet: tf.keras.Model


def _conv(filters, kernel, name, activation="relu"):
    return tf.keras.layers.Conv2D(filters, kernel, padding="same", activation=activation, name=name)


def _up(filters, kernel, name):
    return tf.keras.layers.Conv2DTranspose(filters, kernel, strides=2, padding="same", activation="relu", name=name)


def _u_net(stage_input, stage: int, config: RadioUNetConfig):
    """The U-Net body of one stage, applied to `stage_input`; returns its 1-channel output."""
    p = f"s{stage}_"
    enc_widths, dec_widths, fuse_width = STAGE_WIDTHS[stage]
    n = config.encoder_layers

    skips = []
    h = _conv(config.scaled(enc_widths[0]), ENCODER_KERNELS[0], p + "input_conv")(stage_input)
    skips.append(h)
    for i in range(1, n):
        h = _conv(config.scaled(enc_widths[i]), ENCODER_KERNELS[i], f"{p}enc{i}")(h)
        if ENCODER_POOLS[i]:
            h = tf.keras.layers.MaxPool2D(2, name=f"{p}pool{i}")(h)
        skips.append(h)

    for i in range(n - 1, 0, -1):
        filters = config.scaled(dec_widths[len(ENCODER_POOLS) - 1 - i])
        if ENCODER_POOLS[i]:
            h = _up(filters, 4 if i >= 6 else 6, f"{p}dec{i}")(h)
        else:
            h = _conv(filters, ENCODER_KERNELS[i], f"{p}dec{i}")(h)
        h = tf.keras.layers.Concatenate(name=f"{p}skip{i}")([h, skips[i - 1]])

    h = tf.keras.layers.Concatenate(name=f"{p}input_skip1")([h, stage_input])
    h = _conv(config.scaled(fuse_width), 5, p + "input_fuse_conv")(h)
    h = tf.keras.layers.Concatenate(name=f"{p}input_skip0")([h, stage_input])
    output_activation = "relu" if stage == 1 or config.stage2_output == "relu" else None
    return _conv(1, 5, p + "output_conv", output_activation)(h)


def build_radiounet(config: RadioUNetConfig = RadioUNetConfig()) -> RadioUNet:
    """Builds both stages for `config`; the weights are initialised by Keras' defaults."""
    r = config.resolution
    stage1 = build_stage1(config)

    x2 = tf.keras.Input((r, r, INPUT_CHANNELS), name="x")
    coarse = tf.keras.Input((r, r, 1), name="coarse")
    stacked = tf.keras.layers.Concatenate(name="s2_stack_input")([coarse, x2])
    stage2 = tf.keras.Model([x2, coarse], _u_net(stacked, 2, config), name="stage2")

    xw = tf.keras.Input((r, r, INPUT_CHANNELS), name="x")
    coarse_w = stage1(xw)
    wnet = tf.keras.Model(xw, [coarse_w, stage2([xw, coarse_w])], name="radiownet")
    return RadioUNet(config, stage1, stage2, wnet)


def build_stage1(config: RadioUNetConfig = RadioUNetConfig()) -> tf.keras.Model:
    """Stage 1 alone (x -> coarse map), as `build_radiounet(config).stage1`: half the layers to
    build when a stage-1 model is all that is needed."""
    x = tf.keras.Input((config.resolution, config.resolution, INPUT_CHANNELS), name="x")
    return tf.keras.Model(x, _u_net(x, 1, config), name="stage1")


def parameter_count(model: tf.keras.Model) -> int:
    return int(sum(int(tf.size(w)) for w in model.weights))
