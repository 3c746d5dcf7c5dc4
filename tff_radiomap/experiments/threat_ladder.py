"""The threat ladder of a finished privacy run: from paper 000's observer to a deployment's.

For every saved attack round of a run (`attack_rounds/round_N.npz`, the broadcast model and the
defense's extras), five observers, each scored by its RMSE over its constant guess and its share of
transmitters within 10 m (`privacy.set_scoring`), beside its baselines
(`deployment_observer.ATTACKERS`):

    (i)   single_twin      a single-sample trace (S local steps on one sample), the twin perfect:
                           today's matching attacker (`privacy_matching.MatchingObserver`) on the
                           run's data; the run's own metrics.csv figure is kept beside it
                           (`run_ratio`: the strongest attacker, every cell)
    (ii)  single_shadowed  the same observer, the observed samples from the shadowed reality (the
                           same maps and transmitter positions, gains with shadowing and per-map
                           losses, `data.reality`); the twin unchanged
    (iii) upload_twin      each client's real upload of the round (`RoundObserver.single_upload_cell`)
    (iv)  upload_shadowed  the same, the clients' data the shadowed reality's samples
    (v)   sum_shadowed     the round's sum of uploads on the shadowed reality (`RoundObserver.sum_cell`)

For a defense whose uploads are unobservable (`ddp`: secure aggregation) columns (i)-(iv) are rows
marked 'unobservable'. Defenses whose client step reads the twin's leakage basis are not supported
(`basis_refresh.uses_basis`). In the single-sample columns the constant guess is the observed map's
mean outdoor cell (as in the other columns), and the prior set is the constant guess (one
transmitter a trace). `report` writes ladder.csv, ladder.md and ladder.png.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import time

import numpy as np

from tff_radiomap.data import default_set, radiomapseer, twin
from tff_radiomap.experiments import attack_rounds, basis_refresh, privacy_matching, privacy_setup, saved_runs, shared_models
from tff_radiomap.experiments.defense_registry import DEFENSES, upload_views
from tff_radiomap.experiments.deployment_observer import ATTACKERS, ObserverSettings, RoundObserver, outdoor_coords
from tff_radiomap.models import phases
from tff_radiomap.privacy import matching_attack, set_scoring

COLUMNS = ("single_twin", "single_shadowed", "upload_twin", "upload_shadowed", "sum_shadowed")
LABELS = {
    "single_twin": "(i) single-sample trace, perfect twin",
    "single_shadowed": "(ii) single-sample trace, shadowed reality",
    "upload_twin": "(iii) real upload, perfect twin",
    "upload_shadowed": "(iv) real upload, shadowed reality",
    "sum_shadowed": "(v) round's sum, shadowed reality",
}
FIELDS = ("round", "column", "attacker", "ratio", "within_10m", "rmse_m", "constant_rmse_m", "transmitters", "seconds", "run_ratio", "note")


def shadowed_root(config) -> str:
    """The shadowed reality of the run's data: the built-in `default_shadowed` for the default set
    (generated once if absent); other data roots must name theirs."""
    if os.path.abspath(config.data_root) == os.path.abspath(default_set.default_root(default_set.DEFAULT_SPEC)):
        return default_set.ensure_set("default_shadowed", progress=False)
    raise ValueError(f"data_root={config.data_root!r} is not the default set: name its shadowed reality (--shadowed_root)")


def read_reality(config, root: str, maps: radiomapseer.RadioMapSeer) -> radiomapseer.RadioMapSeer:
    """The set at `root`, read as the run reads its own, checked to hold the run's maps and transmitter positions."""
    other = radiomapseer.RadioMapSeer(radiomapseer.LoaderConfig(root=root, resolution=config.resolution))
    if not (np.array_equal(other.map_ids, maps.map_ids) and np.array_equal(other.tx_pixels, maps.tx_pixels)):
        raise ValueError(f"{root} does not hold the maps and transmitter positions of {config.data_root}: expected the same set in another reality")
    return other


