"""The matching attacker's own positions on the twin: a grid of cell centres, calibration points off
it, their simulated maps cached, and the loader's preprocessing of them."""

import os

import numpy as np
import pytest
from PIL import Image

from tff_radiomap.data import radiomapseer, synthetic, twin


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    spec = synthetic.DatasetSpec(maps=2, transmitters=3, size=64, seed=3)
    return synthetic.generate_dataset(str(tmp_path_factory.mktemp("rms")), spec)


def test_grid_positions_are_the_outdoor_cell_centres():
    buildings = np.zeros((16, 16), bool)
    buildings[:8, :8] = True  # The top-left quarter is a building.
    grid = twin.grid_positions(buildings, resolution=4, stride=1)  # Cells of 4 x 4 pixels, centre (4 i + 2, 4 j + 2).
    assert sorted(map(tuple, grid)) == sorted((4 * i + 2, 4 * j + 2) for i in range(4) for j in range(4) if not (i < 2 and j < 2))
    assert sorted(map(tuple, twin.grid_positions(buildings, 4, 2))) == [(2, 10), (10, 2), (10, 10)]
    with pytest.raises(ValueError, match="resolution 5 does not divide the map size 16"):
        twin.grid_positions(buildings, 5, 1)


def test_off_grid_positions_are_outdoors_and_never_a_cell_centre():
    buildings = np.zeros((16, 16), bool)
    buildings[4:8, :] = True
    pos = twin.off_grid_positions(np.random.default_rng(0), buildings, resolution=4, count=20)
    assert len({tuple(p) for p in pos}) == 20 and not buildings[pos[:, 0], pos[:, 1]].any()
    assert not np.any((pos[:, 0] % 4 == 2) & (pos[:, 1] % 4 == 2))
    with pytest.raises(ValueError, match="only .* outdoor off-grid pixels for 500 positions"):
        twin.off_grid_positions(np.random.default_rng(0), buildings, 4, 500)


def test_position_gains_are_the_twins_maps_cached(data_root, tmp_path):
    m = radiomapseer.list_map_ids(data_root)[0]
    positions = twin.grid_positions(twin.read_buildings(data_root, m), 16, 4)
    gains = twin.position_gains(data_root, m, positions, cache_dir=str(tmp_path))
    np.testing.assert_array_equal(gains, twin.simulate(twin.read_buildings(data_root, m), positions, seed=twin.corner_seed(data_root, m)))
    assert len(os.listdir(tmp_path)) == 1
    np.testing.assert_array_equal(twin.position_gains(data_root, m, positions, cache_dir=str(tmp_path)), gains)  # From the cache.
    assert len(os.listdir(tmp_path)) == 1


def test_samples_at_preprocess_gain_maps_as_the_loader_does(data_root):
    data = radiomapseer.RadioMapSeer(radiomapseer.LoaderConfig(root=data_root, resolution=16))
    m = int(data.map_ids[1])
    grays = np.stack([np.asarray(Image.open(os.path.join(data_root, "gain", "DPM", f"{m}_{t}.png"))) for t in range(data.num_transmitters)])
    got, want = data.samples_at(1, data.tx_pixels[1], grays), data.arrays([1])
    for key in ("x", "y", "coords_m"):
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    with pytest.raises(ValueError, match=r"gain maps of shape \(3, 16, 16\), expected \(3, 64, 64\)"):
        data.samples_at(1, data.tx_pixels[1], grays[:, :16, :16])
