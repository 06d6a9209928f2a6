"""``integrate(..., t0=...)``: a flow started (or resumed) at flow time ``t0`` keeps the log time's
origin at ``t = 0``. Checked against closed forms, a SciPy reference, and the same flow run in one
call; bad start times are refused with a clear error."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import gradflow
from tests.test_chebyshev import _half_square  # a loss with finite gradients and NaN Hessian–vector products

LAM = np.array([1e-3, 1e-2, 0.1, 1.0])


def quadratic(p):
    return 0.5 * jnp.sum(jnp.asarray(LAM) * p["x"] ** 2)


def test_a_flow_from_t0_is_the_closed_form_shifted_and_its_quadrature_starts_at_t0():
    # dx/dt = -λx: x(t) = x(0) e^{-λt}; ∫_{t0}^t L dt = Σ x(0)² (e^{-2λ t0} − e^{-2λ t}) / 4
    x0, t0, t1 = np.ones(4), 50.0, 500.0
    xt0 = x0 * np.exp(-LAM * t0)
    sol = gradflow.integrate(quadratic, {"x": xt0}, t0=t0, t1=t1, rtol=1e-10, quadratures={"L": quadratic},
                             rest_stop=False)
    t = np.asarray(sol.t)
    assert sol.status == "ok" and t[0] == t0 and t[-1] == t1 and len(t) == 401
    assert np.all(np.diff(t) > 0) and bool(np.asarray(sol.valid).all())
    assert np.array_equal(np.asarray(sol.params["x"])[0], xt0)  # the save at t0 is params0 itself
    exact = x0 * np.exp(-LAM * t[:, None])
    assert np.max(np.abs(np.asarray(sol.params["x"]) - exact)) < 1e-9
    q = np.sum(0.25 * x0**2 * (np.exp(-2 * LAM * t0) - np.exp(-2 * LAM * t[:, None])), axis=1)
    assert np.asarray(sol.quadratures["L"])[0] == 0.0
    assert np.max(np.abs(np.asarray(sol.quadratures["L"]) - q)) < 1e-10
    assert dict(sol.meta)["t0"] == t0 and float(sol.t_end) == t1
    # a flow from t = 0 records no start time (the metadata of every earlier run is unchanged)
    assert "t0" not in dict(gradflow.integrate(quadratic, {"x": x0}, t1=1.0).meta)


def _logistic():
    X = jnp.array([[1.0, 0.3], [0.5, 1.2], [-0.2, 0.9], [1.5, -0.4]])
    return lambda p: jnp.mean(jnp.logaddexp(0.0, -(X @ p["w"])))


@pytest.mark.parametrize("t_mid, t1", [(1e2, 1e4), (1e3, 1e8), (1e4, 1e12)])
def test_a_resumed_call_continues_the_log_time_steps_of_one_call(t_mid, t1):
    """Separable logistic regression (never at rest: the margin grows like log t). One call to
    ``t1`` against a call to ``t_mid`` resumed with ``t0 = t_end``: the same end state (against a
    SciPy DOP853 reference at rtol 1e-13), and the resumed call's steps are the one call's steps
    after ``t_mid`` (its log-time step lengths go on; the controller's restart costs a few). The
    control resumes without ``t0``: its log time restarts at the resume point, so its first steps
    are sized for t = 0 again and it takes more."""
    loss, w0 = _logistic(), {"w": np.array([0.1, -0.2])}
    single = gradflow.integrate(loss, w0, t1=t1, ts=[0.0, t_mid, t1])
    first = gradflow.integrate(loss, w0, t1=t_mid, ts=[0.0, t_mid])
    resumed = gradflow.integrate(loss, first.params_end, t0=float(first.t_end), t1=t1, ts=[t_mid, t1])
    restarted = gradflow.integrate(loss, first.params_end, t1=t1 - t_mid, ts=[0.0, t1 - t_mid])
    grad = jax.jit(jax.grad(lambda w: loss({"w": w})))
    ref = solve_ivp(lambda t, w: -np.asarray(grad(w)), (0.0, t1), w0["w"], method="DOP853", rtol=1e-13,
                    atol=1e-14).y[:, -1]
    for sol in (single, resumed, restarted):
        assert sol.status == "ok"
        assert np.max(np.abs(np.asarray(sol.params["w"])[-1] - ref)) < 1e-6 * np.max(np.abs(ref))
    assert resumed.num_steps <= single.num_steps - first.num_steps + 8
    assert restarted.num_steps > resumed.num_steps


def test_integrate_batch_takes_the_start_time_for_every_lane():
    x0s = np.stack([np.ones(4), 2.0 * np.ones(4)])
    t0 = 20.0
    sol = gradflow.integrate_batch(quadratic, {"x": x0s * np.exp(-LAM * t0)}, t0=t0, t1=200.0, ts=[t0, 100.0, 200.0],
                                   rtol=1e-10)
    exact = x0s[:, None] * np.exp(-LAM * np.array([t0, 100.0, 200.0])[:, None])
    assert np.max(np.abs(np.asarray(sol.params["x"]) - exact)) < 1e-9
    assert np.asarray(sol.t).shape == (2, 3) and np.all(np.asarray(sol.t)[:, 0] == t0)


def test_the_rest_stop_from_t0_holds_the_rest_state_and_continues_quadratures():
    t0 = 1e3
    sol = gradflow.integrate(lambda p: 0.5 * jnp.sum(p["x"] ** 2), {"x": np.full(3, 1e-3)}, t0=t0, t1=1e12,
                             quadratures={"one": lambda p: jnp.ones(())})
    assert sol.status == "ok" and t0 < float(sol.t_steady) < 1e12
    t, q = np.asarray(sol.t), np.asarray(sol.quadratures["one"])
    assert np.max(np.abs(q - (t - t0)) / (t - t0 + 1.0)) < 1e-7  # ∫_{t0}^t 1 dt = t − t0, held exactly past rest


@pytest.mark.bad_input
@pytest.mark.parametrize("t0, message", [
    (-1.0, "t0"), (10.0, "t0"), (20.0, "t0"), (float("nan"), "t0"), (float("inf"), "t0"), (True, "t0"),
    ("1", "t0"), (np.zeros(2), "t0"), (np.array(True), "t0"), (np.array("2.5"), "t0"), (np.array(1 + 0j), "t0"),
])
def test_bad_start_times_are_refused(t0, message):
    with pytest.raises(gradflow.GradflowValueError, match=message):
        gradflow.integrate(quadratic, {"x": np.ones(4)}, t0=t0, t1=10.0)


@pytest.mark.bad_input
def test_save_times_before_t0_are_refused():
    with pytest.raises(gradflow.GradflowValueError, match=r"\[t0, t1\] = \[5, 10\]"):
        gradflow.integrate(quadratic, {"x": np.ones(4)}, t0=5.0, t1=10.0, ts=[0.0, 10.0])
    with pytest.raises(gradflow.GradflowValueError, match=r"\[t0, t1\] = \[5, 10\]"):
        gradflow.integrate_batch(quadratic, {"x": np.ones((2, 4))}, t0=5.0, t1=10.0, ts=[4.0, 10.0])


def test_the_default_grid_from_t0_is_the_fresh_grid_shifted():
    from gradflow._engine.settings import default_ts

    ts = default_ts(1e3, t0=10.0)
    assert ts[0] == 10.0 and ts[-1] == 1e3 and np.all(np.diff(ts) > 0)
    assert np.allclose(ts, 10.0 + default_ts(1e3 - 10.0), rtol=1e-15, atol=0)
    # far from the origin, points closer than the float spacing of t0 merge; the ends stay exact
    ts = default_ts(1e30 + 1e18, t0=1e30)
    assert ts[0] == 1e30 and ts[-1] == 1e30 + 1e18 and np.all(np.diff(ts) > 0)


def test_a_run_that_fails_at_its_first_step_still_returns_its_start_at_t0():
    """RKC's spectral estimate is NaN at once, so no step is taken: the run ends ``solver_failed`` at
    ``t_end = t0`` exactly, also where ``expm1(log1p(t0))`` is not ``t0`` (2.9, 123.456: the log
    time's round trip is off in the last bits there; the control: it is), and the save point at
    ``t0`` is the start state, valid (the solve itself saved nothing). Control: the honest loss runs ``ok``."""
    th0, t0 = jnp.array([1.0, -2.0]), 3.0
    sol = gradflow.integrate(lambda p: jnp.sum(_half_square(p)), th0, t0=t0, t1=5.0, ts=[t0, 4.0, 5.0], solver="rkc")
    assert sol.status == "solver_failed" and float(sol.t_end) == t0
    for start in (2.9, 123.456):
        assert float(jnp.expm1(jnp.log1p(start))) != start
        off = gradflow.integrate(lambda p: jnp.sum(_half_square(p)), th0, t0=start, t1=start + 2.0, solver="rkc")
        assert off.status == "solver_failed" and float(off.t_end) == start
        batch = gradflow.integrate_batch(lambda p: jnp.sum(_half_square(p)), jnp.stack([th0, th0]), t0=start,
                                         t1=start + 2.0, solver="rkc")
        assert np.asarray(batch.t_end).tolist() == [start, start]
    assert np.asarray(sol.valid).tolist() == [True, False, False]
    assert np.array_equal(np.asarray(sol.params)[0], np.asarray(th0))
    good = gradflow.integrate(lambda p: 0.5 * jnp.sum(p**2), th0, t0=t0, t1=5.0, ts=[t0, 4.0, 5.0], solver="rkc")
    assert good.status == "ok" and bool(np.asarray(good.valid).all())
    # RKC is second order: its global error at rtol 1e-8 over two e-folds is ~4e-6 relative (9e-7 from t = 0)
    np.testing.assert_allclose(np.asarray(good.params), np.exp(-(np.array([t0, 4.0, 5.0]) - t0))[:, None] * np.asarray(th0),
                               rtol=2e-5)


@pytest.mark.bad_input
def test_a_span_log_time_cannot_resolve_is_refused():
    """From ``t0 = 1e12`` log time resolves steps of about ``3.6e-15·(1 + t)`` ≈ 4e-3 in ``t``: a span
    of 1e-3 would take no step and return ``params0`` as the state at ``t1``, so it is refused. A
    span of 1e6 on a slow flow (curvature 1e-9) is fine, against its closed form. A transient of
    time scale 1 at t0 = 1e12 spans ~1e-12 in log time, below the smallest step the solve accepts
    (``STALL_ULPS`` ulps of τ1, 6e-12): it ends ``stalled`` (a status, not a silent answer), as the
    docstring of ``integrate`` says."""
    with pytest.raises(gradflow.GradflowValueError, match="t1 - t0 is at least"):
        gradflow.integrate(quadratic, {"x": np.ones(4)}, t0=1e12, t1=1e12 + 1e-3)
    slow = lambda p: 0.5e-9 * jnp.sum(p["x"] ** 2)  # noqa: E731
    sol = gradflow.integrate(slow, {"x": np.ones(4)}, t0=1e12, t1=1e12 + 1e6, rtol=1e-10, rest_stop=False)
    assert sol.status == "ok"
    np.testing.assert_allclose(np.asarray(sol.params["x"])[-1], np.exp(-1e-3), rtol=1e-8)
    fast = gradflow.integrate(quadratic, {"x": np.ones(4)}, t0=1e12, t1=1e12 + 1e6, rest_stop=False)
    assert fast.status == "stalled"


def test_the_default_grid_far_from_the_origin_keeps_points_log_time_tells_apart():
    from gradflow._engine.settings import default_ts

    ts = default_ts(1e12 + 1e6, t0=1e12)
    assert ts[0] == 1e12 and ts[-1] == 1e12 + 1e6 and np.all(np.diff(np.log1p(ts)) > 0)
