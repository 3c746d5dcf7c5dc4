"""The EPFL-REMNet programs refuse bad flags with one clear line and exit status 2."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "program,flag,expected",
    [
        ("programs.epfl_remnet", "--k_fraction=1.5", "--k_fraction=1.5: expected a fraction"),
        ("programs.remnet_tables", "--pareto_r=0", "--pareto_r='0': expected comma-separated integers >= 1"),
    ],
)
def test_bad_flag_exits_2_naming_it(tmp_path, program, flag, expected):
    proc = subprocess.run(
        [sys.executable, "-m", program, flag, f"--out={tmp_path}"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert expected in proc.stderr
