"""``gradflow._engine.loop.solve`` (the engine's own while loop around diffrax's solvers and
controllers) against ``diffrax.diffeqsolve`` with the arguments the engine used to call it with:
the same steps, save points, end state, result and step count, bit for bit, for every solver of
the engine's table and its controller, with and without the boolean rest-style event, under
``vmap`` with lanes that start at different times (and its save buffers written in place), at a
step budget, at ``max_steps``, after a stall (``dtmin``), for an event that holds at ``t0`` and for
``t0 = t1``. Negative controls: a start one ulp later is seen, and the loop with PID's own initial-step
heuristic instead of diffeqsolve's effective first step (:data:`gradflow._engine.loop.INITIAL_STEP`)
takes different steps."""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow

from gradflow._engine import loop
from gradflow._engine.solvers import SOLVER_TABLE, make_controller, make_solver


def _field(tau, y, args):
    """A stiff-ish gradient flow in log time: ``dθ/dτ = −e^τ·∇L``, ``L = ½θᵀAθ + ¼Σθ⁴`` (symmetric
    Jacobian, so every solver of the table, the eigen-decomposing ones included, applies)."""
    A, _ = args
    theta, quad = y
    g = A @ theta + theta ** 3
    return -jnp.exp(tau) * g, {"q": jnp.exp(tau) * jnp.sum(g ** 2)}


def _event(tau, y, args, **kwargs):
    """Fires once the state is small (a stand-in for the rest test: a bool scalar of ``(τ, y)``)."""
    _, level = args
    return jnp.max(jnp.abs(y[0])) < level


def _args(level=1e-3):
    A = jnp.asarray([[3.0, 0.5, 0.0], [0.5, 1.0, 0.2], [0.0, 0.2, 40.0]])
    return A, jnp.asarray(level)


Y0 = (jnp.asarray([1.0, -0.5, 0.3]), {"q": jnp.asarray(0.0)})
TAUS = jnp.asarray([0.0, 0.3, 1.0, 2.0, 2.5, 3.0, 4.0])


def _reference(solver, controller, tau0, tau1, y0, args, taus, max_steps, event):
    """The engine's former call: ``diffeqsolve`` with two sub-saves, forward-mode loops."""
    return loop.by_diffeqsolve(diffrax.ODETerm(_field), solver, controller, tau0, tau1, y0, args, taus,
                               max_steps=max_steps, event=event)


def _ours(solver, controller, tau0, tau1, y0, args, taus, max_steps, event, in_place=True):
    return loop.solve(diffrax.ODETerm(_field), solver, controller, tau0, tau1, y0, args, taus,
                      max_steps=max_steps, event=event, in_place=in_place)


def _ours_plain(*a):
    """The loop as a single run's program has it: save points in a plain while loop's carry."""
    return _ours(*a, in_place=False)


def _run(fn, code, *, tau0=0.0, tau1=4.0, event=_event, level=1e-3, max_steps=4096, budget=None, dtmin=1e-12,
         batched=None):
    rtol, atol = 1e-8, 1e-10

    def one(t0, lvl):
        solver = make_solver(code, rtol, atol, batched is not None)
        b = None if budget is None else jnp.asarray(budget)
        ctrl = make_controller(code, rtol, atol, dtmin, b, jnp.asarray(tau1))
        return fn(solver, ctrl, t0, jnp.asarray(tau1), Y0, _args(lvl), jnp.clip(TAUS, t0, tau1), max_steps, event)

    if batched is None:
        return jax.jit(one)(jnp.asarray(tau0), jnp.asarray(level))
    t0s, levels = batched
    return jax.jit(jax.vmap(one))(jnp.asarray(t0s), jnp.asarray(levels))


def _same(a: loop.Solved, b: loop.Solved):
    for name in loop.Solved._fields:
        x, y = getattr(a, name), getattr(b, name)
        if name == "result":
            x, y = x._value, y._value
        for u, v in zip(jax.tree.leaves(x), jax.tree.leaves(y), strict=True):
            np.testing.assert_array_equal(np.asarray(u), np.asarray(v), err_msg=name)


@pytest.mark.parametrize("code", [s.code for s in SOLVER_TABLE], ids=[s.name for s in SOLVER_TABLE])
def test_every_solver_takes_diffeqsolves_steps_bit_for_bit(code):
    """With the event, the single-lane form of the loop (``in_place=False``); without it, the
    form with in-place save buffers."""
    ours, ref = _run(_ours_plain, code), _run(_reference, code)
    _same(ours, ref)
    assert int(ours.num_steps) > 5
    # without the event the solve runs to tau1
    ours, ref = _run(_ours, code, event=None), _run(_reference, code, event=None)
    _same(ours, ref)
    assert float(ours.t_end) == 4.0 and ours.result == diffrax.RESULTS.successful


