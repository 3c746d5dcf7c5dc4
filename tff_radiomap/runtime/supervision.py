"""Surviving the death of the TFF worker process in the middle of a run.

When the local `worker_binary` dies (killed, out of memory), TFF 0.87 does not fail: its execution
context retries the interrupted computation forever (gRPC UNAVAILABLE is a retryable error), so
the program hangs. `run_with_restarts(fn, runtime)` turns that into recovery:

  - while `fn()` runs, a watchdog thread polls the worker; when it has died (and was not stopped
    by us), the watchdog interrupts the main thread with `WorkerLost` (a signal whose handler
    raises it, so that a main thread waiting on the stuck computation wakes up);
  - `run_with_restarts` then starts a fresh worker (`LocalRuntime.restart()`), reinstalls the
    context and calls `fn()` again. `fn` must resume from its last saved state, as every runner
    of this package does when it finds its run folder;
  - after `max_restarts` deaths it stops and re-raises `WorkerLost`; the state saved so far stays,
    and the same command resumes from it.

Main-thread only (Python runs signal handlers there); elsewhere `fn()` runs unsupervised.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable
from typing import TypeVar

from absl import logging

_T = TypeVar("_T")
_SIGNAL = signal.SIGUSR1


class WorkerLost(RuntimeError):
    """The TFF worker process died while the run was using it."""


@contextlib.contextmanager
def watch_worker(runtime, poll_s: float = 0.5):
    """Within the block, the death of `runtime.worker` raises `WorkerLost` in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    worker = runtime.worker
    done = threading.Event()
    fired = threading.Event()

    def handler(signum, frame):
        if fired.is_set() and not done.is_set():
            raise WorkerLost(f"the TFF worker (pid {worker.pid}) died; its log: {worker.log_path}")

    def watch():
        while not done.wait(poll_s):
            if not worker.alive() and not worker.stopping and not done.is_set():
                fired.set()
                signal.pthread_kill(threading.main_thread().ident, _SIGNAL)
                return

    previous = signal.signal(_SIGNAL, handler)
    thread = threading.Thread(target=watch, name="tff-worker-watchdog", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        signal.signal(_SIGNAL, previous)


def run_with_restarts(fn: Callable[[], _T], runtime, max_restarts: int = 3, log=logging.warning) -> _T:
    """`fn()`, restarting the worker and calling `fn()` again (it resumes) when the worker dies."""
    restarts = 0
    while True:
        try:
            with watch_worker(runtime):
                return fn()
        except Exception as exc:
            if not isinstance(exc, WorkerLost):
                if runtime.worker.alive():
                    raise
                # The death surfaced as an RPC error before the watchdog saw it.
                exc = WorkerLost(f"the TFF worker (pid {runtime.worker.pid}) died ({type(exc).__name__}: {exc})")
            if restarts >= max_restarts:
                raise WorkerLost(f"{exc}; gave up after {restarts} restarts") from exc
            restarts += 1
            log(f"{exc}; restarting it ({restarts}/{max_restarts}) and resuming from the last saved round")
            runtime.restart()
