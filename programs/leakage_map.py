r"""Where does my model leak? The leakage audit of one global model (see tff_radiomap.privacy.leakage).

  python -m programs.leakage_map --seed=0 --output_dir=runs/leakage_map/round1
  python -m programs.leakage_map --run_dir=runs/privacy_radiomap/none_s0 --round=25 --output_dir=runs/leakage_map/round25

The model is the one a privacy_radiomap run broadcast in round --round of --run_dir (read from its
program state saved after round - 1; round 1: its initial weights), or, without --run_dir, the
initial weights of --seed (round 1 of a run with that seed). Writes OUTPUT_DIR/groups.csv (one row
per group of every --partitions partition), OUTPUT_DIR/spectrum.csv (the attack after projecting
out the top-k twin leakage directions), OUTPUT_DIR/leakage.png and OUTPUT_DIR/audit.json (the
configuration, the state audited, the basis rank and the share of the held-out uploads' within-map
variance it captures).
"""

import csv
import dataclasses
import json
import math
import os

from programs import console  # noqa: E402

console.quiet_tensorflow_start()  # Before anything imports TensorFlow.

from absl import app, flags  # noqa: E402

from programs import common  # noqa: E402
from tff_radiomap.privacy import leakage  # noqa: E402

FLAGS = flags.FLAGS
_DEFAULTS = leakage.AuditConfig()
flags.DEFINE_string(
    "data_root",
    None,
    "RadioMapSeer-layout folder: the attacker's pool and the validation maps; default: the run's data root, else the cached default synthetic set.",
)
flags.DEFINE_string(
    "twin_root",
    None,
    "The defender's twin of the data root (the leakage basis); default: made once with --twin_positions positions per map beside the data cache. A folder without a twin_spec.json is read as it is.",
)
flags.DEFINE_enum(
    "data_set",
    "default",
    ["default", "v1", "default_shadowed"],
    "Without --data_root and --run_dir: the built-in set to audit on (v1: the first privacy front's; default_shadowed: the default's maps with a reality the twin lacks).",
)
flags.DEFINE_integer("twin_positions", 32, "Transmitter positions per map of a twin this program makes.")
flags.DEFINE_string("run_dir", None, "A privacy_radiomap run folder; with --round, audit the model it broadcast in that round.")
flags.DEFINE_integer("round", None, "Round of --run_dir whose broadcast model is audited (1: the initial weights).")
flags.DEFINE_integer("seed", 0, "Without --run_dir: audit the initial weights of this seed (round 1's model).")
flags.DEFINE_integer("resolution", 64, "Without --run_dir: side of the maps the model sees.")
flags.DEFINE_float("width", 0.25, "Without --run_dir: RadioUNet's width multiplier.")
flags.DEFINE_integer("phase", 1, "1: stage 1 is uploaded (Eq. (1)); 2: stage 2 (Eq. (2)).")
flags.DEFINE_string("partitions", ",".join(_DEFAULTS.partitions), f"Comma list of {', '.join(leakage.PARTITIONS)}.")
flags.DEFINE_integer("train_traces", _DEFAULTS.train_traces, "Labelled uploads the attacker trains on.")
flags.DEFINE_integer("test_traces", _DEFAULTS.test_traces, "Held-out uploads the attack is scored on.")
flags.DEFINE_integer("k_per_map", _DEFAULTS.k_per_map, "Leakage directions per twin map.")
flags.DEFINE_integer("blocks", _DEFAULTS.blocks, "Subspace groups of the 'leakage' partition.")
flags.DEFINE_string("ks", "0,25,50,100,200,400,all", "Comma list of k for the spectrum (integers, 'all': the basis rank).")
flags.DEFINE_string("energies", ",".join(str(e) for e in _DEFAULTS.energies), "Comma list of noise energies E for loss_per_energy.")
flags.DEFINE_integer("draws", _DEFAULTS.draws, "Antithetic noise draws per energy and group.")
flags.DEFINE_integer("val_samples", _DEFAULTS.val_samples, "Validation samples of loss_per_energy.")
flags.DEFINE_integer("attack_seed", _DEFAULTS.seed, "Seed of the train/held-out split, the ridge validation split and the noise draws.")
flags.DEFINE_string("output_dir", "runs/leakage_map", "Results folder.")

GROUP_FIELDS = [f.name for f in dataclasses.fields(leakage.GroupRow)]


def _list(flag: str, parse, expected: str) -> tuple:
    try:
        values = tuple(parse(v.strip()) for v in FLAGS[flag].value.split(","))
    except ValueError:
        values = ()
    common.require(bool(values), flag, FLAGS[flag].value, expected)
    return values


