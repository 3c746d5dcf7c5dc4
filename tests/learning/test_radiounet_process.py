import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_radiomap.models import phases
from tff_radiomap.learning import keras_wrap, local_training, radiounet_process as rp
from tff_radiomap.models.phases import Phase
from tff_radiomap.models import radiounet

CONFIG = radiounet.RadioUNetConfig(resolution=32, width=0.25)
LR = 0.05


def _arrays(n, seed):
    rng = np.random.default_rng(seed)
    x = np.stack([rng.random((n, 32, 32)) < 0.3, rng.random((n, 32, 32)) < 0.002], -1).astype(np.float32)
    y = rng.random((n, 32, 32, 1)).astype(np.float32)
    return x, y


def _dataset(x, y, batch_size=4):
    return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y)).batch(batch_size)


@pytest.fixture(scope="module")
def initial():
    return phases.initial_weights(CONFIG, seed=0)


@pytest.fixture(scope="module")
def clients():
    return [_arrays(6, 1), _arrays(3, 2)]


def _sgd():
    return rp.build_optimizer("sgd", LR)


def _changed(a, b):
    return [not np.array_equal(u, v) for u, v in zip(a, b)]


def _full_gradient(initial, phase, x, y):
    """Gradient of the mean loss over (x, y) for `phase`'s trainable weights, eagerly."""
    model = phases.build_phase_model(CONFIG, phase)
    weights = keras_wrap.to_model_weights(initial, phase)
    for v, w in zip(model.trainable_variables, weights.trainable):
        v.assign(w)
    for v, w in zip(model.non_trainable_variables, weights.non_trainable):
        v.assign(w)
    with tf.GradientTape() as tape:
        loss = phases.mse_loss(y, model(x))
    return [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]


@pytest.fixture(scope="module")
def two_stage(tff_runtime, initial):
    # One aggregator per phase: the weighted mean for stage 1, the uniform mean for stage 2.
    aggregators = {Phase.STAGE1: None, Phase.STAGE2: tff.aggregators.UnweightedMeanFactory()}
    return rp.build_two_stage_process(CONFIG, initial, 1, _sgd(), rp.build_optimizer("sgd", 1.0), aggregators)


def test_each_phase_updates_only_its_stage(two_stage, initial, clients):
    data = [_dataset(*c) for c in clients]
    state = two_stage.initialize()
    assert state["phase"] == Phase.STAGE1
    state, metrics = two_stage.next(state, 1, data)
    after1 = two_stage.network_weights(state)
    assert metrics["phase"] == 1 and metrics["client_work"]["num_examples"] == 9
    assert all(_changed(after1.stage1, initial.stage1))
    assert not any(_changed(after1.stage2, initial.stage2))

    state, metrics = two_stage.next(state, 2, data)
    after2 = two_stage.network_weights(state)
    assert state["phase"] == Phase.STAGE2 and metrics["phase"] == 2
    assert not any(_changed(after2.stage1, after1.stage1))  # Stage 1 frozen, carried over.
    assert all(_changed(after2.stage2, initial.stage2))
    # The stage-2 process uploads stage 2 only.
    assert len(rp.uploaded_update_type(two_stage.processes[Phase.STAGE2])) == len(initial.stage2)
    assert two_stage.client_weighting == {Phase.STAGE1: "num_examples", Phase.STAGE2: "uniform"}


def test_a_round_equals_the_local_training_the_attack_uses(two_stage, initial, clients):
    """One client, server SGD(1): the new global weights are the eager local training's result."""
    x, y = clients[0]
    state, _ = two_stage.next(two_stage.initialize(), 1, [_dataset(x, y, batch_size=4)])
    model = phases.build_phase_model(CONFIG, Phase.STAGE1)
    for v, w in zip(model.trainable_variables, initial.stage1):
        v.assign(w)
    opt = _sgd()
    local_training.train_epochs(model, opt, local_training.initial_optimizer_state(opt, model), _dataset(x, y, 4))
    for got, want in zip(two_stage.network_weights(state).stage1, model.trainable_variables):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-6)


def test_a_scheduled_server_rate_scales_the_round_s_update(two_stage, initial, clients):
    """Server SGD: the round applies rate x the mean update; the schedule sets the rate per round."""
    data = [_dataset(*c) for c in clients]
    full, _ = two_stage.next(two_stage.initialize(), 1, data)
    scheduled = rp.PhasedProcess(two_stage.processes, two_stage.phase_for_round, initial, two_stage.client_weighting, server_learning_rate=lambda r: 0.25)
    state, metrics = scheduled.next(scheduled.initialize(), 1, data)
    assert metrics["server_learning_rate"] == 0.25
    for got, whole, start in zip(scheduled.network_weights(state).stage1, two_stage.network_weights(full).stage1, initial.stage1):
        np.testing.assert_allclose(got - start, 0.25 * (whole - start), rtol=1e-3, atol=1e-7)