def test_the_event_ends_the_solve_where_diffeqsolve_ends_it():
    ours, ref = _run(_ours, 3, level=0.2), _run(_reference, 3, level=0.2)
    _same(ours, ref)
    assert ours.result == diffrax.RESULTS.event_occurred and float(ours.t_end) < 4.0
    assert not np.all(np.isfinite(np.asarray(ours.ts)))  # save points after the event not reached


@pytest.mark.parametrize("code", [3, pytest.param(5, marks=pytest.mark.slow)])  # rodas4 (~18 s) slow: the loop's
# budget and stall code is the same for every solver, and test_every_solver_takes_diffeqsolves_steps_bit_for_bit runs rodas4
def test_budget_max_steps_and_stall_end_as_in_diffeqsolve(code):
    for kw in (dict(budget=7), dict(max_steps=9), dict(dtmin=0.5)):
        ref = _run(_reference, code, **kw)
        for ours in (_run(_ours, code, **kw), _run(_ours_plain, code, **kw)):  # both loop forms
            _same(ours, ref)
            assert ours.result != diffrax.RESULTS.successful, kw


@pytest.mark.slow  # ~60 s on 2 cores (9 programs compiled twice); in the default run the loop is compared
# with diffeqsolve per solver (test_every_solver_takes_diffeqsolves_steps_bit_for_bit) and every engine solve
# runs vmapped lanes (batches against single runs: test_integrate.py, test_simulate.py, test_performance.py)
def test_vmapped_lanes_from_different_start_times():
    """Under ``vmap`` the explicit solves are the same bit for bit. An implicit one's batched
    linear algebra is compiled in a different context, so (as with ``diffeqsolve`` itself, whose
    lanes differ in the last bits between a batch of 4 and a batch of 1) its lanes agree to
    round-off amplified by the step control, well inside the tolerance, with the same statuses."""
    lanes = ([0.0, 1.5, 3.9, 0.7], [1e-3, 1e-3, 1e-3, 0.3])
    for code in (1, 2, 3):  # tsit5, dopri5, dopri8 (its unrolled stages under vmap)
        _same(_run(_ours, code, batched=lanes), _run(_reference, code, batched=lanes))
    # a lane that starts at t1 (no step; the fill after the loop runs for it alone)
    at_end = ([0.0, 4.0, 0.7], [1e-3, 1e-3, 0.3])
    _same(_run(_ours, 3, batched=at_end), _run(_reference, 3, batched=at_end))
    for code in (4, 5, 9):  # kvaerno5, rodas4, rodas4-krylov
        ours, ref = _run(_ours, code, batched=lanes), _run(_reference, code, batched=lanes)
        np.testing.assert_array_equal(ours.result._value, ref.result._value)
        np.testing.assert_allclose(ours.t_end, ref.t_end, rtol=1e-8)
        for u, v in zip(jax.tree.leaves((ours.y_end, ours.ys)), jax.tree.leaves((ref.y_end, ref.ys))):
            np.testing.assert_allclose(u, v, rtol=1e-6, atol=1e-9)
    # one lane under vmap: bit for bit for these solvers too
    for code in (5, 9):
        _same(_run(_ours, code, batched=([0.7], [1e-3])), _run(_reference, code, batched=([0.7], [1e-3])))


def _full_buffer_selects():
    """``select`` instructions over a whole ``(B, T, N)`` save buffer in the compiled vmapped
    solve (5 lanes, 7 save points, 3 parameters)."""
    import re

    def one(t0):
        return loop.solve(diffrax.ODETerm(_field), make_solver(3, 1e-8, 1e-10, True),
                          make_controller(3, 1e-8, 1e-10, 1e-12), t0, jnp.asarray(4.0), Y0, _args(),
                          jnp.clip(TAUS, t0, 4.0), max_steps=100, event=_event)

    text = jax.jit(jax.vmap(one)).lower(jnp.zeros(5)).compile().as_text()
    return len(re.findall(r"= f64\[5,7,3\]\{[^}]*\} select\(", text))


def test_vmapped_save_buffers_are_written_in_place(monkeypatch):
    """Under ``vmap`` the lanes end at different steps; a plain while loop then selects its whole
    carry, the ``(B, T, N)`` save buffer included, between old and new at every step (a copy per
    step: 7–12× slower warm at 16–64 lanes). The loop's buffers are written in place, as in
    diffrax's forward mode: at most one select over the whole buffer is left (the ``t0 = t1``
    fill after the loop, run only if a lane has ``t0 = t1``). Control: the same solve with a
    plain ``lax.while_loop`` (``in_place=False``) has more."""
    in_place = _full_buffer_selects()
    loop_of = loop._while
    monkeypatch.setattr(loop, "_while", lambda cond, body, init, max_steps, buffers, _: loop_of(
        cond, body, init, max_steps, buffers, False))
    plain = _full_buffer_selects()
    assert in_place <= 1 < plain, (in_place, plain)


