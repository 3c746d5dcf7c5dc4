"""Choosing EPFL-REMNet's and the baselines' hyperparameters and the round budget on validation.

The sweep (`GRID`) trains each candidate on one scenario, split and seed (by default heavy,
block, seed 0) for `rounds` rounds on the stacked clients and scores it on the clients'
validation pixels only (`val` in final.json; test pixels are never read for a choice):
  - every method: the client learning rate;
  - EPFL-REMNet: (k_fraction, R) among the pairs whose uplink stays within 3% of uncompressed
    PFL's (the paper's budget), and the EMA decay;
  - FedRep: head epochs; Ditto: lambda.
`choose` picks, per method, the candidate of lowest validation macro RMSE (at the last round);
`round_budget` the one budget for every method: the first evaluated round at which every chosen
candidate's validation macro RMSE is within `tolerance` of its own best over the sweep.
"""

from __future__ import annotations

import csv
import dataclasses
import os

from baselines import remnet_methods
from tff_radiomap.data import rem_points
from tff_radiomap.learning import rem_runner, stacked_runner
from tff_radiomap.learning.epfl_remnet import EpflRemnetConfig

LEARNING_RATES = (1e-3, 3e-3, 1e-2)
GRID = {
    # FedAvg, PFL and EPFL-REMNet (k 0.02, R 1) were best at the grid's top (1e-2): extended to 3e-2.
    "fedavg": [dict(client_learning_rate=lr) for lr in LEARNING_RATES + (3e-2,)],
    "pfl_uncompressed": [dict(client_learning_rate=lr) for lr in LEARNING_RATES + (3e-2,)],
    "pfedgp": [dict(client_learning_rate=lr) for lr in LEARNING_RATES],
    "epfl_remnet": [dict(client_learning_rate=lr, k_fraction=k, sync_period=r) for lr in LEARNING_RATES for k, r in ((0.05, 2), (0.02, 1))]
    + [dict(client_learning_rate=1e-3, k_fraction=0.05, sync_period=2, ema_decay=0.0), dict(client_learning_rate=3e-2, k_fraction=0.02, sync_period=1)],
    "fedrep": [dict(client_learning_rate=lr, head_epochs=h) for lr in LEARNING_RATES[:2] for h in (1, 2)],  # Body: local_epochs.
    "ditto": [dict(client_learning_rate=1e-3, ditto_lambda=lam) for lam in (0.0, 0.001, 0.01, 0.1, 1.0)]
    + [dict(client_learning_rate=3e-3, ditto_lambda=lam) for lam in (0.001, 0.01)],
}
FIELDS = ("client_learning_rate", "k_fraction", "sync_period", "ema_decay", "head_epochs", "ditto_lambda")


def candidate_label(name: str, params: dict) -> str:
    return name + "".join(f"_{k}{v:g}" for k, v in sorted(params.items()))


def candidate(name: str, params: dict, base: EpflRemnetConfig) -> rem_runner.Method:
    """The method `name` with `params` set (a baseline's own fields after it is built)."""
    own = {k: v for k, v in params.items() if k in ("head_epochs", "ditto_lambda")}
    method = remnet_methods.method(name, dataclasses.replace(base, **{k: v for k, v in params.items() if k not in own}))
    return dataclasses.replace(method, config=dataclasses.replace(method.config, **own)) if own else method


def run_sweep(
    out_dir: str,
    data: rem_points.RemPointsConfig,
    scenario: str = "heavy",
    rounds: int = 40,
    seed: int = 0,
    base=EpflRemnetConfig(),
    log=print,
    methods: tuple[str, ...] | None = None,
) -> list[dict]:
    """Trains every candidate (of `methods`, default all of GRID's); returns one row per candidate
    and evaluated round (validation only). A finished candidate's run is read back, not retrained."""
    sc = rem_points.load_scenarios(data, (scenario,))[scenario]
    run = rem_runner.RunConfig(rounds=rounds, eval_every=5, checkpoint_every=10, seed=seed)
    rows, processes = [], {}
    for name, grid in GRID.items():
        if methods is not None and name not in methods:
            continue
        for params in grid:
            label = candidate_label(name, params)
            run_dir = os.path.join(out_dir, "tuning", scenario, data.test_split, label)
            final = stacked_runner.run_stacked(run_dir, sc, candidate(name, params, base), run, log=log, processes=processes)
            with open(os.path.join(run_dir, "metrics.csv"), newline="") as f:
                for r in csv.DictReader(f):
                    if r["val_macro_rmse"]:
                        rows.append(
                            {
                                "method": name,
                                "label": label,
                                **{k: params.get(k, "") for k in FIELDS},
                                "round": int(r["round"]) + 1,
                                "val_macro_rmse_db": float(r["val_macro_rmse"]),
                                "uplink_mb": float(r["cum_uplink_mb"]),
                            }
                        )
            log(f"{label}: val macro RMSE {final['val']['macro_rmse']:.3f} dB")
    return rows


def choose(rows: list[dict]) -> dict[str, str]:
    """method -> label of its candidate with the lowest validation macro RMSE at the last round."""
    last = max(r["round"] for r in rows)
    best = {}
    for r in rows:
        if r["round"] == last and (r["method"] not in best or r["val_macro_rmse_db"] < best[r["method"]]["val_macro_rmse_db"]):
            best[r["method"]] = r
    return {m: r["label"] for m, r in best.items()}


def round_budget(rows: list[dict], chosen: dict[str, str], tolerance: float = 0.02) -> int:
    """The first evaluated round at which every chosen candidate is within `tolerance` (relative)
    of its best validation macro RMSE; the last round if none is."""
    curves = {label: sorted((r["round"], r["val_macro_rmse_db"]) for r in rows if r["label"] == label) for label in chosen.values()}
    for t in sorted({r for c in curves.values() for r, _ in c}):
        if all(dict(c).get(t, float("inf")) <= (1 + tolerance) * min(v for _, v in c) for c in curves.values()):
            return t
    return max(r["round"] for r in rows)
