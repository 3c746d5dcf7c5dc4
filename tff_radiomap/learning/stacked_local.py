"""Client work of the stacked clients (`epfl_stacked`): the models on stacked parameters and the
local training of every client at once (the process, upload pipeline and server step stay there).

The models are EPFL-REMNet's (Eq. (5) backbone, linear or MLP head, Keras' Huber loss) and
pFedGP's deep-kernel GP. `local_train` runs the local epochs of all C clients at once, with TFF's
Adam (or SGD) per client: op by op under a step mask, or as TF's fused kernel when every client
takes every step.
"""

from __future__ import annotations

import math

import tensorflow as tf

LAYER_NORM_EPSILON = 1e-3  # Keras' LayerNormalization default.
ADAM = dict(beta_1=0.9, beta_2=0.999, epsilon=1e-7)  # tff.learning.optimizers.build_adam defaults.
JITTER = 1e-4  # Added to the GP's noise variance on the Gram's diagonal (pFedGP's, `baselines.pfedgp`).


def per_client(mask, t):
    """`mask` [C] reshaped to broadcast over a stacked tensor t [C, ...]."""
    return tf.reshape(mask, [-1] + [1] * (len(t.shape) - 1))


# ---------------------------------------------------------------------------------------------
# Models on stacked parameters: p maps keys to [C, ...] tensors, x is [C, B, D].
def _dense(p, name, h):
    # A batched matmul ([C, B, I] x [C, I, O]); faster here than the same einsum (bench/RESULTS.md, "Speed and scale").
    return tf.matmul(h, p[name + ".kernel"]) + p[name + ".bias"][:, None, :]


def _layer_norm(p, name, h):
    return _normalized(h, p[name + ".gamma"][:, None, :], p[name + ".beta"][:, None, :])


@tf.custom_gradient
def _normalized(h, gamma, beta):
    """Keras' LayerNormalization over the last axis of h [C, B, D] (gamma, beta [C, 1, D]), with its
    gradient written out: differentiating the moments op by op takes about twice the passes over
    h, and layer norm was ~45% of a local step's forward and backward pass (bench/RESULTS.md,
    "Speed and scale")."""
    mean = tf.reduce_mean(h, -1, keepdims=True)
    centred = h - mean
    rstd = tf.math.rsqrt(tf.reduce_mean(tf.square(centred), -1, keepdims=True) + LAYER_NORM_EPSILON)
    xhat = centred * rstd

    def grad(dy):
        dxhat = dy * gamma
        dh = rstd * (dxhat - tf.reduce_mean(dxhat, -1, keepdims=True) - xhat * tf.reduce_mean(dxhat * xhat, -1, keepdims=True))
        return dh, tf.reduce_sum(dy * xhat, 1, keepdims=True), tf.reduce_sum(dy, 1, keepdims=True)

    return xhat * gamma + beta, grad


def backbone(p, x, layers: int = 3):
    """Eq. (5): three Dense + SiLU + LayerNorm layers."""
    h = x
    for n in range(1, layers + 1):
        h = _layer_norm(p, f"backbone_norm_{n}", tf.nn.silu(_dense(p, f"backbone_dense_{n}", h)))
    return h


def remnet_forward(p, x):
    z = backbone(p, x)
    if "head_hidden.kernel" in p:
        z = tf.nn.silu(_dense(p, "head_hidden", z))
    return _dense(p, "head_out", z)


def huber(y, pred, valid, delta: float):
    """Keras' Huber (mean over outputs, then over the valid samples) per client: [C]."""
    err = tf.abs(pred - y)
    per_entry = tf.where(err <= delta, 0.5 * err**2, delta * (err - 0.5 * delta))
    per_sample = tf.reduce_mean(per_entry, axis=-1) * valid
    return tf.reduce_sum(per_sample, 1) / tf.maximum(tf.reduce_sum(valid, 1), 1.0)


def _gp_kernel(p, a, b):
    sq = tf.reduce_sum(a**2, -1)[:, :, None] + tf.reduce_sum(b**2, -1)[:, None, :] - 2.0 * tf.matmul(a, b, transpose_b=True)
    scale = tf.exp(2.0 * p["gp_kernel.log_signal"])[:, None, None]
    return scale * tf.exp(-tf.maximum(sq, 0.0) / (2.0 * tf.exp(2.0 * p["gp_kernel.log_lengthscale"])[:, None, None]))


