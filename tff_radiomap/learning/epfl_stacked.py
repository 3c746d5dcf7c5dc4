"""EPFL-REMNet and its baselines with every client's model stacked on one leading axis.

The same round as `epfl_remnet.build_process` (Algorithm 1; see its docstring), computed for all
C clients at once in one `tf.function`: every parameter of the client models is a tensor
[C, ...], a local step is one batched matmul per layer, Adam (TFF's `build_adam` formula) runs
per client, and the upload pipeline (error feedback Eq. (9)-(10), Top-K, b-bit symmetric
quantization with one scale per tensor, the equal- or example-weighted mean) is applied per row.
Initial values and keys come from `model_layout.model_layout`, shuffles from the same stateless
seeds (client seed, round, epoch) as the TFF client computation, so a round equals the TFF
process's round to float tolerance (tests/learning/test_epfl_stacked.py). It exists because the
tables need hundreds of runs and the TFF worker's round for 90 clients is slow by comparison
(bench/remnet_round_speed.py measures both; bench/RESULTS.md); the TFF process stays the
reference implementation.

Local schedules (`EpflRemnetConfig`):
  joint    (default) all trainable parameters for `local_epochs` (EPFL-REMNet, FedAvg, PFL);
  FedRep   `head_epochs` > 0: the private head for `head_epochs` epochs with the body frozen,
           then the body for `local_epochs` with the head frozen (Collins et al., 2021);
  Ditto    `ditto_lambda` set: the global model trained as FedAvg, and a private personal model
           v_i trained on loss(v_i) + lambda/2 ||v_i - theta^t||^2 (Li et al., 2021); the
           personal model is evaluated.
Models (by `LocalModel.name`): remnet / remnet_global (linear or dropout-free MLP head),
remnet_split (FedFly: FedAvg's training, plus the cut activations and labels counted as uplink),
deep_kernel_gp (pFedGP: GP marginal likelihood per minibatch, GP posterior mean to predict).
The models on stacked parameters and the clients' local training (Adam per client, fused or
masked) are in `stacked_local`; this module holds the layout, the upload pipeline and the round.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from tff_radiomap.aggregators import quantization, wire
from tff_radiomap.learning import epfl_remnet, epfl_steps
from tff_radiomap.learning import local_model as local_lib
from tff_radiomap.learning.model_layout import ModelLayout, model_layout
from tff_radiomap.learning.stacked_local import batches, gp_nll, gp_predict, huber, local_train, per_client, remnet_forward

PERSONAL = "personal/"  # Prefix of Ditto's personal copy of every parameter.
MODELS = ("remnet", "remnet_global", "remnet_split", "deep_kernel_gp")


@dataclasses.dataclass(frozen=True)
class StackedLayout:
    """Which stacked parameters exist: shared (server) keys and the clients' private keys."""

    layout: ModelLayout
    model: str
    ditto: bool

    @property
    def shared_keys(self) -> list[str]:
        return self.layout.shared_keys

    @property
    def private_keys(self) -> list[str]:
        return [PERSONAL + k for k in self.layout.shared_keys] if self.ditto else self.layout.private_keys

    def initial_private(self) -> list[np.ndarray]:
        return list(self.layout.initial_shared if self.ditto else self.layout.initial_private)


def stacked_layout(config: epfl_remnet.EpflRemnetConfig, local: local_lib.LocalModel, seed: int) -> StackedLayout:
    if local.name not in MODELS:
        raise ValueError(f"local model {local.name!r}: the stacked clients know {MODELS}")
    if config.model.head == "mlp" and config.model.head_dropout > 0:
        raise ValueError("head='mlp' with dropout: the stacked clients have no dropout; set head_dropout=0")
    if config.ditto_lambda is not None and local.name != "remnet_global":
        raise ValueError("Ditto needs the whole model shared (split_head=False)")
    return StackedLayout(model_layout(local, seed), local.name, config.ditto_lambda is not None)


# ---------------------------------------------------------------------------------------------
# The upload pipeline per row.
def quantize_rows(config, leaves: list) -> list:
    """b-bit symmetric quantization of every client's upload, one scale per tensor and client (as
    `SymmetricQuantizationFactory(scale_scope='tensor')` per client): what the server decodes."""
    if config.bits is None:
        return leaves
    if config.scale_scope != "tensor":
        raise ValueError("the stacked clients quantize with scale_scope='tensor' only")
    levels = quantization.max_level(config.bits)
    decoded = []
    for t in leaves:
        scale = tf.reduce_max(tf.abs(tf.reshape(t, [t.shape[0], -1])), axis=1) / levels
        scale = tf.reshape(scale, [-1] + [1] * (len(t.shape) - 1))
        decoded.append(tf.clip_by_value(tf.round(tf.math.divide_no_nan(t, scale)), -levels, levels) * scale)
    return decoded


