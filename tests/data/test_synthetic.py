import json
import os

import numpy as np
import pytest
from PIL import Image

from tff_radiomap.data import propagation
from tff_radiomap.data import encoding, synthetic

SMALL = synthetic.DatasetSpec(maps=2, transmitters=3, size=64, seed=7)


def _files(root):
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


@pytest.fixture(scope="module")
def small_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("syn"))
    return synthetic.generate_dataset(root, SMALL)


def test_writes_radiomapseer_layout(small_root):
    for m in range(SMALL.maps):
        b = np.asarray(Image.open(f"{small_root}/png/buildings_complete/{m}.png"))
        assert b.dtype == np.uint8 and b.shape == (64, 64)
        assert set(np.unique(b)) <= {0, 255}
        coords = json.load(open(f"{small_root}/antenna/{m}.json"))
        assert len(coords) == SMALL.transmitters
        for t, (x, y) in enumerate(coords):
            a = np.asarray(Image.open(f"{small_root}/png/antennas/{m}_{t}.png"))
            assert a.dtype == np.uint8 and a.shape == (64, 64)
            assert np.argwhere(a == 255).tolist() == [[y, x]] and np.count_nonzero(a) == 1
            assert b[y, x] == 0, "transmitter inside a building"
            g = np.asarray(Image.open(f"{small_root}/gain/DPM/{m}_{t}.png"))
            assert g.dtype == np.uint8 and g.shape == (64, 64)
            assert np.all(g[b == 255] == 0), "building interiors must hold the floor value"
            assert g[y, x] >= 250, "the transmitter pixel is the strongest"


def test_same_seed_same_bytes_other_seed_differs(small_root, tmp_path):
    again = synthetic.generate_dataset(str(tmp_path / "a"), SMALL)
    assert _files(again) == _files(small_root)
    other = synthetic.generate_dataset(str(tmp_path / "b"), synthetic.DatasetSpec(2, 3, 64, seed=8))
    a, b = _files(small_root), _files(other)
    assert a["png/buildings_complete/0.png"] != b["png/buildings_complete/0.png"]


def test_cities_differ_from_map_to_map():
    fractions, layouts = [], []
    for m in range(6):
        b = synthetic.generate_city(np.random.default_rng(synthetic.map_seed(0, m)), 256)
        fractions.append(b.mean())
        layouts.append(b)
        assert 0.05 < b.mean() < 0.8
    assert np.std(fractions) > 0.01
    assert all(not np.array_equal(layouts[0], other) for other in layouts[1:])


def test_other_spec_in_same_root_is_refused(small_root):
    with pytest.raises(ValueError, match="already holds"):
        synthetic.generate_dataset(small_root, synthetic.DatasetSpec(3, 3, 64, seed=7))


def test_interrupted_generation_completes_without_touching_finished_maps(small_root, tmp_path):
    root = str(tmp_path / "partial")
    synthetic.prepare_root(root, SMALL)
    synthetic.write_map(root, 0, SMALL)
    before = os.stat(f"{root}/png/buildings_complete/0.png").st_mtime_ns
    assert synthetic.prepare_root(root, SMALL) == [1]
    synthetic.generate_dataset(root, SMALL)
    assert os.stat(f"{root}/png/buildings_complete/0.png").st_mtime_ns == before
    assert _files(root) == _files(small_root)


# -- physics -------------------------------------------------------------------------------
def test_line_of_sight_is_free_space_and_falls_with_distance():
    empty = np.zeros((64, 64), bool)
    gain = propagation.MapPropagation(empty).gain_db((32, 10))
    row = gain[32, 11:]
    assert np.all(np.diff(row) < 0)
    d = np.arange(1, 54, dtype=float)
    np.testing.assert_allclose(row, -encoding.free_space_loss_db(d, 5.9e9), atol=1e-4)


def test_a_wall_costs_signal_and_routing_beats_a_thick_block():
    cfg = propagation.PropagationConfig()
    b = np.zeros((96, 96), bool)
    b[40:56, 30:34] = True  # A thin building between tx and receiver.
    gain = propagation.MapPropagation(b, cfg).gain_db((48, 10))
    free = propagation.MapPropagation(np.zeros_like(b), cfg).gain_db((48, 10))
    behind = (48, 50)
    assert gain[behind] < free[behind] - 5.0, "a building in the way must cost signal"
    # Through two walls at most 2 * wall loss; routed around at least one corner loss.
    assert gain[behind] >= free[behind] - 2 * cfg.wall_loss_db - 1e-6
    # Far behind a thick block, the street-routed path (around the corners) dominates.
    thick = np.zeros((96, 96), bool)
    thick[30:66, 30:70] = True
    g2 = propagation.MapPropagation(thick, cfg).gain_db((48, 10))
    direct_walls = free[48, 80] - 2 * cfg.wall_loss_db
    assert g2[48, 80] >= direct_walls - 1e-6
    assert g2[48, 80] < free[48, 80] - cfg.corner_loss_db + 1e-6
    assert np.isneginf(g2[40, 40]), "inside a building is the floor"


def test_shadowed_side_of_a_street_corner_is_weaker_than_the_lit_side():
    b = np.zeros((96, 96), bool)
    b[0:40, 0:40] = True  # An L-shaped street corner.
    gain = propagation.MapPropagation(b).gain_db((60, 20))
    lit, shadow = gain[60, 70], gain[20, 60]
    assert lit > -120 and shadow < lit


def test_path_through_one_more_corner_equals_the_broadcast_minimum():
    rng = np.random.default_rng(0)
    reach = rng.uniform(1, 100, size=(7, 9, 9)).astype(np.float32)
    reach[rng.random(reach.shape) < 0.3] = np.inf  # Hidden pixels.
    to_corner = rng.uniform(0, 50, size=7)
    live = np.array([1, 0, 1, 1, 0, 1, 1], bool)
    expected = np.min(to_corner[live, None, None] + reach[live], axis=0)
    got = propagation._min_over_corners(to_corner, reach, np.flatnonzero(live))
    assert got.dtype == expected.dtype == np.float64
    np.testing.assert_array_equal(got, expected)
