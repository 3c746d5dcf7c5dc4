"""Execution contexts and the lifecycle of the TFF worker processes they run on."""

from tff_radiomap.runtime.workers import (
    LocalRuntime,
    WorkerProcess,
    all_on_this_host,
    install_local_context,
    live_worker_pids,
    local_execution_context,
    parse_addresses,
    remote_execution_context,
    stop_all_workers,
)
