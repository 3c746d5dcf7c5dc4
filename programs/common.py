"""Shared plumbing for the absl program binaries: flag validation and clean failures.

Every check names the flag, the value and what was expected, prints one line to stderr and exits
with status 2 (absl's convention for usage errors).
"""

from __future__ import annotations

import os
import sys


FRESH_NOISE_HELP = (
    "Unseeded defense noise (the deployment setting): identical uploads get different noise; the run is then not "
    "reproducible and a resume is not bit-exact. Default: noise seeded from --seed (with the round and the update), "
    "which anyone who knows the seed can recompute."
)


class UsageError(SystemExit):
    pass


def fail(message: str, code: int = 2) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise UsageError(code)


def require(condition, flag: str, value, expected: str) -> None:
    """Exits with status 2 and 'error: --flag=value: expected ...' unless `condition` holds."""
    if not condition:
        fail(f"--{flag}={value!r}: expected {expected}")


def parse_flags(argv):
    """absl `flags_parser` for `app.run`: a flag that does not parse exits 2 with one line."""
    from absl import flags

    try:
        return flags.FLAGS(argv)
    except flags.Error as exc:
        fail(str(exc))


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


RADIOMAPSEER_FOLDERS = ("png/buildings_complete", "png/antennas", "gain/{simulation}")


def data_root(value: str | None, flag: str = "data_root", simulation: str = "DPM", default=None) -> str | None:
    """The absolute path of a RadioMapSeer-layout `--data_root`, or `default()` when the flag is unset.

    Exits with status 2 naming the flag unless `value` is a folder holding png/buildings_complete,
    png/antennas and gain/SIMULATION. Bad files inside are found by the loader (DataLayoutError).
    """
    if value is None:
        return default() if default is not None else None
    require(os.path.isdir(value), flag, value, "an existing folder in the RadioMapSeer layout (png/, gain/)")
    missing = [d.format(simulation=simulation) for d in RADIOMAPSEER_FOLDERS if not os.path.isdir(os.path.join(value, d.format(simulation=simulation)))]
    require(not missing, flag, value, f"a folder in the RadioMapSeer layout; it lacks {', '.join(m + '/' for m in missing)}")
    return os.path.abspath(value)


PRESET_HELP = "A named set-up of the runs (privacy_radiomap.PRESETS: its data set and settings) under --rounds and --set."


def preset_fields(preset_name: str, rounds: int | None, settings: dict) -> dict:
    """The ExperimentConfig fields of preset `preset_name` for a table or front of runs: its fields,
    --rounds (None: the preset's) and stage 1's rounds (--set's, else the preset's share of the
    rounds); --set's fields go over them."""
    from tff_radiomap.experiments import privacy_radiomap

    preset = privacy_radiomap.PRESETS[preset_name]
    fields = dict(preset.fields)
    fields["rounds"] = rounds if rounds is not None else fields.get("rounds", privacy_radiomap.ExperimentConfig(data_root="").rounds)
    fields["stage1_rounds"] = settings.get("stage1_rounds", preset.stage1_rounds(fields["rounds"]))
    return fields


def config_settings(items: list[str], own_flag: dict) -> dict:
    """--set's {field: value} of privacy_radiomap.ExperimentConfig (`privacy_front.parse_settings`);
    exit 2 naming --set for an unknown field, a value its type does not parse, or a field in
    `own_flag` (field -> the flag that sets it). A folder given relative to here becomes absolute,
    so that it means the same in child processes and on resume."""
    from tff_radiomap.experiments import privacy_front, privacy_radiomap

    text = ",".join(items)
    try:
        settings = privacy_front.parse_settings(privacy_radiomap.ExperimentConfig, items)
    except ValueError as exc:
        fail(f"--set={text!r}: {exc}")
    for name in settings:
        require(name not in own_flag, "set", text, f"no {name}: --{own_flag.get(name)} sets it")
    return {k: os.path.abspath(v) if k.endswith("_root") and isinstance(v, str) and v else v for k, v in settings.items()}


def config_error(exc: ValueError, settings: dict, set_items: list[str], flag_of_field: dict | None = None) -> None:
    """Exit 2 for a configuration's ValueError ("field=value: expected ..."): naming --set when the
    field came from it, else the field's flag (`flag_of_field`, default: the same name)."""
    field, _, rest = str(exc).partition("=")
    if field in settings or not rest:
        fail(f"--set={','.join(set_items)!r}: {exc}" if settings else str(exc))
    flag = (flag_of_field or {}).get(field, field)
    from absl import flags

    value = flags.FLAGS[flag].value if flag in flags.FLAGS else None
    if isinstance(value, list):  # A list flag is named as typed ('a,b'), not as the field's tuple.
        fail(f"--{flag}={','.join(value)!r}: {rest.partition(': ')[2]}")
    fail(f"--{flag}={rest}")


