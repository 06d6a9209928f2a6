"""Structured failures: a run that turns non-finite, stalls or runs out of steps
ends with its status, the time it happened and the last finite state; nothing non-finite reaches
the metrics. A failing lane of a batch leaves the other lanes untouched."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import gradflow
from tests import reference as ref
from tests.test_simulate import fig2_problem

METRICS = ("V", "a", "s", "loss", "Gamma", "entropy", "u")


class CliffTeacher(gradflow.LogisticTeacher):
    """The logistic teacher, but undefined (NaN) once the margin ⟨β*, β⟩ reaches ``limit``:
    a field that turns non-finite mid-run, like a normalisation map at its singularity."""

    limit: jax.Array = 1.0

    def __init__(self, beta_star, limit=1.0):
        super().__init__(beta_star)
        self.limit = jnp.asarray(limit, jnp.float64)

    def __call__(self, beta):
        m = jnp.dot(self.beta_star, beta)
        return jnp.where(m < self.limit, jnp.logaddexp(0.0, -m), jnp.nan)

    def gamma(self, beta):
        m = jnp.dot(self.beta_star, beta)
        return jnp.where(m < self.limit, jax.nn.sigmoid(-m), jnp.nan)


class BlowUp(gradflow.LogisticTeacher):
    """ℓ = −|⟨β*, β⟩|³: the margin obeys m' ∝ m², a finite-time blow-up."""

    def __call__(self, beta):
        return -jnp.abs(jnp.dot(self.beta_star, beta)) ** 3


def _margin_hits(V0, a0, bs, level):
    """Flow time at which ⟨β*, β⟩ first reaches ``level``: SciPy event on the NumPy reference field."""
    d, n = V0.shape
    rhs = lambda t, y: np.concatenate([x.ravel() for x in ref.field(y[: d * n].reshape(d, n), y[d * n:], ref.logistic_residual(bs))[:2]])
    hit = lambda t, y: bs @ (y[: d * n].reshape(d, n) @ ref.softmax(y[d * n:])) - level
    hit.terminal = True
    sol = solve_ivp(rhs, (0, 1e3), np.concatenate([V0.ravel(), a0]), events=hit, rtol=1e-12, atol=1e-14, method="DOP853")
    return float(sol.t_events[0][0])


def _assert_finite(traj):
    for name in METRICS:
        assert np.all(np.isfinite(np.asarray(getattr(traj, name)))), name


def test_field_turning_nonfinite_stops_at_once_with_last_finite_state():
    V0, a0, bs = fig2_problem()
    traj = gradflow.simulate(CliffTeacher(bs), V0, a0, t1=1e6)
    assert traj.status == "nonfinite"
    assert int(traj.num_steps) < 500  # was the whole budget (16384 steps) before the event
    t_hit = _margin_hits(V0, a0, bs, 1.0)
    assert float(traj.t_end) == pytest.approx(t_hit, rel=1e-6)
    valid = np.asarray(traj.valid)
    assert valid[0] and not valid[-1] and np.all(np.asarray(traj.t)[valid] <= float(traj.t_end))
    _assert_finite(traj)
    margin = np.einsum("d,tdn,tn->t", bs, np.asarray(traj.V), np.asarray(traj.s))
    assert np.all(margin < 1.0)


def test_one_failing_lane_leaves_the_others_untouched():
    V0, a0, bs = fig2_problem()
    rng = np.random.RandomState(1)
    V0s = np.stack([V0, 0.1 * rng.randn(8, 8), 0.1 * rng.randn(8, 8)])
    losses = [CliffTeacher(bs, 1.0), CliffTeacher(bs, 1e300), CliffTeacher(bs, 1e300)]
    ts = np.concatenate([[0.0], np.geomspace(1e-2, 1e6, 30)])
    out = gradflow.simulate_batch(losses, V0s, np.zeros((3, 8)), t1=1e6, ts=ts)
    assert out.status == ["nonfinite", "ok", "ok"]
    _assert_finite(out)
    assert float(out.t_end[0]) == pytest.approx(_margin_hits(V0, a0, bs, 1.0), rel=1e-6)
    for i in (1, 2):  # the healthy lanes: the logistic flow, as a single run of the plain teacher gives it
        single = gradflow.simulate(gradflow.LogisticTeacher(bs), V0s[i], np.zeros(8), t1=1e6, ts=ts)
        np.testing.assert_allclose(out[i].s, single.s, rtol=1e-8, atol=1e-14)
        assert float(out.t_end[i]) == 1e6 and bool(np.all(np.asarray(out[i].valid)))


def test_blow_up_is_reported_as_stalled_with_the_time():
    V0, a0, bs = fig2_problem()
    bs = np.abs(bs)  # positive initial margin: m grows and blows up
    V0 = np.abs(V0)
    # a small budget: a stall misreported as max_steps ("not finished: continue") would retry to it
    traj = gradflow.simulate(BlowUp(bs), V0, a0, t1=1e6, max_steps=4000)
    assert traj.status in ("stalled", "nonfinite")
    assert int(traj.num_steps) < 2000 and 0 < float(traj.t_end) < 1e6
    _assert_finite(traj)
    # negative control: the plain logistic teacher from the same start finishes
    assert gradflow.simulate(gradflow.LogisticTeacher(bs), V0, a0, t1=1e6).status == "ok"


