"""What one process shares between stacked runs (the traced round, the prediction graph) changes no result."""

import dataclasses
import json

import numpy as np
import pytest

from baselines import remnet_methods
from tests.rem_tiny import tiny_config, tiny_scenario
from tff_radiomap.learning import epfl_stacked, rem_runner, stacked_runner


def _with_val(scenario):
    clients = [dataclasses.replace(c, x_val=c.x_train[:2] + 0.5, y_val=c.y_train[:2].copy()) for c in scenario.clients]
    return dataclasses.replace(scenario, clients=clients)


def _rows(run_dir):
    """metrics.csv without its timing column."""
    lines = open(f"{run_dir}/metrics.csv").read().splitlines()
    drop = stacked_runner.CSV_FIELDS.index("round_s")
    return [[v for i, v in enumerate(line.split(",")) if i != drop] for line in lines]


def _final(run_dir):
    with open(f"{run_dir}/final.json") as f:
        return {k: v for k, v in json.load(f).items() if k != "wall_s"}


@pytest.mark.parametrize("name", ["epfl_remnet", "pfedgp", "ditto"])
def test_a_reused_trace_gives_bit_identical_runs(tmp_path, name):
    scenario = _with_val(tiny_scenario(train_sizes=(5, 9, 12)))  # Short clients: steps where some are inactive.
    method = remnet_methods.method(name, tiny_config(k_fraction=0.3, bits=8, sync_period=2, ema_decay=0.5))
    run = rem_runner.RunConfig(rounds=4, eval_every=2, clients_per_round=2, seed=1)
    quiet = lambda m: None  # noqa: E731
    stacked_runner.run_stacked(str(tmp_path / "warm_up"), scenario, method, dataclasses.replace(run, seed=0), log=quiet, processes=(shared := {}))
    stacked_runner.run_stacked(str(tmp_path / "reused"), scenario, method, run, log=quiet, processes=shared)
    stacked_runner.run_stacked(str(tmp_path / "fresh"), scenario, method, run, log=quiet, processes={})
    (process,) = shared.values()  # One process for both runs, each of its rounds (sync, non-sync) traced at most once.
    assert all(f.experimental_get_tracing_count() <= 1 for f in process._rounds.values())
    assert process._predict.experimental_get_tracing_count() == 1
    assert _rows(tmp_path / "reused") == _rows(tmp_path / "fresh")
    assert _final(tmp_path / "reused") == _final(tmp_path / "fresh")
    assert _final(tmp_path / "reused") != _final(tmp_path / "warm_up")  # Another seed: another run.


def _eager_prediction(process, state, train, x):
    """The personalized models' predictions computed op by op outside any graph (the reference)."""
    if process.stacked.ditto:
        params = {k[len(epfl_stacked.PERSONAL) :]: v for k, v in state["private"].items()}
    else:
        params = {k: np.repeat(np.asarray(v)[None], x.shape[0], 0) for k, v in process.evaluated_shared(state).items()}
        params.update(state["private"])
    params = {k: np.asarray(v) for k, v in params.items()}
    if process.local.name == "deep_kernel_gp":
        valid = (np.arange(train["x"].shape[1])[None, :] < train["num_examples"][:, None]).astype(np.float32)
        return epfl_stacked.gp_predict(params, train["x"], train["y"], valid, x).numpy()
    return epfl_stacked.remnet_forward(params, x).numpy()


@pytest.mark.parametrize("name", ["epfl_remnet", "pfedgp", "ditto"])
def test_validation_and_test_from_one_prediction_equal_each_split_alone(name):
    scenario = _with_val(tiny_scenario(train_sizes=(5, 9, 12)))
    method = remnet_methods.method(name, tiny_config(k_fraction=0.3, sync_period=1, ema_decay=0.5))
    process = epfl_stacked.StackedProcess(method.config, method.local)
    data = stacked_runner.stacked_data(scenario)
    state = process.initial_state(3, [0, 1, 2])
    for r in range(2):
        state, _ = process.next(state, data, np.ones(3, bool), r)
    evaluate = stacked_runner.StackedEvaluator(process, scenario, data)
    both = evaluate.both(state)
    # pFedGP solves a float32 Cholesky system: traced and eager differ by up to ~3e-5 relative.
    rtol = 1e-4 if name == "pfedgp" else 1e-5
    for split in ("val", "test"):
        alone = evaluate(state, split)
        np.testing.assert_allclose(both[split].per_client_rmse, alone.per_client_rmse, rtol=rtol)
        assert both[split].macro_rmse == pytest.approx(alone.macro_rmse, rel=rtol)
        x = evaluate.inputs[split]
        np.testing.assert_allclose(process.predict(state, data, x), _eager_prediction(process, state, data, x), rtol=rtol, atol=1e-6)
    assert both["val"].macro_rmse != both["test"].macro_rmse
    assert process._predict.experimental_get_tracing_count() <= 2  # Any number of held-out points: one relaxed trace.


def test_a_process_builds_each_seeds_initial_model_once(monkeypatch):
    # Building one sets TF's global seed, which drops every instantiated function's kernels: built
    # per run, each run's first round would pay graph optimization again.
    method = remnet_methods.method("fedrep", tiny_config())
    process = epfl_stacked.StackedProcess(method.config, method.local, seed=0)
    real, built = epfl_stacked.stacked_layout, []
    monkeypatch.setattr(epfl_stacked, "stacked_layout", lambda config, local, seed: built.append(seed) or real(config, local, seed))
    first = process.initial_state(3, [0, 1, 2], model_seed=1)
    again = process.initial_state(3, [0, 1, 2], model_seed=1)
    process.initial_state(3, [0, 1, 2], model_seed=0)  # The seed the process was built with.
    assert built == [1]
    expected = real(method.config, method.local, 1)
    for state in (first, again):
        for k, v in zip(expected.shared_keys, expected.layout.initial_shared):
            np.testing.assert_array_equal(state["shared"][k], v)
        for k, v in zip(expected.private_keys, expected.initial_private()):
            np.testing.assert_array_equal(state["private"][k], np.repeat(v[None], 3, 0))
    key = expected.shared_keys[0]
    with pytest.raises(ValueError, match="read-only"):  # A run cannot change the next run's initial model.
        first["shared"][key][...] = 0.0