def refuse_other_run(flag: str, path: str, exc: Exception) -> None:
    """Exits with status 2: the folder of `--flag` holds a run with another configuration."""
    fail(f"--{flag}={path!r}: {exc}; pass --overwrite to delete its results and start afresh, or choose another --{flag}")


def supervised(fn, runtime):
    """`fn()` with the TFF worker restarted (and the run resumed) if it dies; exit 1 if it keeps dying."""
    from tff_radiomap.runtime import supervision

    try:
        return supervision.run_with_restarts(fn, runtime)
    except supervision.WorkerLost as exc:
        fail(f"{exc}. The results of every finished round are saved; run the same command again to resume.", code=1)


def worker_addresses(spec: str, flag: str = "workers") -> list[str]:
    """The 'host:port,...' of --workers as a list ([] when empty); exit 2 naming a bad entry."""
    if not spec:
        return []
    from tff_radiomap.runtime import workers

    try:
        return workers.parse_addresses(spec)
    except ValueError as exc:
        fail(f"--{flag}={spec!r}: {exc}")


def run_federated(fn, addresses: list[str], flag: str = "workers"):
    """`fn()` on a local TFF worker this program starts and stops (restarted if it dies), or, with
    `addresses`, with each round's clients split across those TFF workers (started elsewhere with
    `python -m programs.start_worker`; not restarted here). Exit 1 if one does not answer."""
    from tff_radiomap import runtime

    if not addresses:
        return supervised(fn, runtime.install_local_context())
    context = runtime.remote_execution_context(addresses)
    try:
        context.__enter__()
    except (TimeoutError, RuntimeError) as exc:
        fail(f"--{flag}={','.join(addresses)!r}: {exc}", code=1)
    try:
        return fn()
    finally:
        context.__exit__(None, None, None)


def privacy_runner(child_runs, child_command, concurrent: bool, overwrite: bool, jobs: int = 1, stop_after_round: int | None = None):
    """(children, local runtime, run_fn) for a table or front of privacy runs: with `concurrent`,
    each run is a child process (`child_runs(child_command, jobs)`, a `privacy_table.ChildRuns`,
    stopped on SIGTERM and SIGHUP too) and there is no local runtime; else the runs go one after another in
    this process on a local TFF runtime, each folder cleared on its first call if `overwrite`, each
    run stopped after round `stop_after_round` if given (`privacy_radiomap.run`)."""
    import functools

    from tff_radiomap import runtime
    from tff_radiomap.experiments import privacy_radiomap, privacy_table

    if concurrent:
        children = child_runs(child_command, jobs)
        privacy_table.ChildRuns.exit_on_signals()
        return children, None, children
    run_fn = privacy_table.overwrite_once(functools.partial(privacy_radiomap.run, progress=True, stop_after_round=stop_after_round), overwrite)
    return None, runtime.install_local_context(), run_fn


def run_privacy_runs(fn, children, local, root: str, output_dir: str):
    """Runs `fn` (a table or front of privacy runs) and turns its failures into exits: a folder of
    another run, bad data or a data set too small for the attack exit 2 naming it, failed runs exit
    1 naming each. With `children` (a `privacy_table.ChildRuns`) the running children are stopped on
    the way out (their finished rounds are saved); else `fn` runs supervised on the `local` runtime."""
    from tff_radiomap.data import radiomapseer
    from tff_radiomap.experiments import privacy_radiomap, privacy_table

    try:
        return fn() if children else supervised(fn, local)
    except privacy_radiomap.ConfigMismatchError as exc:
        refuse_other_run("output_dir", output_dir, exc)
    except radiomapseer.DataLayoutError as exc:
        fail(f"--data_root={root!r}: {exc}")
    except privacy_radiomap.DataTooSmallError as exc:
        fail(str(exc))
    except privacy_table.RunsFailedError as exc:
        fail(str(exc), code=1)
    finally:
        if children and children.stop():
            print(f"stopped the running runs; their finished rounds are saved in {output_dir}: the same command resumes them", file=sys.stderr)