def _square_field(params, args):
    return args * params**2


def test_engine_reports_a_blow_up_as_stalled_in_one_solve():
    """One engine solve of ``y' = y²``, ``y(0) = 1`` (closed form ``1/(1 − t)``, blow-up at
    ``t = 1``): the step collapses at ``t → 1`` and the code is ``stalled`` (not ``max_steps``,
    which the batch loop would read as "not finished: continue"), with ``t_end`` within 1e-6 of 1.
    Negative control: ``y' = −y²`` (``1/(1 + t)``) reaches ``t1`` with code ``ok``."""
    from gradflow._engine import solve as S
    from gradflow._engine.solvers import code_of

    flow = S.Flow(field=_square_field)
    taus = jnp.log1p(jnp.asarray([0.0, 0.5, 10.0]))
    run = lambda sign: S.solve_lane(flow, jnp.asarray(sign), (jnp.ones(1), {}), jnp.zeros(()), taus=taus,
                                    rtol=jnp.asarray(1e-10), atol=jnp.asarray(1e-12), solver=code_of("dopri8"),
                                    max_steps=4000)
    out = run(1.0)
    assert int(out.code) == int(S.Status.stalled) and int(out.num_steps) < 4000
    assert abs(float(jnp.expm1(out.tau_end)) - 1.0) < 1e-6, float(jnp.expm1(out.tau_end))
    np.testing.assert_allclose(float(out.ys[0][1, 0]), 2.0, rtol=1e-8)  # y(0.5) = 2 before the blow-up
    ok = run(-1.0)
    assert int(ok.code) == int(S.Status.ok) and float(ok.ys[0][-1, 0]) == pytest.approx(1 / 11, rel=1e-8)


@pytest.mark.parametrize("solver", ["auto", "tsit5", "rodas4"])
def test_field_undefined_past_a_wall_ends_nonfinite_at_the_wall(solver):
    """``y' = 1`` while ``y < 1``, NaN from ``y = 1`` on (a field undefined past a wall), from
    ``y(0) = 1/4``: by hand ``y(t) = 1/4 + t`` and the wall is reached at ``t* = 3/4``. The run
    ends ``nonfinite`` at ``t*`` (the step collapses at the wall and the field just ahead is NaN),
    every saved state on the line ``y = 1/4 + t`` below the wall. Negative control: the same
    field without the wall runs to ``t1`` with status ``ok`` and ``y(t1) = 1/4 + t1``.

    No event stops these runs (the engine has none without the rest stop): the step collapses at
    the wall, the solve stalls, and the engine's probe just ahead of the stall finds the NaN
    (``gradflow._engine.batch._probe_stalls``)."""
    y0, t1 = 0.25, 10.0
    ts = np.array([0.0, 0.1, 0.5, 0.7, 2.0, t1])
    wall = lambda p: {"y": jnp.where(p["y"] < 1.0, 1.0, jnp.nan)}
    sol = gradflow.integrate(lambda p: -p["y"], {"y": y0}, t1=t1, ts=ts, rest_stop=False, field=wall,
                             solver=solver, rtol=1e-10, atol=1e-12)
    assert sol.status == "nonfinite" and int(sol.num_steps) < 500
    assert float(sol.t_end) == pytest.approx(0.75, rel=2e-11)  # measured relative error <= 1.7e-12
    valid = np.asarray(sol.valid)
    np.testing.assert_array_equal(valid, [True, True, True, True, False, False])
    y = np.asarray(sol.params["y"])[valid]
    np.testing.assert_allclose(y, y0 + ts[valid], rtol=2e-9)  # measured <= 1.7e-10 (tsit5's dense output)
    assert np.all(y < 1.0)
    free = gradflow.integrate(lambda p: -p["y"], {"y": y0}, t1=t1, ts=ts, rest_stop=False,
                              field=lambda p: {"y": jnp.ones_like(p["y"])}, solver=solver, rtol=1e-10, atol=1e-12)
    assert free.status == "ok" and float(free.t_end) == t1
    np.testing.assert_allclose(np.asarray(free.params["y"]), y0 + ts, rtol=3e-9)  # measured <= 3.1e-10


