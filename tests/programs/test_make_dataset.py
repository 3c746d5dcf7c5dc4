import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tff_radiomap.data import radiomapseer as rms
from tff_radiomap.data import synthetic
from tff_radiomap.runtime import hold

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args):
    return subprocess.run([sys.executable, "-m", "programs.make_dataset", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_cli_writes_a_layout_the_loader_reads(tmp_path):
    out = str(tmp_path / "d")
    r = _run("--out", out, "--maps", "3", "--transmitters", "4", "--size", "64", "--workers", "2")
    assert r.returncode == 0, r.stderr
    data = rms.RadioMapSeer(rms.LoaderConfig(root=out, resolution=32))
    assert data.summary()["samples"] == 12
    again = _run("--out", out, "--maps", "3", "--transmitters", "4", "--size", "64")
    assert again.returncode == 0, again.stderr


def test_a_shadowed_set_records_its_reality_and_the_program_prints_and_records_the_twins_mismatch(tmp_path):
    out = str(tmp_path / "s")
    args = ["--maps", "2", "--transmitters", "2", "--size", "64", "--reality", "shadowed", "--wall_loss_spread_db", "2"]
    r = _run("--out", out, *args)
    assert r.returncode == 0, r.stderr
    with open(os.path.join(out, synthetic.SPEC_FILE)) as f:
        assert json.load(f)["spec"]["reality"]["wall_loss_spread_db"] == 2.0
    with open(os.path.join(out, synthetic.MISMATCH_FILE)) as f:
        found = json.load(f)
    assert found["maps"] == 2 and 2.0 < found["twin_rmse_db"] < 15.0
    assert f"twin mismatch: {found['twin_rmse_db']:.2f} dB RMSE" in r.stdout
    assert sorted(synthetic.read_reality(out)) == [0, 1]
    plain = _run("--out", str(tmp_path / "p"), "--maps", "2", "--transmitters", "2", "--size", "64", "--mismatch_maps", "1")
    assert plain.returncode == 0 and "twin mismatch: 0.00 dB RMSE" in plain.stdout and "maps 0-0" in plain.stdout
    assert _run("--out", out, *args[:-2]).returncode == 2  # Another reality for the same folder: refused.


@pytest.mark.parametrize(
    "args, message",
    [
        (["--maps", "0"], "--maps=0: expected an integer >= 1"),
        (["--transmitters", "-2"], "--transmitters=-2: expected an integer >= 1"),
        (["--size", "8"], "--size=8: expected an integer in 32..4096"),
        (["--workers", "0"], "--workers=0: expected an integer >= 1"),
        (["--reality", "ray_traced"], "--reality='ray_traced': expected one of twin, shadowed"),
        (["--shadow_std_los_db", "5"], "--shadow_std_los_db=5.0: expected no value with --reality=twin"),
        (["--reality", "shadowed", "--decorrelation_nlos_m", "0"], "--decorrelation_nlos_m=0.0: expected a finite number > 0"),
        (["--reality", "shadowed", "--wall_loss_spread_db", "-1"], "--wall_loss_spread_db=-1.0: expected a finite number >= 0"),
        (["--mismatch_maps", "-1"], "--mismatch_maps=-1: expected an integer >= 0"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(tmp_path, args, message):
    r = _run("--out", str(tmp_path / "d"), *args)
    assert r.returncode == 2 and message in r.stderr


def test_missing_out_and_unwritable_out(tmp_path):
    r = _run()
    assert r.returncode == 2 and "--output_dir=None" in r.stderr  # --out, used here, is its alias.
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = _run("--out", str(blocker / "sub"))
    assert r.returncode == 2 and "cannot create the folder" in r.stderr


def test_changed_spec_for_existing_root_is_refused(tmp_path):
    out = str(tmp_path / "d")
    assert _run("--out", out, "--maps", "1", "--transmitters", "1", "--size", "32").returncode == 0
    r = _run("--out", out, "--maps", "2", "--transmitters", "1", "--size", "32")
    assert r.returncode == 2 and "already holds" in r.stderr and "--overwrite" in r.stderr


def _files(root):
    out = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    return out


def test_killed_mid_run_and_restarted_gives_the_files_of_an_uninterrupted_run(tmp_path):
    args = ["--maps", "10", "--transmitters", "2", "--size", "128", "--seed", "3"]
    killed, straight, held = str(tmp_path / "killed"), str(tmp_path / "straight"), str(tmp_path / "held")
    # The program holds with map 2 half written, all but the buildings image that marks it complete
    # (`runtime.hold`): the kill lands there, never after the program's end.
    proc = subprocess.Popen(
        [sys.executable, "-m", "programs.make_dataset", "--out", killed, *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=hold.env("map 2 before its buildings", held),
    )
    deadline = time.monotonic() + 300
    while not os.path.exists(held):
        assert proc.poll() is None, f"the program exited ({proc.returncode}) before map 2"
        assert time.monotonic() < deadline, "map 2 not written after 300 s"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert sorted(os.listdir(os.path.join(killed, "png", "buildings_complete"))) == ["0.png", "1.png"]
    assert os.path.exists(os.path.join(killed, "gain", "DPM", "2_1.png"))  # Map 2's other files are there.
    assert _run("--out", killed, *args).returncode == 0
    assert _run("--out", straight, *args).returncode == 0
    assert _files(killed) == _files(straight)


def test_overwrite_replaces_a_set_of_another_spec(tmp_path):
    out = str(tmp_path / "d")
    assert _run("--out", out, "--maps", "2", "--transmitters", "1", "--size", "32").returncode == 0
    (tmp_path / "d" / "notes.txt").write_text("mine")
    r = _run("--out", out, "--maps", "1", "--transmitters", "2", "--size", "32", "--overwrite")
    assert r.returncode == 0, r.stderr
    data = rms.RadioMapSeer(rms.LoaderConfig(root=out, resolution=32))
    assert data.summary()["samples"] == 2 and len(data.map_ids) == 1
    assert (tmp_path / "d" / "notes.txt").read_text() == "mine"  # Only the set's own files went.