def single_sample_cell(config, maps, weights: phases.NetworkWeights, extras, round_num: int, view, stride: int) -> dict:
    """{attacker: SetScore} of today's matching attacker on single-sample traces of `maps`' samples
    (its observed maps, the run's seed), the twin the run's data root's, candidates every `stride`-th cell."""
    cfg = dataclasses.replace(config, matching_maps=max(config.matching_maps, 1), matching_stride=stride, matching_coarse=1)
    observer = privacy_matching.MatchingObserver(cfg, maps)
    phase = cfg.phase_for_round(round_num)
    traces = shared_models.upload_traces(cfg.model_config(), phase, cfg.client_optimizer, cfg.client_learning_rate, cfg.attack_steps)
    phases.set_phase_weights(traces.model, weights, phase)
    if extras is not None and hasattr(view, "observe"):
        view.observe(extras)
    noise = matching_attack.NoiseModel.of(view, traces.shapes)
    estimates, truth, constants = {}, {}, {}
    for sets, found in zip(observer.maps, observer.map_distances(traces, view, extras, cfg.seed + round_num, noise)):
        tau2 = found.tempering(noise.sizes)
        log_lik = matching_attack.log_likelihood(found.observed, found.candidate_sigma**2 + tau2, noise.sizes)
        mean, _ = matching_attack.posterior(log_lik, found.candidate_coords, found.candidate_log_prior)
        m = sets["map_id"]
        outdoor = outdoor_coords(twin.read_buildings(cfg.data_root, m), cfg.resolution, maps.config.meters_per_pixel)
        for i, (e, t) in enumerate(zip(mean, found.observed_coords)):  # Each trace its own one-transmitter set.
            estimates[(m, i)], truth[(m, i)], constants[(m, i)] = e[None], t[None], set_scoring.constant_guess(outdoor)
    score = set_scoring.score_sets(estimates, truth, constants)
    return {"observer": score, "constant": set_scoring.score_sets({}, truth, constants), "prior": set_scoring.score_sets({}, truth, constants)}


def _run_ratio(run_dir: str, round_num: int) -> float:
    """The run's own strongest-attacker ratio at the round (metrics.csv), nan where absent."""
    with open(os.path.join(run_dir, "metrics.csv"), newline="") as f:
        for row in csv.DictReader(f):
            if int(row["round"]) == round_num and "attack_rmse_m" in row:
                return float(row["attack_rmse_m"]) / float(row["attack_constant_rmse_m"])
    return float("nan")


def _rows(round_num: int, column: str, scores: dict | None, seconds: float, run_ratio: float = float("nan"), note: str = "") -> list[dict]:
    if scores is None:
        return [dict(round=round_num, column=column, attacker="observer", seconds=0.0, run_ratio=run_ratio, note=note)]
    return [
        dict(
            round=round_num,
            column=column,
            attacker=a,
            ratio=s.ratio,
            within_10m=s.within_share,
            rmse_m=s.rmse_m,
            constant_rmse_m=s.constant_rmse_m,
            transmitters=s.transmitters,
            seconds=seconds,
            run_ratio=run_ratio,
            note=note,
        )
        for a, s in scores.items()
    ]


