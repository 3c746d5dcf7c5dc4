import numpy as np
import pytest

from tff_radiomap.models.phases import NetworkWeights, Phase
from tff_radiomap.metrics import reconstruction
from tff_radiomap.models import radiounet

CONFIG = radiounet.RadioUNetConfig(resolution=16, width=0.1)


def _net_weights(seed):
    import tensorflow as tf

    tf.keras.utils.set_random_seed(seed)
    return NetworkWeights.from_network(radiounet.build_radiounet(CONFIG))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = rng.random((37, 16, 16, 2)).astype(np.float32)
    y = rng.random((37, 16, 16, 1)).astype(np.float32)
    return x, y


def _numpy_mse(weights, x, y):
    net = radiounet.build_radiounet(CONFIG)
    weights.assign_to(net)
    coarse, refined = net.wnet(x, training=False)
    return float(np.mean((coarse.numpy() - y) ** 2)), float(np.mean((refined.numpy() - y) ** 2))


def test_each_phase_scores_its_stage_and_the_kept_coarse_maps_follow_stage_1(data):
    x, y = data
    evaluator = reconstruction.Evaluator(CONFIG, x, y, batch_size=16)  # 3 batches, the last short.
    first, second = _net_weights(1), _net_weights(2)
    for weights in (first, second, first):  # Stage 1 changes between calls: no stale coarse maps.
        coarse, refined = _numpy_mse(weights, x, y)
        assert evaluator.mse(weights, Phase.STAGE1) == pytest.approx(coarse, rel=1e-5)
        assert evaluator.mse(weights, Phase.STAGE2) == pytest.approx(refined, rel=1e-5)
        assert evaluator.mse(weights, Phase.STAGE2) == evaluator.mse_both(weights)[1]
        assert evaluator.mse(weights, Phase.JOINT) == evaluator.mse_both(weights)[1]
        assert evaluator.mse(weights, Phase.STAGE1) == evaluator.mse_both(weights)[0]
    other_stage2 = NetworkWeights(first.stage1, second.stage2)  # Same stage 1, another stage 2.
    assert evaluator.mse(other_stage2, Phase.STAGE2) == pytest.approx(_numpy_mse(other_stage2, x, y)[1], rel=1e-5)


def test_gain_rmse_in_db_is_the_normalized_rmse_times_the_encodings_span():
    # One unit of the normalized gain spans (1 - 0.2) of -47.84 - (-147) dB (data.encoding).
    assert reconstruction.GAIN_DB_PER_UNIT == pytest.approx(0.8 * 99.16)
    assert reconstruction.gain_rmse_db(10 ** (-24 / 10)) == pytest.approx(5.005, abs=1e-3)
    assert reconstruction.gain_rmse_db(0.0) == 0.0
    with pytest.raises(ValueError, match="mse=-1"):
        reconstruction.gain_rmse_db(-1.0)


def test_scores_match_a_numpy_reference_over_all_and_outdoor_pixels(data):
    x, y = data
    x = x.copy()
    x[..., 0] = (x[..., 0] > 0.7).astype(np.float32)  # 30 % of the pixels indoor.
    evaluator = reconstruction.Evaluator(CONFIG, x, y, batch_size=16)
    weights = _net_weights(3)
    net = radiounet.build_radiounet(CONFIG)
    weights.assign_to(net)
    coarse, refined = (p.numpy() for p in net.wnet(x, training=False))
    for phase, predicted in ((Phase.STAGE1, coarse), (Phase.STAGE2, refined), (Phase.JOINT, refined)):
        scores = evaluator.scores(weights, phase)
        reference = reconstruction.gain_errors_db(predicted, y, x)
        outdoor = x[..., :1] < 0.5
        assert scores["mse"] == pytest.approx(float(np.mean((predicted - y) ** 2)), rel=1e-5)
        assert scores["outdoor_mse"] == pytest.approx(float(np.mean((predicted - y)[outdoor] ** 2)), rel=1e-5)
        assert scores["rmse_db"] == pytest.approx(reference["rmse_db"], rel=1e-5)
        assert scores["outdoor_rmse_db"] == pytest.approx(reference["outdoor_rmse_db"], rel=1e-5)
        assert scores["outdoor_rmse_db"] != pytest.approx(scores["rmse_db"], rel=1e-3)
