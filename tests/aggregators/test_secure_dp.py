"""Secure aggregation with distributed DP (`aggregators.secure_dp`) and central DP in the RadioUNet
learning process: the DDP process aggregates only securely, runs in the package's context, and its
mean of the uploads carries noise of about z C / n a coordinate."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_radiomap.aggregators import central_gaussian_factory, secure_dp
from tff_radiomap.learning import radiounet_process as rp
from tff_radiomap.models import phases, radiounet
from tff_radiomap.models.phases import Phase

CONFIG = radiounet.RadioUNetConfig(resolution=32, width=0.25)


def _dataset(n, seed):
    rng = np.random.default_rng(seed)
    x = np.stack([rng.random((n, 32, 32)) < 0.3, rng.random((n, 32, 32)) < 0.002], -1).astype(np.float32)
    y = rng.random((n, 32, 32, 1)).astype(np.float32)
    return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y)).batch(4)


def _stage2_process(aggregator):
    initial = phases.initial_weights(CONFIG, seed=0)
    return rp.build_phase_process(CONFIG, Phase.STAGE2, initial, rp.build_optimizer("sgd", 0.05), rp.build_optimizer("sgd", 1.0), aggregator)


@pytest.fixture(scope="module")
def ddp_process(tff_runtime):
    return _stage2_process(secure_dp.ddp_mean_factory(noise_multiplier=0.5, clients_per_round=3, clip_norm=1.0, bits=20))


def test_ddp_process_aggregates_only_securely(ddp_process):
    tff.test.assert_not_contains_unsecure_aggregation(ddp_process.next)


def test_the_plain_process_fails_the_same_check(tff_runtime):
    plain = _stage2_process(None)
    with pytest.raises(AssertionError):
        tff.test.assert_not_contains_unsecure_aggregation(plain.next)


def test_ddp_round_runs_and_its_noise_is_z_c_over_n(ddp_process):
    # Clients whose data give the same update: the mean's spread around the noiseless mean is the noise.
    state = ddp_process.initialize()
    start = [np.array(w) for w in ddp_process.get_model_weights(state).trainable]
    out = ddp_process.next(state, [_dataset(4, 1)] * 3)
    after = [np.array(w) for w in ddp_process.get_model_weights(out.state).trainable]
    assert all(np.isfinite(a).all() for a in after)
    assert out.metrics["client_work"]["num_examples"] == 12
    plain = _stage2_process(tff.aggregators.UnweightedMeanFactory(value_sum_factory=tff.aggregators.clipping_factory(1.0, tff.aggregators.SumFactory())))
    clean = plain.next(plain.initialize(), [_dataset(4, 1)] * 3)
    clean_after = [np.array(w) for w in plain.get_model_weights(clean.state).trainable]
    noise = np.concatenate([(a - c).ravel() for a, c in zip(after, clean_after)])
    assert not np.allclose(np.concatenate([a.ravel() for a in after]), np.concatenate([s.ravel() for s in start]))
    # z C / n = 0.5 / 3 a coordinate on the mean (discretization adds little at 20 bits).
    assert noise.std() == pytest.approx(0.5 / 3, rel=0.1)


def test_central_dp_process_adds_its_noise_on_the_server(tff_runtime):
    process = _stage2_process(central_gaussian_factory(0.5, 3, 1.0))
    out = process.next(process.initialize(), [_dataset(4, 1)] * 3)
    plain = _stage2_process(tff.aggregators.UnweightedMeanFactory(value_sum_factory=tff.aggregators.clipping_factory(1.0, tff.aggregators.SumFactory())))
    clean = plain.next(plain.initialize(), [_dataset(4, 1)] * 3)
    noise = np.concatenate(
        [(np.array(a) - np.array(c)).ravel() for a, c in zip(process.get_model_weights(out.state).trainable, plain.get_model_weights(clean.state).trainable)]
    )
    # gaussian_fixed: N(0, (z C)^2) on the sum, divided by the expected clients a round.
    assert noise.std() == pytest.approx(0.5 / 3, rel=0.1)


def test_ddp_factory_rejects_bad_settings():
    with pytest.raises(ValueError, match="mechanism="):
        secure_dp.ddp_sum_factory(1.0, 3, 1.0, mechanism="laplace")
    with pytest.raises(ValueError, match="bits=23"):
        secure_dp.ddp_sum_factory(1.0, 3, 1.0, bits=23)
