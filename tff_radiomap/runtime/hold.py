"""A test hook: a program held at a named point until the test lets it go.

With the environment variable TFF_RADIOMAP_HOLD set to "<point>=<path>", a program reaching
`hold(point)` creates the file <path> and waits while it exists: the test, which waited for the
file, kills the program there (a kill at a known point, not a race with a program that may have
finished) or does what it wants to the running program (kill its TFF worker) and deletes the file
to let it go on. Without the variable, or at another point, `hold` returns at once.
"""

from __future__ import annotations

import os
import time

ENV = "TFF_RADIOMAP_HOLD"
MAX_HOLD_S = 900.0  # A test that died without letting go does not leave the program waiting forever.


def hold(point: str) -> None:
    """Waits at `point` if TFF_RADIOMAP_HOLD names it (module docstring)."""
    name, _, path = os.environ.get(ENV, "").partition("=")
    if not path or name != point:
        return
    with open(path, "w"):
        pass
    deadline = time.monotonic() + MAX_HOLD_S
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)


def env(point: str, path) -> dict:
    """The environment (this process's plus the variable) of a child to be held at `point`."""
    return {**os.environ, ENV: f"{point}={path}"}
