import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize(
    "program, args, message",
    [
        ("privacy_radiomap", ["--noise_multiplier=-1"], "--noise_multiplier=-1.0: expected a non-negative number"),
        ("privacy_radiomap", ["--clip_norm=0"], "--clip_norm=0.0: expected a positive number"),
        ("privacy_radiomap", ["--defense=bogus"], "--defense='bogus': expected one of"),
        ("privacy_table", ["--methods=none,bogus"], "--methods='bogus': expected names from"),
        ("privacy_table", ["--seeds=a"], "--seeds='a': expected comma-separated non-negative integers"),
    ],
)
def test_bad_privacy_flags_exit_2(tmp_path, program, args, message):
    r = subprocess.run(
        [sys.executable, "-m", f"programs.{program}", f"--output_dir={tmp_path / 'out'}", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 2, r.stderr[-2000:]
    assert message in r.stderr
