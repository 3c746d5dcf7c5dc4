"""bench/ceiling.py at a toy size: both stages trained with early stopping, scored, and tabled."""

import json
import os
import subprocess
import sys

import pytest

from tff_radiomap.data import synthetic
from tff_radiomap.metrics import reconstruction


def test_the_ceiling_trains_both_stages_and_its_table_reads_the_records(tmp_path):
    root = synthetic.generate_dataset(str(tmp_path / "set"), synthetic.DatasetSpec(maps=8, transmitters=3, size=32, seed=1), progress=False)
    records = tmp_path / "records"
    os.makedirs(records)
    args = [
        f"--data_root={root}",
        "--resolution=16",
        "--width=0.1",
        "--batch_size=4",
        "--max_epochs=3",
        "--patience=1",
        "--name=toy",
        f"--output={records / 'toy.json'}",
    ]
    run = subprocess.run([sys.executable, "-m", "bench.ceiling", *args], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    (record,) = json.load(open(records / "toy.json"))
    assert record["maps"] == {"train": 6, "val": 1, "test": 1} and record["samples"]["train"] == 18
    for stage in ("stage1", "stage2"):
        val = record[stage]["val"]
        assert 1 <= record[stage]["best_epoch"] <= record[stage]["epochs"] <= 3
        assert val["rmse_db"] == pytest.approx(reconstruction.gain_rmse_db(10 ** (val["mse_db"] / 10)))
    report = subprocess.run([sys.executable, "-m", "bench.ceiling", f"--report={records}"], capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stderr[-2000:]
    table = open(tmp_path / "ceiling.md").read()
    assert "| toy (6 x 3) | 0.1 |" in table and f"{record['stage2']['val']['mse_db']:.2f}" in table
