"""The engine's interior, each piece against an independent statement of what it must be: the
solver table against the methods the solver guide names, the keyword-only settings, the solve
running to ``t1`` past the last save point, the status enumeration, and the version guards of
the library internals (``gradflow/_engine/_pinned.py``)."""

import dataclasses

import diffrax
import numpy as np
import pytest

import gradflow
from gradflow._engine import _pinned, chebyshev, rosenbrock, settings as S, solvers
from gradflow._engine.erk import UnrolledDopri8

# name -> (class, Rosenbrock tableau, linear solve, controller kind), as docs/solvers.md describes them
DOCUMENTED = {
    "tsit5": (diffrax.Tsit5, None, None, "pid"),
    "dopri5": (diffrax.Dopri5, None, None, "pid"),
    "dopri8": (diffrax.Dopri8, None, None, "pid"),
    "kvaerno5": (diffrax.Kvaerno5, None, None, "pid-implicit"),
    "rodas4": (rosenbrock.Rosenbrock, rosenbrock.RODAS4, rosenbrock.DenseLU, "pid-implicit"),
    "ros34pw2": (rosenbrock.Rosenbrock, rosenbrock.ROS34PW2, rosenbrock.HeldInverse, "hold"),
    "ros34pw2-eigh": (rosenbrock.Rosenbrock, rosenbrock.ROS34PW2, rosenbrock.Eigen, "pid-implicit"),
    "rodas4-eigh": (rosenbrock.Rosenbrock, rosenbrock.RODAS4, rosenbrock.EigenRefined, "pid-implicit"),
    "rodas4-krylov": (rosenbrock.Rosenbrock, rosenbrock.RODAS4, rosenbrock.Krylov, "pid-implicit"),
    "rkc": (chebyshev.RKC, None, None, "pid"),
}


def test_solver_table_builds_the_documented_methods():
    """Every name of the table builds the method and controller the solver guide names, codes are
    distinct positive integers, and ``auto`` is a policy, not a row. Control: a name outside the
    table is refused with a clear error."""
    assert solvers.SOLVERS == ("auto",) + tuple(DOCUMENTED)
    codes = [s.code for s in solvers.SOLVER_TABLE]
    assert len(set(codes)) == len(codes) and min(codes) > 0
    for name, (cls, tableau, linear, controller) in DOCUMENTED.items():
        code = solvers.code_of(name)
        solver = solvers.make_solver(code, 1e-8, 1e-10)
        assert type(solver) is cls, name
        if tableau is not None:
            assert solver.tableau is tableau and type(solver.linear) is linear, name
        ctrl = solvers.make_controller(code, 1e-8, 1e-10, 1e-12)
        entry = solvers.spec(name).controller
        assert isinstance(entry, solvers.Controller) and entry.hold == (controller == "hold"), name
        if controller == "hold":
            assert isinstance(ctrl, rosenbrock.HoldStep) and ctrl.inner.pcoeff == 0.3 and ctrl.inner.icoeff == 0.4
        else:
            assert isinstance(ctrl, diffrax.PIDController), name
            assert (ctrl.pcoeff, ctrl.icoeff) == ((0.3, 0.4) if controller == "pid-implicit" else (0, 1)), name
        assert solvers.spec(name).implicit == (controller != "pid"), name
    assert type(solvers.make_solver(solvers.code_of("dopri8"), batched=True)) is UnrolledDopri8
    with pytest.raises(gradflow.GradflowValueError, match=r"^solver: got 'rk4'; expected one of"):
        solvers.resolve_solver("rk4")


def test_tableaux_satisfy_their_order_conditions():
    """RODAS4 and ROS34PW2 in the W-form of the module docstring: the solution weights reproduce
    the exact solution of ``y' = λy`` to the method's order (``R(z) − e^z = O(z^{p+1})`` for the
    stability function ``R(z) = y1`` at ``h = 1``, ``y0 = 1``), computed here by running the stages
    on the scalar problem with exact solves — an independent check of the
    coefficients the class reads. Control: a perturbed coefficient loses the order."""
    def R(tab, z):
        # the stages on y' = λ y, h = 1, y0 = 1, f_t = 0: (1/γ − z) k_i = z (1 + Σ a_ij k_j) + Σ C_ij k_j
        ks = []
        for i in range(len(tab.c)):
            u = 1.0 + sum(tab.a[i][j] * ks[j] for j in range(i))
            rhs = z * u + sum(tab.C[i][j] * ks[j] for j in range(i))
            ks.append(rhs / (1.0 / tab.gamma - z))
        return 1.0 + sum(m * k for m, k in zip(tab.m, ks))

    for tab in (rosenbrock.RODAS4, rosenbrock.ROS34PW2):
        zs = np.array([1e-2, 5e-3])
        errs = np.array([abs(R(tab, z) - np.exp(z)) for z in zs])
        order = np.log(errs[0] / errs[1]) / np.log(2.0) - 1  # local error O(z^{p+1})
        assert order > tab.order - 0.3, (tab.name, order)
    bad = dataclasses.replace(rosenbrock.RODAS4, m=(rosenbrock.RODAS4.m[0] + 1e-3,) + rosenbrock.RODAS4.m[1:])
    errs = np.array([abs(R(bad, z) - np.exp(z)) for z in (1e-2, 5e-3)])
    assert np.log(errs[0] / errs[1]) / np.log(2.0) - 1 < 1.5


