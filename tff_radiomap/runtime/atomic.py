"""Files written whole or not at all: a temporary file in the target's folder, then a rename.

Every write-then-rename of the package goes through `atomic_write`. The temporary's name is the
target's, the writer's pid and a random token (`<name>.<pid>.<token>.tmp`), created exclusively:
writers racing on one target (two runs of a front completing the same twin or data set, two
processes caching the same twin positions) each write a whole file of their own, and the last
rename wins. A reader sees the old file or the new one, never a part. `is_stale_temporary` tells
a temporary whose writer died (a kill between write and rename) from a live writer's.
"""

from __future__ import annotations

import contextlib
import os
import uuid

SUFFIX = ".tmp"


def temporary_name(path: str) -> str:
    """A new temporary's path for `path`, in the same folder (so that the rename stays on one file system)."""
    return f"{path}.{os.getpid()}.{uuid.uuid4().hex[:12]}{SUFFIX}"


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "w", newline: str | None = None):
    """Yields a file object open (`mode`: 'w' or 'wb') on a new temporary file beside `path`; when
    the block ends, the file is closed and renamed onto `path` (`os.replace`). If the block raises,
    the temporary is removed and `path` is left as it was. The temporary is created exclusively
    with the permissions `open` would give it."""
    if mode not in ("w", "wb"):
        raise ValueError(f"mode={mode!r}: expected 'w' or 'wb'")
    while True:
        tmp = temporary_name(path)
        try:
            fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
            break
        except FileExistsError:  # The token repeated: draw another.
            continue
    try:
        with os.fdopen(fd, mode) if "b" in mode else os.fdopen(fd, mode, newline=newline) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def is_stale_temporary(name: str) -> bool:
    """Whether the file `name` is an `atomic_write` temporary (or one of the earlier PNG temporaries,
    `<name>.<pid>.tmp.png` and `<name>.tmp.png`) whose writer is no longer running; a live
    writer's temporary, and any other file, is not."""
    if name.endswith(SUFFIX) and name.count(".") >= 3:
        pid = name[: -len(SUFFIX)].rsplit(".", 2)[-2]
    elif name.endswith(".tmp.png"):  # Written before `atomic_write`: the pid last, or none.
        pid = name[: -len(".tmp.png")].rsplit(".", 1)[-1]
        if not pid.isdigit():
            return True
    else:
        return False
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
