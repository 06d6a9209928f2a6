"""The stabilised explicit solver ``solver="rkc"`` (:mod:`gradflow._engine.chebyshev`): its order
against SciPy's DOP853, stability and damping on stiff linear flows against their closed forms,
the spectral estimate against ``numpy.linalg.eigvalsh``, a saddle escape against its closed form,
lanes of very different stiffness in one batch, and the status of a failed spectral estimate.
Each has a negative control: a variant that breaks the property fails the same comparison."""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate

import gradflow
from gradflow._engine import chebyshev
from gradflow._engine.chebyshev import RKC


def _quartic(tau, y, args):
    """Log-time gradient flow of ``L(p) = ½ pᵀAp + ¼ Σ p⁴`` with a quadrature ``q' = |p|²`` (a
    smooth nonlinear flow whose field depends on ``τ`` through ``e^τ``)."""
    A = jnp.array([[3.0, 1.0, 0.0], [1.0, 2.0, 0.5], [0.0, 0.5, 1.0]])
    p, q = y
    return jnp.exp(tau) * (-(A @ p) - p ** 3), jnp.exp(tau) * jnp.sum(p ** 2)


def _quartic_dop853(t_end, y0):
    A = np.array([[3.0, 1.0, 0.0], [1.0, 2.0, 0.5], [0.0, 0.5, 1.0]])

    def rhs(tau, z):
        p = z[:3]
        return np.exp(tau) * np.concatenate([-(A @ p) - p ** 3, [p @ p]])

    sol = scipy.integrate.solve_ivp(rhs, (0.0, t_end), np.concatenate([y0, [0.0]]), method="DOP853",
                                    rtol=1e-12, atol=1e-14)
    assert sol.success
    return sol.y[:, -1]


def _fixed_steps(solver, term, y0, t_end, n):
    """``n`` equal steps of ``solver`` from 0 to ``t_end`` (its state threaded through), jitted."""
    h = t_end / n

    @jax.jit
    def run(y0):
        def body(k, c):
            y, st = c
            t0 = k * h
            y1, _, _, st, _ = solver.step(term, t0, t0 + h, y, None, st, False)
            return y1, st
        return jax.lax.fori_loop(0, n, body, (y0, solver.init(term, 0.0, h, y0, None)))
    return run(y0)


def _orders(solver, t_end=1.0, ns=(16, 32, 64, 128)):
    term = diffrax.ODETerm(_quartic)
    p0 = np.array([1.0, -0.8, 0.6])
    exact = _quartic_dop853(t_end, p0)
    errs = []
    for n in ns:
        y, _ = _fixed_steps(solver, term, (jnp.asarray(p0), jnp.zeros(())), t_end, n)
        errs.append(float(np.max(np.abs(np.concatenate([np.asarray(y[0]), [float(y[1])]]) - exact))))
    return np.log2(np.array(errs[:-1]) / np.array(errs[1:])), errs


def test_rkc_is_second_order_against_dop853():
    """Fixed steps of RKC on a smooth nonlinear log-time flow with a quadrature (τ = 0 → 1, the field
    grows by ``e`` over the interval, so the stages see several stage numbers) converge at order 2
    against SciPy DOP853 at rtol 1e-12: observed orders in [1.8, 2.3] from 16 to 128 steps (the
asymptotic range: 8 → 16 steps gives 2.31, the pre-asymptotic terms still visible). Negative control: every
    stage's field evaluated at the step's start time (the stage times ``c_j`` dropped) is first
    order (observed below 1.3), which the same comparison shows."""
    orders, errs = _orders(RKC(1e-8))
    assert np.all((orders > 1.8) & (orders < 2.3)), (orders, errs)

    # the control: a term that ignores the time within each step (frozen at the step's start)
    term = diffrax.ODETerm(_quartic)
    p0 = np.array([1.0, -0.8, 0.6])
    exact = _quartic_dop853(1.0, p0)
    errs_bad = []
    for n in (16, 32, 64, 128):
        h = 1.0 / n
        solver = RKC(1e-8)

        @jax.jit
        def run(y0):
            def body(k, c):
                y, st = c
                t0 = k * h
                frozen = diffrax.ODETerm(lambda t, y, a: _quartic(t0, y, a))
                y1, _, _, st, _ = solver.step(frozen, t0, t0 + h, y, None, st, False)
                return y1, st
            return jax.lax.fori_loop(0, n, body, (y0, solver.init(term, 0.0, h, y0, None)))
        y, _ = run((jnp.asarray(p0), jnp.zeros(())))
        errs_bad.append(float(np.max(np.abs(np.concatenate([np.asarray(y[0]), [float(y[1])]]) - exact))))
    bad = np.log2(np.array(errs_bad[:-1]) / np.array(errs_bad[1:]))
    assert np.all(bad < 1.3), bad


