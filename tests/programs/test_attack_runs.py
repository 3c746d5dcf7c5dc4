"""programs.attack_runs: what it refuses, by name, before it writes anything (a run it rescores is
tests/experiments/test_privacy_radiomap_subspace.py's)."""

import json
import os

from tests.programs import processes


def test_a_pattern_matching_no_run_and_a_run_without_models_exit_2_naming_them(tmp_path):
    r = processes.run("programs.attack_runs", f"--runs={tmp_path}/nothing_*")
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"--runs='{tmp_path}/nothing_*': expected privacy_radiomap run folders (each with a config.json)" in r.stderr
    old = tmp_path / "old_run"
    old.mkdir()
    (old / "config.json").write_text(json.dumps({"defense": "none"}))
    r = processes.run("programs.attack_runs", f"--runs={tmp_path}/old_*", "--matching_maps=1")
    assert r.returncode == 2, r.stderr[-2000:]
    assert "a run that kept its attack rounds' models (attack_rounds/)" in r.stderr and "Traceback" not in r.stderr
    r = processes.run("programs.attack_runs", f"--runs={old}", "--matching_stride=0")
    assert r.returncode == 2 and "--matching_stride=0: expected a positive integer" in r.stderr
    assert sorted(os.listdir(old)) == ["config.json"]
