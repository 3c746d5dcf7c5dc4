"""Figures over seeds, and the Markdown tables that show them.

One convention for every table of the package (Table I, the privacy front, the EPFL-REMNet
tables): a figure over seeds is the mean and the sample standard deviation (ddof = 1) of its
finite per-seed values, shown as `mean +- std` in one cell ('n/a' for the std of a single seed,
which says nothing about the spread), and every table says so under it (`std_note`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

PLUS_MINUS = "+-"


def mean_std(values) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof = 1) of the finite `values`: the std is nan for
    fewer than two, the mean nan for none."""
    values = np.asarray([v for v in values if v is not None and np.isfinite(v)], np.float64)
    if not len(values):
        return float("nan"), float("nan")
    return float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else float("nan")


def std_note(seeds: int | None = None) -> str:
    """The sentence every table with a +- carries."""
    over = f"over {seeds} seed{'s' if seeds != 1 else ''}" if seeds is not None else "over the seeds of each row"
    return f"{PLUS_MINUS} is the sample standard deviation (ddof = 1) {over}; n/a where fewer than two seeds have a value."


def plus_minus(mean: str, std: float, fmt: str | Callable[[float], str] = ".2f") -> str:
    """`mean +- std` for a table cell: `mean` already formatted, `std` by `fmt` (a format spec or a
    function); a nan std reads 'n/a'."""
    if std is None or not np.isfinite(std):
        return f"{mean} {PLUS_MINUS} n/a"
    return f"{mean} {PLUS_MINUS} {fmt(std) if callable(fmt) else format(std, fmt)}"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]], title: str | None = None, notes: Sequence[str] = ()) -> str:
    """A Markdown table (`title` line above it, each of `notes` a paragraph under it), cells as given."""
    lines = [title, ""] if title else []
    lines += ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    for note in notes:
        lines += ["", note]
    return "\n".join(lines) + "\n"