@pytest.mark.parametrize("rest_stop", [True, False])
def test_quadrature_nonfinite_at_the_start_ends_nonfinite_at_zero(rest_stop):
    """A quadrature whose integrand is NaN at ``params0`` (``y ≥ 1``) while the field ``y' = 1`` is
    finite: the run ends ``nonfinite`` at ``t = 0`` (docs, "Solvers and statuses"), with or
    without the rest stop (with it, the rest event fires on the non-finite integrand at once and
    the end check must not read that as rest). Control: the integrand NaN only from ``y = 2``
    on, from ``y = 1/4``: ``nonfinite`` at ``t = 7/4``, with ``Q(1) = ∫₀¹ 1 dt = 1`` on the way."""
    q = lambda wall: {"q": lambda p: jnp.where(p["y"] < wall, 1.0, jnp.nan)}
    one = lambda p: {"y": jnp.ones_like(p["y"])}
    sol = gradflow.integrate(lambda p: -p["y"], {"y": 1.5}, t1=10.0, field=one, quadratures=q(1.0), rest_stop=rest_stop)
    assert sol.status == "nonfinite" and float(sol.t_end) == 0.0
    ctrl = gradflow.integrate(lambda p: -p["y"], {"y": 0.25}, t1=10.0, ts=[0.0, 1.0, 10.0], field=one,
                              quadratures=q(2.0), rest_stop=rest_stop, rtol=1e-10, atol=1e-12)
    assert ctrl.status == "nonfinite" and float(ctrl.t_end) == pytest.approx(1.75, rel=1e-8)
    np.testing.assert_allclose(float(np.asarray(ctrl.quadratures["q"])[1]), 1.0, rtol=1e-8)


@pytest.mark.parametrize("layout", ["one solve", "chunks of 2", "throughput-bound"])
def test_stall_probe_marks_only_the_lanes_with_a_wall_ahead(layout, monkeypatch):
    """A batch of four lanes: lanes 0 and 2 blow up as ``y' = y²`` from ``y = 1`` and ``y = 1/2``
    (``1/(1 − t)``, ``2/(2 − t)``: at ``t = 1`` and ``t = 2``, the field finite all the way:
    ``stalled``), lane 1 runs ``y' = 1`` without a wall to ``t1`` (``ok``), lane 3 runs ``y' = 1``
    into a NaN wall at ``y = 1`` from ``y = 1/4`` (by hand: the wall at ``t = 3/4``). Three
    stalls, and the probe after them must mark lane 3 alone ``nonfinite``, each ``t_end`` where
    the hand calculation puts it. Laid out as one vmapped solve, as a first round in chunks of
    two lanes (the wall in the second chunk; ``LANES_PER_SOLVE = 2``), and as a throughput-bound
    batch (``UNROLL_LANES = 2``: the probe on a bucket of the stalled lanes)."""
    from gradflow._engine import batch as _batch

    if layout == "chunks of 2":
        monkeypatch.setattr(_batch, "LANES_PER_SOLVE", 2)
    elif layout == "throughput-bound":
        monkeypatch.setattr(_batch, "UNROLL_LANES", 2)
    t1 = 10.0
    y0 = np.array([1.0, 0.25, 0.5, 0.25])
    kind = np.array([1.0, 2.0, 1.0, 0.0])  # 0: wall, 1: y' = y², 2: free

    def field(p, k):
        y = p["y"]
        return {"y": jnp.where(k == 1.0, y**2, jnp.where((k == 2.0) | (y < 1.0), 1.0, jnp.nan))}

    sol = gradflow.integrate_batch(lambda p, k: -p["y"], {"y": y0}, t1=t1, args=kind, args_batched=True, field=field,
                                   rest_stop=False, solver="dopri8", rtol=1e-10, atol=1e-12)
    assert list(sol.status) == ["stalled", "ok", "stalled", "nonfinite"], list(sol.status)
    np.testing.assert_allclose(np.asarray(sol.t_end), [1.0, t1, 2.0, 0.75], rtol=1e-6)


def test_the_engines_loop_gives_the_same_bits_as_diffeqsolve(monkeypatch):
    """The engine's solves run its own while loop around diffrax's solvers
    (:func:`gradflow._engine.loop.solve`) rather than ``diffrax.diffeqsolve``: the same steps and
    the same bits for a whole single run of ``integrate`` that turns stiff (Dopri8, then Rodas4, to
    the rest stop), each way, in one process, on a loss no other test uses (so each traces anew).
    Control: a start moved by 1e-12 changes bits."""
    from gradflow._engine import batch as _batch, loop
    from gradflow._engine.solvers import spec

    def loss(w):
        return 0.5 * (3.0 - w[0] * w[1]) ** 2 + 0.5 * 40.0 * w[2] ** 2 + 0.25 * w[3] ** 4

    solvers, fused = [], _batch._fused_round
    monkeypatch.setattr(_batch, "_fused_round", lambda *a: solvers.append(spec(a[5].solver).name) or fused(*a))
    w0 = jnp.asarray([0.1, 0.2, 1.0, 0.5])
    runs = {}
    for name in ("forward", "moved", "default"):
        if name == "default":
            monkeypatch.setattr(loop, "solve", loop.by_diffeqsolve)
        start = w0 * (1 + 1e-12) if name == "moved" else w0
        runs[name] = gradflow.integrate(lambda w, _n=name: loss(w), start, t1=1e6)
    assert {"dopri8", "rodas4"} <= set(solvers), solvers
    f, d, m = runs["forward"], runs["default"], runs["moved"]
    assert f.status == d.status == "ok" and int(f.num_steps) == int(d.num_steps)
    np.testing.assert_array_equal(np.asarray(f.params), np.asarray(d.params))
    np.testing.assert_array_equal(np.asarray(f.t_steady), np.asarray(d.t_steady))
    assert not np.array_equal(np.asarray(m.params), np.asarray(f.params))
