"""programs.privacy_radiomap as a user runs it: kill -9 and resume, then a dead TFF worker, bad
flags, a folder holding another run."""

import json
import re

import pytest

from tests.programs import processes
from tff_radiomap.data import synthetic

ROUNDS = 3  # The kill after round 1, the worker's after round 2, then a round after the restart.


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    spec = synthetic.DatasetSpec(maps=8, transmitters=3, size=64, seed=5)
    return synthetic.generate_dataset(str(tmp_path_factory.mktemp("rms")), spec, progress=False)


def _args(data_root, out, *extra):
    # FedSGD: one TFF process to build per start (the two-stage switch across a resume is
    # covered in tests/experiments).
    return (
        f"--data_root={data_root}",
        f"--output_dir={out}",
        "--resolution=32",
        "--clients=3",
        "--clients_per_round=2",
        "--batch_size=4",
        "--local_epochs=1",
        f"--rounds={ROUNDS}",
        "--defense=fedsgd",
        "--noprogress",
        *extra,
    )


def _program(*args):
    return processes.run("programs.privacy_radiomap", *args)


@pytest.fixture(scope="module")
def uninterrupted(data_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("straight") / "run"
    done = _program(*_args(data_root, out))
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_bad_flags_exit_2_naming_the_flag(data_root, tmp_path):
    r = _program(*_args(data_root, tmp_path / "o", "--clients_per_round=5"))
    assert r.returncode == 2 and "--clients_per_round=5: expected an integer in 1..3" in r.stderr


def test_killed_mid_run_restarted_and_its_tff_worker_killed_ends_with_the_csv_of_an_uninterrupted_run(data_root, uninterrupted, tmp_path):
    """One run through both failures (one program start fewer than a test each): the program
    killed (-9) after round 1; restarted, its TFF worker killed after its first round, which the
    program restarts, resuming; it ends with the rows and summary of an uninterrupted run."""
    out, stdout, stderr = tmp_path / "run", tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    held, held_again = tmp_path / "held", tmp_path / "held_again"  # A file each: the killed program leaves its own.
    killed = processes.start("programs.privacy_radiomap", *_args(data_root, out), env=processes.held_env("state after round 1", held))
    processes.wait_for(held, killed)  # Held after saving round 1's state: the kill lands there.
    processes.kill(killed)
    assert killed.returncode == -9 and not (out / "summary.json").exists()
    assert (out / "program_state" / "program_state_1").exists() and not (out / "program_state" / "program_state_2").exists()

    # Restarted, it resumes after round 1; held after saving round 2, its worker is killed.
    env = processes.held_env("state after round 2", held_again, processes.user_env())
    program = processes.start("programs.privacy_radiomap", *_args(data_root, out), stdout_path=stdout, stderr_path=stderr, env=env)
    worker = processes.kill_its_worker_then_finish(program, held_again, stderr)
    done_stdout, done_stderr = stdout.read_text(), stderr.read_text()
    assert "resuming after round" in (out / "log.txt").read_text()
    assert f"the TFF worker (pid {worker}) died" in done_stderr and "restarting it (1/3)" in done_stderr
    # INFO logging goes to log.txt. Not checked: the line gRPC writes when the worker is started
    # again from a process whose threads are in gRPC (the separate tests never restarted it here).
    kept = "\n".join(line for line in done_stderr.splitlines() if "fork_posix.cc" not in line)
    assert not re.search(r"^I\d{4} ", kept, re.M), done_stderr[-2000:]
    assert "Unable to register" not in done_stderr  # TensorFlow's CUDA-registration noise.
    assert f"results: {out}" in done_stdout
    assert "; no privacy guarantee against an observer of the uploads" in done_stdout  # FedSGD: no defense, no epsilon.
    assert f"picture: {out / 'predictions.png'}" in done_stdout and (out / "curves.png").exists()
    assert processes.rows(out / "metrics.csv") == processes.rows(uninterrupted / "metrics.csv")
    assert [r["round"] for r in processes.rows(out / "metrics.csv")] == [str(r) for r in range(1, ROUNDS + 1)]
    final = json.load(open(out / "summary.json"))
    assert final["best_val_mse"] == json.load(open(uninterrupted / "summary.json"))["best_val_mse"]
    assert final["rounds"] == ROUNDS

    # Other flags on the folder are refused (a finished run read back: tests/experiments).
    other = _program(*_args(data_root, out, "--seed=3"))
    assert other.returncode == 2
    assert f"--output_dir='{out}'" in other.stderr and "seed: saved 0, now 3" in other.stderr and "--overwrite" in other.stderr
