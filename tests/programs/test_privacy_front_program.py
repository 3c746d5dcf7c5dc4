"""programs.privacy_front: bad flags exit 2 naming the flag, --report_only names the missing runs,
children get every flag, and one real front (2 rounds, tiny data, one process)."""

import csv
import json
import os
import subprocess
import sys

import pytest

from tests.experiments.test_privacy_front import _fake_run
from tests.programs import processes
from tff_radiomap.data import synthetic


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("front")
    good = synthetic.generate_dataset(str(base / "good"), synthetic.DatasetSpec(maps=3, transmitters=4, size=64, seed=1), progress=False)
    os.makedirs(base / "flat")
    (base / "file").write_text("x")
    front = base / "finished"
    for name in ("none_s0", "none_s1", "uniform_nu0.01_s0"):  # uniform_nu0.01_s1 is missing.
        _fake_run(str(front), name, -20.0, [(1, 30, 100), (2, 20, 100)])
    return {"good": good, "flat": str(base / "flat"), "unwritable": str(base / "file" / "out"), "out": str(base / "out"), "finished": str(front)}


BASE = ["--data_root={good}", "--output_dir={out}/f", "--rounds=4", "--methods=none,uniform"]
CASES = [
    (["--methods=none,bogus"], "--methods='bogus': expected names from"),
    (["--noise_multipliers=0.01,-1"], "--noise_multipliers='-1': expected comma-separated positive numbers"),
    (["--noise_multipliers=x"], "--noise_multipliers='x': expected comma-separated positive numbers"),
    (["--method_grid=uniform"], "--method_grid='uniform': expected METHOD=NU entries, METHOD one of --methods, NU positive"),
    (["--method_grid=aligned=0.01"], "--method_grid='aligned=0.01': expected METHOD=NU entries, METHOD one of --methods"),
    (["--method_grid=uniform=0"], "--method_grid='uniform=0': expected METHOD=NU entries"),
    (["--seeds=a"], "--seeds='a': expected comma-separated non-negative integers"),
    (["--rounds=0"], "--rounds=0: expected an integer >= 1"),
    (["--attack_every=0"], "--attack_every=0: expected an integer >= 1"),
    (["--clip_norm=0"], "--clip_norm=0.0: expected a positive number"),
    (["--jobs=0"], "--jobs=0: expected an integer >= 1"),
    (["--stop_after_round=-1"], "--stop_after_round=-1: expected an integer >= 0"),
    (["--set=bogus=1"], "--set='bogus=1': unknown field 'bogus': expected fields of ExperimentConfig"),
    (["--set=batch_size=4,local_epochs=x"], "--set='batch_size=4,local_epochs=x': local_epochs='x': expected int"),
    (["--set=seed=3"], "--set='seed=3': expected no seed: --seeds sets it"),
    (["--set=rounds=3"], "--set='rounds=3': expected no rounds: --rounds sets it"),
    (["--set=fresh_noise=true"], "--set='fresh_noise=true': expected no fresh_noise: --fresh_noise sets it"),
    (["--set=clients_per_round=99"], "--set='clients_per_round=99': clients_per_round=99: expected an integer in 1..14"),
    (["--set=stage1_rounds=9"], "--set='stage1_rounds=9': stage1_rounds=9: expected an integer in 0..4"),
    (["--report_only", "--noreport"], "--report=False: expected --report with --report_only"),
    (["--data_root={flat}"], "it lacks png/buildings_complete/"),
    (["--output_dir={unwritable}"], "cannot create the folder"),
    (["extra"], "unexpected positional arguments ['extra']"),
]
EXTRA = [
    ["--jobs=1"],
    ["--report_only", "--output_dir={finished}", "--noise_multipliers=0.01", "--seeds=0,1"],
    # Uniform at 0.01 only: the grid's 0.03 is not expected.
    ["--report_only", "--output_dir={finished}", "--noise_multipliers=0.01,0.03", "--method_grid=uniform=0.01", "--seeds=0,1"],
]


def _run(*args, **kwargs):
    proc = subprocess.run([sys.executable, *args], cwd=processes.ROOT, capture_output=True, text=True, timeout=processes.TIMEOUT_S, **kwargs)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def outcomes(roots):
    """[BASE alone, each case, each EXTRA], from one harness process (tests/programs/flag_harness.py)."""
    arg_lists = [BASE] + [BASE + args for args, _ in CASES] + [BASE + args for args in EXTRA]
    arg_lists = [[a.format(**roots) for a in args] for args in arg_lists]
    return _run("-m", "tests.programs.flag_harness", "privacy_front", json.dumps(arg_lists))


def test_valid_flags_start_children_and_one_job_runs_here(outcomes):
    assert outcomes[0]["code"] == "started children", outcomes[0]["stderr"][-2000:]
    assert outcomes[1 + len(CASES)]["code"] == "started", outcomes[1 + len(CASES)]["stderr"][-2000:]