def ladder(
    run_dir: str,
    settings: ObserverSettings = ObserverSettings(),
    rounds=None,
    reality_root: str | None = None,
    columns=COLUMNS,
    log=print,
    done: list[dict] = (),
    on_round=None,
) -> list[dict]:
    """The ladder's rows (`FIELDS`) of the run in `run_dir`: every column of `columns` at every
    saved attack round in `rounds` (None: all), the shadowed reality at `reality_root` (None:
    `shadowed_root`). `log` gets a line per cell with its seconds. Rows in `done` (a resumed
    ladder's, `read_rows`) are kept and their rounds not scored again; `on_round(rows)` is called
    with every row so far after each round scored (to save them)."""
    config = saved_runs.run_config(run_dir)
    unknown = sorted(set(columns) - set(COLUMNS))
    if unknown:
        raise ValueError(f"columns {unknown}: expected some of {COLUMNS}")
    if basis_refresh.uses_basis(config):
        raise ValueError(f"defense {config.defense!r} reads the twin's leakage basis: not supported by the deployment observer")
    saved = attack_rounds.saved_rounds(run_dir, attack_rounds.ATTACK_ROUNDS)
    rounds = saved if rounds is None else list(rounds)
    missing = sorted(set(rounds) - set(saved))
    if not rounds or missing:
        raise FileNotFoundError(f"{run_dir}: no saved broadcast model for rounds {missing or rounds} ({attack_rounds.ATTACK_ROUNDS}/ holds {saved})")
    maps = privacy_setup.read_maps(config)
    shadowed = read_reality(config, reality_root or shadowed_root(config), maps)
    data = {
        "twin": privacy_setup.load_data(config, maps),
        "shadowed": privacy_setup.load_data(dataclasses.replace(config, data_root=shadowed.config.root), shadowed),
    }
    observable = DEFENSES[config.defense].uploads_observable
    views = upload_views(config, os.path.join(run_dir, "basis"))
    rows = list(done)  # All kept: a resumed ladder asked for other rounds adds them and never drops saved ones.
    try:
        for r in [r for r in rounds if r not in {row["round"] for row in done}]:
            weights, extras = attack_rounds.load(run_dir, attack_rounds.ATTACK_ROUNDS, r)
            view = views.get(config.phase_for_round(r))
            observer = RoundObserver(config, maps, weights, extras, r, view, settings)
            uploads = {}
            for column in columns:
                t0 = time.monotonic()
                reality = "twin" if column.endswith("twin") else "shadowed"
                run_ratio = _run_ratio(run_dir, r) if column == "single_twin" else float("nan")
                if not observable and not column.startswith("sum"):
                    rows += _rows(r, column, None, 0.0, run_ratio, "unobservable")
                    continue
                if column.startswith("single"):
                    scores = single_sample_cell(config, maps if reality == "twin" else shadowed, weights, extras, r, view, settings.stride)
                else:
                    if reality not in uploads:
                        uploads[reality] = observer.uploads(data[reality])
                    cell = observer.sum_cell if column.startswith("sum") else observer.single_upload_cell
                    scores, _ = cell(uploads[reality], COLUMNS.index(column))
                seconds = time.monotonic() - t0
                rows += _rows(r, column, scores, seconds, run_ratio)
                log(f"round {r} {column}: observer {scores['observer'].ratio:.3f} / {scores['observer'].within_share:.2f} within 10 m, {seconds:.1f} s")
            log(f"round {r}: candidates (twin, gradients, baseline traces) {observer.candidate_seconds:.1f} s of the cells' time")
            if on_round is not None:
                on_round(rows)
    finally:
        for d in data.values():
            d.remove_client_files()
    return rows


def read_rows(path: str) -> list[dict]:
    """The rows of a ladder.csv (`report`), typed as `ladder` makes them."""
    numbers = {"ratio", "within_10m", "rmse_m", "constant_rmse_m", "seconds", "run_ratio"}
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            typed = {k: (float(v) if k in numbers else v) for k, v in row.items() if v != "" or k in ("note",)}
            typed["round"] = int(row["round"])
            if row.get("transmitters"):
                typed["transmitters"] = int(row["transmitters"])
            rows.append(typed)
    return rows


def resumed_rows(output_dir: str, record: dict) -> list[dict]:
    """The rows a stopped ladder saved in `output_dir` (its ladder.csv), if its ladder_settings.json
    is `record` (the run, the observer's settings, the columns); ValueError naming what differs
    otherwise, the folder left as it is. A new folder gets `record` and [] ."""
    path = os.path.join(output_dir, "ladder_settings.json")
    if not os.path.exists(path):
        os.makedirs(output_dir, exist_ok=True)
        with open(path, "w") as f:
            json.dump(record, f, indent=1)
        return []
    with open(path) as f:
        saved = json.load(f)
    differ = [k for k in record if saved.get(k) != record[k]]
    if differ:
        detail = "; ".join(f"{k}: saved {saved.get(k)!r}, asked {record[k]!r}" for k in differ)
        raise ValueError(f"{output_dir} holds a ladder made otherwise ({detail}): use another --output_dir (nothing was changed)")
    csv_path = os.path.join(output_dir, "ladder.csv")
    return read_rows(csv_path) if os.path.exists(csv_path) else []


def pooled_rows(rows: list[dict], rounds) -> dict:
    """{(column, attacker): SetScore} over the rows of `rounds` (a column's transmitters pooled)."""
    out = {}
    for column in COLUMNS:
        for attacker in ATTACKERS:
            found = [r for r in rows if r["round"] in rounds and r["column"] == column and r["attacker"] == attacker and r.get("ratio") is not None]
            if found:
                out[(column, attacker)] = set_scoring.pooled(
                    set_scoring.SetScore(r["rmse_m"], r["constant_rmse_m"], r["within_10m"], int(r["transmitters"])) for r in found
                )
    return out


