"""Every program checks every flag at start-up: exit 2 and one line naming the flag, the value and
what was expected. The checks run in-process (tests/programs/flag_harness.py, one process per
program); a few go through the real command line elsewhere (test_privacy_radiomap.py,
test_make_dataset.py, test_remnet_programs.py) and here (corrupt data files)."""

import json
import os
import subprocess
import sys

import pytest

from tests.programs import processes
from tff_radiomap.data import synthetic

MISSING = "/nonexistent/tff_radiomap_data"


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("flags")
    spec = synthetic.DatasetSpec(maps=3, transmitters=4, size=64, seed=1)
    good = synthetic.generate_dataset(str(base / "good"), spec, progress=False)
    corrupt = synthetic.generate_dataset(str(base / "corrupt"), spec, progress=False)
    with open(os.path.join(corrupt, "gain", "DPM", "0_1.png"), "wb") as f:
        f.write(b"not a png")
    os.makedirs(base / "flat")
    blocker = base / "file"
    blocker.write_text("x")
    return {"good": good, "corrupt": corrupt, "flat": str(base / "flat"), "unwritable": str(blocker / "out"), "out": str(base / "out")}


# (program, arguments, what stderr must hold). {good}, {flat}, {unwritable}, {out} are filled in.
CASES = {
    "privacy_radiomap": [
        (["--clients=4", "--clients_per_round=5"], "--clients_per_round=5: expected an integer in 1..4"),
        (["--noise_multiplier=-1"], "--noise_multiplier=-1.0: expected a non-negative number"),
        (["--clip_norm=-0.5"], "--clip_norm=-0.5: expected a positive number"),
        (["--clip_norm=nan"], "--clip_norm=nan: expected a positive number"),
        (["--clip_norm=0"], "--clip_norm=0.0: expected a positive number"),
        (["--sigma_min=-1"], "--sigma_min=-1.0: expected a non-negative number"),
        (["--defense=subspace", "--subspace_share=1.5"], "--subspace_share=1.5: expected a number in [0, 1]"),
        (["--defense=subspace", "--basis_k_per_map=40"], "--basis_k_per_map=40: expected an integer in 1..basis_positions-1=31"),
        (["--defense=subspace", "--basis_every=0"], "--basis_every=0: expected an integer >= 1"),
        (["--defense=subspace", "--twin_root=" + MISSING], f"--twin_root='{MISSING}': expected an existing folder"),
        (["--defense=bogus"], "--defense='bogus': expected one of"),
        (["--centralised", "--defense=uniform"], "--defense='uniform': expected 'none' with centralised"),
        (["--rounds=0"], "--rounds=0: expected an integer >= 1"),
        (["--rounds=4", "--stage1_rounds=5"], "--stage1_rounds=5: expected an integer in 0..4"),
        (["--resolution=36"], "--resolution=36: expected a multiple of"),
        (["--width=0"], "--width=0.0: expected a positive multiplier"),
        (["--batch_size=0"], "--batch_size=0: expected an integer >= 1"),
        (["--local_epochs=0"], "--local_epochs=0: expected an integer >= 1"),
        (["--attack_every=-1"], "--attack_every=-1: expected an integer >= 0"),
        (["--attack_train_traces=5"], "--attack_train_traces=5: expected an integer >= 10"),
        (["--matching_coarse=0"], "--matching_coarse=0: expected an integer >= 1"),
        (["--client_learning_rate=0"], "--client_learning_rate=0.0: expected a positive number"),
        (["--server_learning_rate=-1"], "--server_learning_rate=-1.0: expected a positive number"),
        (["--seed=-1"], "--seed=-1: expected an integer >= 0"),
        (["--inject_nan_client=99:0"], "--inject_nan_client='99:0': expected ROUND:CLIENT"),
        (["--rounds=abc"], "--rounds=abc: invalid literal for int()"),
        (["--data_root=" + MISSING], f"--data_root='{MISSING}': expected an existing folder"),
        (["--data_root={flat}"], "expected a folder in the RadioMapSeer layout; it lacks png/buildings_complete/"),
        (["--output_dir={unwritable}"], "--output_dir='{unwritable}': cannot create the folder"),
        (["--workers=nohost"], "--workers='nohost': --workers entry 'nohost': expected host:port"),
        (["extra"], "unexpected positional arguments ['extra']"),
        (["--client_placement=gpu"], "--client_placement=gpu: value should be one of <tff|in_process>"),
        (["--centralised", "--client_placement=in_process"], "--client_placement='in_process': expected 'tff' with centralised"),
        # The good set's 3 maps: 1 for validation, 1 for test, 1 for training, so one client at most.
        (["--clients=2"], "--clients=2: expected at most the 1 training maps of --data_root='{good}' (3 maps, 1 for validation, 1 for test)"),
    ],
    "privacy_table": [
        (["--methods=none,bogus"], "--methods='bogus': expected names from"),
        (["--seeds=a"], "--seeds='a': expected comma-separated non-negative integers"),
        (["--rounds=0"], "--rounds=0: expected an integer >= 1"),
        (["--attack_every=0"], "--attack_every=0: expected an integer >= 1"),
        (["--clip_norm=0"], "--clip_norm=0.0: expected a positive number"),
        (["--noise_multiplier=-2"], "--noise_multiplier=-2.0: expected a non-negative number"),
        (["--server_optimizer=lbfgs"], "--server_optimizer=lbfgs"),
        (["--set=bogus=1"], "--set='bogus=1': unknown field 'bogus': expected fields of ExperimentConfig"),
        (["--set=noise_multiplier=0.1"], "--set='noise_multiplier=0.1': expected no noise_multiplier: --noise_multiplier sets it"),
        (["--set=allocator_every=0"], "--set='allocator_every=0': allocator_every=0: expected an integer >= 1"),
        (["--data_root={flat}"], "it lacks png/buildings_complete/"),
        (["--output_dir={unwritable}"], "cannot create the folder"),
        (["--jobs=0"], "--jobs=0: expected an integer >= 1"),
    ],
    "epfl_remnet": [
        (["--k_fraction=1.5"], "--k_fraction=1.5: expected a fraction in (0, 1]"),
        (["--k_fraction=-0.1"], "--k_fraction=-0.1: expected a fraction in (0, 1]"),
        (["--bits=1"], "--bits=1: expected 2..16"),
        (["--bits=17"], "--bits=17: expected 2..16"),
        (["--clients_per_round=91"], "--clients_per_round=91: expected an integer in 1..90"),
        (["--method=bogus"], "--method='bogus': expected one of"),
        (["--scenario=bogus"], "--scenario='bogus': expected one of"),
        (["--sync_period=0"], "--sync_period=0: expected an integer >= 1"),
        (["--ema_decay=1"], "--ema_decay=1.0: expected a decay in [0, 1)"),
        (["--head=bogus"], "--head='bogus': expected one of ('linear', 'mlp')"),
        (["--rounds=0"], "--rounds=0: expected an integer >= 1"),
        (["--client_lr=0"], "--client_lr=0.0: expected a positive learning rate"),
        (["--checkpoint_every=0"], "--checkpoint_every=0: expected an integer >= 1"),
        (["--rounds=8", "--inject_nan_client=8:0"], "--inject_nan_client='8:0': expected ROUND:CLIENT with ROUND in 0..7"),
        (["--map_id=-1"], "--map_id=-1: expected an integer >= 0"),
        (["--map_id=7"], "--data_root="),  # No map 7 in the set: the missing file is named.
        (["--workers=nohost"], "--workers='nohost': --workers entry 'nohost': expected host:port"),
        (["--data_root=" + MISSING], f"--data_root='{MISSING}': expected an existing folder"),
        (["--data_root={flat}"], "it lacks png/buildings_complete/"),
        (["--out={unwritable}"], "--output_dir='{unwritable}': cannot create the folder"),  # --out: an alias.
        (["--client_placement=gpu"], "--client_placement=gpu: value should be one of <tff|in_process|stacked>"),
        (["--method=fedrep"], "--method='fedrep': expected --client_placement=stacked for FedRep and Ditto"),
        (["--test_split=diagonal"], "--test_split='diagonal': expected one of"),
    ],
    "remnet_tables": [
        (["--pareto_k=0"], "--pareto_k='0': expected fractions in (0, 1]"),
        (["--pareto_k=1.5"], "--pareto_k='1.5': expected fractions in (0, 1]"),
        (["--pareto_k=x"], "--pareto_k='x': expected comma-separated numbers"),
        (["--pareto_r=0"], "--pareto_r='0': expected integers >= 1"),
        (["--pareto_r=x"], "--pareto_r='x': expected comma-separated integers >= 1"),
        (["--scenarios=light,bogus"], "--scenarios='light,bogus': expected a non-empty subset of"),
        (["--clients_per_round=0"], "--clients_per_round=0: expected an integer >= 1"),
        (["--clients_per_round=91"], "--clients_per_round=91: expected an integer in 1..90"),
        (["--map_id=-1"], "--map_id=-1: expected an integer >= 0"),
        (["--seeds=0,0"], "--seeds='0,0': expected distinct integers >= 0"),
        (["--detail_scenarios=bogus"], "--detail_scenarios='bogus': expected a subset of"),
        (["--rounds=0"], "--rounds=0: expected an integer >= 1"),
        (["--eval_every=0"], "--eval_every=0: expected an integer >= 1"),
        (["--test_splits=random,diagonal"], "--test_splits='random,diagonal': expected a non-empty subset of"),
        (["--seeds=0,x"], "--seeds='0,x': expected distinct integers >= 0"),
        (["--methods=fedavg,pfl_uncompressed"], "--methods='fedavg,pfl_uncompressed': expected a list holding epfl_remnet"),
        (["--methods=epfl_remnet,fedavg,pfl_uncompressed,fedprox"], "--methods='epfl_remnet,fedavg,pfl_uncompressed,fedprox': expected a subset of"),
        (["--rem_size=300"], "--rem_size=300: expected 256, 512 or 1024"),
        (["--tune_rounds=2"], "--tune_rounds=2: expected an integer >= 5"),
        (["--tune_methods=fedavg,fedprox"], "--tune_methods='fedavg,fedprox': expected a subset of"),
        (["--jobs=0"], "--jobs=0: expected an integer >= 1"),
        (["--shard=2/2"], "--shard='2/2': expected I/N with 0 <= I < N"),
        (["--data_root=" + MISSING], f"--data_root='{MISSING}': expected an existing folder"),
        (["--data_root={flat}"], "it lacks png/buildings_complete/"),
        (["--output_dir={unwritable}"], "--output_dir='{unwritable}': cannot create the folder"),
    ],
    "make_dataset": [
        (["--maps=0"], "--maps=0: expected an integer >= 1"),
        (["--size=8"], "--size=8: expected an integer in 32..4096"),
        (["--simulation=a/b"], "--simulation='a/b': expected a folder name"),
        (["--seed=-1"], "--seed=-1: expected an integer >= 0"),
        (["--workers=0"], "--workers=0: expected an integer >= 1"),
        (["--output_dir={unwritable}"], "--output_dir='{unwritable}': cannot create the folder"),
    ],
}
# Each program's flags that make a run start (so that every case changes only one thing).
BASE = {
    "privacy_radiomap": ["--data_root={good}", "--output_dir={out}/p", "--resolution=32", "--clients=1", "--clients_per_round=1", "--rounds=4"],
    "privacy_table": ["--data_root={good}", "--output_dir={out}/t", "--rounds=4"],
    "epfl_remnet": ["--data_root={good}", "--output_dir={out}/e", "--rounds=8"],
    "remnet_tables": ["--data_root={good}", "--output_dir={out}/r", "--rounds=4", "--jobs=1"],
    "make_dataset": ["--output_dir={out}/d", "--maps=1", "--size=32"],
}


