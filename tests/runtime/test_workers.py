import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import psutil
import pytest


def _gone(pid: int, wait_s: float = 20.0) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.2)
    return False


def test_local_context_runs_and_stops_its_worker():
    import tensorflow_federated as tff

    from tff_radiomap.runtime import workers

    @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
    def mean(x):
        return tff.federated_mean(x)

    before = tff.framework.get_context_stack().current
    with workers.local_execution_context() as runtime:
        pid = runtime.worker.pid
        assert mean([1.0, 2.0, 6.0]) == pytest.approx(3.0)
        assert runtime.worker.alive() and pid in workers.live_worker_pids()
        assert os.path.exists(runtime.worker.log_path)
        assert tff.framework.get_context_stack().current is runtime.context
    assert _gone(pid) and pid not in workers.live_worker_pids()
    # The previous context is back (later computations do not go to the stopped worker).
    assert tff.framework.get_context_stack().current is before


def _ignores_sigint(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigIgn:"))
    return bool(mask & (1 << (signal.SIGINT - 1)))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
@pytest.mark.parametrize("die_with_parent", [True, False])
def test_a_worker_takes_sigint_when_its_program_ignores_it(die_with_parent):
    """A shell's background job starts with SIGINT ignored; the worker must not inherit that, or
    `stop()`'s SIGINT does nothing and every stop waits for its SIGKILL timeout."""
    from tff_radiomap.runtime import workers

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        assert _ignores_sigint(os.getpid())
        worker = workers.WorkerProcess(die_with_parent=die_with_parent)
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        assert not _ignores_sigint(worker.pid)
    finally:
        worker.stop()


def test_restart_replaces_a_killed_worker():
    import tensorflow_federated as tff

    from tff_radiomap.runtime import workers

    @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
    def total(x):
        return tff.federated_sum(x)

    with workers.local_execution_context() as runtime:
        old = runtime.worker.pid
        os.kill(old, signal.SIGKILL)
        assert _gone(old)
        runtime.restart()
        assert runtime.worker.pid != old
        assert total([1.0, 2.0]) == pytest.approx(3.0)


_CHILD = textwrap.dedent(
    """
    import signal, sys, time
    # A shell's background job (`make test &`, nohup) starts with SIGINT ignored, and this child
    # would inherit that: Python's own SIGINT handler back, so SIGINT is what is tested.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import numpy as np
    import tensorflow_federated as tff
    from tff_radiomap.runtime import workers
    rt = workers.install_local_context()
    @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
    def mean(x):
        return tff.federated_mean(x)
    assert abs(mean([1.0, 3.0]) - 2.0) < 1e-6
    print(rt.worker.pid, flush=True)
    mode = sys.argv[1]
    if mode == "raise":
        raise RuntimeError("boom")
    if mode == "wait":
        time.sleep(600)  # Longer than the test waits: the signal must end it.
    """
)


@pytest.mark.parametrize("mode, signum", [("exit", None), ("raise", None), ("wait", signal.SIGTERM), ("wait", signal.SIGINT), ("wait", signal.SIGKILL)])
def test_worker_never_outlives_the_program(mode, signum):
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        # No preexec_fn: it makes Popen fork this process, whose gRPC threads (from TFF runtimes of
        # earlier tests) can crash it at the fork (a segfault, 2026-12-05); the child resets SIGINT.
    )
    pid = int(child.stdout.readline())
    if mode == "wait":  # The other modes may already have exited (and stopped the worker).
        assert psutil.pid_exists(pid)
    if signum is not None:
        child.send_signal(signum)
    # The pipe closes only when every holder of it is gone: the worker must not hold it.
    try:
        rest, _ = child.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        child.kill()
        raise AssertionError(f"the program (or its worker, holding the pipe) did not end within 60 s of {mode}/{signum}")
    assert rest == ""
    assert _gone(pid), f"worker {pid} survived a program that ended by {mode}/{signum}"


def test_parse_addresses():
    from tff_radiomap.runtime import workers

    assert workers.parse_addresses("a:1, b:2") == ["a:1", "b:2"]
    for bad in ["", "host", "host:0", "host:x", ":80"]:
        with pytest.raises(ValueError):
            workers.parse_addresses(bad)
