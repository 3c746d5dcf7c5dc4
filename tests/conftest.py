"""Test-session plumbing: thread pools sized for the test processes, the slowest files handed out
first, and one TFF worker we own for the whole session, stopped at the end."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from tff_radiomap.runtime import threads  # noqa: E402  (imports neither numpy nor TensorFlow)

# With pytest-xdist's N processes, each (and every program and TFF worker it starts, which inherit
# the environment) gets cores // N threads of TensorFlow's intra-op pool and of BLAS, set before
# either is imported: N pools as large as the machine spin on each other's descheduled threads
# (bench/RESULTS.md, "Threads per run"). A variable the user set is left alone.
os.environ.update(threads.thread_limits(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))

import pytest  # noqa: E402

# The files that take longest (whole runs, program start-ups; `--durations` of a full run), longest
# first. pytest-xdist (--dist loadfile --no-loadscope-reorder, see the Makefile) hands files out in
# collection order: these go first, so that none of them starts while the other process is nearly
# done. The rest keep their order.
SLOW_FILES = (
    "tests/experiments/test_privacy_radiomap.py",
    "tests/experiments/test_deployment_observer.py",
    "tests/experiments/test_privacy_radiomap_client_scope.py",
    "tests/programs/test_remnet_programs.py",
    "tests/experiments/test_privacy_radiomap_adaptive.py",
    "tests/experiments/test_privacy_radiomap_subspace.py",
    "tests/programs/test_privacy_front_program.py",
    "tests/programs/test_privacy_radiomap.py",
    "tests/runtime/test_multi_worker.py",
    "tests/learning/test_fused_adam.py",
    "tests/experiments/test_privacy_radiomap_aggregate_dp.py",
    "tests/learning/test_tensor_client_data.py",
    "tests/privacy/test_allocator.py",
    "tests/programs/test_leakage_map.py",
    "tests/programs/test_flag_validation.py",
    "tests/programs/test_demo.py",
    "tests/runtime/test_workers.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.fixture(scope="session")
def tff_runtime():
    """A local TFF execution context over a worker_binary this session started and will stop."""
    from tff_radiomap.runtime import workers

    runtime = workers.install_local_context()
    yield runtime
    runtime.close()


def pytest_sessionfinish(session, exitstatus):
    # Whatever a test started (extra workers, a failed fixture), nothing outlives the session.
    # A process that never imported the module started none (pytest-xdist's controller, say):
    # it need not import TensorFlow to find that out.
    workers = sys.modules.get("tff_radiomap.runtime.workers")
    if workers is not None:
        workers.stop_all_workers()
