"""The distributed DP accountant against the reference formulas (google-research/federated
`distributed_dp/accounting_utils.py`, rewritten here in the reference's own units: unscaled
sensitivities, the scale s, unscaled noise stddevs), against TFF 0.87's own calibration, and in its
limits (more noise, less epsilon; fine grids, the continuous Gaussian)."""

import math

import dp_accounting
import numpy as np
import pytest

from tff_radiomap.privacy import ddp_accounting as ddp

ORDERS = ddp.DDP_ORDERS
DELTA = 1e-5
D_MODEL = 125_500  # Coordinates of the radio-map model's update.


def gaussian_epsilon(z, rounds, orders=ORDERS):
    event = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), rounds)
    return dp_accounting.rdp.RdpAccountant(list(orders)).compose(event).get_epsilon(DELTA)


# --- The reference's formulas, in its units (rounding by the reference's own bounds). ---


def reference_rounded_bounds(l2, scale, beta, dim):
    """Unscaled L2 and L1 bounds after stochastic rounding at scale s (reference's rounded_*_norm_bound)."""
    scaled = l2 * scale
    l2_rounded = scaled + math.sqrt(dim)
    if beta > 0:
        l2_rounded = min(l2_rounded, math.sqrt(scaled**2 + dim / 4 + math.sqrt(2 * math.log(1 / beta)) * (scaled + math.sqrt(dim) / 2)))
    l1_rounded = l2_rounded * min(math.sqrt(dim), l2_rounded)
    return l2_rounded / scale, l1_rounded / scale


def reference_skellam_rdp(a, l1, l2, central_var, scale):
    """Skellam RDP with unscaled sensitivities l1, l2 and unscaled central variance, at scale s."""
    s = scale
    return a * l2**2 / (2 * central_var) + min(((2 * a - 1) * s * l2**2 + 6 * l1) / (4 * s**3 * central_var**2), 3 * l1 / (2 * s * central_var))


def reference_dgauss_rdp(a, l1, l2, local_stddev, num_clients, dim, scale):
    """Distributed DGauss RDP with unscaled sensitivities and unscaled local stddev, at scale s."""
    tau = 10 * sum(math.exp(-2 * (math.pi * local_stddev * scale) ** 2 * k / (k + 1)) for k in range(1, num_clients))
    l1_scale, l2_scale = l1 / (math.sqrt(num_clients) * local_stddev), l2 / (math.sqrt(num_clients) * local_stddev)
    return min(
        a / 2 * l2_scale**2 + tau * dim,
        a / 2 * (l2_scale**2 + 2 * l1_scale * tau + tau**2 * dim),
        a / 2 * (l2_scale + math.sqrt(dim) * tau) ** 2,
    )


# --- The closed forms. ---


def test_skellam_rdp_by_hand_in_both_branches():
    # a=2, D2=2, D1=4, mu=1: 2*4/2 + min((3*4 + 24)/4, 3*4/2) = 4 + min(9, 6) = 10.
    assert ddp.skellam_rdp([2], 4, 2, 1) == pytest.approx([10.0], rel=1e-12)
    # a=2, D2=1, D1=1, mu=10: 2/20 + min((3 + 6)/400, 3/20) = 0.1 + 0.0225.
    assert ddp.skellam_rdp([2], 1, 1, 10) == pytest.approx([0.1225], rel=1e-12)


