"""Execution contexts and the lifecycle of the TFF worker processes they run on.

The names below are `workers`'; that module (and with it TensorFlow) is imported on first use, so
that `import tff_radiomap`, which registers `tff_exit`'s exit hook, stays light.
"""

import importlib

_FROM_WORKERS = (
    "LocalRuntime",
    "WorkerProcess",
    "all_on_this_host",
    "install_local_context",
    "live_worker_pids",
    "local_execution_context",
    "parse_addresses",
    "remote_execution_context",
    "stop_all_workers",
)
__all__ = list(_FROM_WORKERS)


def __getattr__(name):
    if name in _FROM_WORKERS:
        return getattr(importlib.import_module(f"{__name__}.workers"), name)
    if name in ("nan_injection", "run_folder", "supervision", "threads", "tff_exit", "workers"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