@pytest.mark.parametrize("index", range(len(CASES)))
def test_a_bad_flag_exits_2_with_one_line_naming_it(outcomes, roots, index):
    args, message = CASES[index]
    outcome = outcomes[1 + index]
    lines = [line for line in outcome["stderr"].splitlines() if line.startswith("error: ")]
    assert outcome["code"] == 2, (args, outcome)
    assert len(lines) == 1 and message.format(**roots) in lines[0], (args, outcome["stderr"][-2000:])


def test_report_only_writes_the_front_of_the_finished_runs_and_names_the_missing_one(outcomes, roots):
    outcome = outcomes[2 + len(CASES)]
    assert outcome["code"] == 0, outcome["stderr"][-2000:]
    assert "missing (not finished), left out of the front: uniform_nu0.01_s1" in outcome["stderr"]
    with open(os.path.join(roots["finished"], "front.csv")) as f:
        assert [(r["method"], r["seeds"]) for r in csv.DictReader(f)] == [("none", "2"), ("uniform", "1")]
    assert os.path.exists(os.path.join(roots["finished"], "front.png"))


def test_report_only_expects_of_a_method_only_the_multipliers_its_method_grid_names(outcomes):
    outcome = outcomes[3 + len(CASES)]
    assert outcome["code"] == 0, outcome["stderr"][-2000:]
    missing = [line for line in outcome["stderr"].splitlines() if line.startswith("missing")]
    assert missing == ["missing (not finished), left out of the front: uniform_nu0.01_s1"]


# Runs PROGRAM's main with ARGS, its children recorded instead of started; then each child's
# command through main again, stopped where it would train (its grid recorded).
_CHILDREN = r"""
import dataclasses, importlib, json, sys
from absl import flags
from programs import common
import tff_radiomap.runtime

program = importlib.import_module("programs." + sys.argv[1])
commands, grids, jobs = [], [], []

class Recorder:
    def __init__(self, command, jobs_at_once):
        self.command = command
        jobs.append(jobs_at_once)
    def __call__(self, config, run_dir):
        commands.append(self.command(config))
        raise RuntimeError("recorded")
    def stop(self):
        return 0
    @staticmethod
    def exit_on_signals():
        pass

class Started(Exception):
    pass

def stop(*args, **kwargs):
    raise Started()

program.ChildRuns = Recorder
tff_radiomap.runtime.install_local_context = stop
if hasattr(program, "privacy_front"):
    grid = program.privacy_front.grid
    program.privacy_front.grid = lambda *a: grids.append(grid(*a)) or grids[-1]

def main(args):
    flags.FLAGS.unparse_flags()
    try:
        program.main(common.parse_flags([sys.argv[1], *args]))
    except Started:
        return "started"
    except SystemExit as exc:
        return exc.code

parent = main(json.loads(sys.argv[2]))
names = sorted(f.name for f in flags.FLAGS.get_flags_for_module(program))
children = []
for command in commands:
    grids.clear()
    code = main(command[3:])
    children.append({"code": code, "runs": [[d, dataclasses.asdict(c)] for c, d in (grids[-1] if grids else [])]})
print(json.dumps({"parent": parent, "commands": commands, "flag_names": names, "children": children, "jobs": jobs}))
"""


def test_children_get_every_flag_and_each_runs_its_one_run(roots):
    out = os.path.join(roots["out"], "children")
    args = [
        f"--data_root={roots['good']}",
        f"--output_dir={out}",
        "--methods=none,uniform",
        "--noise_multipliers=0.01,0.3",
        "--method_grid=uniform=0.01,uniform=0.1",  # In place of the grid's; each child gets one.
        "--seeds=0,1",
        "--rounds=2",
        "--attack_every=1",
        "--clip_norm=0.5",
        "--set=batch_size=4,local_epochs=1,attack_train_traces=10",
        "--jobs=2",
        "--fresh_noise",
        "--stop_after_round=1",
    ]
    result = _run("-c", _CHILDREN, "privacy_front", json.dumps(args))
    assert result["parent"] == 1  # Every recorded child "failed": the front is not written.
    assert result["jobs"] == [2]  # The runner shares the cores out over two children at once.
    commands = result["commands"]
    assert len(commands) == 6
    for command in commands:
        assert command[1:3] == ["-m", "programs.privacy_front"]
        for expected in (
            "--rounds=2",
            "--attack_every=1",
            "--clip_norm=0.5",
            "--set=batch_size=4,local_epochs=1,attack_train_traces=10",
            "--jobs=1",
            "--noreport",
            f"--output_dir={out}",
            "--fresh_noise",
            "--stop_after_round=1",
            "--method_grid=",
        ):
            assert expected in command, (expected, command)
        assert len(command) - 3 == len(result["flag_names"])  # One argument per flag of the program.
    by_run = {}
    for child in result["children"]:
        assert child["code"] == "started" and len(child["runs"]) == 1, child
        run_dir, config = child["runs"][0]
        by_run[os.path.basename(run_dir)] = config
    assert sorted(by_run) == sorted(["none_s0", "none_s1"] + [f"uniform_nu{nu}_s{s}" for nu in ("0.01", "0.1") for s in (0, 1)])
    assert by_run["uniform_nu0.1_s1"]["noise_multiplier"] == 0.1 and by_run["uniform_nu0.1_s1"]["seed"] == 1
    assert by_run["none_s0"]["noise_multiplier"] == 0.0
    for config in by_run.values():
        assert (config["batch_size"], config["attack_train_traces"], config["clip_norm"], config["rounds"], config["stage1_rounds"]) == (4, 10, 0.5, 2, 1)
        assert config["fresh_noise"] is True
        assert config["data_root"] == roots["good"]


