"""The digital twin: the data's building maps, new transmitter positions, the same layout."""

import json
import os

import numpy as np
import pytest

from tff_radiomap.data import radiomapseer, synthetic, twin


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
