"""Stiffness detection and the implicit phase of ``solver="auto"``: against SciPy's
Radau at tight tolerance, the detector against known spectra, and negative controls."""

import functools
import importlib
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow
from gradflow._engine.policy import DEFAULT_POLICY as POLICY
from gradflow._engine import stiff
from gradflow._engine.solvers import code_of, spec
from tests import reference as ref

from gradflow._engine.solve import Status as S_status

simulate_mod = importlib.import_module("gradflow.attention._simulate")

BOUNDARY_ON = POLICY.stiff_on * POLICY.explicit_boundary


def _square_draw(kappa, d, seed=123):
    """The paper's conditioning draw (Figs. 3/12) at size ``d``."""
    from gradflow.sims.draws import conditioning_init

    W0, a0, X, y = conditioning_init(kappa, seed, d)
    return W0, a0, X, y, gradflow.SquareLoss(y, design=X, scale=1.0)


def test_auto_on_a_stiff_flow_matches_radau_in_few_steps():
    """κ = 20, d = 4, t1 = 1e5, rtol 1e-8: ``auto`` detects stiffness and finishes in the
    implicit phase in a few hundred steps, agreeing with SciPy Radau (rtol 1e-12); Dopri8 alone
    (the negative control) is stability-limited: 2000 steps do not get it to t1."""
    W0, a0, X, y, loss = _square_draw(20, 4)
    ts = np.concatenate([[0.0], np.geomspace(1.0, 1e5, 11)])
    traj = gradflow.simulate(loss, W0, a0, t1=1e5, ts=ts, rtol=1e-8, atol=1e-10)
    assert traj.status == "ok" and traj.metadata["solver"] == "auto"
    Vr, ar, _ = ref.integrate(W0, a0, ref.square_residual(y, X, 1.0), ts, rtol=1e-12, atol=1e-14, method="Radau")
    np.testing.assert_allclose(traj.a, ar, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(traj.V, Vr, rtol=1e-5, atol=1e-7)
    assert int(traj.num_steps) < 400, int(traj.num_steps)
    explicit = gradflow.simulate(loss, W0, a0, t1=1e5, ts=ts, rtol=1e-8, atol=1e-10, solver="dopri8", max_steps=2000)
    assert explicit.status == "max_steps" and float(explicit.t_end) < 1e5


def test_rodas4_alone_matches_radau():
    """The implicit solver on its own (``solver="rodas4"``) from t = 0, against Radau."""
    W0, a0, X, y, loss = _square_draw(5, 3)
    ts = np.concatenate([[0.0], np.geomspace(0.1, 1e4, 9)])
    traj = gradflow.simulate(loss, W0, a0, t1=1e4, ts=ts, rtol=1e-10, atol=1e-12, solver="rodas4")
    assert traj.status == "ok"
    Vr, ar, _ = ref.integrate(W0, a0, ref.square_residual(y, X, 1.0), ts, rtol=1e-12, atol=1e-14, method="Radau")
    np.testing.assert_allclose(traj.a, ar, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(traj.V, Vr, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("rho", [1.0, 100.0])
def test_stiffness_ratio_is_step_times_spectral_radius(rho):
    """A linear field with eigenvalues ``−1, −ρ/10, −ρ`` (and a pytree state): ``h·ρ`` exactly."""
    lam = jnp.array([-1.0, -rho / 10, -rho])
    field = lambda y: {"u": lam[:2] * y["u"], "w": lam[2:] * y["w"]}
    y = {"u": jnp.ones(2), "w": jnp.ones(1)}
    assert float(stiff.stiffness_ratio(field, y, 0.01)) == pytest.approx(0.01 * rho, rel=1e-6)


def test_phase_policy_switches_with_hysteresis():
    on, off = POLICY.stiff_on * POLICY.explicit_boundary, POLICY.stiff_off * POLICY.explicit_boundary
    mid = 0.5 * (on + off)
    was = np.array([False, False, False, True, True, True])
    h_rho = np.array([1.01 * on, mid, np.nan, mid, 0.99 * off, np.nan])
    codes, left, now = stiff.phase_of_lanes("auto", np.zeros(6), 10_000, was, h_rho)
    np.testing.assert_array_equal(now, [True, False, False, True, False, True])
    assert [spec(c).name for c in codes] == ["rodas4", "dopri8", "dopri8", "rodas4", "dopri8", "rodas4"]
    assert left[1] == POLICY.explicit_round and left[0] == 10_000
    # a named solver never switches (negative control)
    codes, _, now = stiff.phase_of_lanes("dopri8", np.zeros(6), 10_000, was, h_rho)
    assert {spec(c).name for c in codes} == {"dopri8"} and not now.any()


def _h_rho_at_end(loss, V0, a0, t1s, steps):
    """``h·ρ`` (:func:`stiff.stiffness_ratio`) after one Dopri8 solve of at most ``steps`` steps
    from t = 0 to each ``t1`` of ``t1s`` (the engine's own solve), and the solve's state, with
    ``reported``: the ``h·ρ`` that the engine's :func:`~gradflow._engine.solve.stiffness_of` hands
    the phase policy. One program for all of ``t1s`` (``t1`` is a runtime value). Yields
    ``(t1, h·ρ, state)`` per ``t1``, ``state`` with ``tau_end``, ``code`` and ``reported``."""
    from gradflow._engine import solve as S
    from gradflow.attention.models import prepare

    mdl, V, a = prepare(loss, V0, a0, "value-softmax", "softmax", 1.0, batch=False)
    flow = simulate_mod.value_softmax_flow(loss)
    y0 = ((V, a), {"Gamma": jnp.zeros((), V.dtype)})

    @jax.jit
    def measure(tau1):
        out = S.solve_lane(flow, (mdl, loss), y0, jnp.zeros(()), taus=jnp.stack([jnp.zeros(()), tau1]),
                           rtol=jnp.asarray(1e-8), atol=jnp.asarray(1e-10), solver=code_of("dopri8"), max_steps=steps)
        tau = out.tau_end
        field = lambda z: S._log_time_rhs(tau, z, S.FlowArgs(flow, (mdl, loss), 1e-8, 1e-10))
        reported, _ = S.stiffness_of(flow, (mdl, loss), out.y_end, out.tau_end, out.tau_start, out.round_steps)
        return stiff.stiffness_ratio(field, out.y_end, tau / out.num_steps), out.tau_end, out.code, reported

    for t1 in t1s:
        h_rho, tau_end, code, reported = measure(jnp.asarray(np.log1p(t1)))
        yield t1, float(h_rho), SimpleNamespace(tau_end=tau_end, code=code, reported=reported)


def test_detector_fires_on_the_stiff_flow_and_never_on_the_logistic_teacher():
    """After the first explicit round (64 Dopri8 steps) the κ = 20 flow is stability-limited
    (``h·ρ`` above the switching threshold); the logistic teacher of Fig. 2 (negative control),
    integrated to t = 1e12, stays far below it at its end and at intermediate times."""
    W0, a0, _, _, loss = _square_draw(20, 4)
    ((_, h_rho, out),) = _h_rho_at_end(loss, W0, a0, [1e5], POLICY.explicit_round)
    assert int(out.code) == int(S_status.max_steps)  # the round ended unfinished
    assert float(out.tau_end) < np.log1p(1e5) and h_rho > BOUNDARY_ON, h_rho
    assert float(out.reported) == pytest.approx(h_rho, rel=1e-9)  # what the engine reports to the phase policy
    rng = np.random.RandomState(123)
    V0, a0 = 0.1 * rng.randn(8, 8), 0.0 * rng.randn(8)
    bs = rng.randn(8)
    teacher = gradflow.LogisticTeacher(bs / np.linalg.norm(bs))
    for t1, h_rho, out in _h_rho_at_end(teacher, V0, a0, [1e2, 1e6, 1e12], 16384):
        assert float(out.tau_end) == pytest.approx(np.log1p(t1)) and h_rho < 0.5 * BOUNDARY_ON, (t1, h_rho)


# --- ROS34PW2: the Rosenbrock–W method with Jacobian reuse -------------------------------------

_E_WRONG = np.array([[0.0, 0.7], [-0.5, 0.3]])


@jax.custom_jvp
def _wrong_derivative(y):
    return y


@_wrong_derivative.defjvp
def _wrong_derivative_jvp(primals, tangents):
    (y,), (dy,) = primals, tangents
    return y, dy + jnp.asarray(_E_WRONG) @ dy  # autodiff sees I + E instead of I


def _nonlinear_vf(t, y, wrong):
    y = _wrong_derivative(y) if wrong else y
    return jnp.stack([-y[1] + jnp.sin(t) * y[0], y[0] - 0.5 * y[1] ** 2 + jnp.cos(t)])


def _fixed_steps(solver, n, wrong):
    import diffrax

    term, y0, h = diffrax.ODETerm(_nonlinear_vf), jnp.array([1.0, 0.5]), 1.0 / n
    return _fixed_steps_program(solver, _nonlinear_vf, wrong, True)(jnp.asarray(h), n, y0,
                                                                     solver.init(term, 0.0, h, y0, wrong))


@functools.cache
def _fixed_steps_program(solver, vector_field, args, carry_state: bool):
    """``run(h, n, y0, st)``: ``n`` fixed steps of size ``h`` of ``solver`` on ``vector_field``
    from ``(0, y0)``, each from the state the previous step returned (``carry_state``) or every one
    from ``st``, the state of ``init`` (a stale matrix); one program for every ``n`` and ``h``."""
    import diffrax

    term = diffrax.ODETerm(vector_field)

    @jax.jit
    def run(h, n, y0, st):
        def body(k, carry):
            y, s = carry
            y1, _, _, s1, _ = solver.step(term, k * h, k * h + h, y, args, s, False)
            return y1, (s1 if carry_state else s)

        return jax.lax.fori_loop(0, n, body, (y0, st))[0]

    return run


def _observed_orders(solver, wrong):
    import diffrax

    term = diffrax.ODETerm(_nonlinear_vf)
    exact = diffrax.diffeqsolve(term, diffrax.Dopri8(), 0.0, 1.0, 1e-3, jnp.array([1.0, 0.5]), args=False,
                                stepsize_controller=diffrax.PIDController(rtol=1e-13, atol=1e-13)).ys[-1]
    errs = np.array([float(jnp.max(jnp.abs(_fixed_steps(solver, n, wrong) - exact))) for n in (10, 20, 40, 80)])
    return np.log2(errs[:-1] / errs[1:])


def test_ros34pw2_keeps_its_order_with_a_wrong_jacobian_and_rodas4_does_not():
    """A W-method's order conditions hold for any matrix in place of ∂f/∂y (Rang & Angermann
    2005): fixed steps on a nonlinear non-autonomous system, with the exact Jacobian (reused over
    steps of equal size) and with autodiff deliberately returning ``J(I + E)``, converge at order
    ≥ 2.8 (observed 2.9–4.0). Negative control: Rodas4, a Rosenbrock method that needs the exact
    Jacobian, drops to order ≈ 1 with the same wrong derivative (and is order ≈ 4 without)."""
    from gradflow._engine.rosenbrock import Rodas4, Ros34pw2

    for wrong in (False, True):
        assert np.all(_observed_orders(Ros34pw2(), wrong) > 2.8), wrong
    assert np.all(_observed_orders(Rodas4(), False) > 3.3)
    assert np.all(_observed_orders(Rodas4(), True) < 1.2)


def test_ros34pw2_reuses_its_matrix_only_at_the_same_step_size():
    """Two steps of equal size share one ``W⁻¹`` (age 0 → 1, matrix unchanged); a step of another
    size rebuilds it, equal to ``(I/(hγ) − J)⁻¹`` at that step's start (NumPy inverse of the
    autodiff Jacobian); after :data:`MAX_AGE` reuses it is rebuilt even at the same size."""
    import diffrax

    from gradflow._engine import rosenbrock as R

    term, y0, solver = diffrax.ODETerm(_nonlinear_vf), jnp.array([1.0, 0.5]), R.Ros34pw2()
    st = solver.init(term, 0.0, 0.1, y0, False)
    y1, _, _, st1, _ = solver.step(term, 0.0, 0.1, y0, False, st, False)
    y2, _, _, st2, _ = solver.step(term, 0.1, 0.2, y1, False, st1, False)
    assert int(st1[2]) == 0 and int(st2[2]) == 1 and float(st2[1]) == pytest.approx(0.1)
    np.testing.assert_array_equal(st2[0], st1[0])
    _, _, _, st3, _ = solver.step(term, 0.2, 0.25, y2, False, st2, False)
    J = jax.jacfwd(lambda x: _nonlinear_vf(0.2, x, False))(y2)
    expect = np.linalg.inv(np.eye(2) / (0.05 * R._W_GAMMA) - np.asarray(J))
    assert int(st3[2]) == 0 and float(st3[1]) == pytest.approx(0.05)
    np.testing.assert_allclose(st3[0], expect, rtol=1e-12)
    old = (st2[0], st2[1], jnp.asarray(R.MAX_AGE, jnp.int32))  # same step size, matrix too old
    _, _, _, st4, _ = solver.step(term, 0.2, 0.3, y2, False, old, False)
    assert int(st4[2]) == 0 and not np.array_equal(st4[0], st2[0])


def test_hold_step_keeps_the_step_only_when_it_would_barely_grow():
    """:class:`HoldStep` returns the current step size where its PID controller proposes a growth
    by a factor in ``[1, HOLD_MAX]``, and the PID controller's proposal otherwise (larger growth,
    shrinking, rejection): the negative control is the PID controller itself, which changes the
    step in every case."""
    import diffrax

    from gradflow._engine.rosenbrock import HOLD_MAX, HoldStep

    pid = diffrax.PIDController(rtol=1e-6, atol=1e-6, pcoeff=0.3, icoeff=0.4)
    hold = HoldStep(pid).wrap(1)
    pid = pid.wrap(1)
    term = diffrax.ODETerm(lambda t, y, args: -y)
    y0 = jnp.ones(1)
    _, state = pid.init(term, 0.0, 1.0, y0, 0.1, None, lambda *a: -y0, 3)
    seen = set()
    for err in (1e-7, 5e-7, 8e-7, 3e-6, 1e-9):
        out_pid = pid.adapt_step_size(0.0, 0.1, y0, y0, None, jnp.full(1, err), 3, state)
        out_hold = hold.adapt_step_size(0.0, 0.1, y0, y0, None, jnp.full(1, err), 3, state)
        h_pid, h_hold = float(out_pid[2] - out_pid[1]), float(out_hold[2] - out_hold[1])
        assert h_pid != pytest.approx(0.1, rel=1e-12)
        ratio = h_pid / 0.1
        if bool(out_pid[0]) and 1.0 <= ratio <= HOLD_MAX:
            assert h_hold == pytest.approx(0.1, rel=1e-12), (err, ratio)
            seen.add("held")
        else:
            assert h_hold == h_pid, (err, ratio)
            seen.add("grown" if ratio > HOLD_MAX else "shrunk")
    assert seen == {"held", "grown", "shrunk"}, seen


@pytest.mark.slow  # default run kept under ~15 min on 2 cores
def test_ros34pw2_alone_matches_radau():
    """``solver="ros34pw2"`` from t = 0 on a small stiff draw, against SciPy Radau (rtol 1e-12)."""
    W0, a0, X, y, loss = _square_draw(5, 3)
    ts = np.concatenate([[0.0], np.geomspace(0.1, 1e4, 9)])
    traj = gradflow.simulate(loss, W0, a0, t1=1e4, ts=ts, rtol=1e-10, atol=1e-12, solver="ros34pw2")
    assert traj.status == "ok"
    Vr, ar, _ = ref.integrate(W0, a0, ref.square_residual(y, X, 1.0), ts, rtol=1e-12, atol=1e-14, method="Radau")
    np.testing.assert_allclose(traj.a, ar, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(traj.V, Vr, rtol=1e-6, atol=1e-8)


def test_blas_threads_limits_only_implicit_solves():
    """Inside :func:`stiff.blas_threads` for an implicit solver SciPy's OpenBLAS (the LAPACK that
    JAX calls on CPU) runs one thread and is restored on exit; for an explicit solver (negative
    control) nothing changes."""
    import threadpoolctl

    def blas():
        return [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]

    before = blas()
    assert before, "no BLAS library found"
    with stiff.blas_threads("rodas4"):
        assert set(blas()) == {POLICY.blas_threads}
    assert blas() == before
    with stiff.blas_threads("dopri8"):
        assert blas() == before


def test_auto_limits_blas_threads_from_its_first_implicit_round_only(monkeypatch):
    """Under ``auto`` the BLAS threads are limited while the implicit rounds run (each round sees
    one thread) and not before: an explicit round of the same run, and a run that stays explicit
    (the logistic teacher, negative control), see the default; the default is back after the run."""
    import threadpoolctl

    from gradflow._engine import batch

    def blas():
        return tuple(p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas")

    seen, orig = [], batch._fused_round

    def spy(flow, fargs, params0, state, settings, rnd, *lanes):
        seen.append((spec(rnd.solver).name, blas()))
        return orig(flow, fargs, params0, state, settings, rnd, *lanes)

    monkeypatch.setattr(batch, "_fused_round", spy)
    stiff._threadpools()  # SciPy's OpenBLAS loaded, as the engine loads it
    default = blas()
    assert default, "no BLAS library found"
    if set(default) == {POLICY.blas_threads}:
        pytest.skip("BLAS already runs one thread here (one core): the limit cannot be seen")
    W0, a0, _, _, loss = _square_draw(20, 4)
    assert gradflow.simulate(loss, W0, a0, t1=1e5).status == "ok"
    implicit = [b for name, b in seen if spec(name).implicit]
    assert implicit and all(set(b) == {POLICY.blas_threads} for b in implicit), seen
    assert seen[0] == ("dopri8", default) and blas() == default
    seen.clear()
    rng = np.random.RandomState(0)
    teacher = gradflow.LogisticTeacher(rng.randn(4) / 2)
    assert gradflow.simulate(teacher, 0.1 * rng.randn(4, 4), np.zeros(4), t1=1e6).status == "ok"
    assert seen and all(b == default for _, b in seen), seen


# --- ROS34PW2 with a symmetric eigendecomposition (the implicit phase of ``auto`` for gradient flows)


def test_eigen_solve_is_the_dense_inverse_for_a_symmetric_jacobian():
    """Hand check: for a random symmetric parameter block ``P`` with two quadrature rows ``R``,
    :func:`eigen_solve` with the eigendecomposition from :func:`eigen_jacobian` equals NumPy's dense
    solve of ``(I/(hγ) − c·[[P, 0], [R, 0]]) x = r`` at several ``(hγ, c)`` (one decomposition for all);
    negative control: a non-symmetric ``P`` is reported (``asym`` of order one) and its eigen solve,
    which uses the symmetric part, differs from the dense solve."""
    from gradflow._engine import rosenbrock as R

    rng = np.random.default_rng(0)
    n_p, n_q = 7, 2
    for symmetric in (True, False):
        M = rng.normal(size=(n_p, n_p))
        P = -(M @ M.T) if symmetric else -(M @ M.T) + 2.0 * np.triu(rng.normal(size=(n_p, n_p)), 1)
        Rows = rng.normal(size=(n_q, n_p))
        G = np.zeros((n_p + n_q, n_p + n_q))
        G[:n_p, :n_p], G[n_p:, :n_p] = P, Rows
        f = lambda t, x: jnp.exp(t) * (jnp.asarray(G) @ x)  # F(τ, y) = e^τ G y: time factor exp
        Q, mu, Rq, asym = R.eigen_jacobian(f, 0.7, jnp.ones(n_p + n_q), n_p)
        assert (float(asym) < 1e-14) == symmetric, float(asym)
        np.testing.assert_allclose(Rq, Rows, rtol=1e-13, atol=1e-13)
        r = rng.normal(size=n_p + n_q)
        for hg, c in ((1e-3, 1.0), (0.3, 50.0), (2.0, 1e5)):
            x = R.eigen_solve(Q, Q.T, mu, Rq, c, hg, jnp.asarray(r), n_p)
            dense = np.linalg.solve(np.eye(n_p + n_q) / hg - c * G, r)
            if symmetric:
                np.testing.assert_allclose(x, dense, rtol=1e-9, atol=1e-12 * np.max(np.abs(dense)))
            else:
                assert np.max(np.abs(np.asarray(x) - dense)) > 1e-3 * np.max(np.abs(dense))


def _quartic_gradient_vf(tau, y, args):
    """Log-time gradient flow of ``L(p) = ½ pᵀAp + ¼ Σ p⁴`` with a quadrature ``q' = |p|²``."""
    A = jnp.array([[3.0, 1.0, 0.0], [1.0, 2.0, 0.5], [0.0, 0.5, 1.0]])
    p, q = y
    return jnp.exp(tau) * (-(A @ p) - p ** 3), jnp.exp(tau) * jnp.sum(p ** 2)


def test_eigen_w_keeps_order_three_with_a_stale_jacobian():
    """The eigendecomposition is taken once at ``init`` and then only the time factor ``e^τ`` is
    updated: fixed steps on a nonlinear gradient flow (with a quadrature state), from τ = 0 to 0.5,
    converge at order ≥ 2.8 against a tight Dopri8 solution (a W-method: order 3 with any matrix)."""
    import diffrax

    from gradflow._engine.rosenbrock import EigenW

    term, y0 = diffrax.ODETerm(_quartic_gradient_vf), (jnp.array([1.0, -0.8, 0.6]), jnp.zeros(()))
    exact = diffrax.diffeqsolve(term, diffrax.Dopri8(), 0.0, 0.5, 1e-3, y0,
                                stepsize_controller=diffrax.PIDController(rtol=1e-13, atol=1e-13)).ys
    exact = jnp.concatenate([exact[0][-1], exact[1][-1:]])
    solver, errs = EigenW(), []
    for n in (8, 16, 32, 64):
        y = _stale_steps(solver, term, y0, 0.5 / n, n)
        errs.append(float(jnp.max(jnp.abs(jnp.concatenate([y[0], y[1][None]]) - exact))))
    orders = np.log2(np.array(errs[:-1]) / np.array(errs[1:]))
    assert np.all(orders > 2.8), orders


def _solvers_used(monkeypatch):
    """Record the solver name of every round (a spy on the engine's rounds: ``_fused_round``, every
    lane of the run, or of a compile-bound batch, in one call, and ``_round``, part of a larger batch)."""
    from gradflow._engine import batch

    used, orig, orig_fused = [], batch._round, batch._fused_round

    def spy(flow, fargs, state, pending, settings, rnd, devices):
        used.append(spec(rnd.solver).name)
        return orig(flow, fargs, state, pending, settings, rnd, devices)

    def spy_fused(flow, fargs, params0, state, settings, rnd, *lanes):
        used.append(spec(rnd.solver).name)
        return orig_fused(flow, fargs, params0, state, settings, rnd, *lanes)

    monkeypatch.setattr(batch, "_round", spy)
    monkeypatch.setattr(batch, "_fused_round", spy_fused)
    return used


def _linear_stiff(gradient):
    """``dp/dt = −A (p − 1)`` with eigenvalues 0.1…100 of ``A``: symmetric (a gradient flow) or with a
    strictly upper-triangular coupling added in the eigenbasis (same eigenvalues, not a gradient
    field)."""
    lam = np.geomspace(0.1, 100.0, 6)  # 6 parameters: EIGEN_MIN_STATE lowered in the test
    Q = np.linalg.qr(np.random.default_rng(3).normal(size=(6, 6)))[0]
    T = np.diag(lam) if gradient else np.diag(lam) + 3.0 * np.triu(np.ones((6, 6)), 1)
    return Q @ T @ Q.T


@pytest.mark.parametrize("gradient", [True, False])
def test_auto_picks_the_eigen_w_method_only_for_gradient_flows(monkeypatch, gradient):
    """A stiff linear flow through the engine (``Flow`` with its rest stop on) under ``auto``: the
    symmetric one (a gradient flow) runs its implicit rounds with ``AutoPolicy.implicit``
    (``rodas4-eigh``); the
    non-symmetric one (the negative control for the symmetry probe) with the fallback Rodas4. Both
    agree with the matrix exponential (SciPy ``expm``) at the save points."""
    import scipy.linalg

    from gradflow._engine import batch
    from gradflow._engine.settings import check_settings
    from gradflow._engine.solve import Flow

    A = _linear_stiff(gradient)
    flow = Flow(field=lambda p, args: -(args @ (p - 1.0)))
    p0 = np.linspace(1.0, -1.0, 6)
    settings, ts = check_settings(t1=1e3, ts=np.array([0.0, 1e-3, 1e-2, 0.1, 1.0, 10.0]), rtol=1e-8, atol=1e-10,
                                  max_steps=20000, solver="auto",
                                  policy=POLICY.replace(eigen_min_state=1))  # the size threshold is not tested here
    used = _solvers_used(monkeypatch)
    out = batch.run(flow, jnp.asarray(A), jnp.asarray(p0)[None], settings.replace(lane=0), devices=jax.local_devices())
    implicit = {s for s in used if s != "dopri8"}
    assert implicit == ({POLICY.implicit} if gradient else {POLICY.fallback}), used
    assert int(out.status_code) == int(S_status.ok)
    expect = np.stack([1.0 + scipy.linalg.expm(-A * t) @ (p0 - 1.0) for t in ts])
    np.testing.assert_allclose(out.params, expect, rtol=1e-6, atol=1e-8)


# --- Rodas4 with the exact Jacobian through refined eigen solves (``rodas4-eigh``) ---------------


def test_refined_solve_converges_to_the_solve_with_the_exact_jacobian():
    """Hand check: preconditioned by the eigendecomposition of a stale symmetric block ``P_old``,
    :func:`refined_solve` with the exact Jacobian ``J = c·[[P, 0], [R, 0]]`` (``P`` = ``P_old`` plus
    a symmetric drift of 5 % of ``P_old``'s smallest eigenvalue: a Hessian that changes slowly, as near
    a minimiser) approaches NumPy's dense solve of ``(I/hg − J) x = r`` geometrically in
    the number of iterations (each at least 4× closer; 6 iterations to 1e-9). Negative control:
    without iterations (the preconditioner alone) the error is of the size of the drift."""
    from gradflow._engine import rosenbrock as R

    rng = np.random.default_rng(1)
    n_p, n_q = 8, 2
    M = rng.normal(size=(n_p, n_p))
    P_old = -(M @ M.T) - 0.5 * np.eye(n_p)
    E = rng.normal(size=(n_p, n_p))
    lam_min = np.min(np.abs(np.linalg.eigvalsh(P_old)))
    P = P_old + 0.05 * lam_min * (E + E.T) / np.linalg.norm(E + E.T, 2)
    Rows = rng.normal(size=(n_q, n_p))
    G_old, G = np.zeros((n_p + n_q,) * 2), np.zeros((n_p + n_q,) * 2)
    G_old[:n_p, :n_p], G_old[n_p:, :n_p] = P_old, Rows
    G[:n_p, :n_p], G[n_p:, :n_p] = P, Rows
    Q, mu, Rq, _ = R.eigen_jacobian(lambda t, x: jnp.exp(t) * (jnp.asarray(G_old) @ x), 0.0, jnp.ones(n_p + n_q), n_p)
    r = rng.normal(size=n_p + n_q)
    for hg, c in ((0.05, 1.0), (0.3, 50.0), (2.0, 1e4)):
        J = c * G
        dense = np.linalg.solve(np.eye(n_p + n_q) / hg - J, r)
        precond = lambda v: R.eigen_solve(Q, Q.T, mu, Rq, c, hg, v, n_p)
        jvp = lambda v: jnp.asarray(J) @ v
        errs = [float(np.max(np.abs(np.asarray(R.refined_solve(jvp, precond, hg, jnp.asarray(r), k)) - dense)))
                / np.max(np.abs(dense)) for k in range(7)]
        assert errs[0] > 1e-4, (hg, c, errs)  # the stale matrix alone is off by the drift
        assert all(b < a / 4 for a, b in zip(errs, errs[1:]) if a > 1e-13), (hg, c, errs)
        assert errs[6] < 1e-9, (hg, c, errs)


def _fixed_step_orders(solver, t_end=0.5, ns=(8, 16, 32, 64)):
    """Observed orders of ``solver`` (``init`` once: its eigendecomposition taken at τ = 0) over
    fixed steps on :func:`_quartic_gradient_vf`, against a tight Dopri8 solution."""
    import diffrax

    term, y0 = diffrax.ODETerm(_quartic_gradient_vf), (jnp.array([1.0, -0.8, 0.6]), jnp.zeros(()))
    exact = diffrax.diffeqsolve(term, diffrax.Dopri8(), 0.0, t_end, 1e-3, y0, max_steps=100000,
                                stepsize_controller=diffrax.PIDController(rtol=1e-14, atol=1e-14)).ys
    exact = jnp.concatenate([exact[0][-1], exact[1][-1:]])
    errs = []
    for n in ns:
        h = t_end / n
        y = _stale_steps(solver, term, y0, h, n)
        errs.append(float(jnp.max(jnp.abs(jnp.concatenate([y[0], y[1][None]]) - exact))))
    return np.log2(np.array(errs[:-1]) / np.array(errs[1:]))


def _stale_steps(solver, term, y0, h, n):
    """``n`` fixed steps of size ``h`` from ``(0, y0)``, every one with the state of ``init`` at
    τ = 0 (the stale matrix): :func:`_fixed_steps_program`."""
    st = solver.init(term, 0.0, h, y0, None)
    return _fixed_steps_program(solver, term.vector_field, None, False)(jnp.asarray(h), n, y0, st)


def test_eigen_rodas4_is_order_four_with_a_stale_eigendecomposition():
    """RODAS4 needs the exact Jacobian; :class:`EigenRodas4` applies it through ``iterations``
    refinement sweeps preconditioned by the eigendecomposition taken once at ``init``. Each sweep
    multiplies the Jacobian's error by ``O(h)``, so the method is of order ``min(4, k + 1)`` with
    ``k`` sweeps: fixed steps on a nonlinear gradient flow (its Hessian drifting over the interval)
    converge at order ≥ 3.7 with :data:`REFINE` (= 3) sweeps. Negative controls: no sweep (Rodas4 with
    the stale matrix) is order ≈ 1, two sweeps ≈ 3 (observed 1.02–1.08 and 2.69–2.91)."""
    from gradflow._engine.rosenbrock import REFINE, EigenRodas4

    assert REFINE >= 3
    assert np.all(_fixed_step_orders(EigenRodas4(iterations=REFINE)) > 3.7)
    for k in (0, 2):
        orders = _fixed_step_orders(EigenRodas4(iterations=k), ns=(8, 16, 32))
        assert np.all((orders > k + 0.5) & (orders < k + 1.3)), (k, orders)


@pytest.mark.parametrize("solver", [
    "rodas4-eigh",
    # auto's implicit phase is rodas4-eigh; the ros34pw2-eigh run is slow to keep the default run short
    pytest.param("ros34pw2-eigh", marks=pytest.mark.slow),
])
def test_eigen_solver_alone_matches_radau(solver):
    """``solver`` (``rodas4-eigh`` or ``ros34pw2-eigh``) on its own from t = 0 (one
    eigendecomposition per solve round) on a stiff conditioning draw, against Radau at rtol 1e-12."""
    W0, a0, X, y, loss = _square_draw(5, 3)
    ts = np.concatenate([[0.0], np.geomspace(0.1, 1e4, 9)])
    traj = gradflow.simulate(loss, W0, a0, t1=1e4, ts=ts, rtol=1e-10, atol=1e-12, solver=solver)
    assert traj.status == "ok"
    Vr, ar, _ = ref.integrate(W0, a0, ref.square_residual(y, X, 1.0), ts, rtol=1e-12, atol=1e-14, method="Radau")
    np.testing.assert_allclose(traj.a, ar, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(traj.V, Vr, rtol=1e-6, atol=1e-8)


# --- Rodas4 with conjugate-gradient stage solves on Jacobian–vector products (``rodas4-krylov``) ----


def _block_system(rng, n_p, n_q, definite=True):
    """``G = [[P, 0], [R, 0]]``: ``P`` symmetric negative definite (a Hessian at a minimiser, with
    eigenvalues spread over four decades) or indefinite, ``R`` random quadrature rows."""
    Q = np.linalg.qr(rng.normal(size=(n_p, n_p)))[0]
    lam = -np.geomspace(1e-2, 1e2, n_p) if definite else np.linspace(-10.0, 10.0, n_p)
    G = np.zeros((n_p + n_q,) * 2)
    G[:n_p, :n_p], G[n_p:, :n_p] = Q @ np.diag(lam) @ Q.T, rng.normal(size=(n_q, n_p))
    return G


def test_krylov_solve_is_the_dense_solve():
    """Hand check: :func:`krylov_solve` (CG on the parameter block, the quadrature rows by
    substitution, Jacobian–vector products only) equals NumPy's dense solve of
    ``(I/hg − G) x = r`` to its tolerance at several ``hg``, without falling back to GMRES; so it
    does for an indefinite ``I/hg − P`` on which CG does not break down, and where it does break
    down (``pᵀAp = 0``) the GMRES fallback solves the system. Negative control: at a tolerance a million times looser the solve is
    correspondingly less accurate (the tolerance, not luck, sets the accuracy)."""
    from gradflow._engine import rosenbrock as R

    rng = np.random.default_rng(4)
    n_p, n_q = 40, 2
    G = _block_system(rng, n_p, n_q)
    r = jnp.asarray(rng.normal(size=n_p + n_q))
    jvp = lambda v: jnp.asarray(G) @ v
    solve = jax.jit(lambda r, hg, tol: R.krylov_solve(jvp, hg, r, n_p, jnp.full(n_p, tol)))  # one compile
    for hg in (1e-3, 0.3, 50.0):
        dense = np.linalg.solve(np.eye(n_p + n_q) / hg - G, np.asarray(r))
        errs = []
        for tol in (1e-12, 1e-6):
            x, its, fallback = solve(r, hg, tol)
            assert not bool(fallback) and 0 < int(its) <= 200, (hg, tol, int(its))
            errs.append(np.max(np.abs(np.asarray(x) - dense)))
        assert errs[0] < 1e-10 * np.max(np.abs(dense)), (hg, errs)
        assert errs[1] > 10 * errs[0] and errs[1] < 1e-5 * np.sqrt(n_p), (hg, errs)
    G = _block_system(rng, n_p, n_q, definite=False)  # indefinite, no breakdown: CG still solves it
    x, _, fallback = jax.jit(lambda G, r: R.krylov_solve(lambda v: G @ v, 1.0, r, n_p, jnp.full(n_p, 1e-12)))(G, r)
    assert not bool(fallback)
    np.testing.assert_allclose(x, np.linalg.solve(np.eye(n_p + n_q) - G, np.asarray(r)), rtol=0, atol=1e-10)
    # I − P = diag(1, −1) and r_p = (1, 1): pᵀAp = 0 at CG's first iteration (breakdown)
    G = np.array([[0.0, 0.0, 0.0], [0.0, 2.0, 0.0], [1.0, -1.0, 0.0]])
    r = jnp.array([1.0, 1.0, 0.5])
    breakdown = jax.jit(lambda G: R.krylov_solve(lambda v: G @ v, 1.0, r, 2, jnp.full(2, 1e-12)))
    x, _, fallback = breakdown(G)
    assert bool(fallback)
    np.testing.assert_allclose(x, np.linalg.solve(np.eye(3) - G, np.asarray(r)), rtol=0, atol=1e-12)
    # under vmap: the lane that breaks down falls back, the other keeps its CG solution
    Gs = jnp.asarray(np.stack([G, np.diag([-1.0, -2.0, 0.0])]))
    xs, _, fbs = jax.jit(jax.vmap(breakdown))(Gs)
    assert fbs.tolist() == [True, False]
    for Gi, xi in zip(np.asarray(Gs), np.asarray(xs)):
        np.testing.assert_allclose(xi, np.linalg.solve(np.eye(3) - Gi, np.asarray(r)), rtol=0, atol=1e-12)


@pytest.mark.slow  # ~24 s on 2 cores; default run: the Krylov stage solve equals the dense solve
# (test_krylov_solve_is_the_dense_solve), and dense RODAS4 keeps order 4 (test_rodas4_alone_matches_radau,
# test_engine_interior.py::test_tableaux_satisfy_their_order_conditions)
def test_krylov_rodas4_is_order_four():
    """RODAS4 with the exact Jacobian applied by Jacobian–vector products and CG stage solves to a
    fraction of tight tolerances keeps order 4: fixed steps on the nonlinear gradient flow with a
    quadrature converge at order ≥ 3.7. Negative control: one CG iteration per stage (an inexact
    solve far beyond the tolerance) loses the order (below 3)."""
    from gradflow._engine.rosenbrock import RODAS4, Krylov, KrylovRodas4, Rosenbrock

    assert np.all(_fixed_step_orders(KrylovRodas4(rtol=1e-13, atol=1e-15)) > 3.7)
    orders = _fixed_step_orders(Rosenbrock(RODAS4, Krylov(1e-13, 1e-15, max_steps=1)), ns=(8, 16, 32))
    assert np.all(orders < 3.0), orders


def _one_step(solver, y0):
    """``(y1, error estimate, solver state)`` of one step τ = 0 → 0.05 of ``solver`` (from ``init``)
    on :func:`_quartic_gradient_vf`, jitted."""
    import diffrax

    term = diffrax.ODETerm(_quartic_gradient_vf)

    def fn(y):
        st = solver.init(term, 0.0, 0.05, y, None)
        y1, err, _, st1, _ = solver.step(term, 0.0, 0.05, y, None, st, False)
        return y1, err, st1
    return fn


_STRATEGIES = {
    "dense-lu": lambda R: R.DenseLU(), "held-inverse": lambda R: R.HeldInverse(), "eigen": lambda R: R.Eigen(),
    "eigen-refined": lambda R: R.EigenRefined(), "krylov": lambda R: R.Krylov(1e-12, 1e-14),
}


@pytest.mark.parametrize("tableau", ["RODAS4", "ROS34PW2"])
@pytest.mark.parametrize("strategy", sorted(_STRATEGIES))
def test_looped_stages_are_the_written_out_stages(strategy, tableau):
    """:func:`_stages_looped` (the stages after the first in one ``lax.scan``, as ``rodas4-krylov``
    runs them) against :func:`_stages` (every stage written out, an independent formulation of the
    same tableau): one step of every solve strategy and both tableaux on the quartic gradient flow
    with a quadrature gives the same state, error estimate and solver state to round-off (1e-14;
    the Krylov counters exactly, one counted solve per stage); for the Krylov solves the looped
    traced step is less than 0.6 of the written-out one for RODAS4's six stages (measured 0.47) and
    0.8 for ROS34PW2's four (0.65). Negative control: a looped
    tableau with its ``C`` couplings dropped differs by far more."""
    import dataclasses

    from gradflow._engine import rosenbrock as R

    tab, linear = getattr(R, tableau), _STRATEGIES[strategy](R)
    y0 = (jnp.array([1.0, -0.8, 0.6]), jnp.zeros(()))
    flat = lambda tree: np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in jax.tree.leaves(tree)])
    plain, looped = R.Rosenbrock(tab, linear), R.Rosenbrock(tab, linear, looped=True)
    (y_p, e_p, s_p), (y_l, e_l, s_l) = jax.jit(_one_step(plain, y0))(y0), jax.jit(_one_step(looped, y0))(y0)
    np.testing.assert_allclose(flat(y_l), flat(y_p), rtol=0, atol=1e-14)
    np.testing.assert_allclose(flat(e_l), flat(e_p), rtol=0, atol=1e-14)
    if s_p is not None:
        np.testing.assert_allclose(flat(s_l), flat(s_p), rtol=1e-14, atol=1e-14)
    if strategy == "krylov":
        np.testing.assert_array_equal(np.asarray(s_l), np.asarray(s_p))
        assert int(s_l[1]) == len(tab.c)  # one counted solve per stage
        size = lambda solver: len(str(jax.make_jaxpr(_one_step(solver, y0))(y0)))
        bound = 0.6 if tableau == "RODAS4" else 0.8  # two traced solves of six stages, or of four
        assert size(looped) < bound * size(plain), (size(looped), size(plain))
    uncoupled = dataclasses.replace(tab, C=tuple(tuple(0.0 for _ in row) for row in tab.C))
    y_bad = jax.jit(_one_step(R.Rosenbrock(uncoupled, linear, looped=True), y0))(y0)[0]
    assert np.max(np.abs(flat(y_bad) - flat(y_p))) > 1e-6


NO_RKC = POLICY.replace(stabilised_min_state=10**12)
"""The policy without its stabilised explicit phase (the implicit choices alone)."""


def test_auto_picks_krylov_only_above_its_state_size():
    """The phase policy without its stabilised explicit phase (:data:`NO_RKC`): a stiff gradient
    lane runs ``AutoPolicy.krylov`` from ``AutoPolicy.krylov_min_state`` parameters on,
    ``AutoPolicy.implicit`` (dense) just below it (negative control), and a non-gradient lane the
    fallback Rodas4 at any size."""
    on = 2.0 * BOUNDARY_ON
    for size, asym, expect in ((POLICY.krylov_min_state, 0.0, POLICY.krylov),
                               (10 * POLICY.krylov_min_state, 0.0, POLICY.krylov),
                               (POLICY.krylov_min_state - 1, 0.0, POLICY.implicit),
                               (10 * POLICY.krylov_min_state, 0.5, POLICY.fallback)):
        codes, _, now = stiff.phase_of_lanes("auto", np.zeros(1), 10_000, np.zeros(1, bool), np.array([on]),
                                             np.array([asym]), size, NO_RKC)
        assert now[0] and spec(codes[0]).name == expect, (size, asym, spec(codes[0]).name)
    assert spec(POLICY.krylov).gradient_only and spec(POLICY.krylov).code == 9


def _auto_through_engine(monkeypatch, gradient, policy, rtol=1e-8):
    """The stiff linear flow (:func:`_linear_stiff`, 6 parameters, rest stop on) through the engine
    under ``auto`` with ``policy`` at ``rtol`` (``atol = rtol/100``) to ``t1 = 1e3``: the solvers its
    rounds ran besides Dopri8 (a set of names), its result, and the matrix exponential (SciPy
    ``expm``) at its save points."""
    import scipy.linalg

    from gradflow._engine import batch
    from gradflow._engine.settings import check_settings
    from gradflow._engine.solve import Flow

    A = _linear_stiff(gradient)
    flow = Flow(field=lambda p, args: -(args @ (p - 1.0)))
    p0 = np.linspace(1.0, -1.0, 6)
    settings, ts = check_settings(t1=1e3, ts=np.array([0.0, 1e-3, 1e-2, 0.1, 1.0, 10.0]), rtol=rtol, atol=rtol / 100,
                                  max_steps=20000, solver="auto", policy=policy)
    used = _solvers_used(monkeypatch)
    phases: list = []
    out = batch.run(flow, jnp.asarray(A), jnp.asarray(p0)[None], settings.replace(lane=0), devices=jax.local_devices(),
                    phases=phases)
    expect = np.stack([1.0 + scipy.linalg.expm(-A * t) @ (p0 - 1.0) for t in ts])
    # the phases the engine reports (what ``integrate``'s metadata records) are the solvers the spy saw run
    assert phases[0] == "dopri8" and set(phases) == set(used) and len(phases) == len(set(phases)), (phases, used)
    return {s for s in used if s != "dopri8"}, out, expect


def test_auto_runs_krylov_through_the_engine(monkeypatch):
    """The stiff linear gradient flow through the engine (rest stop on) with the Krylov threshold
    lowered to its 6 parameters: the implicit rounds run ``rodas4-krylov`` and the save points
    agree with the matrix exponential (SciPy ``expm``)."""
    used, out, expect = _auto_through_engine(monkeypatch, True, POLICY.replace(eigen_min_state=1, krylov_min_state=6))
    assert used == {POLICY.krylov}, used
    assert int(out.status_code) == int(S_status.ok)
    np.testing.assert_allclose(out.params, expect, rtol=1e-6, atol=1e-8)


RKC_AT_6 = POLICY.replace(eigen_min_state=1, krylov_min_state=6, stabilised_min_state=6)
"""The policy with its stabilised (and Krylov) threshold lowered to the 6 parameters of :func:`_linear_stiff`."""


@pytest.mark.parametrize("gradient", [True, False])
def test_auto_runs_rkc_through_the_engine(monkeypatch, gradient):
    """The stiff linear flow through the engine (rest stop on) with the stabilised threshold lowered
    to its 6 parameters: the gradient flow's stiff rounds run ``rkc`` (``AutoPolicy.stabilised``)
    and its save points agree with the matrix exponential (SciPy ``expm``) to RKC's accuracy at
    rtol 1e-8 (second order: 1e-6 relative); the non-symmetric field (negative control: ``auto``
    never picks a method that assumes a symmetric Jacobian for it) runs the fallback Rodas4."""
    used, out, expect = _auto_through_engine(monkeypatch, gradient, RKC_AT_6)
    assert used == ({POLICY.stabilised} if gradient else {POLICY.fallback}), used
    assert int(out.status_code) == int(S_status.ok)
    np.testing.assert_allclose(out.params, expect, rtol=1e-6, atol=1e-8)


def test_auto_rkc_cap_follows_the_run_rtol(monkeypatch):
    """The engine hands the phase policy the run's own rtol (RKC's stage cap, ``√(rtol/(10 ε))``,
    depends on it): a spy on :func:`stiff.phase_of_lanes` sees rtol 1e-6 after every round of a
    run at rtol 1e-6 (the stiff linear flow, stabilised threshold lowered to its 6 parameters)."""
    from gradflow._engine import batch

    seen, orig = [], batch._stiff.phase_of_lanes

    def spy(*args, **kwargs):
        seen.append(args[8] if len(args) > 8 else kwargs.get("rtol", "default"))
        return orig(*args, **kwargs)

    monkeypatch.setattr(batch._stiff, "phase_of_lanes", spy)
    _auto_through_engine(monkeypatch, True, RKC_AT_6, rtol=1e-6)
    later = seen[1:]  # the first call decides the first round, before any h·ρ
    assert later and all(r == 1e-6 for r in later), seen


@pytest.mark.slow  # ~100 s on the loaded 2-core machine (a simulate compile); the engine test above runs by default
def test_krylov_solver_alone_matches_radau():
    """``solver="rodas4-krylov"`` on its own from t = 0 on a stiff conditioning draw (with the
    quadrature Γ), against Radau at rtol 1e-12."""
    W0, a0, X, y, loss = _square_draw(5, 3)
    ts = np.concatenate([[0.0], np.geomspace(0.1, 1e4, 9)])
    traj = gradflow.simulate(loss, W0, a0, t1=1e4, ts=ts, rtol=1e-10, atol=1e-12, solver="rodas4-krylov")
    assert traj.status == "ok"
    Vr, ar, _ = ref.integrate(W0, a0, ref.square_residual(y, X, 1.0), ts, rtol=1e-12, atol=1e-14, method="Radau")
    np.testing.assert_allclose(traj.a, ar, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(traj.V, Vr, rtol=1e-6, atol=1e-8)


def _largest_intermediate(fn, *args):
    """The most elements of any array in ``fn``'s lowered program (StableHLO text: loops, conds and
    lineax's solves, which a jaxpr keeps behind a primitive, included)."""
    import re

    text = jax.jit(fn).lower(*args).as_text()
    dims = re.findall(r"tensor<((?:\d+x)+)[a-z]", text)
    return max(int(np.prod([int(k) for k in d.rstrip("x").split("x")])) for d in dims)


def test_krylov_step_holds_no_n_by_n_array():
    """Memory ``O(n)``: no value in the traced ``init`` + ``step`` of ``rodas4-krylov`` (CG, the
    GMRES fallback with its basis of 21 vectors, the counters included) has more than ``40·n``
    elements, on a gradient flow
    of ``n = 200`` parameters and a quadrature. Negative control: ``rodas4-eigh`` and ``rodas4``
    hold the ``n × n`` Jacobian."""
    import diffrax

    from gradflow._engine.rosenbrock import EigenRodas4, KrylovRodas4, Rodas4

    n = 200
    a = jnp.geomspace(1e-2, 1e2, n)
    vf = lambda tau, y, args: (jnp.exp(tau) * (-(a * y[0]) - y[0] ** 3), jnp.exp(tau) * jnp.sum(y[0] ** 2))
    term, y0 = diffrax.ODETerm(vf), (jnp.linspace(-1.0, 1.0, n), jnp.zeros(()))

    def one_step(solver):
        def fn(y):
            st = solver.init(term, 0.0, 0.1, y, None)
            return solver.step(term, 0.0, 0.1, y, None, st, False)[0]
        return _largest_intermediate(fn, y0)

    assert one_step(KrylovRodas4()) <= 40 * (n + 1), one_step(KrylovRodas4())
    for dense in (EigenRodas4(), Rodas4()):
        assert one_step(dense) >= n * n


@pytest.mark.slow  # two simulate compiles (batched and single)
def test_krylov_lanes_of_a_batch_equal_single_runs():
    """``rodas4-krylov`` under ``vmap`` (a batch of two stiff draws of different conditioning, whose
    CG solves take different iteration counts in one batched loop) gives each lane's single run
    (to far inside the tolerance)."""
    draws = [_square_draw(k, 3) for k in (5.0, 50.0)]
    ts = np.concatenate([[0.0], np.geomspace(0.1, 1e4, 9)])
    kw = dict(t1=1e4, ts=ts, rtol=1e-10, atol=1e-12, solver="rodas4-krylov")
    batch = gradflow.simulate_batch([d[4] for d in draws], np.stack([d[0] for d in draws]),
                                    np.stack([d[1] for d in draws]), **kw)
    assert batch.status == ["ok"] * 2
    for i, (W0, a0, _, _, loss) in enumerate(draws):
        single = gradflow.simulate(loss, W0, a0, **kw)
        np.testing.assert_allclose(batch[i].V, single.V, rtol=1e-7, atol=1e-10)
        np.testing.assert_allclose(batch[i].a, single.a, rtol=1e-7, atol=1e-10)


def test_detector_draws_no_random_numbers_in_its_program():
    """The detector's start vectors (:func:`stiff.start_vector`) are NumPy constants made while
    tracing: its program has no Threefry kernel (drawn with ``jax.random`` inside it, they were
    most of its compile). The vectors are fixed standard-normal draws: the same for the same seed
    and shape, another for another seed, mean and variance those of N(0, 1) within 5 standard
    errors. Control: a program drawing with ``jax.random.normal`` shows Threefry in its HLO."""
    field = lambda y: -3.0 * jnp.tanh(y)
    y = jnp.linspace(-1.0, 1.0, 400)
    text = jax.jit(lambda y: (stiff.stiffness_ratio(field, y, 0.1), stiff.asymmetry(field, y))).lower(y).as_text()
    assert "threefry" not in text.lower()
    control = jax.jit(lambda y: y + jax.random.normal(jax.random.PRNGKey(0), y.shape, y.dtype)).lower(y).as_text()
    assert "threefry" in control.lower()
    v = np.asarray(stiff.start_vector((4000,), jnp.float64, 0))
    np.testing.assert_array_equal(v, np.asarray(stiff.start_vector((4000,), jnp.float64, 0)))
    assert not np.array_equal(v, np.asarray(stiff.start_vector((4000,), jnp.float64, 1)))
    assert abs(v.mean()) < 5 / np.sqrt(v.size) and abs(v.var() - 1.0) < 5 * np.sqrt(2 / v.size)