def test_an_untested_equinox_falls_back_to_the_plain_loop(monkeypatch):
    """On an equinox version the in-place loop was not tested on, :func:`_pinned.buffered_while_loop`
    declines and the solve runs the plain loop: the same bits (slower under ``vmap``)."""
    from gradflow._engine import _pinned

    lanes = ([0.0, 1.5], [1e-3, 0.3])
    tested = _run(_ours, 3, batched=lanes)
    monkeypatch.setattr(_pinned, "TESTED_EQUINOX", ())
    assert _pinned.buffered_while_loop(None, None, None, 1, None) is None
    _same(_run(_ours, 3, batched=lanes), tested)


def test_the_engine_writes_in_place_exactly_when_it_vmaps(monkeypatch):
    """``batch._solve_jit`` asks for in-place save buffers when it vmaps the solve over several
    lanes and not for a single lane (which it does not vmap): a run of 1 lane, then one of 3
    lanes that all end in their first round."""
    from gradflow._engine import solve

    seen, orig = [], solve.solve_lane
    monkeypatch.setattr(solve, "solve_lane", lambda *a, **k: seen.append(k["vmapped"]) or orig(*a, **k))
    loss = lambda w, c: 0.5 * jnp.sum((w - c) ** 2) + 0.01 * jnp.sum(w ** 4)  # no other test compiles it
    gradflow.integrate(loss, np.ones(3), t1=10.0, args=2.0)
    single, seen[:] = list(seen), []
    gradflow.integrate_batch(loss, np.ones((3, 3)) * np.asarray([[1.0], [0.5], [2.0]]), t1=10.0, args=2.0)
    assert single and not any(single), single
    assert seen and all(seen), seen


def test_an_event_that_holds_at_t0_ends_the_solve_there():
    ref = _run(_reference, 3, level=10.0)
    for ours in (_run(_ours, 3, level=10.0), _run(_ours_plain, 3, level=10.0)):
        _same(ours, ref)
        assert int(ours.num_steps) == 0 and ours.result == diffrax.RESULTS.event_occurred and float(ours.t_end) == 0.0


def test_negative_control_one_ulp_later_start_is_seen():
    """The comparison sees a last-bit change: a start one ulp later gives other bits."""
    later = float(np.nextafter(0.5, 1.0))
    ours, ref = _run(_ours, 3, tau0=later), _run(_reference, 3, tau0=0.5)
    with pytest.raises(AssertionError):  # the states at the save points, not only the echoed times
        _same(ours._replace(ts=ref.ts), ref)


def test_no_step_when_t0_equals_t1():
    ref = _run(_reference, 3, tau0=4.0, event=None)
    for ours in (_run(_ours, 3, tau0=4.0, event=None), _run(_ours_plain, 3, tau0=4.0, event=None)):
        _same(ours, ref)
        assert int(ours.num_steps) == 0


def test_negative_control_the_pid_initial_step_heuristic_changes_the_steps(monkeypatch):
    """PID's own initial-step heuristic (what ``dt0=None`` gives a bare ``ODETerm``) starts
    elsewhere, so the comparison above would fail: it sees the first step."""
    monkeypatch.setattr(loop, "INITIAL_STEP", None)
    jax.clear_caches()
    try:
        ours, ref = _run(_ours, 3, event=None), _run(_reference, 3, event=None)
        with pytest.raises(AssertionError):
            _same(ours, ref)
    finally:
        jax.clear_caches()


def test_clip_floor_is_diffraxs_unrolled_chain():
    """``t1`` stepped down 100 times by a loop equals diffrax's 100 unrolled ``prevbefore`` calls
    (both compiled: XLA:CPU flushes subnormals, so both treat a subnormal ``t1`` alike)."""
    import equinox.internal as eqxi

    def unrolled(t1):
        for _ in range(100):
            t1 = eqxi.prevbefore(t1)
        return t1

    for t1 in (4.0, 27.631021115928547, 1e-300, 5e-324 * 150, 0.0, 2.2250738585072014e-308):
        x = jnp.asarray(t1)
        assert float(jax.jit(loop._clip_floor)(x)) == float(jax.jit(unrolled)(x)), t1
    assert float(jax.jit(loop._clip_floor)(jnp.asarray(4.0))) == 4.0 - 100 * 2.0 ** -51


def test_bad_event_and_jumps_are_refused():
    with pytest.raises(ValueError, match="boolean scalar event"):
        _run(_ours, 3, event=lambda t, y, a: jnp.max(y[0]))

    class Jumping(diffrax.PIDController):
        def adapt_step_size(self, *a):
            out = super().adapt_step_size(*a)
            return out[:3] + (jnp.asarray(False),) + out[4:]

    with pytest.raises(ValueError, match="makes no jumps"):
        jax.jit(lambda: loop.solve(diffrax.ODETerm(_field), diffrax.Dopri5(), Jumping(rtol=1e-6, atol=1e-8), 0.0, 1.0,
                                   Y0, _args(), TAUS / 4, max_steps=100))()