def test_privacy_table_children_get_every_flag_too(roots):
    out = os.path.join(roots["out"], "table")
    os.makedirs(out)
    with open(os.path.join(out, "floors.json"), "w") as f:  # Else computed first, from data too small for 14 clients.
        json.dump({}, f)
    args = [f"--data_root={roots['good']}", f"--output_dir={out}", "--methods=none,clip", "--seeds=0", "--rounds=3", "--noise_multiplier=0.5", "--fresh_noise"]
    result = _run("-c", _CHILDREN, "privacy_table", json.dumps(args))
    assert result["parent"] == 1 and len(result["commands"]) == 2
    for command, child in zip(result["commands"], result["children"]):
        assert command[1:3] == ["-m", "programs.privacy_table"] and len(command) - 3 == len(result["flag_names"])
        assert "--rounds=3" in command and "--noise_multiplier=0.5" in command and "--jobs=1" in command and "--seeds=0" in command
        assert "--fresh_noise" in command
        assert child["code"] == "started"


def test_a_front_of_two_rounds_on_tiny_data(tmp_path_factory):
    """The one real front: FedSGD (no noise: one run a seed) and Uniform Noise at one nu."""
    base = tmp_path_factory.mktemp("real")
    root = synthetic.generate_dataset(str(base / "data"), synthetic.DatasetSpec(maps=8, transmitters=3, size=64, seed=5), progress=False)
    out = base / "front"
    r = processes.run(
        "programs.privacy_front",
        f"--data_root={root}",
        f"--output_dir={out}",
        "--methods=fedsgd,uniform",
        "--noise_multipliers=0.01",
        "--seeds=0",
        "--rounds=2",
        "--attack_every=1",
        "--jobs=1",
        # One observed local step: the attack's traces are traced (the slow part) a third the size;
        # the matching attacker on every 4th cell of its map.
        "--set=resolution=32,num_clients=3,clients_per_round=2,batch_size=4,local_epochs=1,attack_steps=1,attack_train_traces=10,attack_test_traces=4,matching_stride=4",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["fedsgd_s0", "uniform_nu0.01_s0"]
    config = json.load(open(out / "uniform_nu0.01_s0" / "config.json"))
    assert (config["noise_multiplier"], config["batch_size"], config["resolution"], config["rounds"]) == (0.01, 4, 32, 2)
    assert json.load(open(out / "fedsgd_s0" / "config.json"))["noise_multiplier"] == 0.0
    with open(out / "front.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["method"], float(r["noise_multiplier"]), r["seeds"]) for r in rows] == [("fedsgd", 0.0, "1"), ("uniform", 0.01, "1")]
    for row in rows:
        summary = json.load(open(out / ("fedsgd_s0" if row["method"] == "fedsgd" else "uniform_nu0.01_s0") / "summary.json"))
        assert float(row["best_val_mse_db_mean"]) == pytest.approx(summary["best_val_mse_db"])
        assert 0 < float(row["final_attack_rmse_m_mean"]) and 0 < float(row["constant_rmse_m"])
        eps = summary["privacy"]["max_epsilon"]  # FedSGD: no guarantee (None, an empty cell); Uniform Noise: a number.
        assert (row["max_epsilon"] == "") if row["method"] == "fedsgd" else (float(row["max_epsilon"]) == pytest.approx(eps) and eps > 0)
    assert (out / "front.png").stat().st_size > 10_000 and "| fedsgd | 0 | 1 |" in (out / "front.md").read_text()


def test_runs_in_this_process_stop_after_the_round_given(monkeypatch):
    """--stop_after_round with one job: every run is handed it (a child with --jobs=1 is that case);
    the run itself stops there (tests/experiments/test_privacy_radiomap.py)."""
    from programs import common
    from tff_radiomap import runtime
    from tff_radiomap.experiments import privacy_radiomap

    calls = []
    monkeypatch.setattr(runtime, "install_local_context", lambda: "local runtime")
    monkeypatch.setattr(privacy_radiomap, "run", lambda config, run_dir, **kwargs: calls.append((run_dir, kwargs)) or {"stopped_after_round": 1})
    children, local, run_fn = common.privacy_runner(None, None, concurrent=False, overwrite=False, stop_after_round=1)
    assert (children, local) == (None, "local runtime")
    assert run_fn("config", "run_a") == {"stopped_after_round": 1}
    assert calls == [("run_a", {"progress": True, "stop_after_round": 1, "overwrite": False})]
