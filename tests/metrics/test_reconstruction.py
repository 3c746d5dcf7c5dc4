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
