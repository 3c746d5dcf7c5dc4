"""programs.demo as `make demo` runs it, at toy size: the default set-up shortened to stage 1, into
its own folder; the summary and the pictures at the end."""

import json
import os

from tests.programs import processes
from tff_radiomap.data import synthetic


def test_the_demo_trains_stage_1_into_its_own_folder_and_reports_the_gain_rmse(tmp_path):
    root = synthetic.generate_dataset(str(tmp_path / "rms"), synthetic.DatasetSpec(maps=8, transmitters=3, size=64, seed=5), progress=False)
    args = [
        f"--data_root={root}",
        "--resolution=32",
        "--clients=3",
        "--clients_per_round=2",
        "--batch_size=4",
        "--local_epochs=1",
        "--rounds=3",
        "--noprogress",
    ]
    out = tmp_path / "demo"
    r = processes.run("programs.demo", *args, f"--output_dir={out}")
    assert r.returncode == 0, r.stderr[-2000:]
    config = json.load(open(out / "config.json"))
    assert (config["rounds"], config["stage1_rounds"], config["local_epochs"]) == (3, 3, 1)
    assert "gain RMSE: best round" in r.stdout and "dB outdoor" in r.stdout
    assert all(os.path.exists(out / name) for name in ("summary.json", "curves.png", "predictions.png"))
    summary = json.load(open(out / "summary.json"))
    assert set(summary["test"]) == {"mse_db", "rmse_db", "outdoor_rmse_db"}
