"""Fixtures of the privacy experiment's tests, split over several files so that pytest-xdist
(--dist loadfile) spreads their TFF runs over its processes."""

import dataclasses
import functools

import pytest

from tff_radiomap.data import reality, synthetic
from tff_radiomap.experiments import basis_refresh
from tff_radiomap.experiments import privacy_radiomap as experiment
from tff_radiomap.privacy import allocator


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    spec = synthetic.DatasetSpec(maps=8, transmitters=3, size=64, seed=5)
    return synthetic.generate_dataset(str(tmp_path_factory.mktemp("rms")), spec, progress=False)


@pytest.fixture(scope="module")
def shadowed_root(tmp_path_factory):
    """`data_root`'s maps and transmitter positions in a shadowed reality (`data.reality`)."""
    spec = synthetic.DatasetSpec(maps=8, transmitters=3, size=64, seed=5, reality=reality.ShadowedReality())
    return synthetic.generate_dataset(str(tmp_path_factory.mktemp("rms_shadowed")), spec, progress=False)


@pytest.fixture(scope="module")
def config(data_root):
    # 8 maps: 6 train maps over 3 clients, 2 a round; round 1 trains stage 1, rounds 2-3 stage 2.
    return experiment.ExperimentConfig(
        data_root=data_root,
        resolution=32,
        width=0.25,
        rounds=3,
        stage1_rounds=1,
        num_clients=3,
        clients_per_round=2,
        batch_size=4,
        local_epochs=1,
        client_learning_rate=3e-3,
    )


# Fields that only the run's observers and loop read (the attacks, the basis refresher, the
# allocator's training): two configurations that differ only in them build the same trainer.
OBSERVER_FIELDS = (
    "attack_every",
    "attack_steps",
    "attack_train_traces",
    "attack_test_traces",
    "attack_extra_root",
    "matching_maps",
    "matching_stride",
    "matching_calibration",
    "matching_coarse",
    "basis_positions",
    "basis_every",
    "twin_root",
    "allocator_lambda_p",
    "allocator_lambda_h",
    "allocator_every",
    "map_size_m",
)


def trainer_key(config, data_by_reference, basis_dir):
    """What `build_trainer` reads of its arguments: `config` less `OBSERVER_FIELDS`, and less `rounds`
    where only the adaptive defense's noise schedule and the NaN hook read it; the basis folder
    where the defense reads its file inside the computation."""
    ignored = set(OBSERVER_FIELDS) | ({"rounds"} if config.defense != "adaptive" and not config.inject_nan_client else set())
    values = tuple(None if f.name in ignored else getattr(config, f.name) for f in dataclasses.fields(config))
    return values, data_by_reference, basis_dir if basis_refresh.uses_basis(config) else None


_TRAINERS = {}


@pytest.fixture(scope="session")
def cached_trainers():
    """build_trainer memoised per `trainer_key` for the whole test process: the trainers are pure
    functions of it; building the TFF processes is the slow part of a run."""
    build = experiment.build_trainer

    def cached(config, data, data_by_reference=True, basis_dir=None):
        key = trainer_key(config, data_by_reference, basis_dir)
        if key not in _TRAINERS:
            _TRAINERS[key] = build(config, data, data_by_reference=data_by_reference, basis_dir=basis_dir)
        return _TRAINERS[key]

    return cached


def small_allocator_config():
    """AllocatorConfig with a small proxy buffer and few steps (tests/privacy/test_allocator.py's
    sizes), for tests about the allocator's wiring and exact resume, not about what it learns."""
    return functools.partial(allocator.AllocatorConfig, buffer_traces=32, steps=3, harm_samples=8)


@pytest.fixture
def small_allocator(monkeypatch):
    monkeypatch.setattr(allocator, "AllocatorConfig", small_allocator_config())
