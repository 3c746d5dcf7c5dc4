"""--jobs children claiming runs from one plan: each distinct run once, each child keeping to its traced configurations."""

import os

from baselines import remnet_tables
from tff_radiomap.learning import stacked_runner
from tff_radiomap.learning.epfl_remnet import EpflRemnetConfig


def _config():
    return remnet_tables.TablesConfig(base=EpflRemnetConfig(k_fraction=0.05, sync_period=2), scenarios=("light", "heavy"), seeds=(0, 1), detail_scenarios=())


def _fake_training(monkeypatch, trained):
    """run_stacked replaced by a stub that records the run and traces (caches) its process."""

    def run_stacked(run_dir, scenario, method, run, log, pad_to, processes):
        trained.append(run_dir)
        processes.setdefault(stacked_runner.process_key(method), object())
        return {"macro_rmse": float(len(trained))}

    monkeypatch.setattr(stacked_runner, "run_stacked", run_stacked)
    monkeypatch.setattr(remnet_tables, "load_split", lambda config, split, seed: ({n: None for n in config.scenarios}, 16))


def test_a_run_is_claimed_once(tmp_path):
    planned = remnet_tables.plan(_config())[0]
    assert remnet_tables.claim(str(tmp_path), planned)
    assert not remnet_tables.claim(str(tmp_path), planned)
    assert remnet_tables.claim(str(tmp_path), remnet_tables.plan(_config())[1])


def test_children_train_every_distinct_run_once_keeping_to_their_configurations(tmp_path, monkeypatch):
    config = _config()
    trained = []
    _fake_training(monkeypatch, trained)
    distinct = list(dict.fromkeys(p.key() for p in remnet_tables.plan(config)))
    runs = {p.key(): p for p in remnet_tables.plan(config)}
    taken = [runs[k] for k in distinct[1::2]]  # What another child claimed already.
    claims = str(tmp_path / "claims")
    os.makedirs(claims)
    for planned in taken:
        assert remnet_tables.claim(claims, planned)
    out = str(tmp_path / "out")
    results = remnet_tables.run_all(config, out, log=lambda m: None, claims_dir=claims)
    mine = [runs[k] for k in distinct[0::2]]
    assert sorted(trained) == sorted(p.run_dir(out) for p in mine)
    assert {(p.split, p.seed, p.scenario, p.label) for p in mine} <= set(results)
    assert not {(p.split, p.seed, p.scenario, p.label) for p in taken} & set(results)
    # Keeping to a configuration: its runs come one after the other, not interleaved with others'.
    order = [next(p for p in mine if p.run_dir(out) == d) for d in trained]
    switches = sum(stacked_runner.process_key(a.method) != stacked_runner.process_key(b.method) for a, b in zip(order, order[1:]))
    assert switches == len({stacked_runner.process_key(p.method) for p in mine}) - 1
    assert len(os.listdir(claims)) == len(distinct)


def test_without_claims_the_runs_go_in_plan_order(tmp_path, monkeypatch):
    config = _config()
    trained = []
    _fake_training(monkeypatch, trained)
    out = str(tmp_path / "out")
    remnet_tables.run_all(config, out, log=lambda m: None)
    runs = remnet_tables.plan(config)
    first = {p.key(): p for p in reversed(runs)}  # First occurrence of each key.
    assert trained == [p.run_dir(out) for p in runs if first[p.key()] is p]
