"""TFF execution contexts whose worker processes end with the program.

`import tensorflow_federated` installs a local C++ context that starts
`tensorflow_federated/data/worker_binary` on first use and only stops it in a `__del__`, which is
not reliably run at interpreter exit. The orphaned worker inherits stdout/stderr, so a caller
reading the program's output (a pipe, a CI runner) hangs until it is killed.

This module starts the worker itself, so that it owns the pid:
- the worker's output goes to a log file, never to the caller's pipes;
- on Linux the worker is started with PR_SET_PDEATHSIG, so the kernel kills it if this process
  dies, even by SIGKILL;
- `atexit` and SIGTERM/SIGINT handlers stop it on normal exit, exception and Ctrl-C.

Use `local_execution_context()` (a context manager) or `install_local_context()` (for the whole
process). `remote_execution_context(addresses)` spreads each round's clients over workers
started elsewhere (`python -m programs.start_worker --port=P`).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence

import grpc
import portpicker
import tensorflow_federated as tff

_GRPC_OPTIONS = [
    ("grpc.max_message_length", 2 * 1000 * 1000 * 1000),
    ("grpc.max_receive_message_length", 2 * 1000 * 1000 * 1000),
    ("grpc.max_send_message_length", 2 * 1000 * 1000 * 1000),
]
_PR_SET_PDEATHSIG = 1


def worker_binary_path() -> str:
    """Path of the C++ worker shipped inside the tensorflow_federated wheel."""
    path = os.path.join(os.path.dirname(tff.__file__), "data", "worker_binary")
    if not os.path.isfile(path):
        raise RuntimeError(f"TFF worker binary not found at {path}; is tensorflow-federated installed?")
    return path


def worker_environment() -> dict:
    """The worker's environment: ours, with glibc's malloc limited to 2 arenas.

    With one arena per thread (glibc's default, up to 8 per core) the worker's resident memory
    grows every RadioUNet round without bound (freed memory stays in per-thread arenas); with 2
    arenas it stays nearly flat (bench/memory_flat.py; bench/RESULTS.md, "Memory over a 50-round run"). A MALLOC_ARENA_MAX already set wins.
    """
    return {**os.environ, "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "2")}


def _die_with_parent() -> None:
    """preexec_fn: ask the kernel to SIGKILL the child when its parent dies, and give it SIGINT's
    default disposition (see `_default_sigint`)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:  # Not Linux: atexit and signal handlers still apply.
        pass
    _default_sigint()


def _default_sigint() -> None:
    """preexec_fn: SIGINT back to its default in the worker. A program started as a shell's
    background job (nohup, `cmd &`) has SIGINT ignored and its children inherit that: the worker
    would then ignore `stop()`'s SIGINT and be killed only after the timeout (5 s a stop)."""
    try:
        ctypes.CDLL("libc.so.6").signal(int(signal.SIGINT), 0)  # 0: SIG_DFL.
    except OSError:
        pass


class WorkerProcess:
    """One `worker_binary` process, owned by this Python process.

    Attributes:
      port: the gRPC port it serves on (localhost).
      pid: its process id.
      log_path: the file that receives its stdout and stderr.
    """

    def __init__(self, port: int | None = None, log_path: str | None = None, die_with_parent: bool = True):
        self.port = port or portpicker.pick_unused_port()
        if log_path is None:
            fd, log_path = tempfile.mkstemp(prefix=f"tff_worker_{self.port}_", suffix=".log")
            os.close(fd)
        self.log_path = log_path
        args = [worker_binary_path(), f"--port={self.port}", "--max_concurrent_computation_calls=-1"]
        with open(log_path, "ab") as log:
            self._process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent if die_with_parent else _default_sigint,
                close_fds=True,
                env=worker_environment(),
            )
        self.pid = self._process.pid
        self.stopping = False
        _register(self)

    @property
    def address(self) -> str:
        return f"localhost:{self.port}"

    def alive(self) -> bool:
        return self._process.poll() is None

    def wait_ready(self, timeout_s: float = 60.0) -> grpc.Channel:
        """Blocks until the worker answers gRPC; returns a channel to it."""
        return wait_for_address(self.address, timeout_s, process=self)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Ends the worker: SIGINT, then SIGKILL if it has not exited after `timeout_s`."""
        self.stopping = True  # An intended exit (`supervision` does not take it for a crash).
        if self._process.poll() is None:
            try:
                self._process.send_signal(signal.SIGINT)
                self._process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            except ProcessLookupError:
                pass
        _unregister(self)


def wait_for_address(address: str, timeout_s: float = 60.0, process: WorkerProcess | None = None) -> grpc.Channel:
    """Returns a gRPC channel to `address` once a TFF worker answers there."""
    channel = grpc.insecure_channel(address, _GRPC_OPTIONS)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            grpc.channel_ready_future(channel).result(timeout=1.0)
            return channel
        except grpc.FutureTimeoutError:
            pass
        if process is not None and not process.alive():
            raise RuntimeError(f"TFF worker on {address} exited at start-up; see {process.log_path}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"No TFF worker answered on {address} within {timeout_s:.0f} s")


# ---------------------------------------------------------------------------------------------
# Process-wide registry: every worker we started is stopped at exit or on SIGTERM/SIGINT.
_LIVE: dict[int, WorkerProcess] = {}
_LOCK = threading.Lock()
_HOOKS_INSTALLED = False


def _register(worker: WorkerProcess) -> None:
    global _HOOKS_INSTALLED
    with _LOCK:
        _LIVE[worker.pid] = worker
        if not _HOOKS_INSTALLED:
            atexit.register(stop_all_workers)
            if threading.current_thread() is threading.main_thread():
                for signum in (signal.SIGTERM, signal.SIGHUP):
                    previous = signal.getsignal(signum)
                    signal.signal(signum, _make_handler(previous))
            _HOOKS_INSTALLED = True


def _unregister(worker: WorkerProcess) -> None:
    with _LOCK:
        _LIVE.pop(worker.pid, None)


def _make_handler(previous):
    def handler(signum, frame):
        stop_all_workers()
        if callable(previous):
            previous(signum, frame)
        else:
            sys.exit(128 + signum)

    return handler


def stop_all_workers() -> None:
    """Stops every worker this process started and has not stopped yet."""
    with _LOCK:
        workers = list(_LIVE.values())
    for worker in workers:
        worker.stop()


def live_worker_pids() -> list[int]:
    """Pids of the workers this process started that are still registered."""
    with _LOCK:
        return sorted(_LIVE)


# ---------------------------------------------------------------------------------------------
# Execution contexts.
def _executor_factory(channel: grpc.Channel, default_num_clients: int = 0):
    stub = tff.framework.RemoteExecutorGrpcStub(channel)

    def stack_fn(cardinalities):
        if cardinalities.get(tff.CLIENTS) is None:
            cardinalities[tff.CLIENTS] = default_num_clients
        executor = tff.framework.RemoteExecutor(stub)
        executor.set_cardinalities(cardinalities)
        return executor

    return tff.framework.ResourceManagingExecutorFactory(executor_stack_fn=stack_fn)


def _compile(comp):
    """tff.backends.native's compiler, after the secure sums are replaced by plain ones (as
    `tff.backends.test`'s contexts do): a simulation runs secure aggregation without cryptography;
    what an observer may read is enforced by the code that observes."""
    from tensorflow_federated.python.core.backends.native import compiler
    from tensorflow_federated.python.core.backends.test import compiler as test_compiler

    return compiler.desugar_and_transform_to_native(test_compiler.replace_secure_intrinsics_with_bodies(comp))


def _context_kwargs():
    # The argument transforms of tff.backends.native's local C++ context.
    from tensorflow_federated.python.core.environments.tensorflow_frontend import tensorflow_computation

    return dict(
        compiler_fn=_compile,
        transform_args=tensorflow_computation.transform_args,
        transform_result=tensorflow_computation.transform_result,
    )


def sync_context_for(channel: grpc.Channel):
    return tff.framework.SyncExecutionContext(executor_fn=_executor_factory(channel), **_context_kwargs())


def async_context_for(channel: grpc.Channel):
    return tff.framework.AsyncExecutionContext(executor_fn=_executor_factory(channel), **_context_kwargs())


class LocalRuntime:
    """A running local worker and the TFF context installed over it."""

    def __init__(self, worker: WorkerProcess):
        self.worker = worker
        self.context = sync_context_for(worker.wait_ready())

    def install(self) -> None:
        tff.framework.set_default_context(self.context)

    def restart(self) -> None:
        """Replaces a dead (or live) worker with a fresh one and reinstalls the context."""
        self.worker.stop()
        self.worker = WorkerProcess()
        self.context = sync_context_for(self.worker.wait_ready())
        self.install()

    def close(self) -> None:
        self.worker.stop()


_PROCESS_RUNTIME: LocalRuntime | None = None


def install_local_context() -> LocalRuntime:
    """Starts (once per process) a local worker we own and makes it TFF's default context."""
    global _PROCESS_RUNTIME
    if _PROCESS_RUNTIME is None or not _PROCESS_RUNTIME.worker.alive():
        _PROCESS_RUNTIME = LocalRuntime(WorkerProcess())
    _PROCESS_RUNTIME.install()
    return _PROCESS_RUNTIME