@pytest.mark.parametrize("a, l2, dim, local_stddev, scale, n", [(7, 0.8, 50, 0.3, 40.0, 4), (2, 0.02, 400, 0.03, 20.0, 5), (3, 1.0, 9, 0.5, 1.0, 1)])
def test_both_mechanisms_match_the_reference_form_in_its_units(a, l2, dim, local_stddev, scale, n):
    """Integer units (D = s l, mu = n (s sigma)^2) against the reference's unscaled form."""
    l2_r, l1_r = reference_rounded_bounds(l2, scale, 0.0, dim)
    central_var = n * local_stddev**2
    ours = ddp.skellam_rdp([a], l1_r * scale, l2_r * scale, central_var * scale**2)[0]
    assert ours == pytest.approx(reference_skellam_rdp(a, l1_r, l2_r, central_var, scale), rel=1e-12)
    ours = ddp.distributed_dgauss_rdp([a], l1_r * scale, l2_r * scale, central_var * scale**2, n, dim)[0]
    assert ours == pytest.approx(reference_dgauss_rdp(a, l1_r, l2_r, local_stddev, n, dim, scale), rel=1e-12)


def test_dgauss_uses_each_of_its_bounds():
    """sigma = 0.6 per share makes tau matter: the tau*d bound wins for small d, the L1 bound for
    large d at low order, and with one client (tau = 0) the discrete Gaussian's a D^2 / (2 sigma^2)."""
    tau = ddp.dgauss_tau(0.36, 2)
    assert tau == pytest.approx(10 * math.exp(-2 * math.pi**2 * 0.36 / 2))
    small_d = ddp.distributed_dgauss_rdp([3], 5, 3, 0.72, 2, 9)[0]
    assert small_d == pytest.approx(1.5 * 9 / 0.72 + tau * 9)
    large_d = ddp.distributed_dgauss_rdp([2], 1, 1, 0.72, 2, 100)[0]
    assert large_d == pytest.approx(1 / 0.72 + 2 * tau / math.sqrt(0.72) + tau**2 * 100)
    assert large_d < 1 / 0.72 + tau * 100
    assert ddp.distributed_dgauss_rdp([5], 4, 2, 9.0, 1, 1000)[0] == pytest.approx(5 * 4 / 18)


def test_orders_must_be_integers_and_sigma_at_least_half():
    with pytest.raises(ValueError, match="integer RDP orders"):
        ddp.skellam_rdp([1.5, 2], 1, 1, 1)
    with pytest.raises(ValueError, match="sigma >= 1/2"):
        ddp.distributed_dgauss_rdp([2], 1, 1, 0.2, 2, 10)
    assert np.all(np.isinf(ddp.skellam_rdp([2, 3], 1, 1, 0.0)))


# --- TFF's calibration and the reference's pipeline. ---


@pytest.mark.parametrize(
    "mechanism, rotation, beta, z, n, bits, dim",
    [("distributed_skellam", "dft", 0.0, 1.0, 6, 20, 1001), ("distributed_dgauss", "hd", math.exp(-0.5), 0.5, 10, 16, 1001)],
)
def test_calibration_is_the_one_tff_sets(tff_runtime, mechanism, rotation, beta, z, n, bits, dim):
    import tensorflow_federated as tff
    from tensorflow_federated.python.aggregators import distributed_dp

    factory = distributed_dp.DistributedDpSumFactory(z, n, bits, 1.0, beta=beta, mechanism=mechanism, rotation_type=rotation)
    state = factory.create(tff.TensorType(np.float32, [dim])).initialize()
    inner = state[0]["inner_agg"]
    query = inner["inner_agg_process"].query_state
    ours = ddp.tff_ddp_calibration(z, n, bits, 1.0, dim, beta=beta, mechanism=mechanism, rotation_type=rotation)
    assert ours.scale == pytest.approx(float(inner["scale_factor"]), rel=1e-6)
    assert ours.event.l2_sensitivity == pytest.approx(float(query.l2_norm_bound), rel=1e-6)
    assert ours.local_stddev == pytest.approx(float(query.local_stddev), rel=1e-6)
    assert ours.event.l2_sensitivity > ours.scale * 1.0  # Inflated by rounding.
    if mechanism == "distributed_skellam":
        assert abs(ours.event.l1_sensitivity - int(query.l1_norm_bound)) <= 1
    else:
        assert ours.event.variance == n * math.ceil(float(query.local_stddev)) ** 2


