"""The privacy-utility front of paper 000's defenses: each method over a grid of noise multipliers.

`run_front(base_config, methods, noise_multipliers, seeds, output_dir, run_fn)` runs (or resumes)
one privacy experiment per (method, nu, seed) in `output_dir/<method>_nu<nu>_s<seed>/`; a method
without noise (`NOISE_FREE`) runs once per seed, in `output_dir/<method>_s<seed>/`, with nu = 0.
`front_report.write_results` then writes the front's tables and figures. `parse_settings` reads
the `--set` overrides of the programs. Running the runs reuses Table I's (`privacy_table.run_all`).
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Mapping

from tff_radiomap.experiments import privacy_table

NOISE_FREE = ("none", "clip", "fedsgd")  # Their runs do not depend on nu: one per seed.


def cells(methods, noise_multipliers) -> list[tuple[str, float]]:
    """The (method, nu) rows of the front: nu = 0 alone for a method without noise.
    `noise_multipliers`: one grid for every method, or {method: its grid}."""
    rows = []
    for method in methods:
        grid_of = noise_multipliers[method] if isinstance(noise_multipliers, Mapping) else noise_multipliers
        rows += [(method, 0.0)] if method in NOISE_FREE else [(method, float(nu)) for nu in grid_of]
    return rows


def run_name(method: str, noise_multiplier: float, seed: int) -> str:
    if method in NOISE_FREE:
        return f"{method}_s{seed}"
    return f"{method}_nu{noise_multiplier:.12g}_s{seed}"


def grid(base_config, methods, noise_multipliers, seeds, output_dir: str) -> list[tuple[object, str]]:
    """(config, run folder) of every run of the front, seed by seed (an interrupted sequential
    front has every row for its first seeds)."""
    return [
        (dataclasses.replace(base_config, defense=m, noise_multiplier=nu, seed=s), os.path.join(output_dir, run_name(m, nu, s)))
        for s in seeds
        for m, nu in cells(methods, noise_multipliers)
    ]


def run_front(base_config, methods, noise_multipliers, seeds, output_dir: str, run_fn, progress: bool = True, jobs: int = 1, skip=None) -> None:
    """Runs every run of the front through `run_fn(config, run_dir)` (the front's tables and figures
    are `front_report.write_results`'s).

    `run_fn` resumes a partial run and returns a finished one as it is (as `privacy_radiomap.run`
    does). `skip(config, run_dir)`: true for a run not to hand to `run_fn` at all (a finished one,
    `privacy_radiomap.holds_finished_run`: a child process per finished run costs a start-up), or
    raises for a folder that must not be used. With `jobs` > 1 the runs go as Table I's do
    (`privacy_table.run_all`: costliest first; RunsFailedError names every failed one after the
    others finish).
    """
    os.makedirs(output_dir, exist_ok=True)
    runs = [(c, d) for c, d in grid(base_config, methods, noise_multipliers, seeds, output_dir) if skip is None or not skip(c, d)]
    privacy_table.run_all(runs, run_fn, jobs, progress)


def parse_settings(config_class, items) -> dict:
    """{field: value} from 'FIELD=VALUE' strings, each value parsed by the field's type.

    An item without '=' continues the previous value (a tuple field, comma-separated, given in a
    comma-separated list: 'basis_positions=1,2,3,basis_every=5'). Types: bool (true/false, 1/0),
    int, float, str, tuples and lists of those, `X | None` ('none'). Raises ValueError naming an
    unknown field or a value its type does not parse.
    """
    hints = typing.get_type_hints(config_class)
    fields = [f.name for f in dataclasses.fields(config_class)]
    pairs: list[list[str]] = []
    for item in items:
        if "=" in item:
            pairs.append(item.split("=", 1))
        elif pairs:
            pairs[-1][1] += "," + item
        else:
            raise ValueError(f"{item!r}: expected FIELD=VALUE")
    settings = {}
    for name, text in pairs:
        name = name.strip()
        if name not in fields:
            raise ValueError(f"unknown field {name!r}: expected fields of {config_class.__name__}: {', '.join(fields)}")
        try:
            settings[name] = _parse(hints[name], text.strip())
        except ValueError as exc:
            raise ValueError(f"{name}={text!r}: expected {_type_name(hints[name])} ({exc})") from None
    return settings


def _parse(kind, text: str):
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return None if text.lower() == "none" else _parse(rest[0] if len(rest) == 1 else typing.Union[tuple(rest)], text)
    if origin in (tuple, list):
        items = [t.strip() for t in text.split(",")] if text else []
        if origin is tuple and args and (len(args) != 2 or args[1] is not Ellipsis):
            if len(items) != len(args):
                raise ValueError(f"{len(items)} values for {len(args)}")
            return tuple(_parse(a, t) for a, t in zip(args, items))
        element = args[0] if args else str
        return origin(_parse(element, t) for t in items)
    if kind is bool:
        if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError("not a boolean")
        return text.lower() in ("true", "1", "yes")
    if kind in (int, float, str):
        return kind(text)
    raise ValueError(f"a {kind} field cannot be set from text")


def _type_name(kind) -> str:
    return getattr(kind, "__name__", None) if typing.get_origin(kind) is None else str(kind).replace("typing.", "")


def finished(run_dir: str) -> bool:
    return all(os.path.exists(os.path.join(run_dir, f)) for f in ("summary.json", "metrics.csv"))
