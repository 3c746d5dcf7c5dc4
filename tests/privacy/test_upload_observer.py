"""The deployment observer's search (`privacy.upload_observer`) on uploads drawn from its own
first-order model: random candidate gradients, an upload tanh(sum of the true candidates' gradients
/ (n s)), so that the search, the count rule and the sum over clients are tested without a network
(tests/experiments/test_deployment_observer.py runs them on a RadioUNet's real uploads)."""

import dataclasses

import numpy as np
import pytest

from tff_radiomap.privacy import upload_observer

D = 3000


def _client(rng, maps=(7, 9), per_map=30, truth_per_map=(2, 1), told=True, weight=1.0):
    gradients = rng.normal(size=(per_map * len(maps), D)).astype(np.float32)
    coords = rng.uniform(0, 256, size=(len(gradients), 2))
    map_of = np.repeat(maps, per_map)
    chosen = np.concatenate([rng.choice(np.flatnonzero(map_of == m), k, replace=False) for m, k in zip(maps, truth_per_map)])
    counts = {m: k for m, k in zip(maps, truth_per_map) if k}
    client = upload_observer.ClientCandidates(gradients, coords, map_of, samples=len(chosen), counts=counts if told else None, weight=weight)
    return client, chosen


def _upload(client, chosen, config):
    """The model's upload of the client holding `chosen` (the search's own `_Search` model)."""
    search = upload_observer._Search(np.ones(D, np.float32), [client], config, config.scales[0])
    return search._model(0, client.gradients[chosen].sum(0), len(chosen))


def _found(located, client, k=0):
    return sorted(map(tuple, np.concatenate(list(located.positions[k].values())).round(6)))


def _true(client, chosen):
    return sorted(map(tuple, client.coords[chosen].round(6)))


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_the_observer_finds_the_candidates_behind_an_upload_of_its_model(optimizer):
    rng = np.random.default_rng(0)
    client, chosen = _client(rng, truth_per_map=(3, 2))
    config = upload_observer.ObserverConfig(optimizer=optimizer, scales=(1.0,))
    located = upload_observer.locate(_upload(client, chosen, config), [client], config)
    assert _found(located, client) == _true(client, chosen)
    assert {m: len(v) for m, v in located.positions[0].items()} == {7: 3, 9: 2}
    assert located.fit == pytest.approx(1.0, abs=1e-5)


def test_the_count_rule_finds_how_many_transmitters_each_map_holds():
    rng = np.random.default_rng(1)
    for truth_per_map in ((1, 0), (1, 1), (2, 1)):
        client, chosen = _client(rng, truth_per_map=truth_per_map, told=False)
        config = upload_observer.ObserverConfig(told=False, max_per_map=6, scales=(1.0,))
        y = _upload(client, chosen, dataclasses.replace(config, told=True))
        located = upload_observer.locate(y, [client], config)
        assert {m: len(v) for m, v in located.positions[0].items() if len(v)} == {m: k for m, k in zip((7, 9), truth_per_map) if k}
        assert _found(located, client) == _true(client, chosen)


def test_the_observer_of_a_sum_splits_it_over_the_clients():
    rng = np.random.default_rng(2)
    (a, chosen_a), (b, chosen_b) = _client(rng, maps=(1, 2), weight=1.0), _client(rng, maps=(3, 4), weight=0.5)
    config = upload_observer.ObserverConfig(scales=(1.0,))
    parts = [_upload(c, chosen, config) for c, chosen in ((a, chosen_a), (b, chosen_b))]
    y = 1.0 * parts[0] / np.linalg.norm(parts[0]) + 0.5 * parts[1] / np.linalg.norm(parts[1])
    located = upload_observer.locate(y, [a, b], config)
    assert _found(located, a, 0) == _true(a, chosen_a) and _found(located, b, 1) == _true(b, chosen_b)


def test_bad_candidates_and_counts_are_refused():
    rng = np.random.default_rng(3)
    client, _ = _client(rng)
    with pytest.raises(ValueError, match="a total of samples"):
        upload_observer.ClientCandidates(client.gradients, client.coords, client.maps, samples=5, counts={7: 1})
    with pytest.raises(ValueError, match="one each per candidate"):
        upload_observer.ClientCandidates(client.gradients[:3], client.coords, client.maps, samples=1, counts={7: 1})
    with pytest.raises(ValueError, match="coordinates"):
        upload_observer.locate(np.ones(D + 1), [client])
    with pytest.raises(ValueError, match="told observer"):
        upload_observer.locate(np.ones(D), [dataclasses.replace(client, counts=None)])
