"""TFF's own local context is released at exit: no `ServiceManager.__del__` traceback, no worker left."""

import os
import signal
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import psutil
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A process that ends with the context `import tensorflow_federated` installs still installed,
# having run a computation on it (its ServiceManager then runs a worker) or not. The weak
# reference's callback reports when the manager is finalized and whether its module was still
# intact then; it sits on `os`, a module cleared last at teardown. Without the exit hook, the
# unused manager outlives its module's globals and its `__del__` prints "'NoneType' object has no
# attribute 'Popen'", and the used one's worker is left running, holding the program's stdout.
_CHILD = textwrap.dedent(
    """
    import os, sys, weakref
    import numpy as np
    import tff_radiomap  # As every program, bench script and test session of this package does.
    import tensorflow_federated as tff
    from tensorflow_federated.python.core.impl.executor_stacks import executor_factory

    def run_a_computation():
        @tff.tensorflow.computation(np.float32)
        def add_one(x):
            return x + 1

        assert add_one(1.0) == 2.0

    if sys.argv[1] == "used":
        run_a_computation()
    context = tff.framework.get_context_stack().current
    cells = context._executor_factory._executor_stack_fn.__closure__
    (manager,) = [c.cell_contents for c in cells if type(c.cell_contents).__name__ == "ServiceManager"]
    print(manager._process.pid if manager._process else 0, flush=True)

    def finalized(ref, write=os.write, module=executor_factory.__dict__):
        write(2, b"manager finalized, its module intact: %d\\n" % (module.get("subprocess") is not None))

    os._witness = weakref.ref(manager, finalized)
    del context, manager, cells
    """
)


def _gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.parametrize("use", ["unused", "used"])
def test_a_program_ending_on_tffs_own_context_prints_no_traceback_and_leaves_no_worker(use):
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, use],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    worker = int(child.stdout.readline() or 0)
    try:
        # TFF's worker inherits the child's stdout: the pipe closes only once that worker is gone too.
        _, err = child.communicate(timeout=120)
    finally:
        for pid in (child.pid, worker):
            if pid and not _gone(pid):
                os.kill(pid, signal.SIGKILL)
    assert child.returncode == 0, err[-3000:]
    assert "manager finalized, its module intact: 1" in err, err[-3000:]
    assert "Exception ignored" not in err and "Traceback" not in err, err[-3000:]
    assert (worker > 0) == (use == "used") and (not worker or _gone(worker))


def test_release_stops_the_worker_of_a_tff_local_context_and_drops_its_manager():
    import tensorflow_federated as tff

    from tff_radiomap.runtime import tff_exit

    context = tff.backends.native.create_sync_local_cpp_execution_context()
    (cell,) = tff_exit._manager_cells(context)
    manager = weakref.ref(cell.cell_contents)

    @tff.tensorflow.computation(np.float32)
    def add_one(x):
        return x + 1

    with tff.framework.get_context_stack().install(context):
        assert add_one(1.0) == 2.0
        worker = manager()._process
        assert worker.poll() is None
        assert tff_exit.release_tff_local_contexts([context]) == [worker.pid]
    assert worker.poll() is not None  # Stopped, and reaped by the release.
    assert manager() is None and cell.cell_contents is None
    assert tff_exit.release_tff_local_contexts([context]) == []  # Nothing left to release.
