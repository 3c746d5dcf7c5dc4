"""Several TFF workers: `programs.start_worker`, and a run whose clients are split across two
loopback workers (TFF's mergeable-computation context) against the single-worker run."""

import csv
import os
import re
import signal
import subprocess
import sys

import numpy as np
import portpicker
import psutil
import pytest

from tff_radiomap import runtime
from tff_radiomap.data import synthetic
from tff_radiomap.experiments import privacy_radiomap as experiment

_ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


def _gone(pid: int, wait_s: float = 20.0) -> bool:
    try:
        psutil.Process(pid).wait(timeout=wait_s)
    except psutil.NoSuchProcess:
        return True
    except psutil.TimeoutExpired:
        return False
    return True


@pytest.fixture(scope="module")
def started_workers():
    """Two `python -m programs.start_worker` programs: (program, port, worker pid) each."""
    started = []
    try:
        for _ in range(2):  # Both start before either is waited for: their start-ups overlap.
            port = portpicker.pick_unused_port()
            program = subprocess.Popen(
                [sys.executable, "-m", "programs.start_worker", f"--port={port}"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=_ENV,
            )
            started.append((program, port, None))
        for i, (program, port, _) in enumerate(started):
            line = program.stdout.readline()
            match = re.search(r"TFF worker pid (\d+) listening on \S+:(\d+)", line)
            assert match and int(match.group(2)) == port, line
            started[i] = (program, port, int(match.group(1)))
        yield started
    finally:
        for program, _, _ in started:
            if program.poll() is None:
                program.send_signal(signal.SIGTERM)
        for program, _, _ in started:
            program.wait(timeout=60)


def _rows(output_dir):
    with open(os.path.join(output_dir, "metrics.csv")) as f:
        return list(csv.DictReader(f))


def test_a_run_split_across_two_loopback_workers_gives_the_single_worker_results(tff_runtime, started_workers, tmp_path):
    spec = synthetic.DatasetSpec(maps=8, transmitters=3, size=64, seed=5)
    data_root = synthetic.generate_dataset(str(tmp_path / "rms"), spec, progress=False)
    # 6 training maps over 3 clients, all 3 a round (split 2 + 1 across the workers); stage 1, then 2.
    config = experiment.ExperimentConfig(
        data_root=data_root,
        resolution=32,
        width=0.25,
        rounds=2,
        stage1_rounds=1,
        num_clients=3,
        clients_per_round=3,
        batch_size=4,
        local_epochs=1,
        client_learning_rate=3e-3,
    )
    single = experiment.run(config, str(tmp_path / "single"), progress=False)
    addresses = [f"localhost:{port}" for _, port, _ in started_workers]
    with runtime.remote_execution_context(addresses):
        # Samples sent every round, as to workers on other machines (the single run reads files).
        split = experiment.run(config, str(tmp_path / "split"), progress=False, data_by_reference=False)
    rows_single, rows_split = _rows(tmp_path / "single"), _rows(tmp_path / "split")
    assert [r["phase"] for r in rows_split] == [r["phase"] for r in rows_single] == ["1", "2"]
    for a, b in zip(rows_single, rows_split):
        assert a["num_examples"] == b["num_examples"]
        np.testing.assert_allclose(float(b["train_loss"]), float(a["train_loss"]), rtol=1e-5)
        np.testing.assert_allclose(float(b["val_mse"]), float(a["val_mse"]), rtol=1e-5)
    np.testing.assert_allclose(split["final_val_mse"], single["final_val_mse"], rtol=1e-5)
    # The block's end reinstalled the local context.
    assert experiment.run(config, str(tmp_path / "single"), progress=False) == single


def test_client_states_come_back_in_the_clients_order(tff_runtime, started_workers, tmp_path):
    """EPFL-REMNet keeps a state per client: split 2 + 1, the states must return to their owners
    (TFF 0.87 alone returns them in the order the subrounds finish)."""
    from baselines import remnet_methods
    from tests.rem_tiny import tiny_config, tiny_scenario
    from tff_radiomap.learning import rem_runner

    scenario, run = tiny_scenario(), rem_runner.RunConfig(rounds=3, eval_every=1)
    method = remnet_methods.method("epfl_remnet", tiny_config(sync_period=2))
    single = rem_runner.run_experiment(str(tmp_path / "single"), scenario, method, run, log=lambda m: None)
    with runtime.remote_execution_context([f"localhost:{port}" for _, port, _ in started_workers]):
        split = rem_runner.run_experiment(str(tmp_path / "split"), scenario, method, run, log=lambda m: None)
    np.testing.assert_allclose(split["per_client_rmse"], single["per_client_rmse"], rtol=1e-5)
    assert split["cum_uplink_bytes"] == single["cum_uplink_bytes"]


@pytest.mark.parametrize("index, signum", [(0, signal.SIGTERM), (1, signal.SIGINT)])
def test_start_worker_stops_its_worker_when_signalled(started_workers, index, signum):
    program, _, pid = started_workers[index]
    assert psutil.pid_exists(pid)
    program.send_signal(signum)
    assert program.wait(timeout=60) == 0
    assert _gone(pid), f"worker {pid} survived start_worker ended by {signum}"
