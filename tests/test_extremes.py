"""Numerics at the extremes: huge logit gaps and spreads, underflowed weights,
long horizons, exact ties. Expected values come from hand formulas in float64 (exact centred form)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow
from gradflow import maps
from tests.test_simulate import fig2_problem

MODEL = gradflow.get_model("value-softmax")


def _gap_problem(gap, dtype):
    a = np.array([gap, 0.0, -1.0, 0.5], dtype=dtype)
    V = np.array([[1.0, 0.2, -0.3, 0.1], [0.5, 0.1, 0.2, -0.4]], dtype=dtype)
    return V, a, np.array([1.0, 0.5])


def _exact_da(V, a, bs):
    """da_i/dt = s_i Σ_j s_j (w_i − w_j), w = γ Vᵀβ* (the reduced (u, a) system, docs/model.md), summed pairwise in float64: no 1 − s_top."""
    V, a = V.astype(np.float64), a.astype(np.float64)
    s = np.exp(a - a.max())
    s /= s.sum()
    w = (V.T @ bs) / (1 + np.exp(bs @ (V @ s)))
    return s * ((w[:, None] - w[None, :]) @ s)


@pytest.mark.parametrize("gap, dtype, sum_tol", [(50.0, np.float64, 1e-12), (25.0, np.float32, 4 * np.finfo(np.float32).eps)])
def test_leading_logit_velocity_and_zero_sum_at_huge_gaps(gap, dtype, sum_tol):
    """Gap 50 in float64 (others' weights ≈ 2e-22, so 1 − s_top rounds to 0) and 25 in float32.
    The float32 field is returned in float32: its Σ is exact only to float32 rounding (≈ 6e-8)."""
    V, a, bs = _gap_problem(gap, dtype)
    dV, da = gradflow.gradient_field(MODEL, gradflow.LogisticTeacher(bs), jnp.asarray(V), jnp.asarray(a))
    assert da.dtype == dtype and dV.dtype == dtype
    da = np.asarray(da, np.float64)
    exact = _exact_da(V, a, bs)
    assert exact[0] > 0 and da[0] > 0  # the leading logit keeps rising
    np.testing.assert_allclose(da, exact, rtol=1e-12 if dtype == np.float64 else 1e-6)
    assert abs(da.sum()) <= sum_tol * np.abs(da).sum()


def test_plain_autodiff_loses_the_leading_velocity_negative_control():
    """What the exact form fixes: differentiating through jax.nn.softmax at gap 50 gives the top
    logit a velocity of 0 (true value +1.6e-22) and Σ da/dt = −Σ_others ≠ 0. Plain autodiff of
    the model's own loss (its softmax is :func:`gradflow.softmax`) keeps it."""
    V, a, bs = _gap_problem(50.0, np.float64)
    loss = gradflow.LogisticTeacher(bs)
    da = -jax.grad(lambda a_: MODEL.loss_of_weights(loss, jnp.asarray(V), jax.nn.softmax(a_)))(jnp.asarray(a))
    assert not float(da[0]) > 0
    assert abs(float(da.sum())) > 0.5 * float(jnp.abs(da).sum())
    exact = gradflow.gradient_field(MODEL, loss, jnp.asarray(V), jnp.asarray(a))[1]
    da_model = -jax.grad(lambda a_: MODEL.loss(loss, jnp.asarray(V), a_))(jnp.asarray(a))
    np.testing.assert_allclose(da_model, exact, rtol=1e-12)


def test_spread_1e4_field_loss_entropy_gap_finite():
    a = np.linspace(-5e3, 5e3, 6)  # spread 1e4: all but one weight underflow to exactly 0
    rng = np.random.RandomState(0)
    V, bs = rng.randn(3, 6), rng.randn(3)
    for loss in (gradflow.LogisticTeacher(bs), gradflow.SquareLoss(bs)):
        dV, da = gradflow.gradient_field(MODEL, loss, jnp.asarray(V), jnp.asarray(a))
        m = gradflow.attention.trajectory.compute_metrics(MODEL, loss, jnp.asarray(V), jnp.asarray(a))
        for x in (dV, da, m["s"], m["loss"], m["entropy"]):
            assert np.all(np.isfinite(np.asarray(x)))
        s = np.asarray(m["s"])
        assert s[-1] == 1.0 and np.all(s[:-1] == 0) and float(m["entropy"]) == 0.0
        np.testing.assert_array_equal(np.asarray(da), 0.0)  # weights exactly one-hot: J(s) = 0
        # loss at the one-hot output β = V e_last
        beta = V[:, -1]
        want = np.logaddexp(0, -bs @ beta) if isinstance(loss, gradflow.LogisticTeacher) else 0.5 * np.sum((bs - beta) ** 2)
        assert float(m["loss"]) == pytest.approx(want, rel=1e-14)
    assert float(np.sort(a)[-1] - np.sort(a)[-2]) == 2e3  # the logit gap itself is finite


@pytest.mark.parametrize("normalization", ["softmax", "relu"])
def test_underflowed_weight_entropy_value_and_gradient_finite(normalization):
    a = jnp.array([0.0, -1e4, 1.0]) if normalization == "softmax" else jnp.array([1.0, -2.0, 3.0])
    model = gradflow.get_model("value-softmax", normalization)
    V = jnp.ones((2, 3))
    s = np.asarray(model.weights(V, a))
    assert s[1] == 0.0  # underflowed (softmax) or clipped (relu) to exactly 0
    h, g = jax.value_and_grad(lambda a_: model.entropy(V, a_))(a)
    p = s[s > 0]
    assert float(h) == pytest.approx(-np.sum(p * np.log(p)), rel=1e-14)
    assert np.all(np.isfinite(np.asarray(g)))
    # the gradient w.r.t. the surviving logits against central differences
    eps = 1e-6
    for i in (0, 2):
        e = jnp.zeros(3).at[i].set(eps)
        fd = (model.entropy(V, a + e) - model.entropy(V, a - e)) / (2 * eps)
        assert float(g[i]) == pytest.approx(float(fd), rel=1e-6, abs=1e-9)


def test_t1_1e8_default_settings_completes_and_reports_steps():
    V0, a0, bs = fig2_problem()
    traj = gradflow.simulate(gradflow.LogisticTeacher(bs), V0, a0, t1=1e8)
    assert traj.status == "ok" and float(traj.t_end) == 1e8 and np.all(np.asarray(traj.valid))
    assert 0 < int(traj.num_steps) < 200
    assert np.all(np.isfinite(np.asarray(traj.s)))


def _tied_problem():
    """Columns 0 and 1 of V identical with the largest u = Vᵀβ*, logits tied: the flow is
    symmetric under swapping tokens 0 and 1, so they must stay tied exactly."""
    rng = np.random.RandomState(5)
    bs = rng.randn(4)
    V = 0.3 * rng.randn(4, 5)
    V[:, 0] = V[:, 1] = 2.0 * bs / np.linalg.norm(bs)
    return V, np.zeros(5), bs


def test_exact_ties_stay_tied_and_winners_reports_the_set():
    V0, a0, bs = _tied_problem()
    assert np.argmax(V0.T @ bs) == 0 and np.isclose((V0.T @ bs)[0], (V0.T @ bs)[1])
    traj = gradflow.simulate(gradflow.LogisticTeacher(bs), V0, a0, t1=1e8)
    a, V, s = np.asarray(traj.a), np.asarray(traj.V), np.asarray(traj.s)
    assert traj.status == "ok"
    assert np.max(np.abs(a[:, 0] - a[:, 1])) <= 1e-12 * max(1.0, np.abs(a).max())
    assert np.max(np.abs(V[:, :, 0] - V[:, :, 1])) <= 1e-12
    assert s[-1, 0] > 0.45  # the tied pair shares nearly all the attention
    assert np.flatnonzero(gradflow.winners(s[-1])).tolist() == [0, 1]
    assert int(np.argmax(s[-1])) == 0  # argmax alone would name one arbitrary member
    gd = gradflow.descend(gradflow.LogisticTeacher(bs), V0, a0, lr=0.1, steps=2000)
    np.testing.assert_array_equal(np.asarray(gd.a)[:, 0], np.asarray(gd.a)[:, 1])


def test_broken_tie_separates_negative_control():
    """Control: a 1e-9 difference between the two columns grows (repulsion, Thm 3.2b), so the
    tie test above can fail; winners then reports a single token."""
    V0, a0, bs = _tied_problem()
    V0[:, 0] += 1e-9 * bs / np.linalg.norm(bs)
    traj = gradflow.simulate(gradflow.LogisticTeacher(bs), V0, a0, t1=1e8)
    gap = np.asarray(traj.a)[:, 0] - np.asarray(traj.a)[:, 1]
    assert gap[-1] > 1e-12 * np.abs(np.asarray(traj.a)).max()  # the tie criterion above fails
    assert np.all(np.diff(gap[1:]) > 0)  # and the gap keeps growing
    assert np.flatnonzero(gradflow.winners(np.asarray(traj.s[-1]))).tolist() == [0]


def test_softmax_vjp_matches_dense_jacobian_and_keeps_ties_bitwise():
    rng = np.random.RandomState(3)
    a = rng.randn(2, 6)
    a[1, 2] = a[1, 4] = a[1].max() + 1.0  # a tie at the top of row 1
    g = rng.randn(2, 6)
    g[1, 4] = g[1, 2]
    s = np.asarray(maps.softmax(jnp.asarray(a)))
    got = np.asarray(maps.softmax_vjp(jnp.asarray(s), jnp.asarray(g)))
    for r in range(2):
        J = np.diag(s[r]) - np.outer(s[r], s[r])
        np.testing.assert_allclose(got[r], J @ g[r], rtol=1e-12, atol=1e-16)
    assert got[1, 2] == got[1, 4]


def test_model_overriding_weights_is_differentiated_as_written():
    """The exact softmax path applies only to the base class's softmax weights: a subclass with
    its own ``weights`` (theory's map-switching model does this) gets plain autodiff of its loss."""

    class SigmoidWeights(gradflow.ValueSoftmax):
        def weights(self, V, a):
            return jax.nn.sigmoid(a)

    model = SigmoidWeights()
    rng = np.random.RandomState(0)
    V, a, bs = jnp.asarray(rng.randn(3, 4)), jnp.asarray(rng.randn(4)), rng.randn(3)
    loss = gradflow.LogisticTeacher(bs)
    dV, da = gradflow.gradient_field(model, loss, V, a)
    s = 1 / (1 + np.exp(-np.asarray(a)))
    gamma = 1 / (1 + np.exp(bs @ (np.asarray(V) @ s)))
    np.testing.assert_allclose(dV, gamma * np.outer(bs, s), rtol=1e-12)  # dV = r sᵀ with s = σ(a)
    np.testing.assert_allclose(da, gamma * (np.asarray(V).T @ bs) * s * (1 - s), rtol=1e-12)
