"""Fixtures of the privacy experiment's tests, split over several files so that pytest-xdist
(--dist loadfile) spreads their TFF runs over its processes."""

import pytest

from tff_radiomap.data import synthetic
from tff_radiomap.experiments import privacy_radiomap as experiment


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    spec = synthetic.DatasetSpec(maps=8, transmitters=3, size=64, seed=5)
    return synthetic.generate_dataset(str(tmp_path_factory.mktemp("rms")), spec, progress=False)


@pytest.fixture(scope="module")
def config(data_root):
    # 8 maps: 6 train maps over 3 clients, 2 a round; round 1 trains stage 1, rounds 2-3 stage 2.
    return experiment.ExperimentConfig(
        data_root=data_root, resolution=32, width=0.25, rounds=3, stage1_rounds=1, num_clients=3,
        clients_per_round=2, batch_size=4, client_learning_rate=3e-3,
    )


@pytest.fixture(scope="module")
def cached_trainers():
    """build_trainer memoised per config: the trainers are pure functions of it, and building the
    TFF processes is the slow part of a run."""
    cache = {}
    build = experiment.build_trainer

    def cached(config, data, **kwargs):
        if config not in cache:
            cache[config] = build(config, data, **kwargs)
        return cache[config]

    return cached