def side_bytes_per_sample(config, local: local_lib.LocalModel) -> int:
    """FedFly's per-sample activations and label (float32) sent device -> edge each local step."""
    return 4 * (config.model.backbone_units[0] + config.model.outputs) if local.name == "remnet_split" else 0


def upload_bytes(config, layout: ModelLayout) -> int:
    return epfl_remnet.upload_bytes_per_client(epfl_remnet.upload_factory(config), layout.uploaded_type)


def dense_value_count(layout: ModelLayout) -> int:
    return wire.value_count(layout.shared_type)


# ---------------------------------------------------------------------------------------------
# The process.
class StackedProcess:
    """All clients' rounds as one `tf.function` (one trace per kind of round: sync or not, and
    whether Adam runs fused, see `fused_adam_applies`).

    State (a dict of numpy arrays or tensors): `shared` and (with an EMA) `ema`, key -> server
    value; `private` key -> [C, ...] (the heads; Ditto's personal models); `error` key -> [C, ...]
    (with Top-K); `seeds` [C] int64 (the clients' shuffle seeds). Data: x [C, N, D], y [C, N, M],
    num_examples [C] (rows past it are padding). `fused_adam=False` keeps Adam op by op in every
    round (the reference the fused kernel is tested against).
    """

    def __init__(self, config: epfl_remnet.EpflRemnetConfig, local: local_lib.LocalModel, seed: int = 0, fused_adam: bool = True):
        self.config, self.local, self.fused_adam = config, local, fused_adam
        self._layouts = {}  # Model seed -> StackedLayout (see `_layout_of`).
        self.stacked = self._layout_of(seed)
        self.layout = self.stacked.layout
        self.bytes_per_upload = upload_bytes(config, self.layout)
        self.k = epfl_remnet.kept_entries(config, self.layout)  # K of Top-K (None: no Top-K).
        self.side_per_sample = side_bytes_per_sample(config, local)
        kinds = [(sync, fused) for sync in (False, True) for fused in (False, True)]
        self._rounds = {kind: tf.function(lambda *a, kind=kind: self._round(*a, sync=kind[0], fused=kind[1]), autograph=False) for kind in kinds}
        self._scratch = {}  # Number of clients -> key -> (w, a, v) variables of the fused Adam.
        self._predict = tf.function(self._predict_graph, autograph=False, reduce_retracing=True)

    def initial_state(self, num_clients: int, client_seeds, model_seed: int | None = None) -> dict:
        """Every client starts from the common initial model of `model_seed` (default: the seed
        the process was built with; the traced round does not depend on it, so one process
        serves every seed)."""

        def stack(values):
            return {k: np.repeat(v[None], num_clients, 0) for k, v in values}

        stacked = self.stacked if model_seed is None else self._layout_of(model_seed)
        shared = dict(zip(stacked.layout.shared_keys, stacked.layout.initial_shared))
        state = {"shared": shared, "private": stack(zip(stacked.private_keys, stacked.initial_private()))}
        if self.config.ema_decay > 0:
            state["ema"] = dict(shared)
        if self.config.k_fraction is not None:
            state["error"] = {k: np.zeros((num_clients,) + v.shape, np.float32) for k, v in shared.items()}
        state["seeds"] = np.asarray(client_seeds, np.int64)
        return state

    def _layout_of(self, model_seed: int) -> StackedLayout:
        """The initial model of `model_seed`, built once per process and seed. Building one sets TF's
        global seed, which clears the kernels of every instantiated function: the next round and
        prediction would pay graph optimization again (about 1.2 s for FedAvg's round, 4 s for
        Ditto's), once per run instead of once per seed."""
        if model_seed not in self._layouts:
            built = stacked_layout(self.config, self.local, model_seed)
            for values in (built.layout.initial_shared, built.layout.initial_private):
                for v in values:
                    v.setflags(write=False)  # Shared by every run of this seed.
            self._layouts[model_seed] = built
        return self._layouts[model_seed]

    def fused_adam_applies(self, data: dict, selected) -> bool:
        """Whether this round's Adam can run fused: every client selected and none short of the
        padded length by a batch, so that every client takes every local step at the same step
        count (otherwise the masked per-client step, `stacked_local._optimizer_step`)."""
        if not self.fused_adam or self.config.client_optimizer != "adam" or not np.all(selected):
            return False
        batch = self.config.batch_size
        return bool(np.all(batches(np.asarray(data["num_examples"]), batch) == batches(int(data["x"].shape[1]), batch)))

    def _scratch_for(self, num_clients: int) -> dict:
        """The fused Adam's variables [C, ...] for every shared and private key (Ditto's personal
        model has its own), made outside the traced round (a `tf.function` may create variables on
        its first trace only)."""
        if num_clients not in self._scratch:
            stacked = self.stacked
            values = zip(stacked.shared_keys + stacked.private_keys, self.layout.initial_shared + stacked.initial_private())
            self._scratch[num_clients] = {k: tuple(tf.Variable(tf.zeros((num_clients,) + v.shape)) for _ in range(3)) for k, v in values}
        return self._scratch[num_clients]

    def evaluated_shared(self, state) -> dict:
        return state["ema"] if "ema" in state else state["shared"]

    def _loss_fn(self, anchor=None):
        if self.local.name == "deep_kernel_gp":
            return gp_nll
        delta, lam = self.config.model.huber_delta, self.config.ditto_lambda

        def loss(p, x, y, valid):
            value = huber(y, remnet_forward(p, x), valid, delta)
            if anchor is not None:  # Ditto's proximal term toward the broadcast model.
                value += 0.5 * lam * tf.add_n([tf.reduce_sum(tf.reshape(tf.square(p[k] - anchor[k]), [p[k].shape[0], -1]), 1) for k in anchor])
            return value

        return loss

    def _train(self, tile, private, data, selected, seeds, round_num, fused: bool):
        """(trained shared parameters, new private ones, loss sum, epochs) of every client."""
        cfg, keys = self.config, self.layout.shared_keys
        scratch = self._scratch[int(data["x"].shape[0])] if fused else None

        def train(params, names, loss, epochs, first=0, scratch=scratch):
            return local_train(cfg, params, names, loss, data, selected, seeds, round_num, epochs, first, scratch)

        if self.stacked.ditto:
            trained, loss = train(tile, keys, self._loss_fn(), cfg.local_epochs)
            personal = {k: private[PERSONAL + k] for k in keys}
            personal_scratch = {k: scratch[PERSONAL + k] for k in keys} if fused else None
            personal, _ = train(personal, keys, self._loss_fn(anchor=tile), cfg.local_epochs, scratch=personal_scratch)
            return trained, {PERSONAL + k: personal[k] for k in keys}, loss, cfg.local_epochs
        params, private_keys = {**tile, **private}, self.stacked.private_keys
        if cfg.head_epochs > 0:  # FedRep: the head first (body frozen), then the body (head frozen).
            params, head_loss = train(params, private_keys, self._loss_fn(), cfg.head_epochs)
            params, body_loss = train(params, keys, self._loss_fn(), cfg.local_epochs, cfg.head_epochs)
            return params, {k: params[k] for k in private_keys}, head_loss + body_loss, cfg.head_epochs + cfg.local_epochs
        params, loss = train(params, keys + private_keys, self._loss_fn(), cfg.local_epochs)
        return params, {k: params[k] for k in private_keys}, loss, cfg.local_epochs

    def _round(self, shared, ema, private, error, data, selected, seeds, round_num, sync: bool, fused: bool):
        cfg, keys = self.config, self.layout.shared_keys
        c = int(data["x"].shape[0])
        # Server broadcast: theta^t to every client.
        tile = {k: tf.tile(shared[k][None], [c] + [1] * len(shared[k].shape)) for k in keys}
        # Client work: local training; a client whose result holds a NaN or Inf is dropped.
        trained, new_private, loss_sum, epochs = self._train(tile, private, data, selected, seeds, round_num, fused)
        delta = [trained[k] - tile[k] for k in keys]
        finite = tf.math.is_finite(loss_sum)
        for t in delta + list(new_private.values()):
            finite &= tf.reduce_all(tf.math.is_finite(tf.reshape(t, [c, -1])), 1)
        ok = finite & selected
        new_private = {k: tf.where(per_client(ok, v), v, private[k]) for k, v in new_private.items()}
        delta = [tf.where(per_client(ok, d), d, tf.zeros_like(d)) for d in delta]
        uploads = ok if sync else tf.zeros_like(ok)
        new_error = error
        # Upload: u = Delta + e (Eq. (9)), Top-K and quantization; e = u - T_K(u) (Eq. (10)) stays.
        if sync:
            sent = delta
            if self.k is not None:
                sent, residual = epfl_steps.sparsify_with_error_feedback(delta, [error[k] for k in keys], self.k, batch_dims=1)
                new_error = {k: tf.where(per_client(ok, e), e, error[k]) for k, e in zip(keys, residual)}
            decoded = quantize_rows(cfg, sent)
            # Inner aggregation: the weighted mean of the decoded uploads (0 if nobody uploads).
            examples = tf.cast(data["num_examples"], tf.float32)
            weight = tf.cast(uploads, tf.float32) * (examples if cfg.client_weighting == "num_examples" else 1.0)
            total = tf.reduce_sum(weight)
            mean = [tf.math.divide_no_nan(tf.tensordot(weight, t, axes=1), total) for t in decoded]
            # Server update: theta^(t+1) = theta^t + eta * mean, and its EMA.
            shared = {k: shared[k] + cfg.server_learning_rate * m for k, m in zip(keys, mean)}
            if ema is not None:
                ema = epfl_steps.ema_update(ema, shared, cfg.ema_decay)
        okf = tf.cast(ok, tf.float32)
        examples = tf.cast(data["num_examples"], tf.float32)
        metrics = {
            "train_loss": tf.math.divide_no_nan(tf.reduce_sum(tf.where(ok, loss_sum, 0.0)), tf.reduce_sum(okf * examples) * epochs),
            "uploads": tf.reduce_sum(tf.cast(uploads, tf.int64)),
            "side_bytes": tf.cast(tf.reduce_sum(okf * examples), tf.int64) * (cfg.local_epochs * self.side_per_sample),
            "nonfinite_updates": tf.reduce_sum(tf.cast(selected & ~finite, tf.int64)),
        }
        return shared, ema, new_private, new_error, metrics

    def next(self, state: dict, data: dict, selected, round_num: int) -> tuple[dict, dict]:
        """One round; `selected` [C] bool (the clients trained this round). Metrics as the TFF
        process's: train_loss, uploads, uplink_bytes (exact), nonfinite_updates."""
        sync = epfl_steps.is_sync_round(round_num, self.config.sync_period)
        fused = self.fused_adam_applies(data, selected)
        if fused:
            self._scratch_for(int(data["x"].shape[0]))
        shared, ema, private, error, m = self._rounds[sync, fused](
            state["shared"],
            state.get("ema"),
            state["private"],
            state.get("error", {}),
            data,
            tf.constant(selected),
            state["seeds"],
            tf.constant(round_num, tf.int64),
        )
        new = {"shared": shared, "private": private, "seeds": state["seeds"]}
        if ema is not None:
            new["ema"] = ema
        if "error" in state:
            new["error"] = error
        metrics = {k: v.numpy() for k, v in m.items()}
        metrics["uplink_bytes"] = int(metrics["uploads"]) * self.bytes_per_upload + int(metrics.pop("side_bytes"))
        return new, metrics

    def predict(self, state: dict, train: dict, x) -> np.ndarray:
        """[C, T, M] z-scored predictions of every client's personalized model on x [C, T, D].
        One graph per process (traced once, any T), reused by every run and evaluation."""
        if self.stacked.ditto:
            shared, stacked = {}, {k[len(PERSONAL) :]: v for k, v in state["private"].items()}
        else:
            shared, stacked = self.evaluated_shared(state), state["private"]
        gp_train = {k: train[k] for k in ("x", "y", "num_examples")} if self.local.name == "deep_kernel_gp" else {}
        return self._predict(shared, stacked, gp_train, x).numpy()

    def _predict_graph(self, shared, stacked, gp_train, x):
        c = tf.shape(x)[0]
        params = {k: tf.repeat(v[None], c, axis=0) for k, v in shared.items()}  # The server model on every client.
        params.update(stacked)
        if self.local.name == "deep_kernel_gp":
            valid = tf.cast(tf.range(tf.shape(gp_train["x"])[1])[None, :] < gp_train["num_examples"][:, None], tf.float32)
            return gp_predict(params, gp_train["x"], gp_train["y"], valid, x)
        return remnet_forward(params, x)