def test_tableaux_orders_on_a_non_autonomous_problem():
    """One step of each tableau's stages on ``y' = λy + cos t`` (closed form: ``y_p = (sin t −
    λ cos t)/(λ² + 1)`` plus ``(y0 − y_p(0))e^{λt}``), with exact scalar solves and ``f_t`` exact:
    the local error is ``O(h^{order+1})`` — the stage times ``c`` and the ``h d_i f_t`` terms enter
    here, unlike on ``y' = λy`` — and the embedded estimate ``Σ e_j k_j`` is ``O(h^{error_order})``.
    Control: RODAS4 with a wrong stage time ``c_2`` loses its order."""
    lam, t0, y0 = -0.7, 0.3, 1.2
    yp = lambda t: (np.sin(t) - lam * np.cos(t)) / (lam ** 2 + 1)
    exact = lambda t: yp(t) + (y0 - yp(t0)) * np.exp(lam * (t - t0))

    def step(tab, h):
        ks = []
        for i in range(len(tab.c)):
            u = y0 + sum(tab.a[i][j] * ks[j] for j in range(i))
            rhs = lam * u + np.cos(t0 + tab.c[i] * h) + h * tab.d[i] * (-np.sin(t0)) + sum(tab.C[i][j] * ks[j] for j in range(i)) / h
            ks.append(rhs / (1.0 / (h * tab.gamma) - lam))
        return y0 + sum(m * k for m, k in zip(tab.m, ks)), sum(e * k for e, k in zip(tab.e, ks))

    def orders(tab):
        hs = np.array([0.04, 0.02])
        out = [step(tab, h) for h in hs]
        local = [abs(y1 - exact(t0 + h)) for (y1, _), h in zip(out, hs)]
        est = [abs(e) for _, e in out]
        return np.log2(local[0] / local[1]), np.log2(est[0] / est[1])

    for tab in (rosenbrock.RODAS4, rosenbrock.ROS34PW2):
        p_local, p_est = orders(tab)
        assert p_local > tab.order + 1 - 0.3 and p_est > tab.error_order - 0.3, (tab.name, p_local, p_est)
    bad = dataclasses.replace(rosenbrock.RODAS4, c=(0.0, 0.4) + rosenbrock.RODAS4.c[2:])
    assert orders(bad)[0] < rosenbrock.RODAS4.order + 1 - 1.0


def test_settings_are_keyword_only_and_checked_once():
    """``check_settings`` takes keywords only and returns the run's settings: save points in log
    time ending at ``log1p(t1)`` even when ``ts`` stops earlier, ``keep = len(ts)``, the metadata
    as Python floats; bad values are refused by name."""
    with pytest.raises(TypeError):
        S.check_settings(1e3, None, 1e-8, 1e-10, 100, "auto")  # noqa
    st, ts = S.check_settings(t1=1e3, ts=[0.0, 1.0, 10.0], rtol=1e-7, atol=1e-9, max_steps=100, solver="rodas4")
    np.testing.assert_allclose(st.taus, np.log1p([0.0, 1.0, 10.0, 1e3]), rtol=0, atol=1e-15)
    assert st.keep == 3 and list(ts) == [0.0, 1.0, 10.0] and st.lane is None and st.args_batched is False
    assert st.describe() == {"solver": "rodas4", "rtol": 1e-7, "atol": 1e-9, "t1": 1e3, "max_steps": 100}
    assert st.replace(lane=0).lane == 0 and st.lane is None
    st, ts = S.check_settings(t1=1e3, ts=None, rtol=1e-7, atol=1e-9, max_steps=100, solver="auto")
    assert ts[0] == 0.0 and ts[1] == 1e-3 and ts[-1] == 1e3 and st.taus[-1] == np.log1p(1e3) and st.keep == 401
    with pytest.raises(gradflow.GradflowValueError, match=r"^rtol: got 1.5; expected a number in \(0, 1\)"):
        S.check_settings(t1=1e3, ts=None, rtol=1.5, atol=1e-9, max_steps=100, solver="auto")
    with pytest.raises(dataclasses.FrozenInstanceError):
        st.rtol = 1.0