@pytest.mark.parametrize("mechanism", ddp.MECHANISMS)
@pytest.mark.parametrize("bits, z, dim, n", [(20, 1.0, D_MODEL, 6), (9, 2.0, 1000, 8)])
def test_epsilon_matches_the_reference_pipeline_at_tff_scale(mechanism, bits, z, dim, n):
    """The reference's epsilon (its rounding bounds, its RDP, dp_accounting's conversion) at the
    scale TFF picks; ours adds TFF's 1e-5 norm leeway and ceilings, hence rel 1e-3, not 1e-12."""
    cal = ddp.tff_ddp_calibration(z, n, bits, 1.0, dim, mechanism=mechanism)
    s = cal.scale
    l2_r, l1_r = reference_rounded_bounds(1.0, s, 0.0, cal.padded_dim)
    local = z / math.sqrt(n)
    if mechanism == "distributed_skellam":
        rdp = [reference_skellam_rdp(a, l1_r, l2_r, n * local**2, s) for a in ORDERS]
    else:
        # TFP's sampler draws N_Z(0, sigma^2) with sigma = ceil(s * local stddev): the noise added.
        sampled = math.ceil(local * s) / s
        rdp = [reference_dgauss_rdp(a, l1_r, l2_r, sampled, n, cal.padded_dim, s) for a in ORDERS]
        unrounded = [reference_dgauss_rdp(a, l1_r, l2_r, local, n, cal.padded_dim, s) for a in ORDERS]
        if sampled > 1.01 * local:  # A coarse grid: the ceiling adds noise that counts.
            assert cal.epsilon(60, DELTA) < 0.99 * dp_accounting.rdp.compute_epsilon(ORDERS, 60 * np.array(unrounded), DELTA)[0]
    reference = dp_accounting.rdp.compute_epsilon(ORDERS, 60 * np.array(rdp), DELTA)[0]
    assert cal.epsilon(60, DELTA) == pytest.approx(reference, rel=1e-3)


def test_tff_refuses_what_we_refuse():
    with pytest.raises(ValueError, match="bits=2"):
        ddp.tff_ddp_calibration(1.0, 6, 2, 1.0, 100)
    with pytest.raises(ValueError, match="mechanism"):
        ddp.tff_ddp_calibration(1.0, 6, 20, 1.0, 100, mechanism="gaussian")
    assert ddp.padded_dim(125_500, "hd") == 131_072 and ddp.padded_dim(125_501, "dft") == 125_502


# --- Limits. ---


@pytest.mark.parametrize("mechanism", ddp.MECHANISMS)
def test_more_noise_less_epsilon(mechanism):
    eps = [ddp.tff_ddp_calibration(z, 6, 20, 1.0, D_MODEL, mechanism=mechanism).epsilon(60, DELTA) for z in (0.5, 1, 2, 4, 8, 16)]
    assert all(a > b for a, b in zip(eps, eps[1:])), eps
    assert eps[-1] < eps[0] / 20
    assert ddp.tff_ddp_calibration(0.0, 6, 20, 1.0, D_MODEL, mechanism=mechanism).epsilon(60, DELTA) == np.inf
    # At a fixed sensitivity too: the RDP curves fall with the variance, order by order.
    curves = [ddp.DistributedDpEvent(mechanism, 3000.0, 100.0, v, 6, 1000).rdp() for v in (1e3, 1e4, 1e5)]
    assert np.all(curves[0] > curves[1]) and np.all(curves[1] > curves[2])


@pytest.mark.parametrize("mechanism", ddp.MECHANISMS)
@pytest.mark.parametrize("z", [1.0, 2.0, 4.0])
def test_fine_grid_approaches_the_continuous_gaussian(mechanism, z):
    """20 bits, 6 clients, 125 500 coordinates: scale ~1e5, the L2 bound inflated ~0.3 %."""
    cal = ddp.tff_ddp_calibration(z, 6, 20, 1.0, D_MODEL, mechanism=mechanism)
    ratio = cal.epsilon(60, DELTA) / gaussian_epsilon(z, 60)
    assert 1.0 <= ratio < 1.02, ratio


