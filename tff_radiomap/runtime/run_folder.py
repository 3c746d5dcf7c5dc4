"""A run's folder on disk: atomic JSON files, the metrics CSV cut back on resume, `--overwrite`.

A run may be killed (SIGKILL, a lost machine) at any instruction. What it leaves must let the same
command resume without losing or duplicating a round:
  - JSON and .npz files (config, summary, final results, checkpoints) are written to a temporary file and renamed, so a
    reader finds the old content or the new one, never half of it;
  - the metrics CSV gets one row per finished round, appended; on resume `truncate_csv` keeps the
    rows up to the last saved round, in order, and drops everything after it (rows of rounds that
    ran after the last checkpoint, and a row cut short by the kill);
  - `clear` removes a run's own files (and nothing else) when the user asks for `--overwrite`.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from collections.abc import Iterable, Mapping

import numpy as np

from tff_radiomap.runtime.atomic import atomic_write


class RunFolderConflict(ValueError):
    """The folder holds a run with another configuration (resume refused, `--overwrite` needed)."""


def check_config(record: Mapping, run_dir: str, *, defaults: Mapping | None = None, ignored: Iterable[str] = (), error=RunFolderConflict) -> bool:
    """True if `run_dir`/config.json holds the configuration `record` (a JSON-able dict); False if
    there is no config.json; raises `error` naming every differing field otherwise.

    A field missing from the saved file counts as `defaults[field]` (the value runs had before the
    field existed); `ignored` fields (those this run does not read) are not compared.
    """
    path = os.path.join(run_dir, "config.json")
    if not os.path.exists(path):
        return False
    try:
        with open(path) as f:
            found = json.load(f)
    except (OSError, ValueError) as exc:
        raise error(f"{path} is unreadable ({exc})") from exc
    wanted = json.loads(json.dumps(dict(record), default=str))
    defaults = json.loads(json.dumps(dict(defaults or {}), default=str))
    saved = lambda k: found.get(k, defaults.get(k))  # noqa: E731
    differing = sorted(k for k in (set(found) | set(wanted)) - set(ignored) if saved(k) != wanted.get(k))
    if differing:
        detail = ", ".join(f"{k}: saved {saved(k)!r}, now {wanted.get(k)!r}" for k in differing)
        raise error(f"{run_dir} holds a run with another configuration ({detail})")
    return True


def round_arrays_path(run_dir: str, name: str, round_num: int) -> str:
    return os.path.join(run_dir, name, f"round_{round_num}.npz")


def save_round_arrays(run_dir: str, name: str, round_num: int, arrays: Mapping, keep: int = 3) -> None:
    """`arrays` saved with round `round_num` in `run_dir`/`name`/ (atomically); the `keep` newest
    rounds' files stay, as the program states do."""
    path = round_arrays_path(run_dir, name, round_num)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_npz(path, arrays)
    for old in range(round_num - keep, 0, -1):
        if not os.path.exists(round_arrays_path(run_dir, name, old)):
            break
        os.remove(round_arrays_path(run_dir, name, old))


def load_round_arrays(run_dir: str, name: str, round_num: int) -> dict | None:
    """The arrays `save_round_arrays` wrote with round `round_num`, or None if there are none."""
    path = round_arrays_path(run_dir, name, round_num)
    if not os.path.exists(path):
        return None
    with np.load(path) as saved:
        return {k: saved[k] for k in saved.files}


def write_json(path: str, content) -> None:
    """Writes `content` as JSON to `path` atomically (`atomic.atomic_write`)."""
    with atomic_write(path) as f:
        json.dump(content, f, indent=2, sort_keys=True, default=str)


def write_npz(path: str, arrays: dict) -> None:
    """Writes `arrays` (name -> array) as an .npz file at `path` atomically (`atomic.atomic_write`)."""
    with atomic_write(path, "wb") as f:
        np.savez(f, **arrays)


def truncate_csv(path: str, last: int, key: str = "round", fields: list[str] | None = None) -> list[dict]:
    """Keeps the rows of `path` whose `key` runs first, first + 1, ... up to `last`; returns them.

    Rows after `last`, a row cut short (fewer fields than the header), and anything after the first
    row that breaks the sequence go. `fields` (optional) is the header to write; by default the
    file's own. A missing file becomes one holding only the header (when `fields` is given).
    """
    header, kept = list(fields or []), []
    if os.path.exists(path):
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            header = list(fields or reader.fieldnames or [])
            previous = None
            for row in reader:
                if None in row.values() or None in row or not str(row.get(key, "")).lstrip("-").isdigit():
                    break
                number = int(row[key])
                if number > last or (previous is not None and number != previous + 1):
                    break
                kept.append(row)
                previous = number
    if not header:
        return kept
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=header, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(kept)
    with atomic_write(path, newline="") as f:
        f.write(buf.getvalue())
    return kept


def clear(run_dir: str, names: Iterable[str]) -> list[str]:
    """Removes the files and folders `names` (a run's own outputs) from `run_dir`; returns them.

    Only the listed entries go: a results folder given by mistake (`--output_dir=.`) loses
    nothing else.
    """
    removed = []
    for name in names:
        path = os.path.join(run_dir, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.remove(path)
        else:
            continue
        removed.append(name)
    return removed
