"""Engine cases the other test files leave open, each against an independent computation:
the flow at temperature T ≠ 1 (SciPy), the tied and row-wise models' fields (formulas derived
by hand below), the steady-state stop's relative branch, and the implicit solver (Kvaerno5)
against SciPy's Radau."""

import jax.numpy as jnp
import numpy as np
import pytest

import gradflow
from gradflow._engine import solve as _solve
from tests import reference as ref


def softmax_rows(A):
    z = np.exp(A - A.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def J(s):
    return np.diag(s) - np.outer(s, s)


# ----------------------------------------------------------------- temperature T ≠ 1


@pytest.mark.parametrize("T", [0.5, 2.0])
def test_flow_at_temperature_matches_scipy(T):
    """``s = softmax(a/T)``: ``da/dt = J(s) Vᵀ r / T`` (the 1/T of the chain rule). Measured max
    errors (worst of T = 0.5, 2): s 9.4e-10 relative, V 5.4e-10, a 4.3e-10, Γ 3.4e-10 absolute
    (|V| ≤ 4, |a| ≤ 2.3, Γ ≤ 11); tolerances ~10×. The T = 1 flow differs by 0.6 in ``s``."""
    rng = np.random.RandomState(7)
    V0, a0, b = 0.3 * rng.randn(5, 6), 0.2 * rng.randn(6), rng.randn(5)
    ts = np.concatenate([[0.0], np.geomspace(1e-2, 1e6, 25)])
    Vr, ar, Gr = ref.integrate(V0, a0, ref.logistic_residual(b), ts, rtol=1e-12, atol=1e-14, temperature=T)
    traj = gradflow.simulate(gradflow.LogisticTeacher(b), V0, a0, t1=1e6, ts=ts, rtol=1e-11, atol=1e-13, temperature=T)
    assert traj.status == "ok"
    sr = softmax_rows(ar / T)
    assert np.max(np.abs(np.asarray(traj.s) - sr) / sr) < 1e-8
    np.testing.assert_allclose(traj.V, Vr, rtol=0, atol=5e-9)
    np.testing.assert_allclose(traj.a, ar, rtol=0, atol=5e-9)
    np.testing.assert_allclose(traj.Gamma, Gr, rtol=0, atol=4e-9)
    np.testing.assert_allclose(traj.u, np.einsum("tdn,d->tn", Vr, b), rtol=0, atol=5e-9)  # u = Vᵀβ*, ‖β*‖ ≠ 1
    np.testing.assert_allclose(traj.loss, np.logaddexp(0.0, -np.einsum("tdn,tn,d->t", Vr, sr, b)), rtol=1e-8)
    # negative control: the T = 1 flow is far from the T reference (the test can tell them apart)
    plain = gradflow.simulate(gradflow.LogisticTeacher(b), V0, a0, t1=1e6, ts=ts, rtol=1e-11, atol=1e-13)
    assert np.max(np.abs(np.asarray(plain.s) - sr)) > 0.1


# ------------------------------------------------------------ tied and row-wise fields


@pytest.mark.parametrize("T", [1.0, 1.7])
def test_tied_field_matches_hand_formula(T):
    """Tied model ``α = softmax(U a / T)``, ``β = U α``, ``r = −∇ℓ(β)``. From
    ``dβ = dU α + U J(α) dU a / T + U J(α) U da / T`` and ``dℓ = −rᵀ dβ``:

        −∇_U L = r αᵀ + (J(α) Uᵀ r) aᵀ / T,      −∇_a L = Uᵀ J(α) Uᵀ r / T.

    (The second term of ``−∇_U L`` is the path through the logits, ``gV_logits``.)"""
    rng = np.random.RandomState(11)
    D = 5
    U, a, b = rng.randn(D, D), rng.randn(D), rng.randn(D)
    for loss, residual in [
        (gradflow.LogisticTeacher(b), ref.logistic_residual(b)),
        (gradflow.SquareLoss(b), ref.square_residual(b)),
    ]:
        model = gradflow.get_model("tied", temperature=T)
        dU, da = gradflow.gradient_field(model, loss, jnp.asarray(U), jnp.asarray(a))
        alpha = ref.softmax(U @ a / T)
        r, _ = residual(U @ alpha)
        hU = np.outer(r, alpha) + np.outer(J(alpha) @ U.T @ r, a) / T
        ha = U.T @ J(alpha) @ U.T @ r / T
        np.testing.assert_allclose(dU, hU, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(da, ha, rtol=1e-12, atol=1e-14)
        assert np.max(np.abs(np.outer(J(alpha) @ U.T @ r, a) / T)) > 1e-2  # the logits path matters here


@pytest.mark.parametrize("T", [1.0, 0.6])
def test_rowwise_field_matches_hand_formula_at_temperature(T):
    """Row-wise model, ``n_r`` rows, ``s_t = softmax(A[t]/T)``, ``β_t = V s_t``,
    ``L = (1/n_r) Σ_t ℓ(β_t)``: ``−∇_V L = (1/n_r) Σ_t r_t s_tᵀ``,
    ``−∇_{A[t]} L = J(s_t) Vᵀ r_t / (n_r T)``; ``γ = (1/n_r) Σ_t σ(−⟨β*, β_t⟩)`` and the loss the
    mean of the per-row losses."""
    rng = np.random.RandomState(12)
    d, n = 3, 4
    V, A, b = rng.randn(d, n), rng.randn(n, n), rng.randn(d)
    model = gradflow.get_model("rowwise", temperature=T)
    dV, dA = gradflow.gradient_field(model, gradflow.LogisticTeacher(b), jnp.asarray(V), jnp.asarray(A))
    r_of = ref.logistic_residual(b)
    hV, hA, hg, hL = np.zeros((d, n)), np.zeros((n, n)), 0.0, 0.0
    for t in range(n):
        s = ref.softmax(A[t] / T)
        r, g = r_of(V @ s)
        hV += np.outer(r, s) / n
        hA[t] = J(s) @ V.T @ r / (n * T)
        hg += g / n
        hL += np.logaddexp(0.0, -b @ V @ s) / n
    np.testing.assert_allclose(dV, hV, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(dA, hA, rtol=1e-12, atol=1e-15)
    loss = gradflow.LogisticTeacher(b)
    np.testing.assert_allclose(model.gamma(loss, jnp.asarray(V), jnp.asarray(A)), hg, rtol=1e-13)
    np.testing.assert_allclose(model.loss(loss, jnp.asarray(V), jnp.asarray(A)), hL, rtol=1e-13)


# ---------------------------------------------------------------- steady-state stop


REST_FRACTION = 1e-2
"""The documented rest criterion's fraction (``gradflow._engine.solve.REST_FRACTION``), written out
here so that an engine whose constant drifts fails this test instead of adapting it."""


def test_rest_stop_fires_where_the_hand_computed_bound_is_met():
    """The rest stop (docs: solver guide, "The rest stop"): at rest when ``κ > 0`` and
    ``‖v‖_tol/κ < REST_FRACTION``, with ``v = (1 + t)f`` and ``κ = −(1 + t)⟨f, Jf⟩/⟨f, f⟩ − 1``.
    Recomputed here in NumPy with ``Jf`` by a central finite difference of the field: the bound
    holds at the held end state and does not hold at ``t_steady/4`` (the stop is not late by
    much); at loose tolerances (rtol = atol = 1e-2), Kvaerno5."""
    rng = np.random.RandomState(0)
    V0, b = 0.1 * rng.randn(6, 6), rng.randn(6)
    loss = gradflow.SquareLoss(b / np.linalg.norm(b))
    rtol = atol = 1e-2
    traj = gradflow.simulate(loss, V0, np.zeros(6), t1=1e30, rtol=rtol, atol=atol, solver="kvaerno5")
    assert traj.status == "ok"
    t_st = float(traj.t_steady)
    assert np.isfinite(t_st)
    model = gradflow.get_model("value-softmax")

    def field(x):
        dV, da = gradflow.gradient_field(model, loss, jnp.asarray(x[:36].reshape(6, 6)), jnp.asarray(x[36:]))
        return np.concatenate([np.asarray(dV).ravel(), np.asarray(da)])

    def bound(V, a, t):
        x = np.concatenate([np.ravel(V), a])
        f = field(x)
        u = f / np.abs(f).max()
        h = 1e-6 * max(1.0, np.abs(x).max())
        Ju = (field(x + h * u) - field(x - h * u)) / (2 * h)
        kappa = -(1 + t) * (u @ Ju) / (u @ u) - 1
        speed = np.max((1 + t) * np.abs(f) / (atol + rtol * np.abs(x)))
        return speed / kappa if kappa > 0 else np.inf

    assert bound(np.asarray(traj.V[-1]), np.asarray(traj.a[-1]), t_st) < REST_FRACTION
    k = int(np.searchsorted(np.asarray(traj.t), t_st / 4)) - 1
    assert bound(np.asarray(traj.V[k]), np.asarray(traj.a[k]), float(traj.t[k])) > REST_FRACTION


def test_rest_stop_constant_is_the_documented_one():
    assert _solve.REST_FRACTION == REST_FRACTION


# ------------------------------------------------------------ the implicit solver


def test_kvaerno5_matches_scipy_radau():
    """The implicit phase on its own (``solver="kvaerno5"``) on the conditioning problem (square
    loss with a design of condition number 5, d = 6, flow time 300) against SciPy's Radau at
    rtol 1e-12 (|a| ≤ 2.7, |V| ≤ 6.7, Γ ≤ 49). Measured max absolute errors: a 4.4e-9, V 3.9e-9,
    Γ 1.3e-8 (336 implicit steps); tolerances ~10×."""
    rng = np.random.RandomState(123)
    d = 6
    W, a = 1e-5 * rng.randn(d, d), 1e-3 * rng.randn(d)
    U, _, Vt = np.linalg.svd(rng.randn(d, d))
    X = U @ np.diag(np.linspace(1, 1 / 5, d)) @ Vt
    y = rng.randn(d)
    ts = np.concatenate([[0.0], np.geomspace(1e-1, 300.0, 15)])
    Vr, ar, Gr = ref.integrate(W, a, ref.square_residual(y, X, 1.0), ts, rtol=1e-12, atol=1e-14, method="Radau")
    traj = gradflow.simulate(gradflow.SquareLoss(y, design=X, scale=1.0), W, a, t1=300.0, ts=ts,
                             rtol=1e-10, atol=1e-12, solver="kvaerno5")
    assert traj.status == "ok" and traj.metadata["solver"] == "kvaerno5"
    np.testing.assert_allclose(traj.a, ar, rtol=0, atol=5e-8)
    np.testing.assert_allclose(traj.V, Vr, rtol=0, atol=5e-8)
    np.testing.assert_allclose(traj.Gamma, Gr, rtol=0, atol=1.5e-7)