def _linear(lams, seed=0):
    """A quadratic loss ``½ θᵀAθ`` with eigenvalues ``lams`` (random eigenvectors), its start and
    the closed form ``θ(t) = Q e^{−Λt} Qᵀ θ0``."""
    rng = np.random.RandomState(seed)
    n = len(lams)
    Q, _ = np.linalg.qr(rng.randn(n, n))
    A = (Q * lams) @ Q.T
    th0 = rng.randn(n)
    exact = lambda t: Q @ (np.exp(-np.asarray(lams) * t) * (Q.T @ th0))  # noqa: E731
    return A, th0, exact, Q


def _damping_bound(s):
    """``|a_s| + b_s``: the bound of the damped RKC polynomial ``R_s(z) = a_s + b_s T_s(w0 + w1 z)``
    on the part of its stability interval where ``|w0 + w1 z| ≤ 1`` (``|T_s| ≤ 1`` there), from
    the method's coefficients (``b_s = T_s''(w0)/T_s'(w0)²``, ``a_s = 1 − b_s T_s(w0)``)."""
    w0 = 1 + chebyshev.DAMPING / s ** 2
    ch = np.polynomial.chebyshev.Chebyshev.basis(s)
    b_s = ch.deriv(2)(w0) / ch.deriv(1)(w0) ** 2
    return abs(1 - b_s * ch(w0)) + b_s


def test_rkc_fixed_steps_are_stable_and_damp_stiff_modes_up_to_h_rho_1e4():
    """Fixed steps of size ``h = 1`` on ``dθ/dt = −Aθ`` with ``h·λ_max = 1e4`` (and modes down to
    ``h·λ = 1e-2``): RKC chooses ``s ≥ √(1.54·1.2e4) ≈ 136`` stages, and every stiff mode
    (``h·λ ≥ 10``, inside the damped part of the interval) shrinks by at least the damped
    polynomial's bound ``|a_s| + b_s ≈ 0.951`` (ε = 2/13, computed from the coefficients) per
    step: after 20 steps each stiff component of the state is at most ``bound^20 ≈ 0.37`` of its
    start (stable and damped, not only bounded), while the slow modes follow the closed form to
    the accuracy of second-order steps of size 1. Negative control: the spectral radius
    underestimated tenfold (``safety = 0.12``) gives too few stages and the stiff modes grow."""
    lams = np.concatenate([np.geomspace(1e-2, 1.0, 5), np.geomspace(10.0, 1e4, 8)])
    A, th0, exact, Q = _linear(lams)
    term = diffrax.ODETerm(lambda t, y, args: -(jnp.asarray(A) @ y))
    y, st = _fixed_steps(RKC(1e-8), term, jnp.asarray(th0), 20.0, 20)
    s = int(st.most)
    assert s >= 136 and int(st.substeps) == 20, (s, int(st.substeps))
    bound = _damping_bound(s)
    assert bound < 0.96, bound
    comp = np.abs(Q.T @ np.asarray(y))
    stiff = lams >= 10.0
    assert np.all(comp[stiff] <= bound ** 20 * np.abs(Q.T @ th0)[stiff] * (1 + 1e-9)), comp[stiff]
    slow = ~stiff
    np.testing.assert_allclose((Q.T @ np.asarray(y))[slow], (Q.T @ exact(20.0))[slow], rtol=0, atol=0.05)
    bad, _ = _fixed_steps(RKC(1e-8, safety=0.12), term, jnp.asarray(th0), 20.0, 20)
    assert not np.all(np.abs(Q.T @ np.asarray(bad))[stiff] <= np.abs(Q.T @ th0)[stiff])


