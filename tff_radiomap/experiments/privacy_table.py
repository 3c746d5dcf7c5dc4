"""Table I and Fig. 2 of paper 000: every method over several seeds, then the table and figure.

`run_table(base_config, methods, seeds, output_dir)` runs (or resumes) one privacy experiment per
(method, seed) in `output_dir/<method>_s<seed>/`, then writes

    table1.csv, table1.md   best validation MSE (dB) and final attacker RMSE (m), mean and sample std
                            over seeds, per method, with the constant-guess floor
    fig2.png                (a) validation MSE in dB per round, (b) attacker RMSE per round
                            (mean over seeds), one line per method, the constant guess dashed
    floors.json             the validation MSE of two predictors that learned nothing: all-zero
                            output, and the per-pixel mean of the training maps

Both columns have floors, so that a number can be read: a model whose best MSE is the all-zero
output's has learned nothing (at nu = 3 a collapsed model sits exactly there), and an attacker at
the constant guess has found nothing. "Final attacker RMSE" is the attack at the last round where
it ran; when a run's attack was skipped at later rounds (the model had diverged and its traces were
not finite) the table says at which round that last attack was.

With `jobs` > 1 the runs go `jobs` at a time (`run_all`; the program runs each in its own process,
`ChildRuns`), the costliest method first, so that no long run is left alone at the end. The
privacy-utility front (`privacy_front`) runs and reads its runs with the same pieces.
"""

from __future__ import annotations

import concurrent.futures
import csv
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from tff_radiomap.experiments import defense_registry
from tff_radiomap.metrics.over_seeds import markdown_table, mean_std, plus_minus, std_note
from tff_radiomap.runtime import run_folder
from tff_radiomap.runtime.threads import thread_limits

METHODS = ("none", "fedsgd", "clip", "uniform", "directed", "adaptive")
LABELS = defense_registry.labels()


def read_metrics(run_dir: str) -> list[dict]:
    path = os.path.join(run_dir, "metrics.csv")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing: has the run in {run_dir} started?")
    with open(path) as f:
        return [{k: (float(v) if v not in ("", None) else float("nan")) for k, v in row.items()} for row in csv.DictReader(f)]


class RunsFailedError(RuntimeError):
    """Some runs of the table failed (the others finished); the message names each one."""


def run_table(base_config, methods, seeds, output_dir: str, run_fn, progress: bool = True, floors_fn=None, jobs: int = 1) -> dict:
    """Runs every (method, seed) through `run_fn(config, run_dir)` and writes the table and figure.

    `run_fn` resumes a partial run and returns a finished one as it is (as
    `privacy_radiomap.run` does, after checking that the folder holds the same configuration).
    `floors_fn(base_config)` (optional) gives the MSE floors (`mse_floors`), written once to
    floors.json. With `jobs` > 1, `run_fn` is called from `jobs` threads at once (it should start
    a process), the costliest methods first (`defense_registry.cost_order()`); a failed run does not stop the others,
    and RunsFailedError then names every failed one instead of writing the table.
    """
    os.makedirs(output_dir, exist_ok=True)
    floors_path = os.path.join(output_dir, "floors.json")
    if floors_fn is not None and not os.path.exists(floors_path):
        run_folder.write_json(floors_path, floors_fn(base_config))
    # Seed by seed: an interrupted sequential table has every method for its first seeds.
    runs = [(dataclasses.replace(base_config, defense=m, seed=s), os.path.join(output_dir, f"{m}_s{s}")) for s in seeds for m in methods]
    run_all(runs, run_fn, jobs, progress)
    return write_results(output_dir, methods, seeds)


def run_all(runs, run_fn, jobs: int = 1, progress: bool = True) -> None:
    """`run_fn(config, run_dir)` for every (config, run_dir) of `runs`.

    In order with `jobs` <= 1; else from `jobs` threads at once (`run_fn` should start a process),
    the costliest defenses first (`defense_registry.cost_order()`, then the order of `runs`); a failed run does not
    stop the others, and RunsFailedError then names every failed one.
    """
    if jobs <= 1:
        for config, run_dir in runs:
            run_fn(config, run_dir)
        return
    rank = {m: i for i, m in enumerate(defense_registry.cost_order())}
    _run_concurrently(sorted(runs, key=lambda r: rank.get(r[0].defense, len(rank))), run_fn, jobs, progress)


def overwrite_once(run: Callable, overwrite: bool) -> Callable:
    """`run(config, run_dir, overwrite=...)` as a `run_fn`: with `overwrite`, a folder is cleared on
    its first call only, so that a resume after a TFF worker restart keeps the rounds saved since."""
    cleared = set()

    def run_fn(config, run_dir):
        first = run_dir not in cleared
        cleared.add(run_dir)
        return run(config, run_dir, overwrite=overwrite and first)

    return run_fn


