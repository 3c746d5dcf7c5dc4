import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tff_radiomap.data import synthetic

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    spec = synthetic.DatasetSpec(maps=8, transmitters=3, size=64, seed=5)
    return synthetic.generate_dataset(str(tmp_path_factory.mktemp("rms")), spec, progress=False)


def _command(data_root, out, *extra):
    return [
        sys.executable, "-m", "programs.privacy_radiomap", f"--data_root={data_root}", f"--output_dir={out}",
        "--resolution=32", "--clients=3", "--clients_per_round=2", "--batch_size=4", "--rounds=3",
        "--stage1_rounds=1", "--noprogress", *extra,
    ]


def test_bad_flags_exit_2_naming_the_flag(data_root, tmp_path):
    r = subprocess.run(_command(data_root, tmp_path / "o", "--clients_per_round=5"), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "--clients_per_round=5: expected an integer in 1..3" in r.stderr


def test_a_run_killed_mid_way_resumes_when_restarted(data_root, tmp_path):
    out = tmp_path / "run"
    state_1 = out / "program_state" / "program_state_1"
    # FedSGD: one TFF process to build per start (the two-stage switch across a resume is
    # covered in tests/experiments).
    command = _command(data_root, out, "--defense=fedsgd")
    killed = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while not state_1.exists() and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert state_1.exists(), "the run saved no program state for round 1"
    killed.send_signal(signal.SIGKILL)
    killed.wait()

    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resuming after round" in done.stderr
    assert f"results: {out}" in done.stdout
    with open(out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["round"] for r in rows] == ["1", "2", "3"] and [r["phase"] for r in rows] == ["0", "0", "0"]
    summary = json.load(open(out / "summary.json"))
    assert summary["rounds"] == 3 and 1 <= summary["best_round"] <= 3
    assert json.load(open(out / "config.json"))["defense"] == "fedsgd"
