"""EPFL-REMNet point data: features, scenarios, the client grid and per-client normalization."""

import json
import os

import numpy as np
import pytest

from tff_radiomap.data import rem_points, synthetic
from tff_radiomap.data.radiomapseer import DataLayoutError


@pytest.fixture(scope="module")
def rem_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("rem"))
    return synthetic.generate_dataset(root, synthetic.DatasetSpec(maps=1, transmitters=4, size=64, seed=3), placement="quadrants")


def test_quadrant_placement_puts_one_base_station_per_quadrant(rem_root):
    with open(os.path.join(rem_root, "antenna", "0.json")) as f:
        xy = json.load(f)
    quadrants = [(y >= 32, x >= 32) for x, y in xy]
    assert quadrants == [(False, False), (False, True), (True, False), (True, True)]


def test_occupancy_features_match_a_direct_count():
    rng = np.random.default_rng(0)
    buildings = rng.random((20, 20)) < 0.4
    rows, cols = np.array([0, 7, 19]), np.array([0, 11, 5])
    feats = rem_points.occupancy_features(buildings, rows, cols, neighbourhood=4, cell_px=3)
    for n, (r, c) in enumerate(zip(rows, cols)):
        for i in range(4):
            for j in range(4):
                r0, c0 = r + (i - 2) * 3, c + (j - 2) * 3
                block = [buildings[y, x] for y in range(r0, r0 + 3) for x in range(c0, c0 + 3) if 0 <= y < 20 and 0 <= x < 20]
                assert feats[n, i * 4 + j] == pytest.approx(sum(block) / 9.0)


def test_scenarios_partition_the_outdoor_pixels_by_heterogeneity(rem_root):
    rem_map = rem_points.load_rem_map(rem_root, 0)
    points = rem_points.extract_points(rem_map)
    assert points.features.shape == (int((~rem_map.buildings).sum()), 100)
    h = points.heterogeneity
    np.testing.assert_allclose(h, np.std(points.labels_db, axis=1), rtol=1e-6)
    q = rem_points.scenario_thresholds(h)
    masks = [rem_points.scenario_mask(h, s, q) for s in rem_points.SCENARIOS]
    np.testing.assert_array_equal(sum(m.astype(int) for m in masks), 1)
    assert h[masks[0]].max() <= q[0] < h[masks[2]].min()


def test_grid_cells_are_equal_count_and_geographic():
    rng = np.random.default_rng(1)
    rows, cols = rng.integers(0, 256, 900), rng.integers(0, 256, 900)
    cells = rem_points.grid_cells(rows, cols, (10, 9))
    counts = np.bincount(cells, minlength=90)
    assert counts.min() == counts.max() == 10
    bands = cells // 9
    for b in range(9):  # Bands are ordered by row: no row of band b lies below one of band b+1.
        assert rows[bands == b].max() <= rows[bands == b + 1].min()
    assert rem_points.neighbour_cells(0, (10, 9)) == [1, 9, 10]
    assert len(rem_points.neighbour_cells(40, (10, 9))) == 8


def test_clients_are_split_normalized_and_mapped_back_to_db(rem_root):
    config = rem_points.RemPointsConfig(root=rem_root, grid=(3, 3), neighbour_share=0.2, test_fraction=0.25)
    scenario = rem_points.load_scenarios(config, scenarios=("medium",))["medium"]
    rem_map = rem_points.load_rem_map(rem_root, 0)
    points = rem_points.extract_points(rem_map)
    assert len(scenario.clients) == 9
    total_test = sum(len(c.x_test) + len(c.x_val) for c in scenario.clients)
    own_train = sum(c.num_train - c.neighbour_samples for c in scenario.clients)
    mask = rem_points.scenario_mask(points.heterogeneity, "medium", rem_points.scenario_thresholds(points.heterogeneity))
    assert total_test + own_train == mask.sum()  # Every scenario pixel is in exactly one own cell.
    for c in scenario.clients:
        assert c.neighbour_samples == round(0.2 * (c.num_train - c.neighbour_samples + len(c.x_test) + len(c.x_val)))
        assert c.x_train.shape[1] == 102
        np.testing.assert_allclose(c.x_train[:, :2].min(0), 0.0, atol=1e-6)
        np.testing.assert_allclose(c.x_train[:, :2].max(0), 1.0, atol=1e-6)
        np.testing.assert_allclose(c.y_train.mean(0), 0.0, atol=1e-4)
        wide = c.label_std_db > config.min_label_std_db
        np.testing.assert_allclose(c.y_train.std(0)[wide], 1.0, rtol=1e-4)
        y_db = c.to_db(c.y_train)
        assert y_db.min() >= -147.0 - 1e-3 and y_db.max() <= -47.84 + 1e-3


def test_bad_configuration_and_missing_files_are_named(tmp_path):
    with pytest.raises(ValueError, match="test_fraction=1.0"):
        rem_points.RemPointsConfig(test_fraction=1.0)
    with pytest.raises(ValueError, match="val_fraction=0.9"):
        rem_points.RemPointsConfig(val_fraction=0.9)
    with pytest.raises(ValueError, match="test_split='diagonal'"):
        rem_points.RemPointsConfig(test_split="diagonal")
    with pytest.raises(ValueError, match="scenario='extreme'"):
        rem_points.scenario_mask(np.zeros(3), "extreme", (0.0, 1.0))
    with pytest.raises(DataLayoutError, match="buildings_complete"):
        rem_points.load_rem_map(str(tmp_path), 0)


@pytest.mark.parametrize("split", rem_points.TEST_SPLITS)
def test_train_val_test_are_disjoint_and_block_holds_out_whole_blocks(rem_root, split):
    config = rem_points.RemPointsConfig(root=rem_root, grid=(2, 2), neighbour_share=0.0, test_split=split)
    rem_map = rem_points.load_rem_map(rem_root, 0)
    points = rem_points.extract_points(rem_map)
    index = np.flatnonzero(rem_points.scenario_mask(points.heterogeneity, "heavy", rem_points.scenario_thresholds(points.heterogeneity)))
    cells = rem_points.grid_cells(points.rows[index], points.cols[index], config.grid)
    rng = np.random.default_rng(0)
    for c in range(4):
        own = index[cells == c]
        train, val, test = rem_points.hold_out(points, own, config, rng)
        assert len(set(train) | set(val) | set(test)) == len(own) == len(train) + len(val) + len(test)
        blocks = rem_points.grid_cells(points.rows[own], points.cols[own], config.block_grid)
        block_of = dict(zip(own, blocks))
        held = {block_of[i] for i in test}
        if split == "block":  # Whole blocks: no training pixel shares a block with a test pixel.
            assert len(held) == round(0.2 * 9) and not held & {block_of[i] for i in train}
            assert not {block_of[i] for i in val} & held
        else:  # Random pixels: test pixels scatter over the cell's blocks.
            assert len(held) > 2
    scenario = rem_points.load_scenarios(config, ("heavy",))["heavy"]
    assert all(len(cl.x_val) and len(cl.x_test) for cl in scenario.clients)
    assert scenario.summary()["test_split"] == split
