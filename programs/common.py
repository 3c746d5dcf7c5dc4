"""Shared plumbing for the absl program binaries: flag validation and clean failures.

Every check names the flag, the value and what was expected, prints one line to stderr and exits
with status 2 (absl's convention for usage errors).
"""

from __future__ import annotations

import os
import sys


class UsageError(SystemExit):
    pass


def fail(message: str, code: int = 2) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise UsageError(code)


def require(condition, flag: str, value, expected: str) -> None:
    """Exits with status 2 and 'error: --flag=value: expected ...' unless `condition` holds."""
    if not condition:
        fail(f"--{flag}={value!r}: expected {expected}")


def reject_extra_args(argv) -> None:
    if len(argv) > 1:
        fail(f"unexpected positional arguments {argv[1:]!r}; every option is a --flag")


def require_writable_dir(path: str, flag: str) -> None:
    """Creates `path` if needed; exits with status 2 if it cannot be created or written."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        fail(f"--{flag}={path!r}: cannot create the folder ({exc.strerror})")
    if not os.path.isdir(path) or not os.access(path, os.W_OK | os.X_OK):
        fail(f"--{flag}={path!r}: expected a writable folder")
