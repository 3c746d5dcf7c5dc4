"""Helpers of the program tests: running a program, killing it or its TFF worker mid-run.

A kill lands at a known point: the program is started held (`held_env`, `runtime.hold`) and waits
at that point, so the test never races a program that may have finished before the kill."""

import csv
import os
import signal
import subprocess
import sys
import time

from tff_radiomap.runtime import hold

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT_S = 600


def run(module: str, *args: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)


def user_env() -> dict:
    """The environment of a user who did not set TF_CPP_MIN_LOG_LEVEL (tests/conftest.py does)."""
    return {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}


def start(module: str, *args: str, stderr_path=None, stdout_path=None, env=None) -> subprocess.Popen:
    """Starts the program; its stderr goes to `stderr_path` and its stdout to `stdout_path` (or nowhere)."""
    stderr = open(stderr_path, "w") if stderr_path else subprocess.DEVNULL
    stdout = open(stdout_path, "w") if stdout_path else subprocess.DEVNULL
    try:
        return subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, stdout=stdout, stderr=stderr, env=env)
    finally:
        for f, path in ((stderr, stderr_path), (stdout, stdout_path)):
            if path:
                f.close()


def held_env(point: str, path, base: dict | None = None) -> dict:
    """`base` (default this process's environment) with the program held at `point` until `path` goes."""
    return {**(os.environ if base is None else base), hold.ENV: f"{point}={path}"}


def wait_for(path, proc: subprocess.Popen) -> None:
    """Polls until `path` exists; fails if `proc` exits first."""
    deadline = time.monotonic() + TIMEOUT_S
    while not os.path.exists(path):
        assert proc.poll() is None, f"the program exited ({proc.returncode}) before writing {path}"
        assert time.monotonic() < deadline, f"no {path} after {TIMEOUT_S} s"
        time.sleep(0.05)


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def worker_pids(pid: int) -> list[int]:
    """Pids of the TFF worker_binary processes whose parent is `pid` (as workers.py starts them)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read()
        except OSError:
            continue
        if ppid == pid and b"worker_binary" in command:
            found.append(int(entry))
    return found


def kill_its_worker_then_finish(program: subprocess.Popen, held, stderr_path) -> int:
    """Once `program` holds at its point (it wrote `held`, see `held_env`), kills the program's one
    TFF worker, lets the program go on and waits for it to end with exit 0 (the program is killed
    if the test fails first); returns the killed worker's pid."""
    try:
        wait_for(held, program)
        workers = worker_pids(program.pid)
        assert len(workers) == 1, workers
        os.kill(workers[0], signal.SIGKILL)
        os.remove(held)
        assert program.wait(timeout=TIMEOUT_S) == 0, open(stderr_path).read()[-2000:]
    finally:
        if program.poll() is None:
            kill(program)
    return workers[0]


def rows(path, drop=("seconds", "round_s")) -> list[dict]:
    """The CSV's rows without the wall-time columns (the rest must match run to run)."""
    with open(path) as f:
        return [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(f)]