def test_the_cosine_schedule_runs_from_the_base_to_its_final_fraction():
    rate = rp.cosine_schedule(2.0, 0.1, first=11, last=21)
    assert rate(11) == pytest.approx(2.0) and rate(16) == pytest.approx(2.0 * (0.1 + 0.9 * 0.5)) and rate(21) == pytest.approx(0.2)
    assert rp.cosine_schedule(2.0, 0.1, first=5, last=5)(5) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="final_fraction=1.5"):
        rp.cosine_schedule(1.0, 1.5, 1, 2)


@pytest.mark.parametrize("aggregator", ["weighted", "unweighted"])
def test_fedsgd_takes_one_step_on_the_full_local_gradients(tff_runtime, initial, clients, aggregator):
    if aggregator == "weighted":  # A weighted factory with measurements of its own; the norm clips nothing.
        factory = tff.aggregators.clipping_factory(1e3, tff.aggregators.MeanFactory())
    else:
        factory = tff.aggregators.UnweightedMeanFactory()
    process = rp.build_fedsgd_process(CONFIG, initial, _sgd(), rp.build_optimizer("sgd", 1.0), factory)
    assert process.client_weighting[Phase.JOINT] == ("num_examples" if aggregator == "weighted" else "uniform")
    state, metrics = process.next(process.initialize(), 1, [_dataset(*c, batch_size=4) for c in clients])
    assert metrics["phase"] == Phase.JOINT
    if aggregator == "weighted":
        assert metrics["aggregator"]["clipped_count"] == 0
    grads = [_full_gradient(initial, Phase.JOINT, *c) for c in clients]
    p = np.array([6.0, 3.0]) / 9.0 if aggregator == "weighted" else np.array([0.5, 0.5])
    start = keras_wrap.to_model_weights(initial, Phase.JOINT).trainable
    got = keras_wrap.to_model_weights(process.network_weights(state), Phase.JOINT).trainable
    for i, (w0, w1) in enumerate(zip(start, got)):
        expected = w0 - LR * (p[0] * grads[0][i] + p[1] * grads[1][i])
        np.testing.assert_allclose(w1, expected, rtol=1e-4, atol=1e-6)


def test_bad_aggregators_are_refused(initial):
    with pytest.raises(ValueError, match="lacks phases"):
        rp.build_two_stage_process(CONFIG, initial, 1, _sgd(), _sgd(), {Phase.STAGE1: None})
    with pytest.raises(TypeError, match="model_aggregator='mean'"):
        rp.as_weighted("mean")


def test_local_updates_are_the_uploads_of_each_step(initial):
    model = phases.build_phase_model(CONFIG, Phase.STAGE1)
    for v, w in zip(model.trainable_variables, initial.stage1):
        v.assign(w)
    x, y = _arrays(1, 4)
    uploads = local_training.local_updates(model, _sgd(), x, y, steps=3)
    assert len(uploads) == 3 and len(uploads[0]) == len(initial.stage1)
    for v, w in zip(model.trainable_variables, initial.stage1):  # The model is left as found.
        np.testing.assert_array_equal(v.numpy(), w)
    first = _full_gradient(initial, Phase.STAGE1, x, y)
    for u, g in zip(uploads[0], first):
        np.testing.assert_allclose(u.numpy(), LR * g, rtol=1e-4, atol=1e-7)
    assert all(np.abs(u3.numpy()).sum() > 0 for u3 in uploads[2])


def test_client_simulator_sees_what_a_tff_client_uploads(tff_runtime, initial):
    """The attack's simulator, built before a TFF process (Keras swaps classes when TFF traces),
    reproduces the upload of a one-sample client: new global = global - upload (server SGD 1)."""
    adam = rp.build_optimizer("adam", 1e-3)
    simulator = local_training.ClientSimulator(CONFIG, Phase.STAGE2, adam)
    process = rp.build_phase_process(CONFIG, Phase.STAGE2, initial, adam, rp.build_optimizer("sgd", 1.0))
    x, y = _arrays(1, 5)
    simulator.set_global_weights(initial)
    uploads = simulator.uploads(x, y, steps=2)
    assert len(uploads) == 2 and [u.shape for u in uploads[0]] == [w.shape for w in initial.stage2]
    output = process.next(process.initialize(), [_dataset(x, y, batch_size=1)])
    trained = output.state.global_model_weights.trainable
    for w0, w1, u in zip(initial.stage2, trained, uploads[0]):
        np.testing.assert_allclose(w1, w0 - u, rtol=1e-4, atol=1e-7)
    with pytest.raises(ValueError, match="steps=0"):
        simulator.uploads(x, y, steps=0)


def test_uploaded_layer_names_follow_the_upload_order():
    names1 = phases.uploaded_layer_names(CONFIG, Phase.STAGE1)
    names2 = phases.uploaded_layer_names(CONFIG, Phase.STAGE2)
    joint = phases.uploaded_layer_names(CONFIG, Phase.JOINT)
    assert names1[0] == "s1_input_conv/kernel:0" and names2[0] == "s2_input_conv/kernel:0"
    assert joint == names1 + names2
    for stage, names in ((1, names1), (2, names2)):
        for layer in radiounet.transmitter_sensitive_layers(stage):
            assert f"{layer}/kernel:0" in names