def test_metadata_records_the_settings_asked_for():
    """The result's metadata: the solver name asked for (``auto`` included, no internal name),
    tolerances, horizon and budget as given."""
    sol = gradflow.integrate(lambda p: 0.5 * (p - 1.0) ** 2, 0.0, t1=50.0, rtol=1e-7, atol=1e-11, max_steps=999)
    meta = sol.metadata
    assert (meta["solver"], meta["rtol"], meta["atol"], meta["t1"], meta["max_steps"]) == ("auto", 1e-7, 1e-11, 50.0, 999)


def test_the_solve_runs_to_t1_past_the_last_save_point():
    """``dw/dt = w²`` (the flow of ``L = −w³/3``) from ``w = 1`` blows up at ``t = 1``; saving only
    at ``t ≤ 0.5`` with ``t1 = 10``, the solve still runs on to the blow-up and says so (closed
    form ``1/(1 − t)``). Control: the same flow with ``t1 = 0.9`` reaches it with status ``ok``."""
    sol = gradflow.integrate(lambda w: -(w ** 3) / 3.0, 1.0, t1=10.0, ts=[0.0, 0.5], rtol=1e-10, atol=1e-12)
    assert sol.status in ("stalled", "nonfinite") and abs(float(sol.t_end) - 1.0) < 1e-4, (sol.status, sol.t_end)
    np.testing.assert_allclose(float(sol.params[1]), 2.0, rtol=1e-8)
    ok = gradflow.integrate(lambda w: -(w ** 3) / 3.0, 1.0, t1=0.9, ts=[0.0, 0.5], rtol=1e-10, atol=1e-12)
    assert ok.status == "ok" and float(ok.t_end) == 0.9


def test_status_enumeration_carries_its_messages():
    """One enumeration: codes 0–4, names as ``gradflow.STATUS`` by code, a message on each member."""
    from gradflow._status import Status

    assert gradflow.STATUS == tuple(s.name for s in sorted(Status))
    assert [int(s) for s in Status] == list(range(5))
    assert all(isinstance(s.message, str) and len(s.message) > 20 for s in Status)
    assert Status(2) is Status.stalled and "kink" in Status.stalled.message


def test_library_internals_are_version_guarded(monkeypatch, tmp_path):
    """On the tested versions the internals are used; on any other, the serialised-solve store
    declines (the caller traces as usual)."""
    import jax
    import jaxlib

    assert _pinned.EXPORT_ACTIVE == (jax.__version__ in _pinned.TESTED_JAX and jaxlib.__version__ in _pinned.TESTED_JAX)
    from gradflow._engine import _export

    monkeypatch.setattr(_export, "folder", lambda: str(tmp_path))
    monkeypatch.setattr(_pinned, "EXPORT_ACTIVE", False)
    before = _export.stats["traced"]
    assert _export._compiled(lambda x: x, None, [], ()) is None and _export.stats["traced"] == before + 1


