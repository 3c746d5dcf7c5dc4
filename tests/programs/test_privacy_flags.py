"""programs.privacy_table's real command line turns a bad flag into exit 2 and one line naming it.

Every flag check of privacy_radiomap and privacy_table runs in-process in test_flag_validation.py
(one harness process a program); privacy_radiomap's real command line is exercised in
test_privacy_radiomap.py and test_flag_validation.py (a corrupt data file)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_bad_privacy_table_flag_exits_2_naming_it(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "programs.privacy_table", f"--output_dir={tmp_path / 'out'}", "--seeds=a"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2, r.stderr[-2000:]
    assert "--seeds='a': expected comma-separated non-negative integers" in r.stderr
