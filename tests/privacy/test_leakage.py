import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tff_radiomap.data import radiomapseer, synthetic, twin
from tff_radiomap.learning import local_training, radiounet_process
from tff_radiomap.models import phases, radiounet
from tff_radiomap.models.phases import Phase
from tff_radiomap.privacy import groups as G
from tff_radiomap.privacy import leakage


def _mask_partition():
    # Two tensors (3, 2) and (6,), three groups; group 2 straddles both tensors.
    ids = (np.array([[0, 0], [1, 2], [1, 1]], np.int32), np.array([2, 2, 0, 1, 2, 2], np.int32))
    return G.ParameterGroups(("a", "b", "c"), (True, True, False), ids)


def _subspace_partition(d=12, blocks=(1, 3), seed=0):
    basis, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, sum(blocks))))
    return G.SubspaceGroups(((3, 2), (6,)), blocks, basis=basis.astype(np.float32))


def _uploads(n=60, d=12, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, d)) * rng.uniform(0.2, 3.0, d) + rng.normal(size=d)).astype(np.float32)


def test_mask_shares_match_numpy_and_sum_to_one():
    u = _uploads()
    views = leakage.views_of(_mask_partition())
    flat = np.concatenate([a.ravel() for a in _mask_partition().ids])
    var, mean2 = u.astype(np.float64).var(0), u.astype(np.float64).mean(0) ** 2
    want_var = np.array([var[flat == g].sum() for g in range(3)]) / var.sum()
    want_mean2 = np.array([mean2[flat == g].sum() for g in range(3)]) / mean2.sum()
    np.testing.assert_allclose(leakage.variance_shares(u, views), want_var, rtol=1e-5)
    np.testing.assert_allclose(leakage.squared_mean_shares(u, views), want_mean2, rtol=1e-5)
    assert leakage.variance_shares(u, views).sum() == pytest.approx(1.0, abs=1e-6)
    assert [v.size for v in views] == [3, 4, 5]