def _masked_gram(p, z, valid):
    """K + (sigma^2 + jitter) I on the valid rows; padding rows become identity rows (no effect)."""
    outer = valid[:, :, None] * valid[:, None, :]
    noise = tf.exp(2.0 * p["gp_kernel.log_noise"])[:, None] + JITTER
    return _gp_kernel(p, z, z) * outer + tf.linalg.diag(tf.where(valid > 0, noise, 1.0))


def gp_nll(p, x, y, valid):
    """baselines.pfedgp.gp_nll per client on the valid rows: [C]."""
    chol = tf.linalg.cholesky(_masked_gram(p, backbone(p, x), valid))
    y = y * valid[:, :, None]
    alpha = tf.linalg.cholesky_solve(chol, y)
    n, m = tf.reduce_sum(valid, 1), tf.cast(tf.shape(y)[2], tf.float32)
    logdet = tf.reduce_sum(tf.math.log(tf.linalg.diag_part(chol)), 1)
    nll = 0.5 * tf.reduce_sum(y * alpha, [1, 2]) + m * logdet + 0.5 * n * m * math.log(2 * math.pi)
    return nll / tf.maximum(n * m, 1.0)


def gp_predict(p, x_train, y_train, valid_train, x):
    chol = tf.linalg.cholesky(_masked_gram(p, backbone(p, x_train), valid_train))
    k_star = _gp_kernel(p, backbone(p, x), backbone(p, x_train)) * valid_train[:, None, :]
    return tf.matmul(k_star, tf.linalg.cholesky_solve(chol, y_train * valid_train[:, :, None]))


# ---------------------------------------------------------------------------------------------
# Local training of all clients at once.
def epoch_orders(seeds, round_num, epoch, n, n_max: int):
    """[C, n_max] visiting orders: client c's `local_model.epoch_order` under seed (seed_c, round +
    epoch), padded positions last."""
    keys = tf.stack([tf.random.stateless_uniform([n_max], seed=tf.stack([seeds[c], round_num + epoch])) for c in range(seeds.shape[0])])
    keys = tf.where(tf.range(n_max)[None, :] < n[:, None], keys, 2.0)
    return tf.argsort(keys, axis=1, stable=True)


def _adam_constants(config) -> dict:
    """Adam's float32 constants, as TF's fused kernel receives them."""
    return {k: tf.constant(v, tf.float32) for k, v in dict(ADAM, lr=config.client_learning_rate).items()}


def _adam_rates(config, steps: int):
    """Adam's step sizes lr sqrt(1 - beta_2^t) / (1 - beta_1^t) for t = 1..steps ([steps], float32):
    one table that every client's step looks up, because a vectorized pow can round one lane
    differently from another."""
    c, t = _adam_constants(config), tf.range(1, steps + 1, dtype=tf.float32)
    return c["lr"] * tf.sqrt(1.0 - tf.pow(c["beta_2"], t)) / (1.0 - tf.pow(c["beta_1"], t))


def _optimizer_step(config, w, g, a, v, rate, active):
    """TFF's Adam (or plain SGD) on one stacked parameter; `rate` [C] is each client's Adam step
    size at its step count (`_adam_rates`) and `active` [C] (1.0 or 0.0) whether it takes this
    step. An inactive client's w, a and v come back unchanged: the mask scales the per-client
    coefficients (exact: x + 0 * finite = x), which costs no pass over the parameters, where
    selecting the old values would cost three. The float32 operations are those of TF's fused Adam
    kernel, in its order (`_fused_adam_step`): one step of either gives the same bits."""
    if config.client_optimizer == "sgd":
        return w - per_client(config.client_learning_rate * active, w) * g, a, v
    c = _adam_constants(config)
    a = a + (g - a) * per_client((1.0 - c["beta_1"]) * active, w)
    v = v + (tf.square(g) - v) * per_client((1.0 - c["beta_2"]) * active, w)
    return w - (a * per_client(rate * active, w)) / (tf.sqrt(v) + c["epsilon"]), a, v


