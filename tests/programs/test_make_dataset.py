import os
import subprocess
import sys

import pytest

from tff_radiomap.data import radiomapseer as rms

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


@pytest.mark.parametrize(
    "args, message",
    [
        (["--maps", "0"], "--maps=0: expected an integer >= 1"),
        (["--transmitters", "-2"], "--transmitters=-2: expected an integer >= 1"),
        (["--size", "8"], "--size=8: expected an integer in 32..4096"),
        (["--workers", "0"], "--workers=0: expected an integer >= 1"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(tmp_path, args, message):
    r = _run("--out", str(tmp_path / "d"), *args)
    assert r.returncode == 2 and message in r.stderr


def test_missing_out_and_unwritable_out(tmp_path):
    r = _run()
    assert r.returncode == 2 and "--out=None" in r.stderr
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = _run("--out", str(blocker / "sub"))
    assert r.returncode == 2 and "cannot create the folder" in r.stderr


def test_changed_spec_for_existing_root_is_refused(tmp_path):
    out = str(tmp_path / "d")
    assert _run("--out", out, "--maps", "1", "--transmitters", "1", "--size", "32").returncode == 0
    r = _run("--out", out, "--maps", "2", "--transmitters", "1", "--size", "32")
    assert r.returncode == 2 and "already holds" in r.stderr