def test_subspace_shares_match_projections_and_sum_to_one():
    u = _uploads()
    groups = _subspace_partition()
    views = leakage.views_of(groups)
    v = groups.basis.astype(np.float64)
    projectors = [v[:, :1] @ v[:, :1].T, v[:, 1:] @ v[:, 1:].T, np.eye(12) - v @ v.T]
    z = u.astype(np.float64) - u.mean(0)
    m = u.astype(np.float64).mean(0)
    want_var = np.array([np.sum((z @ p) ** 2) for p in projectors]) / np.sum(z**2)
    want_mean2 = np.array([np.sum((m @ p) ** 2) for p in projectors]) / np.sum(m**2)
    np.testing.assert_allclose(leakage.variance_shares(u, views), want_var, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(leakage.squared_mean_shares(u, views), want_mean2, rtol=1e-4, atol=1e-6)
    assert leakage.squared_mean_shares(u, views).sum() == pytest.approx(1.0, abs=1e-5)
    assert [x.size for x in views] == [1, 3, 8] and [x.kind for x in views] == ["span", "span", "complement"]
    # What the observer reads: coefficients of a block, the projected upload for the residual.
    np.testing.assert_allclose(views[1].features(u), u @ groups.basis[:, 1:], rtol=1e-5)
    np.testing.assert_allclose(views[2].features(u), u @ projectors[2], atol=1e-4)


def test_empty_mask_groups_are_left_out():
    cfg = radiounet.RadioUNetConfig(resolution=16, width=0.125)
    names = [v.name for v in leakage.views_of(G.radiounet_groups(cfg, Phase.STAGE1))]
    assert names == ["stage1_transmitter", "residual"]  # stage 2 is not uploaded in stage 1.


@pytest.mark.parametrize("which", [0, 1, 2])
def test_noise_is_confined_to_its_group_at_the_asked_energy(which):
    mask_view = leakage.views_of(_mask_partition())[1]
    sub = leakage.views_of(_subspace_partition())
    view = [mask_view, sub[1], sub[2]][which]
    rng = np.random.default_rng(3)
    draws = np.stack([view.noise(rng, 2.0, 12) for _ in range(4000)])
    assert np.mean(np.sum(draws**2, 1)) == pytest.approx(2.0, rel=0.05)
    # P_g n = n: nothing outside the group.
    np.testing.assert_allclose(view.energy(draws), np.sum(draws**2, 1), rtol=1e-4, atol=1e-9)


def test_loss_per_energy_is_half_the_curvature_whatever_the_gradient():
    h = np.linspace(1.0, 4.0, 12)  # Diagonal Hessian.
    w = np.random.default_rng(0).normal(size=12)
    gradient = 50.0 * np.ones(12)  # A first-order term far above the second-order one.
    loss = lambda delta: float(gradient @ (w if delta is None else w + delta) + 0.5 * np.sum(h * (w if delta is None else w + delta) ** 2))  # noqa: E731
    view = leakage.views_of(_mask_partition())[1]
    got = leakage.loss_per_energy(loss, view, 12, (0.01, 0.1), 200, np.random.default_rng(1))
    assert got == pytest.approx(0.5 * h[view.index].mean(), rel=0.1)


def test_spectrum_projecting_out_a_basis_spanning_the_leak_leaves_the_constant_guess():
    rng = np.random.default_rng(0)
    n, d = 400, 60
    coords = rng.uniform(0, 256, size=(n, 2))
    leak, _ = np.linalg.qr(rng.normal(size=(d, 2)))
    u = (((coords - 128) / 64) @ leak.T + 0.05 * rng.normal(size=(n, d))).astype(np.float32)
    basis, _ = np.linalg.qr(np.concatenate([leak, rng.normal(size=(d, 4))], axis=1))  # Spans the leak, and more.
    curve = leakage.spectrum(u[:300], coords[:300], u[300:], coords[300:], basis.astype(np.float32), (0, 1, leakage.ALL, 50))
    ks = [k for k, _ in curve]
    assert ks == [0, 1, 6]  # 'all' is the basis rank; k above it is clipped to it.
    ratios = {k: r.ratio for k, r in curve}
    assert ratios[0] < 0.1 and ratios[6] > 0.9
    assert curve[0][1].constant_rmse_m == pytest.approx(curve[-1][1].constant_rmse_m)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = synthetic.generate_dataset(str(tmp_path_factory.mktemp("rms")), synthetic.DatasetSpec(maps=4, transmitters=8, size=64, seed=2), progress=False)
    twin_root = twin.ensure_twin(root, positions=4, out_root=str(tmp_path_factory.mktemp("twin") / "twin"))
    read = lambda r: radiomapseer.RadioMapSeer(radiomapseer.LoaderConfig(root=r, resolution=16))  # noqa: E731
    cfg = radiounet.RadioUNetConfig(resolution=16, width=0.125)
    state = leakage.ModelState(cfg, phases.initial_weights(cfg, 0), "tiny", val_fraction=0.25, test_fraction=0.25)
    return state, read(root), read(twin_root)


def test_weight_noise_loss_is_the_validation_mse_and_restores_the_weights(tiny):
    state, data, _ = tiny
    model = phases.build_phase_model(state.model_config, Phase.STAGE1)
    phases.set_phase_weights(model, state.weights, Phase.STAGE1)
    a = data.arrays([0])
    loss = leakage.WeightNoiseLoss(model, a["x"], a["y"], batch_size=3)
    want = float(tf.reduce_mean(tf.square(model(a["x"]) - a["y"])))
    assert loss(None) == pytest.approx(want, rel=1e-5)
    before = [v.numpy() for v in model.trainable_variables]
    d = sum(b.size for b in before)
    assert loss(np.full(d, 0.05)) != pytest.approx(want, rel=1e-4)
    for v, b in zip(model.trainable_variables, before):
        np.testing.assert_array_equal(v.numpy(), b)


def test_audit_on_tiny_data_gives_every_partition_and_the_spectrum(tiny):
    state, data, twin_data = tiny
    config = leakage.AuditConfig(train_traces=24, test_traces=8, k_per_map=2, blocks=2, ks=(0, 4, leakage.ALL), energies=(0.1,), draws=1, val_samples=8)
    result = leakage.audit(
        state,
        Phase.STAGE1,
        data,
        twin_data,
        config,
        log=lambda *_: None,
        optimizer=radiounet_process.build_optimizer(state.client_optimizer, state.client_learning_rate),
        local_updates=local_training.local_updates,
    )
    by_partition = {}
    for row in result.groups:
        by_partition.setdefault(row.partition, []).append(row)
        assert np.isfinite(row.ratio) and row.attack_rmse_m > 0 and np.isfinite(row.loss_per_energy)
    assert set(by_partition) == {"paper", "layers", "leakage"}
    assert [r.group for r in by_partition["leakage"]] == ["leak0", "leak1", "residual"]
    for rows in by_partition.values():
        assert sum(r.variance_share for r in rows) == pytest.approx(1.0, abs=1e-4)
        assert sum(r.squared_mean_share for r in rows) == pytest.approx(1.0, abs=1e-4)
        assert sum(r.size for r in rows) == result.summary["d"]
    assert [k for k, _ in result.spectrum] == [0, 4, 8]  # 4 twin maps x 2 directions.
    assert result.summary["basis_rank"] == 8 and 0.0 <= result.summary["captured_share_held_out"] <= 1.0
    with pytest.raises(leakage.DataTooSmallError, match="holds 32 samples"):
        leakage.audit(
            state,
            Phase.STAGE1,
            data,
            twin_data,
            dataclasses.replace(config, train_traces=30),
            log=lambda *_: None,
            optimizer=radiounet_process.build_optimizer(state.client_optimizer, state.client_learning_rate),
            local_updates=local_training.local_updates,
        )


def test_audit_config_names_a_bad_field():
    with pytest.raises(ValueError, match="partitions=\\('paper', 'nope'\\)"):
        leakage.AuditConfig(partitions=("paper", "nope"))
    with pytest.raises(ValueError, match="energies=\\(0.0,\\)"):
        leakage.AuditConfig(energies=(0.0,))