# Argument lists run after a program's CASES in the same harness process, by name.
EXTRA = {
    "epfl_remnet": {"corrupt_data": ["--data_root={corrupt}", "--out={out}/ec"]},
    "privacy_table": {"sequential": BASE["privacy_table"] + ["--jobs=1"]},
    "remnet_tables": {"children": BASE["remnet_tables"] + ["--jobs=2"]},
}


@pytest.fixture(scope="module")
def outcomes(roots):
    """program -> [outcome of BASE alone, then of each case, then of each EXTRA], from one
    harness process a program."""
    results = {}
    for program, cases in CASES.items():
        extra = list(EXTRA.get(program, {}).values())
        arg_lists = [BASE[program]] + [BASE[program] + args for args, _ in cases] + extra
        arg_lists = [[a.format(**roots) for a in args] for args in arg_lists]
        proc = subprocess.run(
            [sys.executable, "-m", "tests.programs.flag_harness", program, json.dumps(arg_lists)],
            cwd=processes.ROOT,
            capture_output=True,
            text=True,
            timeout=processes.TIMEOUT_S,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        results[program] = json.loads(proc.stdout.strip().splitlines()[-1])
    return results


@pytest.mark.parametrize("program", sorted(CASES))
def test_valid_flags_reach_the_run(outcomes, program):
    expected = "started children" if program == "privacy_table" else "started"  # --jobs=3 by default.
    assert outcomes[program][0]["code"] == expected, outcomes[program][0]["stderr"][-2000:]


def test_privacy_table_with_one_job_runs_in_its_own_process(outcomes):
    outcome = outcomes["privacy_table"][1 + len(CASES["privacy_table"])]
    assert outcome["code"] == "started", outcome["stderr"][-2000:]


def test_remnet_tables_with_two_jobs_starts_its_children(outcomes):
    outcome = outcomes["remnet_tables"][1 + len(CASES["remnet_tables"])]
    assert outcome["code"] == "started children", outcome["stderr"][-2000:]


@pytest.mark.parametrize("program, index", [(p, i) for p in sorted(CASES) for i in range(len(CASES[p]))])
def test_a_bad_flag_exits_2_with_one_line_naming_it(outcomes, roots, program, index):
    args, message = CASES[program][index]
    outcome = outcomes[program][index + 1]
    lines = [line for line in outcome["stderr"].splitlines() if line.startswith("error: ")]
    assert outcome["code"] == 2, (args, outcome)
    assert len(lines) == 1 and message.format(**roots) in lines[0], (args, outcome["stderr"][-2000:])


def test_a_corrupt_data_file_is_named_without_a_traceback(roots, tmp_path):
    bad = os.path.join(roots["corrupt"], "gain", "DPM", "0_1.png")
    r = processes.run(
        "programs.privacy_radiomap",
        f"--data_root={roots['corrupt']}",
        f"--output_dir={tmp_path}",
        "--resolution=32",
        "--clients=1",
        "--clients_per_round=1",
        "--rounds=1",
        "--noprogress",
    )
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"cannot read PNG {bad}" in r.stderr and "Traceback" not in r.stderr
    assert not os.path.exists(tmp_path / "config.json")  # A failed start leaves no run behind.


def test_a_corrupt_gain_file_is_named_by_epfl_remnet(outcomes_corrupt_rem):
    assert outcomes_corrupt_rem["code"] == 2 and "cannot read PNG" in outcomes_corrupt_rem["stderr"]
    assert "0_1.png" in outcomes_corrupt_rem["stderr"] and "Traceback" not in outcomes_corrupt_rem["stderr"]


@pytest.fixture(scope="module")
def outcomes_corrupt_rem(outcomes):
    names = list(EXTRA["epfl_remnet"])
    return outcomes["epfl_remnet"][1 + len(CASES["epfl_remnet"]) + names.index("corrupt_data")]
