"""programs.privacy_radiomap as a user runs it: kill -9 and resume, a dead TFF worker, bad flags,
a folder holding another run."""

import json
import os
import re
import signal

import pytest

from tests.programs import processes
from tff_radiomap.data import synthetic

ROUNDS = 5


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    spec = synthetic.DatasetSpec(maps=8, transmitters=3, size=64, seed=5)
    return synthetic.generate_dataset(str(tmp_path_factory.mktemp("rms")), spec, progress=False)


def _args(data_root, out, *extra):
    # FedSGD: one TFF process to build per start (the two-stage switch across a resume is
    # covered in tests/experiments).
    return (
        f"--data_root={data_root}", f"--output_dir={out}", "--resolution=32", "--clients=3", "--clients_per_round=2",
        "--batch_size=4", f"--rounds={ROUNDS}", "--defense=fedsgd", "--noprogress", *extra,
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


def test_killed_mid_run_then_restarted_ends_with_the_csv_of_an_uninterrupted_run(data_root, uninterrupted, tmp_path):
    out = tmp_path / "run"
    killed = processes.start("programs.privacy_radiomap", *_args(data_root, out))
    processes.wait_for(out / "program_state" / "program_state_1", killed)
    processes.kill(killed)
    assert not (out / "summary.json").exists()

    done = processes.run("programs.privacy_radiomap", *_args(data_root, out), env=processes.user_env())
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resuming after round" in (out / "log.txt").read_text()
    assert not re.search(r"^I\d{4} ", done.stderr, re.M), done.stderr[-2000:]  # INFO logging goes to log.txt.
    assert "Unable to register" not in done.stderr  # TensorFlow's CUDA-registration noise.
    assert f"results: {out}" in done.stdout
    assert "; no privacy guarantee against an observer of the uploads" in done.stdout  # FedSGD: no defense, no epsilon.
    assert f"picture: {out / 'predictions.png'}" in done.stdout and (out / "curves.png").exists()
    assert processes.rows(out / "metrics.csv") == processes.rows(uninterrupted / "metrics.csv")
    assert [r["round"] for r in processes.rows(out / "metrics.csv")] == [str(r) for r in range(1, ROUNDS + 1)]
    final = json.load(open(out / "summary.json"))
    assert final["best_val_mse"] == json.load(open(uninterrupted / "summary.json"))["best_val_mse"]

    # Other flags on the folder are refused (a finished run read back: tests/experiments).
    other = _program(*_args(data_root, out, "--seed=3"))
    assert other.returncode == 2
    assert f"--output_dir='{out}'" in other.stderr and "seed: saved 0, now 3" in other.stderr and "--overwrite" in other.stderr


def test_a_killed_tff_worker_is_restarted_and_the_run_resumes(data_root, uninterrupted, tmp_path):
    out, log = tmp_path / "run", tmp_path / "stderr.txt"
    program = processes.start("programs.privacy_radiomap", *_args(data_root, out), stderr_path=log)
    try:
        processes.wait_for(out / "program_state" / "program_state_1", program)
        workers = processes.worker_pids(program.pid)
        assert len(workers) == 1, workers
        os.kill(workers[0], signal.SIGKILL)
        assert program.wait(timeout=processes.TIMEOUT_S) == 0
    finally:
        if program.poll() is None:
            processes.kill(program)
    assert f"the TFF worker (pid {workers[0]}) died" in log.read_text() and "restarting it (1/3)" in log.read_text()
    assert processes.rows(out / "metrics.csv") == processes.rows(uninterrupted / "metrics.csv")
    assert json.load(open(out / "summary.json"))["rounds"] == ROUNDS