@pytest.mark.parametrize("solver", ["dopri8", "rodas4"])
def test_step_budget_ends_a_solve_as_diffrax_max_steps_does(solver):
    """:class:`solvers.StepBudget` (a round's step budget as a runtime value, ``max_steps`` fixed
    at the longest round) against diffrax's own ``max_steps``: the solve of ``y' = −y(1 + y²)``
    (``y(0) = 2``; at rest at 0, so the rest stop is not what ends it) with a budget of ``k``
    steps under ``max_steps = 4096`` ends in the same state, log time, step count and status as
    the solve with ``max_steps = k``, for budgets that end it early and one that does not; the
    same compiled program serves every budget. Control: without the budget the solve runs on."""
    import jax
    import jax.numpy as jnp

    from gradflow._engine import solve as _solve

    flow = _solve.Flow(field=lambda y, _: -y * (1.0 + y * y), detect_stiffness=False)
    taus = jnp.log1p(jnp.asarray([0.0, 1.0, 1e3]))
    code = solvers.code_of(solver)
    kw = dict(taus=taus, rtol=jnp.asarray(1e-10), atol=jnp.asarray(1e-12), solver=code)
    traces = []

    @jax.jit
    def budgeted(budget):
        traces.append(1)
        return _solve.solve_lane(flow, None, (jnp.full(1, 2.0), {}), jnp.zeros(()), max_steps=4096, budget=budget, **kw)

    full = _solve.solve_lane(flow, None, (jnp.full(1, 2.0), {}), jnp.zeros(()), max_steps=4096, **kw)
    assert int(full.code) == int(_solve.Status.ok) and 12 < int(full.num_steps) < 4096
    for k in (3, 12, 4096):
        got = budgeted(jnp.asarray(k))
        want = jax.jit(lambda: _solve.solve_lane(flow, None, (jnp.full(1, 2.0), {}), jnp.zeros(()), max_steps=k,
                                                 **kw))()
        assert (int(got.num_steps), int(got.code)) == (int(want.num_steps), int(want.code)), k
        # the same steps; the two programs are compiled apart (XLA may order a sum differently)
        np.testing.assert_allclose(float(got.tau_end), float(want.tau_end), rtol=1e-12, atol=0)
        np.testing.assert_allclose(np.asarray(got.y_end[0]), np.asarray(want.y_end[0]), rtol=1e-10, atol=0)
    assert int(budgeted(jnp.asarray(3)).code) == int(_solve.Status.max_steps)
    assert len(traces) == 1
    assert int(full.num_steps) > 3  # control: without the budget the same solve goes on


def test_round_of_refuses_a_round_longer_than_its_cap():
    """``Round.of``: a round of ``0 < steps ≤ cap`` steps; the step count is an array (traced),
    the solver and cap static; anything else is refused."""
    r = S.Round.of(np.int64(3), 64, 512)
    assert r.solver == 3 and r.cap == 512 and int(r.steps) == 64 and np.asarray(r.steps).dtype == np.int64
    for bad in (0, 513):
        with pytest.raises(ValueError, match="round of"):
            S.Round.of(3, bad, 512)


def _stability_series(tab, order: int = 6):
    """The Taylor coefficients ``r_0 … r_order`` of the stability function ``R(z)`` of ``tab``
    (one step on ``y' = λy``, ``h = 1``, ``y0 = 1``), in exact rational arithmetic on the
    tableau's float coefficients: the stages ``(1/γ − z) k_i = z (1 + Σ a_ij k_j) + Σ C_ij k_j``
    as truncated power series in ``z``."""
    from fractions import Fraction as F

    N = order + 1
    add = lambda p, q: [x + y for x, y in zip(p, q)]
    scale = lambda c, p: [F(c) * x for x in p]
    shift = lambda p: [F(0)] + p[:-1]  # z · p
    gamma = F(tab.gamma)
    inv = [gamma ** (n + 1) for n in range(N)]  # 1/(1/γ − z) = γ Σ (γ z)^n

    def mul(p, q):
        return [sum((p[i] * q[n - i] for i in range(n + 1)), F(0)) for n in range(N)]

    one = [F(1)] + [F(0)] * order
    ks = []
    for i in range(len(tab.c)):
        u = one
        for j in range(i):
            u = add(u, scale(tab.a[i][j], ks[j]))
        rhs = shift(u)
        for j in range(i):
            rhs = add(rhs, scale(tab.C[i][j], ks[j]))
        ks.append(mul(rhs, inv))
    R = one
    for m, k in zip(tab.m, ks):
        R = add(R, scale(m, k))
    return R


def test_stability_functions_match_the_exponential_to_their_order():
    """``R(z) = Σ r_k z^k`` agrees with ``e^z`` term by term, ``r_k = 1/k!`` for ``k ≤ order``
    (to the rounding of the published coefficients, 1e-12), computed exactly: unlike the
    finite-difference order estimate above, this sees a perturbation of any size. Control:
    RODAS4's solution weight ``m_6 = 1.001`` (a step changed by 0.1 % of its own error estimate,
    invisible at any tolerance a solve is run at) breaks ``r_4``, and ROS34PW2 is not of order 4."""
    import math

    def defect(tab, k):
        return abs(float(_stability_series(tab)[k]) - 1 / math.factorial(k))

    for tab in (rosenbrock.RODAS4, rosenbrock.ROS34PW2):
        assert max(defect(tab, k) for k in range(tab.order + 1)) < 1e-12, tab.name
    bad = dataclasses.replace(rosenbrock.RODAS4, m=rosenbrock.RODAS4.m[:-1] + (1.001,))
    assert max(defect(bad, k) for k in range(5)) > 1e-7
    assert defect(rosenbrock.ROS34PW2, 4) > 1e-4