def _k(text: str) -> int:
    return leakage.ALL if text == "all" else int(text)


def audit_config() -> leakage.AuditConfig:
    """Every audit flag against what it may be: exit 2 naming the first bad one."""
    partitions = _list("partitions", str, f"a comma list of {', '.join(leakage.PARTITIONS)}")
    common.require(set(partitions) <= set(leakage.PARTITIONS), "partitions", FLAGS.partitions, f"a comma list of {', '.join(leakage.PARTITIONS)}")
    ks = _list("ks", _k, "a comma list of non-negative integers or 'all'")
    common.require(all(k == leakage.ALL or k >= 0 for k in ks), "ks", FLAGS.ks, "a comma list of non-negative integers or 'all'")
    energies = _list("energies", float, "a comma list of positive numbers")
    common.require(all(math.isfinite(e) and e > 0 for e in energies), "energies", FLAGS.energies, "a comma list of positive numbers")
    for name, low in (("train_traces", 10), ("test_traces", 1), ("k_per_map", 1), ("blocks", 1), ("draws", 1), ("val_samples", 1), ("twin_positions", 2)):
        common.require(FLAGS[name].value >= low, name, FLAGS[name].value, f"an integer >= {low}")
    common.require(FLAGS.attack_seed >= 0, "attack_seed", FLAGS.attack_seed, "an integer >= 0")
    common.require(FLAGS.phase in (1, 2), "phase", FLAGS.phase, "1 or 2")
    return leakage.AuditConfig(
        partitions=partitions,
        train_traces=FLAGS.train_traces,
        test_traces=FLAGS.test_traces,
        k_per_map=FLAGS.k_per_map,
        blocks=FLAGS.blocks,
        ks=ks,
        energies=energies,
        draws=FLAGS.draws,
        val_samples=FLAGS.val_samples,
        seed=FLAGS.attack_seed,
    )


def check_state_flags() -> None:
    """--run_dir with --round, or --seed (with --resolution, --width); the round must be saved."""
    if FLAGS.run_dir is None:
        common.require(FLAGS.round is None, "round", FLAGS.round, "no --round without --run_dir (the initial weights of --seed are round 1)")
        common.require(FLAGS.seed >= 0, "seed", FLAGS.seed, "an integer >= 0")
        from tff_radiomap.models import radiounet

        try:
            radiounet.RadioUNetConfig(resolution=FLAGS.resolution, width=FLAGS.width)
        except ValueError as exc:  # "resolution=36: expected ..." names the flag.
            common.fail(f"--{exc}")
        return
    for name in ("seed", "resolution", "width"):
        common.require(not FLAGS[name].present, name, FLAGS[name].value, f"no --{name} with --run_dir (the run's config.json sets it)")
    common.require(FLAGS.round is not None and FLAGS.round >= 1, "round", FLAGS.round, "an integer >= 1 with --run_dir")
    from tff_radiomap.experiments import saved_runs

    try:
        saved_runs.run_config(FLAGS.run_dir)
        saved_runs.check_round(FLAGS.run_dir, FLAGS.round)
    except FileNotFoundError as exc:
        common.fail(f"--run_dir={FLAGS.run_dir!r}: {exc}")
    except saved_runs.RoundNotSavedError as exc:
        common.fail(f"--round={FLAGS.round}: {exc}")
    except (TypeError, ValueError) as exc:  # A config.json of another program or version.
        common.fail(f"--run_dir={FLAGS.run_dir!r}: config.json is not a privacy_radiomap configuration ({exc})")


def _data(data_root: str, twin_root: str | None, resolution: int):
    from tff_radiomap.data import radiomapseer, twin

    read = lambda root: radiomapseer.RadioMapSeer(radiomapseer.LoaderConfig(root=root, resolution=resolution))  # noqa: E731
    try:
        data = read(data_root)
    except radiomapseer.DataLayoutError as exc:
        common.fail(f"--data_root={data_root!r}: {exc}")
    if twin_root is None or not os.path.isdir(twin_root) or os.path.exists(os.path.join(twin_root, twin.TWIN_FILE)):
        try:
            twin_root = twin.ensure_twin(data_root, FLAGS.twin_positions, out_root=twin_root, workers=min(os.cpu_count() or 1, 4))
        except ValueError as exc:  # A twin made with other settings, or maps too crowded for it.
            common.fail(f"--twin_root={twin_root!r}: {exc}")
    try:
        return data, read(twin_root), twin_root
    except radiomapseer.DataLayoutError as exc:
        common.fail(f"--twin_root={twin_root!r}: {exc}")


