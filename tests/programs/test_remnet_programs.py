"""The EPFL-REMNet programs as a user runs them: a bad flag (every flag check also runs in-process
in test_flag_validation.py), kill -9 and resume, a dead worker, a NaN client."""

import subprocess
import sys

import pytest


def test_bad_remnet_tables_flag_exits_2_naming_it(tmp_path):
    # epfl_remnet's real command line exits 2 in the resume test below (another run in --out).
    proc = subprocess.run(
        [sys.executable, "-m", "programs.remnet_tables", "--pareto_r=0", f"--out={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "--pareto_r='0': expected integers >= 1" in proc.stderr


# ---------------------------------------------------------------------------------------------
# programs.epfl_remnet on a one-map 64x64 set: kill -9 and resume, a dead worker, a NaN client.
import json  # noqa: E402
import os  # noqa: E402

from tests.programs import processes  # noqa: E402
from tff_radiomap.learning import rem_runner  # noqa: E402
from tff_radiomap.data import synthetic  # noqa: E402

ROUNDS = 6  # Checkpoints after rounds 2 and 4 (the kills land there), then two rounds more.
# Every run of this file gives this client NaN inputs in round 1 (a sync round, R = 2, that
# selects it): one uninterrupted run serves both the NaN test and the resume tests' reference.
NAN_CLIENT = rem_runner.select_clients(90, 4, 0, 1)[0]


@pytest.fixture(scope="module")
def rem_root(tmp_path_factory):
    spec = synthetic.DatasetSpec(maps=1, transmitters=4, size=64, seed=2)
    return synthetic.generate_dataset(str(tmp_path_factory.mktemp("rem")), spec, progress=False)


def _args(root, out, *extra):
    return (
        f"--data_root={root}",
        f"--out={out}",
        f"--rounds={ROUNDS}",
        "--clients_per_round=4",
        "--local_epochs=1",
        "--eval_every=2",
        "--checkpoint_every=2",
        f"--inject_nan_client=1:{NAN_CLIENT}",
        *extra,
    )


def _metrics(out):
    return processes.rows(os.path.join(out, "heavy", "epfl_remnet", "metrics.csv"))


@pytest.fixture(scope="module")
def uninterrupted(rem_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("straight")
    done = processes.run("programs.epfl_remnet", *_args(rem_root, out))
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_epfl_remnet_killed_mid_run_restarted_and_its_tff_worker_killed_ends_like_an_uninterrupted_run(rem_root, uninterrupted, tmp_path):
    """One run through both failures (one program start fewer than a test each): the program
    killed (-9) after its first checkpoint; restarted, its TFF worker killed after the restarted
    program's first checkpoint, which the program survives; it ends like an uninterrupted run."""
    out, run_dir = tmp_path / "out", tmp_path / "out" / "heavy" / "epfl_remnet"
    stdout, stderr = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    held, held_again = tmp_path / "held", tmp_path / "held_again"  # A file each: the killed program leaves its own.
    killed = processes.start("programs.epfl_remnet", *_args(rem_root, out), env=processes.held_env("checkpoint after round 2", held))
    processes.wait_for(held, killed)  # Held after its first checkpoint (round 2): the kill lands there.
    processes.kill(killed)
    assert killed.returncode == -9 and not (run_dir / "final.json").exists()

    # Restarted, it resumes after round 2; held after its next checkpoint, its worker is killed.
    env = processes.held_env("checkpoint after round 4", held_again)
    program = processes.start("programs.epfl_remnet", *_args(rem_root, out), stdout_path=stdout, stderr_path=stderr, env=env)
    worker = processes.kill_its_worker_then_finish(program, held_again, stderr)
    assert "resuming after round" in stdout.read_text()
    assert f"the TFF worker (pid {worker}) died" in stderr.read_text()
    assert _metrics(out) == _metrics(uninterrupted)
    final, straight = (json.load(open(d / "heavy" / "epfl_remnet" / "final.json")) for d in (out, uninterrupted))
    assert final["per_client_rmse"] == straight["per_client_rmse"]

    other = processes.run("programs.epfl_remnet", *_args(rem_root, out, "--seed=1"))
    assert other.returncode == 2 and f"--output_dir='{out}'" in other.stderr and "--overwrite" in other.stderr


def test_epfl_remnet_drops_and_counts_a_nan_client(uninterrupted):
    rows = _metrics(uninterrupted)
    assert [int(r["nonfinite_updates"]) for r in rows] == [0, 1] + [0] * (ROUNDS - 2)
    assert int(rows[1]["uploads"]) == 3
    final = json.load(open(uninterrupted / "heavy" / "epfl_remnet" / "final.json"))
    assert all(v == v for v in final["per_client_rmse"])  # No NaN.


def test_epfl_remnet_writes_its_pictures_and_logs_info_to_its_folder(uninterrupted):
    run_dir = uninterrupted / "heavy" / "epfl_remnet"
    for name in ("curves.png", "client_rmse.png"):
        assert (run_dir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    assert (run_dir / "log.txt").exists()


def test_remnet_tables_with_two_jobs_trains_every_run_once_and_writes_the_tables(rem_root, tmp_path):
    """The --jobs path end to end: two children claim the runs, exit 0, the parent writes the tables."""
    methods = "epfl_remnet,fedavg,pfl_uncompressed"
    common = (f"--data_root={rem_root}", f"--out={tmp_path}", "--rounds=2", "--eval_every=1", "--scenarios=heavy", "--test_splits=block", "--seeds=0")
    done = processes.run("programs.remnet_tables", *common, f"--methods={methods}", "--detail_splits=", "--jobs=2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(processes.rows(os.path.join(tmp_path, "main.csv"))) == 3
    with open(os.path.join(tmp_path, "summary.json")) as f:
        assert json.load(f)["runs"] == 3
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".claims-")]
    for name in methods.split(","):
        with open(os.path.join(tmp_path, "runs", "block", "seed0", "heavy", name, "final.json")) as f:
            assert json.load(f)["rounds"] == 2