@contextlib.contextmanager
def local_execution_context() -> Iterator[LocalRuntime]:
    """Runs TFF computations on a fresh local worker that is stopped when the block ends; the
    previous default context is reinstalled then (it is not left pointing at a stopped worker)."""
    previous = tff.framework.get_context_stack().current
    runtime = LocalRuntime(WorkerProcess())
    runtime.install()
    try:
        yield runtime
    finally:
        runtime.close()
        tff.framework.set_default_context(previous)


def parse_addresses(spec: str) -> list[str]:
    """'host:port,host:port' -> list; raises ValueError naming the bad entry."""
    addresses = [a.strip() for a in spec.split(",") if a.strip()]
    if not addresses:
        raise ValueError(f"--workers={spec!r}: expected host:port[,host:port...]")
    for address in addresses:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"--workers entry {address!r}: expected host:port with a port in 1..65535")
    return addresses


_THIS_HOST = ("localhost", "127.0.0.1", "[::1]", "::1")


def all_on_this_host(addresses: Sequence[str]) -> bool:
    """True if every 'host:port' names this machine by a loopback name (they see its files)."""
    return all(a.rpartition(":")[0].lower() in _THIS_HOST for a in addresses)


def _keep_clients_in_order() -> None:
    """Works around TFF 0.87's mergeable context returning CLIENTS-placed results out of order.

    `mergeable_comp_execution_context._invoke_after_merge_in_async_pool` concatenates the
    subrounds' CLIENTS-placed results in the order the subrounds finish, not in the clients'
    order (a client-state process then gets its states back permuted). This replacement runs the
    same subrounds and concatenates them in order. Idempotent.
    """
    import asyncio

    from tensorflow_federated.python.core.impl.execution_contexts import mergeable_comp_execution_context as mergeable

    if getattr(mergeable._invoke_after_merge_in_async_pool, "keeps_order", False):
        return

    async def invoke_after_merge_in_order(comp, merge_result, arg_list, execution_contexts):
        def task_fn(indexed_arg, context):
            index, arg = indexed_arg

            async def run():
                return index, await mergeable._compute_after_merged(comp, arg, merge_result, context)

            return asyncio.create_task(run())

        async def collect(results, indexed_result, context):
            del context
            return (*results, indexed_result)

        results, _ = await mergeable._run_in_async_context_pool(task_fn, list(enumerate(arg_list)), execution_contexts, (), collect)
        return [result for _, result in sorted(results, key=lambda r: r[0])]

    invoke_after_merge_in_order.keeps_order = True
    mergeable._invoke_after_merge_in_async_pool = invoke_after_merge_in_order


