import dp_accounting
import numpy as np
import pytest
from tensorflow_privacy.privacy.analysis import compute_dp_sgd_privacy_lib as tfp_lib

from tff_radiomap.privacy import accounting


def test_per_client_epsilon_equals_dp_accounting_directly():
    acc = accounting.PerClientAccountant(delta=1e-5)
    ev = dp_accounting.GaussianDpEvent(3.0)
    for r in range(10):
        acc.record_round([0, 1] if r % 2 else [0], ev)
    assert acc.uploads(0) == 10 and acc.uploads(1) == 5
    for k, n in [(0, 10), (1, 5)]:
        direct = (
            dp_accounting.rdp.RdpAccountant(accounting.DEFAULT_ORDERS)
            .compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(3.0), n))
            .get_epsilon(1e-5)
        )
        assert acc.epsilon(k) == pytest.approx(direct, rel=1e-9)
    assert acc.epsilon(0) > acc.epsilon(1)
    assert acc.summary()["max_epsilon"] == pytest.approx(acc.epsilon(0))


def test_mixed_events_compose():
    acc = accounting.PerClientAccountant(delta=1e-6)
    acc.record_round(["a"], dp_accounting.GaussianDpEvent(2.0))
    acc.record_round(["a"], dp_accounting.GaussianDpEvent(4.0))
    direct = accounting.epsilon_of(dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(2.0), dp_accounting.GaussianDpEvent(4.0)]), 1e-6)
    assert acc.epsilon("a") == pytest.approx(direct, rel=1e-9)


def test_uniform_noise_agrees_with_tf_privacy_statement():
    """n full-batch Gaussian uploads = TF-Privacy's DP-SGD example privacy with q = 1, n epochs."""
    acc = accounting.PerClientAccountant(delta=1e-5)
    for _ in range(25):
        acc.record_round([7], dp_accounting.GaussianDpEvent(3.0))
    ours = acc.epsilon(7)
    theirs = tfp_lib._compute_dp_sgd_example_privacy(num_epochs=25, noise_multiplier=3.0, example_delta=1e-5, used_microbatching=False)
    assert ours == pytest.approx(theirs, rel=0.02)  # Same RDP accountant, different order grids.
    deprecated_eps, _ = tfp_lib.compute_dp_sgd_privacy(n=100, batch_size=100, noise_multiplier=3.0, epochs=25, delta=1e-5)
    assert ours == pytest.approx(deprecated_eps, rel=0.02)


def test_no_guarantee_is_reported_as_none():
    acc = accounting.PerClientAccountant()
    acc.record_round([1], dp_accounting.GaussianDpEvent(3.0))
    acc.record_round([1, 2], None)
    assert acc.epsilon(1) is None and acc.epsilon(2) is None
    assert acc.summary()["max_epsilon"] is None
    with pytest.raises(ValueError, match="delta=2"):
        accounting.PerClientAccountant(delta=2)


@pytest.mark.parametrize(
    "name, multiplier",
    [("uniform", 3.0), ("adaptive_floor", 0.9 / 0.5), ("clip", None), ("directed", None), ("adaptive", None)],
)
def test_each_factory_event_gives_the_epsilon_of_dp_accounting_directly(name, multiplier):
    """What the factories claim per upload, composed by our accountant over uneven participation,
    equals dp_accounting's RDP accountant on the Gaussian mechanism they are (or None)."""
    from tff_radiomap.aggregators import AdaptiveGroupNoiseFactory, ClipOnlyFactory, DirectedNoiseFactory, UniformNoiseFactory
    from tff_radiomap.privacy.groups import ParameterGroups

    groups = ParameterGroups(("sensitive", "rest"), (True, False), (np.array([0, 0, 1, 1], np.int32),))
    factory = {
        "uniform": lambda: UniformNoiseFactory(0.5, 3.0, groups=groups),
        "adaptive_floor": lambda: AdaptiveGroupNoiseFactory(0.5, 3.0, groups=groups, sigma_min=0.9),
        "clip": lambda: ClipOnlyFactory(0.5, groups=groups),
        "directed": lambda: DirectedNoiseFactory(0.5, 3.0, groups=groups),
        "adaptive": lambda: AdaptiveGroupNoiseFactory(0.5, 3.0, groups=groups),
    }[name]()
    event = factory.dp_event()
    acc = accounting.PerClientAccountant(delta=1e-5)
    for r in range(12):
        acc.record_round([0, 1] if r % 3 == 0 else [0], event)
    if multiplier is None:
        assert event is None and acc.epsilon(0) is None
        return
    assert event == dp_accounting.GaussianDpEvent(pytest.approx(multiplier))
    for client, uploads in ((0, 12), (1, 4)):
        direct = dp_accounting.rdp.RdpAccountant(accounting.DEFAULT_ORDERS).compose(dp_accounting.GaussianDpEvent(multiplier), uploads).get_epsilon(1e-5)
        assert acc.epsilon(client) == pytest.approx(direct, rel=1e-9)


def test_state_round_trips_through_json_in_order_and_counts_are_summarised():
    import json

    acc = accounting.PerClientAccountant(delta=1e-5)
    acc.record_round([2, 0], dp_accounting.GaussianDpEvent(0.7))
    acc.record_round([0], dp_accounting.GaussianDpEvent(1.3))
    acc.record_round([0, 5], dp_accounting.GaussianDpEvent(0.7))
    assert acc.uploads(9) == 0 and 9 not in acc.summary()["per_client"]  # Asking does not add a client.
    back = accounting.PerClientAccountant.from_state(json.loads(json.dumps(acc.state())), delta=1e-5)
    assert back.state() == acc.state()
    assert back.summary() == acc.summary()  # Bit for bit: the same events composed in the same order.
    s = acc.summary()
    assert (s["clients_with_uploads"], s["max_uploads_per_client"]) == (3, 3)
    assert s["max_epsilon"] == acc.epsilon(0) and acc.epsilon(0) > acc.epsilon(2)
    none = accounting.PerClientAccountant.from_state([[1, [[None, 2]]]])
    assert none.epsilon(1) is None and none.summary()["max_uploads_per_client"] == 2
    empty = accounting.PerClientAccountant().summary()
    assert (empty["max_epsilon"], empty["clients_with_uploads"], empty["max_uploads_per_client"]) == (None, 0, 0)
    acc.record_round([3], dp_accounting.LaplaceDpEvent(1.0))
    with pytest.raises(TypeError, match="client 3: event .*LaplaceDpEvent.* has no JSON form"):
        acc.state()


def test_a_factory_that_claims_nothing_has_no_event():
    from tff_radiomap.aggregators.client_perturbation import ClientPerturbationFactory

    class Unclaimed(ClientPerturbationFactory):
        def _client_sigmas(self, extras, clipped_flat, group_ids, groups):
            raise NotImplementedError

    assert Unclaimed(1.0, 3.0).dp_event() is None  # Noise, but no claim made: no guarantee.
