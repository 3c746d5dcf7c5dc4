import dataclasses
import hashlib
import json
import os

import numpy as np
import pytest
from PIL import Image

from tff_radiomap.data import propagation
from tff_radiomap.data import encoding, reality, synthetic, twin

SMALL = synthetic.DatasetSpec(maps=2, transmitters=3, size=64, seed=7)
SHADOWED = dataclasses.replace(SMALL, reality=reality.ShadowedReality())


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


# -- the reality the twin lacks ------------------------------------------------------------
@pytest.fixture(scope="module")
def shadowed_root(tmp_path_factory):
    return synthetic.generate_dataset(str(tmp_path_factory.mktemp("shadowed")), SHADOWED)


def test_the_default_spec_writes_what_it_wrote_before_the_reality_option(small_root, tmp_path):
    # Decoded images of a 1-map 32x32 set as the generator wrote them before the option: the
    # default (twin) sets, the cached default set included, must not change.
    root = synthetic.generate_dataset(str(tmp_path / "pin"), synthetic.DatasetSpec(maps=1, transmitters=2, size=32, seed=0))
    digest = hashlib.sha1()
    for name in ["png/buildings_complete/0.png", "png/antennas/0_0.png", "png/antennas/0_1.png", "gain/DPM/0_0.png", "gain/DPM/0_1.png"]:
        digest.update(np.asarray(Image.open(os.path.join(root, name))).tobytes())
    assert digest.hexdigest() == "932891534467e839abb934c8eae8819ec3229a60"
    # Its record has no reality (the record, and so the cache key, is the one of before).
    record = json.load(open(os.path.join(small_root, synthetic.SPEC_FILE)))
    assert record["spec"] == {"maps": 2, "transmitters": 3, "size": 64, "seed": 7, "simulation": "DPM"}
    assert not os.path.exists(os.path.join(small_root, synthetic.REALITY_DIR)) and synthetic.read_reality(small_root) == {}


def test_a_shadowed_set_has_the_same_maps_and_positions_and_only_other_gains(small_root, shadowed_root):
    plain, shadowed = _files(small_root), _files(shadowed_root)
    geometry = [p for p in plain if not p.startswith("gain") and p != synthetic.SPEC_FILE]
    assert len(geometry) == SMALL.maps * (2 + SMALL.transmitters)
    assert all(plain[p] == shadowed[p] for p in geometry), "buildings and transmitter positions must be the default's"
    gains = [p for p in plain if p.startswith("gain")]
    assert all(plain[p] != shadowed[p] for p in gains)
    for m in range(SMALL.maps):
        b = np.asarray(Image.open(f"{shadowed_root}/png/buildings_complete/{m}.png")) > 0
        for t in range(SMALL.transmitters):
            g = np.asarray(Image.open(f"{shadowed_root}/gain/DPM/{m}_{t}.png"))
            assert np.all(g[b] == 0), "building interiors keep the floor value"


def test_a_shadowed_set_records_its_reality_and_each_maps_losses(shadowed_root):
    record = json.load(open(os.path.join(shadowed_root, synthetic.SPEC_FILE)))
    assert record["spec"]["reality"] == dataclasses.asdict(reality.ShadowedReality())
    assert record == {"spec": synthetic.spec_record(SHADOWED), "propagation": dataclasses.asdict(propagation.PropagationConfig())}
    maps = synthetic.read_reality(shadowed_root)
    assert sorted(maps) == list(range(SHADOWED.maps))
    losses = [(r["corner_loss_db"], r["wall_loss_db"]) for r in maps.values()]
    assert len(set(losses)) == SHADOWED.maps and all(c >= reality.MIN_LOSS_DB and w >= reality.MIN_LOSS_DB for c, w in losses)
    assert all(2.0 < r["twin_model_rmse_db"] < 15.0 and r["outdoor_pixels"] > 0 for r in maps.values())


def test_a_shadowed_set_is_reproducible_from_its_seed_and_resumes_to_the_same_files(shadowed_root, tmp_path):
    root = str(tmp_path / "again")
    synthetic.prepare_root(root, SHADOWED)
    synthetic.write_map(root, 1, SHADOWED)
    assert synthetic.prepare_root(root, SHADOWED) == [0]
    synthetic.generate_dataset(root, SHADOWED)
    assert _files(root) == _files(shadowed_root)
    other = synthetic.generate_dataset(str(tmp_path / "other"), dataclasses.replace(SHADOWED, seed=8))
    assert _files(other)["gain/DPM/0_0.png"] != _files(shadowed_root)["gain/DPM/0_0.png"]
    with pytest.raises(ValueError, match="already holds"):
        synthetic.generate_dataset(root, SMALL)  # The twin's version of the spec is another set.
    synthetic.remove_dataset(root)
    assert _files(root) == {} and not os.path.exists(os.path.join(root, synthetic.REALITY_DIR))


def test_the_twins_mismatch_is_zero_on_a_twin_set_and_what_the_generator_recorded_on_a_shadowed_one(small_root, shadowed_root):
    own_corners = lambda m: synthetic.corner_seed(SMALL.seed, m)  # noqa: E731
    assert twin.mismatch_db(small_root, corners=own_corners) == 0.0
    assert twin.mismatch_db(small_root) == 0.0  # The twin draws the data's corners by default.
    assert synthetic.reality_rmse_db(small_root) == 0.0
    found = twin.mismatch_db(shadowed_root, corners=own_corners)
    assert 2.0 < found < 15.0
    assert found == pytest.approx(synthetic.reality_rmse_db(shadowed_root), rel=1e-9)
    assert twin.mismatch_db(shadowed_root, maps=[1]) == pytest.approx(synthetic.read_reality(shadowed_root)[1]["twin_model_rmse_db"], rel=1e-9)


def test_the_twin_keeps_the_datas_corners_where_a_map_has_more_than_it_keeps(tmp_path):
    # Few corners kept: every map is subsampled, so a twin drawing other corners (seed m, as it
    # did before `twin.corner_seed`) misses the data, and the twin as run does not.
    few = propagation.PropagationConfig(max_corners=3)
    root = str(tmp_path / "few")
    synthetic.prepare_root(root, SMALL, few)
    for m in range(2):
        synthetic.write_map(root, m, SMALL, few)
    assert twin.mismatch_db(root, maps=[0, 1], config=few) == 0.0
    assert twin.mismatch_db(root, maps=[0, 1], config=few, corners=lambda m: m) > 0.5
    positions = np.argwhere(~twin.read_buildings(root, 0))[:2]
    gains = twin.position_gains(root, 0, positions, cache_dir=str(tmp_path / "cache"), config=few)
    data_model = propagation.MapPropagation(twin.read_buildings(root, 0), few, seed=synthetic.corner_seed(SMALL.seed, 0))
    assert np.array_equal(gains[1], encoding.gain_db_to_gray(data_model.gain_db(tuple(positions[1]))))


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
