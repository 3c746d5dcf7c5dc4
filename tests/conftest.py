"""Test-session plumbing: one TFF worker we own for the whole session, stopped at the end."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest


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