def mergeable_context(addresses: Sequence[str], timeout_s: float = 60.0):
    """The TFF mergeable-computation context over the workers at `addresses` (not installed);
    see `remote_execution_context`. Keep one for a whole run: a new one compiles and loads every
    computation again."""
    contexts = [async_context_for(wait_for_address(a, timeout_s)) for a in addresses]
    _keep_clients_in_order()
    return tff.backends.native.create_mergeable_comp_execution_context(contexts)


@contextlib.contextmanager
def remote_execution_context(addresses: Sequence[str], timeout_s: float = 60.0) -> Iterator[None]:
    """Splits each computation's clients over the TFF workers at `addresses`.

    Uses TFF's mergeable-computation context (`tff.backends.native.
    set_mergeable_comp_execution_context`): each call's clients are dealt to the workers, every
    worker runs its share and its partial aggregates, and this process merges them. Aggregations
    whose result feeds another aggregation in the same call cannot be split (TFF raises). The
    workers are not ours: they run until stopped where they were started. They speak
    unauthenticated, unencrypted gRPC: private networks only. The previous default context is
    reinstalled when the block ends. CLIENTS-placed results come back in the clients' order
    (`_keep_clients_in_order`); partial sums are merged in the order subrounds finish, so sums
    agree with a single worker's to float rounding, not bit for bit.
    """
    context = mergeable_context(addresses, timeout_s)
    previous = tff.framework.get_context_stack().current
    tff.framework.set_default_context(context)
    try:
        yield
    finally:
        tff.framework.set_default_context(previous)