def groups(rows: list[dict]) -> list[tuple[str, list[int]]]:
    """The ladder's round groups: round 1, and the later attack rounds together (as labelled)."""
    rounds = sorted({int(r["round"]) for r in rows})
    out = [("round 1", [1])] if 1 in rounds else []
    late = [r for r in rounds if r > 1]
    return out + ([(f"round{'s' if len(late) > 1 else ''} {', '.join(map(str, late))}", late)] if late else [])


def _cell(rows, label_rounds, column, attacker, pooled) -> str:
    if any(r["column"] == column and r.get("note") == "unobservable" and r["round"] in label_rounds for r in rows):
        return "unobservable"
    s = pooled.get((column, attacker))
    return "-" if s is None else f"{s.ratio:.3f} / {s.within_share:.2f}"


def markdown(rows: list[dict], title: str) -> str:
    """ladder.md: per round group, each attacker's ratio to its constant guess / share within 10 m in every column."""
    lines = [
        f"# The threat ladder: {title}",
        "",
        "Each cell: RMSE over the constant guess / share of transmitters within 10 m. "
        "The prior set (k outdoor clusters a map) is what one-to-one matching gives an observer that read nothing.",
        "",
    ]
    present = [c for c in COLUMNS if any(r["column"] == c for r in rows)]
    for label, label_rounds in groups(rows):
        pooled = pooled_rows(rows, label_rounds)
        lines += [f"## {label}", "", "| attacker | " + " | ".join(LABELS[c] for c in present) + " |", "|---" * (len(present) + 1) + "|"]
        for attacker in ATTACKERS:
            cells = [_cell(rows, label_rounds, c, attacker, pooled) for c in present]
            if any(c != "-" for c in cells):
                lines.append(f"| {attacker} | " + " | ".join(cells) + " |")
        ratios = [r["run_ratio"] for r in rows if r["column"] == "single_twin" and r["attacker"] == "observer" and r["round"] in label_rounds]
        if ratios and np.isfinite(ratios).any():
            lines += ["", f"The run's own strongest attacker (metrics.csv, every cell): {np.nanmean(ratios):.3f} of its constant guess."]
        seconds = {c: sum(r["seconds"] for r in rows if r["column"] == c and r["attacker"] == "observer" and r["round"] in label_rounds) for c in present}
        lines += ["", "Seconds per cell (summed over the rounds): " + ", ".join(f"{c} {s:.0f}" for c, s in seconds.items()), ""]
    return "\n".join(lines)


def figure(rows: list[dict], path: str, title: str) -> None:
    """ladder.png: per round group, each attacker's ratio in every column (bars; 1 = the constant guess)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    present = [c for c in COLUMNS if any(r["column"] == c for r in rows)]
    found = groups(rows)
    fig, axes = plt.subplots(1, len(found), figsize=(6.5 * len(found), 4.2), squeeze=False)
    width = 0.8 / len(ATTACKERS)
    for ax, (label, label_rounds) in zip(axes[0], found):
        pooled = pooled_rows(rows, label_rounds)
        for j, attacker in enumerate(ATTACKERS):
            values = [pooled[(c, attacker)].ratio if (c, attacker) in pooled else np.nan for c in present]
            ax.bar(np.arange(len(present)) + (j - (len(ATTACKERS) - 1) / 2) * width, values, width, label=attacker)
        ax.axhline(1.0, color="k", lw=0.8, ls="--")
        ax.set_xticks(np.arange(len(present)), [LABELS[c].split(" ", 1)[0] for c in present])
        ax.set_title(label)
        ax.set_ylabel("RMSE / constant guess")
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle(title + ": " + "; ".join(LABELS[c] for c in present), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(rows: list[dict], output_dir: str, title: str) -> dict:
    """Writes ladder.csv, ladder.md and ladder.png into `output_dir`; returns their paths."""
    os.makedirs(output_dir, exist_ok=True)
    paths = {name: os.path.join(output_dir, f"ladder.{name}") for name in ("csv", "md", "png")}
    with open(paths["csv"], "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows({k: r.get(k, "") for k in FIELDS} for r in rows)
    with open(paths["md"], "w") as f:
        f.write(markdown(rows, title))
    figure(rows, paths["png"], title)
    return paths