def test_rkc_substeps_past_the_stage_cap_stay_stable_and_damped():
    """With the stage cap at 21 (``rtol = 1e-12``: ``√(1e-12/(10ε)) ≈ 21``), the same fixed steps of
    ``h·ρ ≈ 1.2e4`` are each taken as ``k ≈ 46`` substeps of at most 21 stages: every stiff component
    shrinks by at least ``bound(s)^k`` per step, and the slow modes follow the closed form at least as
    well as with one substep (the substeps are smaller). Negative control: the substep count
    forced to 1 with the cap's 21 stages (``h·ρ`` far outside ``β(21) ≈ 290``) blows up."""
    lams = np.concatenate([np.geomspace(1e-2, 1.0, 5), np.geomspace(10.0, 1e4, 8)])
    A, th0, exact, Q = _linear(lams)
    term = diffrax.ODETerm(lambda t, y, args: -(jnp.asarray(A) @ y))
    assert int(chebyshev.stage_cap(1e-12)) == 21
    y, st = _fixed_steps(RKC(1e-12), term, jnp.asarray(th0), 20.0, 20)
    k = int(st.substeps) // 20
    assert int(st.most) <= 21 and int(st.substeps) % 20 == 0 and k >= 40, (int(st.most), int(st.substeps))
    stiff = lams >= 10.0
    comp = np.abs(Q.T @ np.asarray(y))
    assert np.all(comp[stiff] <= _damping_bound(int(st.most)) ** 20 * np.abs(Q.T @ th0)[stiff] * (1 + 1e-9))
    slow = ~stiff
    np.testing.assert_allclose((Q.T @ np.asarray(y))[slow], (Q.T @ exact(20.0))[slow], rtol=0, atol=0.05)

    class OneSubstep(RKC):
        def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
            old = chebyshev.stages_for
            chebyshev.stages_for = lambda h_rho, cap: (jnp.ones((), jnp.int32), cap)
            try:
                return super().step(terms, t0, t1, y0, args, solver_state, made_jump)
            finally:
                chebyshev.stages_for = old

    bad, _ = _fixed_steps(OneSubstep(1e-12), term, jnp.asarray(th0), 20.0, 20)
    assert not np.all(np.abs(Q.T @ np.asarray(bad))[stiff] <= np.abs(Q.T @ th0)[stiff])


def test_rkc_adaptive_run_matches_the_closed_form_of_a_stiff_flow():
    """``gradflow.integrate(solver="rkc")`` on the gradient flow of a quadratic with eigenvalues
    from 1e-2 to 1e4 to ``t1 = 1e3`` (log-time ``h·ρ`` past 1e6 by the end): every save point
    within ``100·rtol`` of the closed form (relative to ``‖θ0‖``), status ``ok``."""
    lams = np.concatenate([np.geomspace(1e-2, 1.0, 4), np.geomspace(10.0, 1e4, 4)])
    A, th0, exact, _ = _linear(lams, seed=1)
    ts = np.concatenate([[0.0], np.geomspace(1e-2, 1e3, 11)])
    loss = lambda p: 0.5 * p @ (jnp.asarray(A) @ p)  # noqa: E731
    sol = gradflow.integrate(loss, jnp.asarray(th0), t1=1e3, ts=ts, solver="rkc", rtol=1e-6, atol=1e-8,
                             rest_stop=False)
    assert sol.status == "ok"
    want = np.stack([exact(t) for t in ts])
    assert np.max(np.abs(np.asarray(sol.params) - want)) <= 100 * 1e-6 * np.linalg.norm(th0)


