"""The digital twin: the data's building maps, new transmitter positions, the same layout."""

import dataclasses
import json
import os

import numpy as np
import pytest

from tff_radiomap.data import propagation, radiomapseer, synthetic, twin
from tff_radiomap.runtime import atomic


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    spec = synthetic.DatasetSpec(maps=2, transmitters=3, size=64, seed=2)
    return synthetic.generate_dataset(str(tmp_path_factory.mktemp("rms")), spec)


def test_twin_has_the_same_maps_and_new_positions_far_from_the_datas(data_root, tmp_path):
    root = twin.ensure_twin(data_root, positions=5, out_root=str(tmp_path / "t"), min_distance=3)
    data = radiomapseer.RadioMapSeer(radiomapseer.LoaderConfig(root=data_root, resolution=64))
    tw = radiomapseer.RadioMapSeer(radiomapseer.LoaderConfig(root=root, resolution=64))
    np.testing.assert_array_equal(tw.map_ids, data.map_ids)
    np.testing.assert_array_equal(tw.buildings, data.buildings)
    assert tw.num_transmitters == 5
    for m in range(2):
        gap = np.abs(tw.tx_pixels[m][:, None, :] - data.tx_pixels[m][None, :, :]).max(-1)
        assert gap.min() > 3  # Chebyshev distance to every data transmitter.
        assert not tw.buildings[m][tuple(tw.tx_pixels[m].T)].any()  # Outdoors.
    # The twin's gain is the generator's propagation model at those positions.
    gray = twin.simulate(data.buildings[0] > 0.5, tw.tx_pixels[0][:1], seed=0)
    stored = np.asarray(__import__("PIL.Image", fromlist=["Image"]).open(os.path.join(root, "gain", "DPM", "0_0.png")))
    assert np.mean(np.abs(gray[0].astype(int) - stored.astype(int))) < 1.0
    # Same call again: nothing to do; other settings in the same folder: refused.
    assert twin.ensure_twin(data_root, positions=5, out_root=root, min_distance=3) == root
    with pytest.raises(ValueError, match="twin made with"):
        twin.ensure_twin(data_root, positions=6, out_root=root, min_distance=3)
    assert json.load(open(os.path.join(root, twin.TWIN_FILE)))["positions"] == 5


def test_twin_of_a_missing_root_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        twin.ensure_twin(str(tmp_path / "nowhere"), positions=2, out_root=str(tmp_path / "t"))


def test_a_second_writer_between_save_and_rename_leaves_both_files_whole(tmp_path, monkeypatch):
    # Two runs of a front starting together complete the same twin: writer B saves and renames the
    # same PNG while writer A is between its save and its rename. With one shared temporary name A's
    # rename failed (FileNotFoundError); each writer's own temporary (`atomic.atomic_write`) does not.
    from PIL import Image

    path = str(tmp_path / "0_0.png")
    real_save, real_getpid = Image.Image.save, os.getpid
    nested = []

    def save(image, fp, *args, **kwargs):
        real_save(image, fp, *args, **kwargs)
        if not nested:  # Writer A has saved; writer B (another pid) writes the whole file now.
            nested.append(fp)
            monkeypatch.setattr(os, "getpid", lambda: real_getpid() + 1)
            synthetic._save_png(path, np.full((4, 4), 7))
            monkeypatch.setattr(os, "getpid", real_getpid)

    monkeypatch.setattr(Image.Image, "save", save)
    synthetic._save_png(path, np.full((4, 4), 9))
    assert np.asarray(Image.open(path)).tolist() == np.full((4, 4), 9).tolist()  # A's rename came last.
    assert os.listdir(tmp_path) == ["0_0.png"]


def test_only_a_dead_writers_temporaries_are_stale():
    dead = 2**22 + 17  # Above the default pid_max: no such process.
    assert atomic.is_stale_temporary(f"3_1.png.{dead}.0123456789ab.tmp")
    assert not atomic.is_stale_temporary(f"3_1.png.{os.getpid()}.0123456789ab.tmp")  # A live writer's.
    assert not atomic.is_stale_temporary("3_1.png")
    assert not atomic.is_stale_temporary(f"3.json.{dead}.tmp")  # Not an atomic_write temporary.
    # Left by earlier versions, which named PNG temporaries <name>[.<pid>].tmp.png.
    assert atomic.is_stale_temporary("3_1.png.tmp.png")
    assert not atomic.is_stale_temporary(f"3_1.png.{os.getpid()}.tmp.png")
    assert atomic.is_stale_temporary(f"3_1.png.{dead}.tmp.png")


def test_a_changed_propagation_model_does_not_reuse_a_twin(data_root, tmp_path):
    changed = propagation.PropagationConfig(wall_loss_db=20.0)
    root = twin.ensure_twin(data_root, positions=2, out_root=str(tmp_path / "t"), min_distance=3)
    assert json.load(open(os.path.join(root, twin.TWIN_FILE)))["propagation"] == dataclasses.asdict(propagation.PropagationConfig())
    with pytest.raises(ValueError, match="twin made with"):
        twin.ensure_twin(data_root, positions=2, out_root=root, min_distance=3, config=changed)
    # A record written before it held the corners: made with other corners (seed m), not reused.
    spec = os.path.join(root, twin.TWIN_FILE)
    legacy = {k: v for k, v in json.load(open(spec)).items() if k not in ("propagation", "corners")}
    json.dump(legacy, open(spec, "w"))
    with pytest.raises(ValueError, match="twin made with"):
        twin.ensure_twin(data_root, positions=2, out_root=root, min_distance=3)
    # The default folder: one per model and corners, never an earlier twin's name.
    cache = str(tmp_path / "cache")
    old_name = twin.twin_root(data_root, 2, 0, cache=cache)
    assert old_name.endswith("_p2_s0_cdata")
    assert twin.twin_root(data_root, 2, 0, cache=cache, config=changed) not in (
        old_name,
        twin.twin_root(data_root, 2, 0, cache=cache, config=propagation.PropagationConfig(wall_loss_db=21.0)),
    )


def test_the_position_cache_is_keyed_by_the_propagation_model(data_root, tmp_path):
    positions = np.array([[5, 6]])
    cache = str(tmp_path / "positions")
    plain = twin.position_gains(data_root, 0, positions, cache_dir=cache)
    changed = twin.position_gains(data_root, 0, positions, cache_dir=cache, config=propagation.PropagationConfig(wall_loss_db=40.0, corner_loss_db=30.0))
    assert len(os.listdir(cache)) == 2
    assert not np.array_equal(plain, changed)
