import json
import os
import shutil

import numpy as np
import pytest
from PIL import Image

from tff_radiomap.data import radiomapseer as rms
from tff_radiomap.data import synthetic

SPEC = synthetic.DatasetSpec(maps=6, transmitters=3, size=64, seed=3)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return synthetic.generate_dataset(str(tmp_path_factory.mktemp("rms")), SPEC)


def _copy(root, tmp_path):
    dst = str(tmp_path / "copy")
    shutil.copytree(root, dst)
    return dst


def test_reads_back_what_the_generator_wrote(root):
    data = rms.RadioMapSeer(rms.LoaderConfig(root=root, resolution=64))
    assert list(data.map_ids) == list(range(6)) and data.num_transmitters == 3
    a = data.arrays([0, 2])
    assert a["x"].shape == (6, 64, 64, 2) and a["y"].shape == (6, 64, 64, 1) and a["coords_m"].shape == (6, 2)
    gray = np.asarray(Image.open(f"{root}/gain/DPM/2_1.png"))
    expected = rms.normalize_gain(gray, 0.2)
    np.testing.assert_allclose(a["y"][4, ..., 0], expected, atol=1e-3)  # float16 storage
    b = np.asarray(Image.open(f"{root}/png/buildings_complete/2.png")) / 255.0
    np.testing.assert_array_equal(a["x"][4, ..., 0], b)
    coords = json.load(open(f"{root}/antenna/2.json"))
    x, y = coords[1]
    assert a["x"][4, y, x, 1] == 1.0 and a["x"][4, ..., 1].sum() == 1.0
    np.testing.assert_allclose(a["coords_m"][4], [x + 0.5, y + 0.5])


def test_thresh_matches_the_authors_formula():
    gray = np.array([0, 51, 100, 255], np.uint8)
    g = gray / 255.0
    expected = (np.maximum(g, 0.2) - 0.2) / 0.8
    np.testing.assert_allclose(rms.normalize_gain(gray, 0.2), expected, rtol=1e-6)
    np.testing.assert_allclose(rms.normalize_gain(gray, 0.0), g, rtol=1e-6)


def test_lower_resolution_is_area_averaged(root):
    full = rms.RadioMapSeer(rms.LoaderConfig(root=root, resolution=64))
    low = rms.RadioMapSeer(rms.LoaderConfig(root=root, resolution=32))
    f, lo = full.arrays([1]), low.arrays([1])
    np.testing.assert_allclose(lo["x"][0, ..., 0], f["x"][0, ..., 0].reshape(32, 2, 32, 2).mean((1, 3)), atol=1e-6)
    np.testing.assert_allclose(lo["y"][0, ..., 0], f["y"][0, ..., 0].reshape(32, 2, 32, 2).mean((1, 3)), atol=2e-3)
    assert lo["x"][0, ..., 1].sum() == 1.0
    np.testing.assert_array_equal(lo["coords_m"], f["coords_m"])  # meters do not depend on resolution


def test_dataset_pipeline(root):
    data = rms.RadioMapSeer(rms.LoaderConfig(root=root, resolution=32))
    ds = data.dataset([0, 1], batch_size=4, shuffle_seed=0)
    batches = list(ds.as_numpy_iterator())
    assert [b["x"].shape[0] for b in batches] == [4, 2]
    assert batches[0]["x"].shape[1:] == (32, 32, 2) and batches[0]["y"].shape[1:] == (32, 32, 1)


def test_map_split_is_seeded_disjoint_and_complete():
    s1, s2 = rms.split_maps(40, 0.15, 0.15, seed=1), rms.split_maps(40, 0.15, 0.15, seed=1)
    np.testing.assert_array_equal(s1.train, s2.train)
    allm = np.concatenate([s1.train, s1.val, s1.test])
    assert sorted(allm.tolist()) == list(range(40))
    assert len(s1.val) == 6 and len(s1.test) == 6
    assert not np.array_equal(rms.split_maps(40, seed=2).val, s1.val)


def test_client_partition_and_weights():
    parts = rms.partition_maps(np.arange(30), num_clients=14, seed=0)
    assert len(parts) == 14 and all(len(p) >= 2 for p in parts)
    assert sorted(np.concatenate(parts).tolist()) == list(range(30))
    w = rms.client_weights(parts, transmitters_per_map=80)
    assert abs(w.sum() - 1) < 1e-12
    np.testing.assert_allclose(w, [len(p) / 30 for p in parts])
    with pytest.raises(ValueError, match="num_clients=31"):
        rms.partition_maps(np.arange(30), num_clients=31)


# -- bad data ------------------------------------------------------------------------------
def test_missing_root_and_folder(root, tmp_path):
    with pytest.raises(rms.DataLayoutError, match="does not exist"):
        rms.RadioMapSeer(rms.LoaderConfig(root=str(tmp_path / "nope")))
    with pytest.raises(rms.DataLayoutError, match=r"gain/IRT2"):
        rms.RadioMapSeer(rms.LoaderConfig(root=root, simulation="IRT2", resolution=64))


def test_missing_png_is_named(root, tmp_path):
    dst = _copy(root, tmp_path)
    os.remove(f"{dst}/gain/DPM/4_2.png")
    with pytest.raises(rms.DataLayoutError, match=r"missing file .*gain/DPM/4_2\.png"):
        rms.RadioMapSeer(rms.LoaderConfig(root=dst, resolution=64))


def test_corrupt_png_is_named(root, tmp_path):
    dst = _copy(root, tmp_path)
    with open(f"{dst}/png/antennas/3_0.png", "wb") as f:
        f.write(b"not a png")
    with pytest.raises(rms.DataLayoutError, match=r"cannot read PNG .*antennas/3_0\.png"):
        rms.RadioMapSeer(rms.LoaderConfig(root=dst, resolution=64))


def test_wrong_size_is_named(root, tmp_path):
    dst = _copy(root, tmp_path)
    Image.fromarray(np.zeros((32, 32), np.uint8)).save(f"{dst}/gain/DPM/1_1.png")
    with pytest.raises(rms.DataLayoutError, match=r"1_1\.png is 32x32 pixels, expected 64x64"):
        rms.RadioMapSeer(rms.LoaderConfig(root=dst, resolution=64))


def test_transmitter_pixel_must_be_unique(root, tmp_path):
    dst = _copy(root, tmp_path)
    a = np.zeros((64, 64), np.uint8)
    a[3, 3] = a[10, 10] = 255
    Image.fromarray(a).save(f"{dst}/png/antennas/0_1.png")
    with pytest.raises(rms.DataLayoutError, match=r"0_1\.png: expected exactly one transmitter pixel, found 2"):
        rms.RadioMapSeer(rms.LoaderConfig(root=dst, resolution=64))
    Image.fromarray(np.zeros((64, 64), np.uint8)).save(f"{dst}/png/antennas/0_1.png")
    with pytest.raises(rms.DataLayoutError, match="found 0"):
        rms.RadioMapSeer(rms.LoaderConfig(root=dst, resolution=64))


def test_resolution_must_divide_size(root):
    with pytest.raises(rms.DataLayoutError, match="resolution 48 does not divide the stored size 64"):
        rms.RadioMapSeer(rms.LoaderConfig(root=root, resolution=48))
