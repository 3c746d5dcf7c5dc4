"""programs/console.py: TensorFlow's start-up noise held back, other stderr lines kept."""

import subprocess
import sys

from tests.programs import processes

SCRIPT = """
import os, sys
from programs import console
console.quiet_tensorflow_start()
print("level", os.environ["TF_CPP_MIN_LOG_LEVEL"])
with console._stderr_without(console.KNOWN_NOISE):
    os.write(2, b"E: Unable to register cuDNN factory: Attempting to register factory for plugin cuDNN when one\\n")
    os.write(2, b"E: a real C++ error\\n")
    print("a Python warning", file=sys.stderr)
"""


def _run(env):
    return subprocess.run([sys.executable, "-c", SCRIPT], cwd=processes.ROOT, capture_output=True, text=True, timeout=processes.TIMEOUT_S, env=env)


def test_start_up_noise_is_dropped_and_other_lines_kept():
    r = _run(processes.user_env())
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["level", "2"]
    assert r.stderr.splitlines() == ["E: a real C++ error", "a Python warning"]


def test_a_level_the_user_set_is_left_alone():
    r = _run({**processes.user_env(), "TF_CPP_MIN_LOG_LEVEL": "0"})
    assert r.returncode == 0 and r.stdout.split() == ["level", "0"]


def test_a_process_the_program_spawns_drops_the_noise_too():
    """The data generator's spawned workers inherit the level the program set; they must still
    drop the CUDA-registration lines that importing TensorFlow Federated prints (they reached a new
    user's console during `make demo`'s data generation). The variable is console.SET_BY_US."""
    env = {**processes.user_env(), "TF_CPP_MIN_LOG_LEVEL": "2", "TFF_RADIOMAP_QUIET_TF": "1"}
    r = subprocess.run(
        [sys.executable, "-c", "from programs import console; console.quiet_tensorflow_start(); import tensorflow_federated"],
        cwd=processes.ROOT,
        capture_output=True,
        text=True,
        timeout=processes.TIMEOUT_S,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Unable to register" not in r.stderr, r.stderr[-2000:]