def write_results(result: leakage.AuditResult, output_dir: str) -> None:
    with open(os.path.join(output_dir, "groups.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=GROUP_FIELDS)
        writer.writeheader()
        writer.writerows(dataclasses.asdict(row) for row in result.groups)
    with open(os.path.join(output_dir, "spectrum.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["k", "attack_rmse_m", "ratio"])
        writer.writerows([k, r.rmse_m, r.ratio] for k, r in result.spectrum)
    with open(os.path.join(output_dir, "audit.json"), "w") as f:
        json.dump(result.summary, f, indent=2)
    plot(result, os.path.join(output_dir, "leakage.png"))


def plot(result: leakage.AuditResult, path: str) -> None:
    """Per partition, the attack ratio of each group (horizontal bars); then the spectrum."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    partitions = list(dict.fromkeys(row.partition for row in result.groups))
    most = max([sum(r.partition == p for r in result.groups) for p in partitions] + [4])
    fig, axes = plt.subplots(1, len(partitions) + 1, figsize=(5.0 * (len(partitions) + 1), max(4.0, 0.22 * most + 1.5)), squeeze=False)
    for ax, p in zip(axes[0], partitions):
        rows = [r for r in result.groups if r.partition == p]
        ax.barh(range(len(rows)), [r.ratio for r in rows], color="tab:red")
        ax.set_yticks(range(len(rows)), [f"{r.group} ({r.size})" for r in rows], fontsize=7 if len(rows) > 8 else 9)
        ax.invert_yaxis()
        ax.axvline(1.0, color="k", ls="--", lw=0.8)
        ax.set_xlabel("attack RMSE / constant guess")
        ax.set_title(f"partition '{p}'")
    ax = axes[0][-1]
    ks = [k for k, _ in result.spectrum]
    ax.plot(ks, [r.ratio for _, r in result.spectrum], "o-")
    ax.axhline(1.0, color="k", ls="--", lw=0.8)
    ax.set_ylim(0.0, 1.05)
    ax.set_xlabel(f"top-k twin directions projected out (of {result.summary['basis_rank']})")
    ax.set_ylabel("attack RMSE / constant guess")
    ax.set_title(f"spectrum (constant guess {result.summary['constant_rmse_m']:.1f} m)")
    fig.suptitle(f"{result.summary['state']}, phase {result.summary['phase']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv):
    common.reject_extra_args(argv)
    config = audit_config()
    check_state_flags()
    common.require_writable_dir(FLAGS.output_dir, "output_dir")
    twin_root = common.data_root(FLAGS.twin_root, flag="twin_root") if FLAGS.twin_root and os.path.isdir(FLAGS.twin_root) else FLAGS.twin_root

    from tff_radiomap.experiments import saved_runs
    from tff_radiomap.learning import local_training, radiounet_process
    from tff_radiomap.models.phases import Phase

    runtime = None
    if FLAGS.run_dir is not None:
        run = saved_runs.run_config(FLAGS.run_dir)
        data_root = common.data_root(FLAGS.data_root) or run.data_root
        resolution = run.resolution
        if FLAGS.round > 1:  # Reading a saved state builds the run's TFF processes.
            from tff_radiomap import runtime as runtimes

            runtime = runtimes.install_local_context()
        state = saved_runs.broadcast_state(FLAGS.run_dir, FLAGS.round)
    else:
        from tff_radiomap.data import default_set

        data_root = common.data_root(FLAGS.data_root, default=lambda: default_set.ensure_set(FLAGS.data_set))
        resolution = FLAGS.resolution
        state = leakage.initial_state(FLAGS.seed, FLAGS.resolution, FLAGS.width)
    try:
        data, twin_data, twin_root = _data(data_root, twin_root, resolution)
        optimizer = radiounet_process.build_optimizer(state.client_optimizer, state.client_learning_rate)
        result = leakage.audit(state, Phase(FLAGS.phase), data, twin_data, config, optimizer=optimizer, local_updates=local_training.local_updates)
    except leakage.DataTooSmallError as exc:
        common.fail(f"--train_traces={FLAGS.train_traces} --test_traces={FLAGS.test_traces}: {exc}")
    finally:
        if runtime is not None:
            runtime.close()
    result.summary.update(data_root=data_root, twin_root=twin_root)
    write_results(result, FLAGS.output_dir)
    print(f"results: {os.path.abspath(FLAGS.output_dir)} (groups.csv, spectrum.csv, leakage.png, audit.json)")


if __name__ == "__main__":
    app.run(main, flags_parser=common.parse_flags)