def _run_concurrently(runs, run_fn, jobs: int, progress: bool) -> None:
    failed = []
    pool = concurrent.futures.ThreadPoolExecutor(jobs)
    futures = {pool.submit(run_fn, config, run_dir): run_dir for config, run_dir in runs}
    try:
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            run_dir, error = futures[future], future.exception()
            if error is not None:
                failed.append(f"{run_dir}: {error}")
            if progress:
                print(f"[{done}/{len(runs)}] {os.path.basename(run_dir)} {'FAILED' if error else 'done'}", flush=True)
    finally:
        # Interrupted: start no more runs and do not wait here for the running ones (the caller
        # stops their processes).
        pool.shutdown(wait=False, cancel_futures=True)
    if failed:
        raise RunsFailedError(f"{len(failed)} of {len(runs)} runs failed (the others are saved): " + "; ".join(failed))


def child_arguments(program_flags: Iterable, overrides: Mapping) -> list[str]:
    """The command-line arguments that repeat a program's flags for one of its runs.

    `program_flags`: the program's absl flags (`FLAGS.get_flags_for_module(module)`); each is
    forwarded with its value as parsed (`Flag.serialize()`), so that a new flag reaches the children
    without being listed anywhere; `overrides` (name -> value) replaces the value of those named.
    """
    args = []
    for flag in program_flags:
        if flag.name not in overrides:
            arg = flag.serialize()
        elif isinstance(overrides[flag.name], bool):
            arg = f"--{'' if overrides[flag.name] else 'no'}{flag.name}"
        else:
            arg = f"--{flag.name}={overrides[flag.name]}"
        if arg:  # An unset flag (None) serializes to ''.
            args.append(arg)
    return args


class ChildRuns:
    """A `run_fn` running each run in its own process, `command(config)` (the program for that one
    run), its output appended to RUN_DIR.log; `stop()` interrupts the running ones.

    Children start in this process's working folder (relative paths mean the same there), with
    the repository on PYTHONPATH so that `python -m programs....` finds the program. With `jobs`
    children at once, each gets the machine's cores shared out (`thread_limits`): a BLAS or
    TensorFlow pool per child as large as the machine spins on descheduled threads.
    """

    def __init__(self, command: Callable[[object], list[str]], jobs: int = 1):
        self.command = command
        self.threads = thread_limits(jobs)
        self.lock = threading.Lock()
        self.running = set()
        self.stopped = False

    @staticmethod
    def exit_on_signals(signums=(signal.SIGTERM, signal.SIGHUP)) -> None:
        """SIGTERM and SIGHUP end this program with SystemExit (as SIGINT does with
        KeyboardInterrupt), so that the caller's `finally: children.stop()` stops the children
        too. Call from the main thread."""
        for signum in signums:
            signal.signal(signum, lambda signum, frame: sys.exit(128 + signum))

    def __call__(self, config, run_dir: str) -> None:
        log_path = f"{run_dir}.log"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (_REPO, os.environ.get("PYTHONPATH")) if p), **self.threads)
        with open(log_path, "a") as log:
            with self.lock:
                if self.stopped:
                    raise RuntimeError("not started: the runs were interrupted")
                child = subprocess.Popen(self.command(config), stdout=log, stderr=subprocess.STDOUT, env=env)
                self.running.add(child)
            code = child.wait()
            with self.lock:
                self.running.discard(child)
        if code != 0:
            lines = [line.strip() for line in open(log_path, errors="replace").read().replace("\r", "\n").splitlines() if line.strip()]
            raise RuntimeError(f"exit {code} ({lines[-1] if lines else 'no output'}); its output: {log_path}")

    def stop(self) -> int:
        """Interrupts the running children (each has saved its last finished round, and stops its
        TFF worker); returns how many there were."""
        with self.lock:
            self.stopped = True
            children = list(self.running)
        for child in children:
            child.terminate()
        for child in children:
            try:
                child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                child.kill()
        return len(children)


_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def mse_floors(data) -> dict:
    """Validation MSE (and dB) of the all-zero output and of the per-pixel mean training map."""
    y_val = np.asarray(data.val[1], np.float64)
    mean_map = np.mean(data.pooled_train()[1], axis=0, dtype=np.float64)
    zero = float(np.mean(y_val**2))
    mean = float(np.mean((y_val - mean_map) ** 2))
    return {"zero_output_mse": zero, "zero_output_db": 10 * np.log10(zero), "train_mean_map_mse": mean, "train_mean_map_db": 10 * np.log10(mean)}


def csv_cell(value):
    """A nan std (or a None) as an empty CSV cell; other values as they are."""
    return "" if value is None or (isinstance(value, float) and not np.isfinite(value)) else value


