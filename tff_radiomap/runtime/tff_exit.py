"""TFF's own local execution context, released at exit while the interpreter is still whole.

`import tensorflow_federated` installs a local C++ context whose `ServiceManager` (made inside
`executor_factory.local_cpp_executor_factory`) starts a `worker_binary` on first use and stops it
only in its `__del__`. When that manager lives until interpreter teardown (a process that never
installs another context, or one that reinstalls TFF's after `workers.local_execution_context()`),
its `__del__` runs after its module's globals were set to None and prints

    Exception ignored in: <function local_cpp_executor_factory.<locals>.ServiceManager.__del__ ...>
    AttributeError: 'NoneType' object has no attribute 'Popen'

and a worker it started is not stopped (it inherits the program's stdout and stderr).

`release_at_exit()` registers (once; `import tff_radiomap` calls it, importing nothing heavy) an
`atexit` hook that, if TFF was imported, finds every such manager behind a context on TFF's context
stack, stops the worker it started by that process's pid (SIGINT, then SIGKILL after a timeout),
and lets the manager go: its `__del__` then runs at once, with its module intact, and finds nothing
left to stop. The contexts it served cannot run computations after that (it is the exit).
"""

from __future__ import annotations

import atexit
import signal
import subprocess
import sys
import threading

_STACK_MODULE = "tensorflow_federated.python.core.impl.context_stack.context_stack_impl"
_MANAGER = "local_cpp_executor_factory.<locals>.ServiceManager"  # The class's __qualname__.
_LOCK = threading.Lock()
_REGISTERED = False


def release_at_exit() -> None:
    """Registers `release_tff_local_contexts` to run at interpreter exit (idempotent)."""
    global _REGISTERED
    with _LOCK:
        if not _REGISTERED:
            atexit.register(release_tff_local_contexts)
            _REGISTERED = True


def release_tff_local_contexts(contexts=None, timeout_s: float = 5.0) -> list[int]:
    """Stops the workers of TFF's local C++ contexts among `contexts` (default: those on TFF's
    context stack) and drops their service managers now; returns the pids of the workers those
    managers had started."""
    if contexts is None:
        stack_module = sys.modules.get(_STACK_MODULE)
        if stack_module is None:  # TFF was never imported: it started nothing.
            return []
        contexts = list(stack_module.context_stack._stack)
    stopped = []
    for context in contexts:
        for cell in _manager_cells(context):
            manager = cell.cell_contents
            pid = _stop_worker(manager, timeout_s)
            if pid is not None:
                stopped.append(pid)
            cell.cell_contents = None  # The last reference: `manager.__del__` runs when we return.
    return stopped


def _manager_cells(context) -> list:
    """The closure cells holding a TFF `ServiceManager` in `context`'s executor factory."""
    factory = getattr(context, "_executor_factory", None)
    stack_fn = getattr(factory, "_executor_stack_fn", None)
    cells = []
    for cell in getattr(stack_fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # An empty cell.
            continue
        if type(value).__qualname__ == _MANAGER:
            cells.append(cell)
    return cells


def _stop_worker(manager, timeout_s: float) -> int | None:
    """Ends the worker `manager` started, if it runs; returns its pid (None if there was none)."""
    process = getattr(manager, "_process", None)
    manager._process = None  # Its `__del__` then signals nothing (the pid may be reused by then).
    if not isinstance(process, subprocess.Popen):
        return None
    if process.poll() is None:
        try:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        except ProcessLookupError:
            pass
    return process.pid
