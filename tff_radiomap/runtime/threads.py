"""Thread pools of concurrent child processes: the machine's cores shared out between them.

A child's numpy BLAS (OpenBLAS, or an OpenMP build) and TensorFlow intra-op pool (read by the
Python process and by the TFF worker it starts) default to one thread per core; several such
children at once spin on descheduled threads (bench/RESULTS.md, "Threads per run").
"""

from __future__ import annotations

import os

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_INTRAOP_THREADS")


def available_cores() -> int:
    """The cores this process may run on (its affinity mask where the platform has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def thread_limits(jobs: int, cores: int | None = None) -> dict:
    """Environment variables giving each of `jobs` concurrent children cores // jobs threads (at
    least 1); none for one job, and none that the user has set."""
    if jobs <= 1:
        return {}
    per_child = str(max(1, (cores or available_cores()) // jobs))
    return {name: per_child for name in THREAD_VARIABLES if name not in os.environ}
