"""programs.leakage_map on tiny data: the three result files; bad flags, a missing run folder or
round exit 2 naming the flag (in-process, tests/programs/flag_harness.py)."""

import csv
import dataclasses
import json
import os
import subprocess
import sys

import pytest

from tests.programs import processes
from tff_radiomap.data import synthetic


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    spec = synthetic.DatasetSpec(maps=4, transmitters=8, size=64, seed=2)
    return synthetic.generate_dataset(str(tmp_path_factory.mktemp("rms")), spec, progress=False)


TINY = (
    "--resolution=16",
    "--width=0.125",
    "--train_traces=24",
    "--test_traces=8",
    "--twin_positions=4",
    "--k_per_map=2",
    "--blocks=2",
    "--ks=0,4,all",
    "--energies=0.1",
    "--draws=1",
    "--val_samples=8",
)


def test_the_audit_of_tiny_data_writes_groups_spectrum_and_figure(data_root, tmp_path):
    out = tmp_path / "out"
    r = processes.run("programs.leakage_map", f"--data_root={data_root}", f"--twin_root={tmp_path / 'twin'}", f"--output_dir={out}", *TINY)
    assert r.returncode == 0, r.stderr[-3000:]
    with open(out / "groups.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["partition", "group", "size", "attack_rmse_m", "ratio", "variance_share", "squared_mean_share", "loss_per_energy"]
    assert {r["partition"] for r in rows} == {"paper", "layers", "leakage"}
    assert [r["group"] for r in rows if r["partition"] == "leakage"] == ["leak0", "leak1", "residual"]
    with open(out / "spectrum.csv") as f:
        assert [r["k"] for r in csv.DictReader(f)] == ["0", "4", "8"]
    summary = json.load(open(out / "audit.json"))
    assert summary["basis_rank"] == 8 and summary["state"] == "initial weights of seed 0 (round 1)"
    assert (out / "leakage.png").stat().st_size > 1000
    assert os.path.exists(tmp_path / "twin" / "twin_spec.json")  # The twin made where --twin_root said.


def _run_dir(tmp_path, data_root):
    from tff_radiomap.experiments import privacy_radiomap as experiment

    run_dir = tmp_path / "run"
    os.makedirs(run_dir / "program_state")
    with open(run_dir / "config.json", "w") as f:
        json.dump(dataclasses.asdict(experiment.ExperimentConfig(data_root=data_root)), f)
    return str(run_dir)


def test_bad_flags_exit_2_naming_the_flag(data_root, tmp_path):
    run_dir, out = _run_dir(tmp_path, data_root), str(tmp_path / "o")
    cases = [
        (["--partitions=paper,nope"], "--partitions='paper,nope': expected a comma list of paper, layers, leakage"),
        (["--ks=0,x"], "--ks='0,x': expected a comma list of non-negative integers or 'all'"),
        (["--ks=-3"], "--ks='-3': expected"),
        (["--energies=0"], "--energies='0': expected a comma list of positive numbers"),
        (["--phase=3"], "--phase=3: expected 1 or 2"),
        (["--train_traces=5"], "--train_traces=5: expected an integer >= 10"),
        (["--round=2"], "--round=2: expected no --round without --run_dir"),
        (["--resolution=36"], "--resolution=36: expected a multiple of"),
        ([f"--run_dir={tmp_path / 'nowhere'}", "--round=2"], "is not a privacy_radiomap run folder"),
        ([f"--run_dir={run_dir}"], "--round=None: expected an integer >= 1 with --run_dir"),
        ([f"--run_dir={run_dir}", "--round=5"], "--round=5: round 5 needs the program state saved after round 4;"),
        ([f"--run_dir={run_dir}", "--round=1", "--seed=3"], "--seed=3: expected no --seed with --run_dir"),
        (
            [f"--data_root={data_root}", "--train_traces=30", "--test_traces=8", *TINY[:2], f"--twin_root={tmp_path / 'twin'}", "--twin_positions=2"],
            "--train_traces=30 --test_traces=8: train_traces + test_traces = 38: the data set holds 32 samples",
        ),
    ]
    args = [[*a, f"--output_dir={out}"] for a, _ in cases]
    r = subprocess.run(
        [sys.executable, "-m", "tests.programs.flag_harness", "leakage_map", json.dumps(args)],
        cwd=processes.ROOT,
        capture_output=True,
        text=True,
        timeout=processes.TIMEOUT_S,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    for (a, want), got in zip(cases, json.loads(r.stdout.strip().splitlines()[-1])):
        assert got["code"] == 2, (a, got)
        assert want in got["stderr"] and len(got["stderr"].strip().splitlines()) == 1, (a, got["stderr"])