def _fused_adam_step(config, scratch, g, rate):
    """`_optimizer_step`'s Adam for clients that all take the step at one step count, whose step
    size `rate` (`_adam_rates`) is a scalar: TF's fused kernel updates the scratch variables
    (w, a, v) in one pass over the parameter where the formula op by op takes about twelve. The
    kernel's own step size, lr sqrt(1 - beta_2^t) / (1 - beta_1^t), is given as rate * 1 / 1
    (beta powers 0), because its scalar arithmetic can round that product 1 ulp apart from TF's
    ops. One step agrees bit for bit with the masked step (tests/learning/test_fused_adam.py);
    whole rounds to float tolerance, since TF may rewrite the rest of two different graphs into
    differently rounded kernels (Ditto's rounds differ in the 6th digit)."""
    c, (w, a, v), zero = _adam_constants(config), scratch, tf.constant(0.0)
    tf.raw_ops.ResourceApplyAdam(
        var=w.handle, m=a.handle, v=v.handle, beta1_power=zero, beta2_power=zero, lr=rate,
        beta1=c["beta_1"], beta2=c["beta_2"], epsilon=c["epsilon"], grad=g,
    )  # fmt: skip


def batches(rows, batch: int):
    """Local steps an epoch over `rows` samples (numbers or an array of them): ceil(rows / batch)."""
    return -(-rows // batch)


def local_train(config, params: dict, trainable: list[str], loss_fn, data, selected, seeds, round_num, epochs, first_epoch: int = 0, scratch=None):
    """Trains `trainable` of every selected client for `epochs` (fresh optimizer state, as the TFF
    client does each round); returns (params, loss sum over visited samples).

    `scratch` (key -> (w, a, v) variables [C, ...], see `epfl_stacked.StackedProcess._scratch_for`): Adam by the
    fused kernel, valid only when every client takes every step (`epfl_stacked.StackedProcess.fused_adam_applies`)."""
    x, y, n = data["x"], data["y"], data["num_examples"]
    n_max, batch = int(x.shape[1]), config.batch_size
    steps = batches(n_max, batch)
    params = {k: tf.convert_to_tensor(v) for k, v in params.items()}
    if scratch is not None:
        for k in trainable:
            for var, value in zip(scratch[k], (params[k], tf.zeros_like(params[k]), tf.zeros_like(params[k]))):
                var.assign(value)
    slots = {k: (tf.zeros_like(params[k]), tf.zeros_like(params[k])) for k in trainable} if scratch is None else {}
    count = tf.zeros_like(n)
    rates = _adam_rates(config, epochs * steps)
    loss_sum = tf.zeros([x.shape[0]], tf.float32)
    for epoch in range(first_epoch, first_epoch + epochs):
        order = epoch_orders(seeds, round_num, epoch, n, n_max) if config.shuffle else tf.tile(tf.range(n_max)[None], [x.shape[0], 1])
        order = tf.pad(order, [[0, 0], [0, steps * batch - n_max]])
        for s in range(steps):
            position = s * batch + tf.range(batch)
            valid = tf.cast((position[None, :] < n[:, None]) & selected[:, None], tf.float32)
            active = tf.reduce_any(valid > 0, axis=1)
            idx = order[:, s * batch : (s + 1) * batch]
            xb, yb = tf.gather(x, idx, batch_dims=1), tf.gather(y, idx, batch_dims=1)
            if scratch is not None:
                params.update((k, scratch[k][0].read_value()) for k in trainable)
            with tf.GradientTape() as tape:
                tape.watch([params[k] for k in trainable])
                loss = loss_fn(params, xb, yb, valid)
                total = tf.reduce_sum(loss)  # Clients are independent: d total / d params_c = d loss_c / d params_c.
            grads = tape.gradient(total, [params[k] for k in trainable])
            count = count + tf.cast(active, count.dtype)
            if scratch is not None:  # Every client at step (epoch - first_epoch) * steps + s + 1.
                for k, g in zip(trainable, grads):
                    _fused_adam_step(config, scratch[k], g, rates[(epoch - first_epoch) * steps + s])
            else:
                rate, takes_step = tf.gather(rates, tf.maximum(count, 1) - 1), tf.cast(active, tf.float32)
                for k, g in zip(trainable, grads):
                    w, a, v = _optimizer_step(config, params[k], g, *slots[k], rate, takes_step)
                    params[k], slots[k] = w, (a, v)
            loss_sum += loss * tf.reduce_sum(valid, 1)
    if scratch is not None:
        params.update((k, scratch[k][0].read_value()) for k in trainable)
    return params, loss_sum