@pytest.mark.parametrize("mechanism", ddp.MECHANISMS)
def test_coarse_grid_pays_for_rounding(mechanism):
    """12 bits: scale ~500, rounding adds sqrt(d) / s ~ 0.7 to a clip of 1: epsilon well above the Gaussian's."""
    cal = ddp.tff_ddp_calibration(2.0, 6, 12, 1.0, D_MODEL, mechanism=mechanism)
    assert cal.inflated_l2_clip > 1.5
    assert cal.epsilon(60, DELTA) > 1.5 * gaussian_epsilon(2.0, 60)


def test_skellam_ignores_the_client_count_the_discrete_gaussian_does_not():
    """At the same central variance, 200 shares of sigma ~0.7 are far from one discrete Gaussian
    (tau d large); a sum of Skellams is exactly Skellam."""
    variance, l2, l1, dim = 200 * 0.5, 10.0, 100.0, 10_000
    sk = [ddp.DistributedDpEvent("distributed_skellam", l1, l2, variance, n, dim).epsilon(10, DELTA) for n in (1, 200)]
    dg = [ddp.DistributedDpEvent("distributed_dgauss", l1, l2, variance, n, dim).epsilon(10, DELTA) for n in (1, 200)]
    assert sk[0] == sk[1]
    assert dg[1] > 2 * dg[0]
    assert dg[0] == pytest.approx(gaussian_epsilon(math.sqrt(variance) / l2, 10), rel=1e-9)  # One DG share: the Gaussian's RDP.


# --- Composition and per-client accounting. ---


def test_composes_with_dp_accounting_events_and_per_client():
    event = ddp.tff_ddp_calibration(2.0, 6, 20, 1.0, D_MODEL).event
    assert not dp_accounting.rdp.RdpAccountant().supports(event)  # Why DdpRdpAccountant exists.
    mixed = ddp.DdpRdpAccountant().compose(dp_accounting.ComposedDpEvent([dp_accounting.SelfComposedDpEvent(event, 3), dp_accounting.GaussianDpEvent(1.5)]))
    gauss = dp_accounting.rdp.RdpAccountant(list(ORDERS)).compose(dp_accounting.GaussianDpEvent(1.5))
    np.testing.assert_allclose(mixed._rdp, 3 * event.rdp() + gauss._rdp, rtol=1e-12)
    eps = ddp.per_client_epsilon(event, {"a": 26, "b": 60, "c": 0}, DELTA)
    assert eps["a"] == event.epsilon(26, DELTA) and eps["b"] == event.epsilon(60, DELTA) and eps["c"] == 0.0
    assert 0 < eps["a"] < eps["b"]


def test_replace_one_doubles_the_sensitivities():
    event = ddp.DistributedDpEvent("distributed_skellam", 400.0, 20.0, 2000.0, 6, 1000)
    doubled = ddp.DistributedDpEvent("distributed_skellam", 800.0, 40.0, 2000.0, 6, 1000)
    replace = ddp.DdpRdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE).compose(event, 5)
    assert replace.get_epsilon(DELTA) == pytest.approx(doubled.epsilon(5, DELTA), rel=1e-12)
    assert replace.get_epsilon(DELTA) > event.epsilon(5, DELTA)
    special = ddp.DdpRdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL)
    assert not special.supports(event)


def test_fewer_participants_less_noise_more_epsilon():
    full = ddp.tff_ddp_calibration(2.0, 6, 20, 1.0, D_MODEL)
    five = ddp.tff_ddp_calibration(2.0, 6, 20, 1.0, D_MODEL, participants=5)
    assert five.event.variance == pytest.approx(full.event.variance * 5 / 6)
    assert five.epsilon(60, DELTA) > full.epsilon(60, DELTA)