@pytest.mark.parametrize("kind", ["spd", "indefinite", "negative-top"])
def test_spectral_radius_within_5_percent_of_eigvalsh(kind):
    """The power iteration on exact Hessian–vector products (:func:`chebyshev.spectral_radius`,
    the cold start of every solve: :data:`chebyshev.POWER_COLD` iterations at most) against
    ``numpy.linalg.eigvalsh`` on random 40 × 40 Hessians: positive definite, indefinite with the
    largest |λ| positive, and with the largest |λ| negative; within 5 % (from below, as a norm of
    a product). Negative control: three iterations are not within 5 % on the same matrices."""
    rng = np.random.RandomState({"spd": 0, "indefinite": 1, "negative-top": 2}[kind])
    n = 40
    Q, _ = np.linalg.qr(rng.randn(n, n))
    lams = rng.uniform(0.0, 1.0, n) ** 2 * 50.0
    if kind != "spd":
        lams[: n // 2] *= -1.0
    if kind == "negative-top":
        lams[0] = -60.0
    H = (Q * lams) @ Q.T
    want = np.max(np.abs(np.linalg.eigvalsh(H)))
    loss = lambda x: 0.5 * x @ (jnp.asarray(H) @ x) + 0.0 * jnp.sum(x ** 3)  # noqa: E731
    x0 = jnp.zeros(n)
    hvp = jax.jit(lambda v: jax.jvp(jax.grad(loss), (x0,), (v,))[1])
    v0 = jnp.asarray(np.random.RandomState(7).standard_normal(n))
    rho, _, its = chebyshev.spectral_radius(hvp, v0, chebyshev.POWER_COLD)
    assert abs(float(rho) - want) <= 0.05 * want, (float(rho), want, int(its))
    assert float(rho) <= want * (1 + 1e-12)
    rho3, _, _ = chebyshev.spectral_radius(hvp, v0, 3)
    assert abs(float(rho3) - want) > 0.05 * want, (float(rho3), want)


def test_rkc_state_estimates_rho_at_the_step_end_time():
    """The solver's own estimate (its state after the first step) is ``ρ`` of the log-time
    Jacobian ``e^{τ1}·∇²L`` at the step's *end* time ``τ1`` and start state: against
    ``eigvalsh`` of ``jax.hessian`` within 5 %. Negative control: the start time's ``ρ`` is more
    than 5 % below it (``e^{0.5} ≈ 1.65``)."""
    term = diffrax.ODETerm(_quartic)
    y0 = (jnp.array([1.0, -0.8, 0.6]), jnp.zeros(()))
    solver = RKC(1e-8)
    st = solver.init(term, 0.0, 0.5, y0, None)
    _, _, _, st1, _ = solver.step(term, 0.0, 0.5, y0, None, st, False)
    A = np.array([[3.0, 1.0, 0.0], [1.0, 2.0, 0.5], [0.0, 0.5, 1.0]])
    H = A + np.diag(3 * np.asarray(y0[0]) ** 2)
    want = np.exp(0.5) * np.max(np.abs(np.linalg.eigvalsh(H)))
    assert abs(float(st1.rho) - want) <= 0.05 * want, (float(st1.rho), want)
    assert abs(want / np.exp(0.5) - want) > 0.05 * want


def test_rkc_escapes_a_saddle_as_the_closed_form():
    """``L(x, y) = ½x² − ½y² + ¼y⁴`` from ``(1, 1e-6)``, next to the saddle at 0 (negative
    curvature, no stability limit): ``x = e^{−t}``, ``y = y0 e^t / √(1 + y0²(e^{2t} − 1))`` → 1.
    ``integrate(solver="rkc")`` follows it through the escape (``t ≈ 14``) to within ``1e-4`` at
    every save point. Negative control: the same comparison against the flow that stays at the
    saddle (``y ≡ y0``) fails."""
    loss = lambda p: 0.5 * p[0] ** 2 - 0.5 * p[1] ** 2 + 0.25 * p[1] ** 4  # noqa: E731
    y0 = 1e-6
    ts = np.concatenate([[0.0], np.linspace(1.0, 30.0, 30)])
    sol = gradflow.integrate(loss, jnp.array([1.0, y0]), t1=30.0, ts=ts, solver="rkc", rtol=1e-8, atol=1e-10)
    assert sol.status == "ok"
    x = np.exp(-ts)
    y = y0 * np.exp(ts) / np.sqrt(1 + y0 ** 2 * np.expm1(2 * ts))
    got = np.asarray(sol.params)
    np.testing.assert_allclose(got[:, 0], x, rtol=0, atol=1e-4)
    np.testing.assert_allclose(got[:, 1], y, rtol=0, atol=1e-4)
    assert got[-1, 1] > 0.99
    assert np.max(np.abs(got[:, 1] - y0)) > 1e-4  # the control: a flow stuck at the saddle is told apart


def test_rkc_lanes_of_very_different_stiffness_equal_single_runs():
    """A batch of two lanes whose spectral radii differ by 1e4 (λ_max 1 and 1e4; their stage
    numbers differ by about 100×): each lane equals its own single run to round-off (the batched
    stage loop freezes a lane after its own stage count) and the closed form to the tolerance.
    Negative control: the two lanes' results are far apart (the comparison can fail)."""
    ts = np.concatenate([[0.0], np.geomspace(1e-2, 100.0, 7)])
    out = []
    for scale in (1.0, 1e4):
        lams = np.geomspace(1e-2, scale, 6)
        A, th0, exact, _ = _linear(lams, seed=3)
        out.append((A, th0, exact))
    th0 = out[0][1]
    np.testing.assert_array_equal(th0, out[1][1])  # one start, two matrices (the same seed)
    As = jnp.asarray(np.stack([o[0] for o in out]))
    loss = lambda p, A: 0.5 * p @ (A @ p)  # noqa: E731
    kw = dict(t1=100.0, ts=ts, solver="rkc", rtol=1e-7, atol=1e-9, rest_stop=False)
    batch = gradflow.integrate_batch(loss, jnp.stack([jnp.asarray(th0)] * 2), args=As, args_batched=True, **kw)
    for i, (A, _, exact) in enumerate(out):
        single = gradflow.integrate(loss, jnp.asarray(th0), args=jnp.asarray(A), **kw)
        np.testing.assert_allclose(np.asarray(batch.params[i]), np.asarray(single.params), rtol=1e-12, atol=1e-14)
        want = np.stack([exact(t) for t in ts])
        assert np.max(np.abs(np.asarray(single.params) - want)) <= 100 * 1e-7 * np.linalg.norm(th0)
    assert np.max(np.abs(np.asarray(batch.params[0]) - np.asarray(batch.params[1]))) > 1e-3


@jax.custom_jvp
def _slope(x):
    return x


@_slope.defjvp
def _slope_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    return _slope(x), jnp.nan * dx  # the Hessian–vector product is NaN; the gradient is not


@jax.custom_jvp
def _half_square(x):
    return 0.5 * x ** 2


@_half_square.defjvp
def _half_square_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    return _half_square(x), _slope(x) * dx


def test_rkc_with_a_non_finite_spectral_estimate_fails_with_a_status():
    """A loss whose gradient is finite (``θ``) but whose Hessian–vector products are NaN: the
    spectral estimate is not finite, so the run ends ``solver_failed`` at ``t = 0`` with the start
    state, never a silent result. Control: the same loss with an honest second derivative runs
    ``ok`` and decays like ``e^{−t}``."""
    loss = lambda p: jnp.sum(_half_square(p))  # noqa: E731
    th0 = jnp.array([1.0, -2.0])
    ts = np.array([0.0, 1.0, 2.0])
    sol = gradflow.integrate(loss, th0, t1=2.0, ts=ts, solver="rkc")
    assert sol.status == "solver_failed" and float(sol.t_end) == 0.0, (sol.status, sol.t_end)
    assert np.all(np.isfinite(np.asarray(sol.params)))
    good = gradflow.integrate(lambda p: 0.5 * jnp.sum(p ** 2), th0, t1=2.0, ts=ts, solver="rkc")
    assert good.status == "ok"
    np.testing.assert_allclose(np.asarray(good.params), np.exp(-ts)[:, None] * np.asarray(th0), rtol=1e-6)


def test_stage_rules():
    """The stage cap from round-off (``√(rtol/(10ε))``: 2122 at rtol 1e-8, 212 at 1e-10, at least 2,
    at most :data:`chebyshev.MAX_STAGES`) and the substeps past it: ``s ≤ cap`` always, one substep
    while ``1 + ⌊√(1 + 1.54·hρ)⌋`` fits, and ``k`` substeps that each satisfy
    ``1.54·hρ/k ≤ s² − 1`` (each inside the stability interval ``β(s) ≈ (s² − 1)/1.54``)."""
    assert int(chebyshev.stage_cap(1e-8)) == 2122 and int(chebyshev.stage_cap(1e-10)) == 212
    assert int(chebyshev.stage_cap(1e-20)) == 2 and int(chebyshev.stage_cap(1.0)) == chebyshev.MAX_STAGES
    cap = chebyshev.stage_cap(1e-10)
    for h_rho in (0.0, 1.0, 100.0, 6e4, 7e4, 1e6, 1e9):
        k, s = (int(x) for x in chebyshev.stages_for(h_rho, cap))
        assert 2 <= s <= int(cap) and k >= 1
        assert 1.54 * h_rho / k <= s ** 2 - 1, (h_rho, k, s)
        if 1 + np.floor(np.sqrt(1 + 1.54 * h_rho)) <= int(cap):
            assert k == 1 and s == max(2, 1 + int(np.floor(np.sqrt(1 + 1.54 * h_rho))))