def write_results(output_dir: str, methods, seeds) -> dict:
    rows, curves = [], {}
    for method in methods:
        runs = [read_metrics(os.path.join(output_dir, f"{method}_s{s}")) for s in seeds]
        summaries = [json.load(open(os.path.join(output_dir, f"{method}_s{s}", "summary.json"))) for s in seeds]
        best_db = mean_std([s["best_val_mse_db"] for s in summaries])
        last = [last_attack(r) for r in runs]
        final_attack = mean_std([a for a, _ in last])
        floor = mean_std([_last(r, "attack_constant_rmse_m") for r in runs])
        rows.append(
            {
                "method": LABELS.get(method, method),
                "best_val_mse_db_mean": best_db[0],
                "best_val_mse_db_std": best_db[1],
                "final_attack_rmse_m_mean": final_attack[0],
                "final_attack_rmse_m_std": final_attack[1],
                "constant_guess_rmse_m": floor[0],
                "last_attack_round": min((k for _, k in last), default=0),
                "rounds": max(int(r[-1]["round"]) if r else 0 for r in runs),
            }
        )
        curves[method] = runs
    with open(os.path.join(output_dir, "table1.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({k: csv_cell(v) if k.endswith("_std") else v for k, v in r.items()} for r in rows)
    cells = []
    for r in rows:
        at = "" if r["last_attack_round"] >= r["rounds"] else f" (round {r['last_attack_round']}: later attacks skipped, model diverged)"
        cells.append(
            [
                r["method"],
                plus_minus(f"{r['best_val_mse_db_mean']:.2f}", r["best_val_mse_db_std"]),
                plus_minus(f"{r['final_attack_rmse_m_mean']:.2f}", r["final_attack_rmse_m_std"]) + at,
                f"{r['constant_guess_rmse_m']:.2f}",
            ]
        )
    notes = [std_note(len(seeds))]
    floors = _read_floors(output_dir)
    if floors:
        notes.append(
            f"Predictors that learned nothing: all-zero output {floors['zero_output_db']:.2f} dB, "
            f"per-pixel mean of the training maps {floors['train_mean_map_db']:.2f} dB (validation MSE)."
        )
    header = ("method", "best val. MSE (dB)", "final attacker RMSE (m)", "constant guess (m)")
    with open(os.path.join(output_dir, "table1.md"), "w") as f:
        f.write(markdown_table(header, cells, f"Table I ({len(seeds)} seed(s): {', '.join(map(str, seeds))})", notes))
    _figure(os.path.join(output_dir, "fig2.png"), curves, floors)
    return {"rows": rows, "table_md": os.path.join(output_dir, "table1.md"), "figure": os.path.join(output_dir, "fig2.png")}


def _read_floors(output_dir: str) -> dict | None:
    path = os.path.join(output_dir, "floors.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def last_attack(rows) -> tuple[float, int]:
    """(attacker RMSE, round) of the last round where the attack ran; (nan, 0) if none."""
    done = [(r["attack_rmse_m"], int(r["round"])) for r in rows if np.isfinite(r.get("attack_rmse_m", np.nan))]
    return done[-1] if done else (float("nan"), 0)


def _last(rows, key):
    values = [r.get(key, float("nan")) for r in rows]
    values = [v for v in values if np.isfinite(v)]
    return values[-1] if values else float("nan")


def _mean_curve(runs, key):
    rounds = sorted({int(r["round"]) for run in runs for r in run if np.isfinite(r.get(key, np.nan))})
    means = [np.nanmean([r[key] for run in runs for r in run if int(r["round"]) == k]) for k in rounds]
    return rounds, means


def _figure(path, curves, mse_floors=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_a, ax_b) = plt.subplots(1, 2, figsize=(11, 4))
    attack_floors = []
    for method, runs in curves.items():
        r, m = _mean_curve(runs, "val_mse_db")
        ax_a.plot(r, m, label=LABELS.get(method, method))
        r, m = _mean_curve(runs, "attack_rmse_m")
        if r:
            ax_b.plot(r, m, marker="o", label=LABELS.get(method, method))
        attack_floors += [x for run in runs for x in [row.get("attack_constant_rmse_m", np.nan) for row in run] if np.isfinite(x)]
    if attack_floors:
        ax_b.axhline(float(np.mean(attack_floors)), color="k", linestyle="--", label="constant guess")
    if mse_floors:
        ax_a.axhline(mse_floors["zero_output_db"], color="k", linestyle=":", label="all-zero output")
        ax_a.axhline(mse_floors["train_mean_map_db"], color="k", linestyle="--", label="mean training map")
        ax_a.legend(fontsize=8)
        ax_a.set_ylim(top=mse_floors["zero_output_db"] + 15)  # A diverged run (hundreds of dB) would flatten the rest.
    ax_a.set(xlabel="round", ylabel="validation MSE (dB)", title="(a) reconstruction")
    ax_b.set(xlabel="round", ylabel="attacker RMSE (m)", title="(b) localization attack")
    for ax in (ax_a, ax_b):
        ax.grid(alpha=0.3)
    ax_b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
