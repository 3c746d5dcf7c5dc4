"""bench/basis_read.py at a toy size: both basis layouts time and give the same aggregate."""

import subprocess
import sys


def test_basis_read_times_both_layouts_and_they_agree(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "bench.basis_read", "--coordinates=300", "--rank=10", "--clients=2", "--repeats=1"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    for name in ("uniform", "adaptive, raw basis file", "adaptive, serialized basis file"):
        assert any(line.startswith(f"{name}: ") and "s a round of 2 uploads" in line for line in lines), out.stdout
    assert "largest difference of the two layouts' aggregates: 0" in out.stdout
