"""The engine's solve loop: diffrax's solvers and step-size controllers, stepped by a while loop
of our own instead of :func:`diffrax.diffeqsolve`.

Why: a round program of a user's small model is compile-bound (a new 75-parameter model's first
call is 84 % tracing and compiling, ``benchmarks/FIRST_CALL.md``), and ``diffeqsolve`` compiles
more than the steps need:

- it writes ``t1 − 100 ulp`` (the point past which a step is clipped to ``t1``) as 100 unrolled
  ``prevbefore`` calls, one 1,700-instruction kernel in every program (about 0.1 s of XLA compile
  alone, a development measurement); here it is a ``fori_loop`` of the same 100 steps (the same
  value);
- it traces its step body three times (twice under ``eval_shape`` to find which of its fields
  are static), here once;
- its general machinery (backward time, jumps, dense output, root-found events, step saves,
  progress meters) is compiled in part even when unused, and its checks of the save times are
  host callbacks (``eqx.error_if``), which keep JAX from writing a program to its persistent
  compilation cache.

A solve that may run under ``vmap`` writes its save points in place (equinox's
``while_loop(kind="lax")`` with buffers, as diffrax's forward mode); a single lane's keeps them in
a plain ``lax.while_loop`` carry, which compiles faster (:func:`_while`).

What it does is what ``diffeqsolve`` does for the engine's solves (diffrax 0.7.2:
``diffrax._integrate.loop`` and ``diffeqsolve``), step by step and bit for bit
(``tests/test_loop.py`` compares the two on every solver of the engine's table with and without
a boolean event, under ``vmap``, at a step budget, at ``max_steps`` and after a stall; a change of
diffrax's rules fails it): ``dt0=None`` (the controller's initial step), save points ``ts`` by the
solver's dense interpolation plus the end point, an optional boolean event (the solve ends at the first accepted step where it holds, no
root find), ``max_steps``, ``throw=False`` and forward-mode loops (diffrax's
``adjoint=ForwardMode()``: Runge–Kutta stages in ``lax.scan``). The solver and controller
interfaces are diffrax's public ones (``init``, ``step``, ``func``, ``error_order``,
``interpolation_cls``; ``init``, ``adapt_step_size``): the engine's solvers (diffrax's explicit
Runge–Kutta methods, Kvaerno5 with its root finder's tolerances given, the Rosenbrock methods of
:mod:`gradflow._engine.rosenbrock`) and controllers (PID, :class:`~gradflow._engine.rosenbrock.HoldStep`,
:class:`~gradflow._engine.solvers.StepBudget`) run in it unchanged. Not done here: ``diffeqsolve``'s
filling in of an implicit solver's root-finder tolerances left as diffrax's ``use_stepsize_tol``
placeholder (pass them explicitly, as the engine does).

Limits: forward time only, not checked (``t0 ≤ t1``; with ``t0 > t1`` no step is taken and the
result is ``successful``; with ``t0 = t1`` every save point holds ``y0`` and the event is tested
at ``t0``, where ``diffeqsolve``, integrating "backwards", passes it ``−t0``; the engine never
solves from or past ``τ1``); save times increasing inside ``[t0, t1]``, not checked (the engine
clips them into it); no jumps (a controller whose ``made_jump`` is not ``False``, as with
diffrax's ``step_ts``/``jump_ts`` clipping: a ``ValueError`` while tracing). Under ``vmap`` with several lanes an implicit solver's batched
linear algebra is compiled in another context than inside ``diffeqsolve`` and can differ in its
last bits, as ``diffeqsolve``'s own lanes differ between batch sizes (``tests/test_loop.py``)."""

from __future__ import annotations

from typing import Any, NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from . import _pinned

__all__ = ["Solved", "CLIP_ULPS", "INITIAL_STEP", "solve", "by_diffeqsolve"]

CLIP_ULPS = 100
"""A step whose end falls within this many ulps of ``t1`` is clipped to end at ``t1`` (diffrax's
rule: it avoids intervals too short for a stable dense output)."""


INITIAL_STEP = 0.01
"""The first step tried (then clipped to the controller's ``dtmin``/``dtmax`` and to ``t1``).

This is the step ``diffeqsolve`` starts with when given ``dt0=None`` for these solves: it wraps
every term in its private ``WrapTerm`` (to integrate backwards in time), so the PID controller's
initial-step heuristic, which applies only to a bare ``ODETerm``, returns its fallback ``0.01``.
In the engine's log time ``τ = log(1 + t)`` that is ``t ≈ 0.01`` from ``τ0 = 0``; a step too large
is rejected and shrunk by the controller like any other."""


class Solved(NamedTuple):
    """What :func:`solve` returns (one lane; leading lane axes under ``vmap``).

    ``ts`` ``(T,)``: the save times reached, ``inf`` where not; ``ys``: the state at them
    (leaves ``(T, ...)``, ``inf`` where not reached); ``t_end``, ``y_end``: where the solve
    stopped (``t1``, the step where the event held, or where it failed); ``result``: a
    :data:`diffrax.RESULTS` item (``successful``, ``event_occurred``, ``max_steps_reached``, a
    controller's or solver's failure; compare it with those items); ``num_steps``: steps taken,
    accepted and rejected (an integer scalar). Times and states in the time dtype (:func:`solve`)."""

    ts: jax.Array
    ys: Any
    t_end: jax.Array
    y_end: Any
    result: Any
    num_steps: jax.Array


class _Carry(eqx.Module):
    """The while loop's state (``save_ts``, ``save_ys``: arrays, or equinox's in-place buffers
    inside the loop)."""

    y: Any
    tprev: jax.Array
    tnext: jax.Array
    solver_state: Any
    controller_state: Any
    result: Any
    num_steps: jax.Array
    save_index: jax.Array
    save_ts: Any
    save_ys: Any


def _prevbefore(x):
    """The float before ``x``, and ``−tiny`` for ``0`` (equinox's ``prevbefore``, the function
    diffrax steps down with, written out)."""
    return jnp.where(x == 0, -jnp.finfo(x.dtype).tiny, jnp.nextafter(x, -jnp.inf))


def _clip_floor(t1):
    """``t1`` stepped down :data:`CLIP_ULPS` times (diffrax's ``t1_clip_floor``), as a loop."""
    return lax.fori_loop(0, CLIP_ULPS, lambda _, t: _prevbefore(t), t1)


def _while(cond, body, init, max_steps: int, buffers, in_place: bool):
    """A while loop of at most ``max_steps`` iterations.

    ``in_place``: its ``buffers(carry)`` (the save points' arrays) are written in place
    (``equinox.internal.while_loop``, ``kind="lax"``, as diffrax's forward-mode loops). Under
    ``vmap`` a plain while loop whose lanes end at different steps selects every carried array
    between its old and new value at every step, a copy of the whole ``(B, T, ...)`` save buffer
    per step (7–12× slower warm at 16–64 lanes in development measurements); in place, each write
    is selected per lane at its index only. Otherwise a plain ``lax.while_loop`` with a step
    counter: the same iterations and values, and outside ``vmap`` nothing to select, in a program
    that compiles faster (a single run's first call about 0.3 s shorter, development
    measurement)."""
    if in_place:
        out = _pinned.buffered_while_loop(cond, body, init, max_steps, buffers)
        if out is not None:
            return out

    def going(counted):
        k, carry = counted
        return (k < max_steps) & cond(carry)

    def step(counted):
        k, carry = counted
        return k + 1, body(carry)

    return lax.while_loop(going, step, (jnp.asarray(0), init))[1]


def _successful(result):
    return result == diffrax.RESULTS.successful


def solve(term, solver, controller, t0, t1, y0, args, ts, *, max_steps: int, event=None,
          in_place: bool = True) -> Solved:
    """Solve ``dy/dt = term`` from ``(t0, y0)`` to ``t1`` with ``solver`` under ``controller``.

    The same steps, saves, result and step count as ``diffrax.diffeqsolve(term, solver, t0, t1,
    dt0=None, y0, args, saveat=SaveAt(subs=[SubSaveAt(ts=ts), SubSaveAt(t1=True)]),
    stepsize_controller=controller, event=diffrax.Event(event), max_steps=max_steps, throw=False,
    adjoint=diffrax.ForwardMode())`` (module docstring).

    **Arguments:** ``term`` a :class:`diffrax.ODETerm`; ``solver`` a diffrax solver;
    ``controller`` an adaptive diffrax step-size controller; ``t0``, ``t1`` float scalars with
    ``t0 ≤ t1`` (traced or not; not checked); ``y0`` a pytree of arrays, promoted to the time
    dtype (the result type of ``t0``, ``t1``, ``ts``; a float type) as ``diffeqsolve`` does;
    ``args`` the field's arguments; ``ts`` ``(T,)`` increasing save times inside ``[t0, t1]``
    (not checked); ``max_steps`` a Python ``int``, the most steps, accepted and rejected;
    ``event`` ``None`` or ``cond_fn(t, y, args, **kwargs) -> bool scalar`` (diffrax's event
    signature; called with no keyword arguments here), tested at ``t0`` and after every step;
    ``in_place``: write the save points in place (:func:`_while`; needed for speed under
    ``vmap``; ``False`` compiles faster where the solve is not vmapped). The results are the same
    either way.

    **Returns:** :class:`Solved`.

    **Raises:** ``ValueError`` while tracing for a controller that makes jumps or an event that
    is not a boolean scalar."""
    time_dtype = jnp.result_type(t0, t1, ts)
    if not jnp.issubdtype(time_dtype, jnp.floating):
        time_dtype = jnp.result_type(time_dtype, float)
    t0 = jnp.asarray(t0, time_dtype)
    t1 = jnp.asarray(t1, time_dtype)
    ts = jnp.asarray(ts, time_dtype)
    with jax.numpy_dtype_promotion("standard"):
        y0 = jax.tree.map(lambda x: jnp.asarray(x, jnp.result_type(x, time_dtype)), y0)
    if isinstance(solver, diffrax.AbstractRungeKutta) and solver.scan_kind is None:  # as ForwardMode
        solver = eqx.tree_at(lambda s: s.scan_kind, solver, "lax", is_leaf=lambda x: x is None)
    t1_floor = _clip_floor(t1)
    error_order = solver.error_order(term)

    tnext, controller_state = controller.init(term, t0, t1, y0, INITIAL_STEP, args, solver.func, error_order)
    tnext = jnp.minimum(tnext, t1)
    solver_state = solver.init(term, t0, tnext, y0, args)
    T = ts.shape[0]
    result = diffrax.RESULTS.successful
    if event is not None:
        result = diffrax.RESULTS.where(_event(event, t0, y0, args), diffrax.RESULTS.event_occurred, result)
    init = _Carry(
        y=y0, tprev=t0, tnext=tnext, solver_state=solver_state, controller_state=controller_state, result=result,
        num_steps=jnp.asarray(0), save_index=jnp.asarray(0), save_ts=jnp.full(T, jnp.inf, time_dtype),
        save_ys=jax.tree.map(lambda x: jnp.full((T,) + x.shape, jnp.inf, x.dtype), y0),
    )

    def going(c: _Carry):
        return (c.tprev < t1) & _successful(c.result)

    def body(c: _Carry) -> _Carry:
        y, y_error, dense_info, solver_state, solver_result = solver.step(
            term, c.tprev, c.tnext, c.y, args, c.solver_state, False)
        y_error = jax.tree.map(lambda x: jnp.where(jnp.isnan(x), jnp.inf, x), y_error)
        keep, tprev, tnext, made_jump, controller_state, controller_result = controller.adapt_step_size(
            c.tprev, c.tnext, c.y, y, args, y_error, error_order, c.controller_state)
        if made_jump is not False:
            raise ValueError(f"gradflow's solve loop makes no jumps; the step-size controller {controller!r} "
                             "returned made_jump that is not False")
        # a step the solver reports failed is not taken, even where the controller would keep it:
        # the solve ends at the step's start, in its state (diffeqsolve would move t to the step's
        # end with whatever state the failed step returned; no solver of diffrax's reports a failure
        # on a step it lets the controller keep, so this differs from diffeqsolve only for those
        # that do: ``rkc``'s non-finite spectral estimate)
        failed = keep & ~diffrax.is_okay(solver_result)
        keep = keep & ~failed
        tprev = jnp.where(failed, c.tprev, tprev)
        tprev = jnp.minimum(tprev, t1)
        # diffrax's _clip_to_end: a step ending within CLIP_ULPS of t1 ends at t1 (a rejected one halfway)
        tnext = jnp.where(tnext > t1_floor, jnp.where(keep, t1, tprev + 0.5 * (t1 - tprev)), tnext)
        keep_ = lambda a, b: jnp.where(keep, a, b)
        y = jax.tree.map(keep_, y, c.y)
        solver_state = jax.tree.map(keep_, solver_state, c.solver_state)
        solver_result = diffrax.RESULTS.where(keep | failed, solver_result, diffrax.RESULTS.successful)
        result = diffrax.RESULTS.where(diffrax.is_okay(c.result), solver_result, c.result)
        result = diffrax.RESULTS.where(diffrax.is_okay(result), controller_result, result)

        # the save points inside the step just taken, by the solver's dense interpolation
        interpolator = solver.interpolation_cls(t0=c.tprev, t1=c.tnext, **dense_info)

        def save_more(s):
            i, _, _ = s
            return keep & (ts[i] <= c.tnext) & (i < T)

        def save_one(s):
            i, sts, sys_ = s
            t = ts[i]
            yt = interpolator.evaluate(t)
            return i + 1, sts.at[i].set(t), jax.tree.map(lambda v, vs: vs.at[i].set(v), yt, sys_)

        save_index, save_ts, save_ys = _while(save_more, save_one, (c.save_index, c.save_ts, c.save_ys), T,
                                              lambda s: (s[1], s[2]), in_place)
        if event is not None:
            result = diffrax.RESULTS.where(_event(event, tprev, y, args), diffrax.RESULTS.event_occurred, result)
        return _Carry(y=y, tprev=tprev, tnext=tnext, solver_state=solver_state, controller_state=controller_state,
                      result=result, num_steps=c.num_steps + 1, save_index=save_index, save_ts=save_ts, save_ys=save_ys)

    final = _while(going, body, init, max_steps, lambda c: (c.save_ts, c.save_ys), in_place)
    t_end, y_end = final.tprev, final.y
    # t0 = t1: no step taken; every save point holds y0 at t0 (as diffeqsolve)
    same = t0 == t1

    def fill(saved):  # under vmap a select of the whole save buffer: only run if some lane needs it
        save_ts, save_ys = saved
        return (jnp.where(same, jnp.broadcast_to(t0, (T,)), save_ts),
                jax.tree.map(lambda s, e: jnp.where(same, jnp.broadcast_to(e, s.shape), s), save_ys, y_end))

    save_ts, save_ys = lax.cond(_pinned.any_lane(same), fill, lambda saved: saved, (final.save_ts, final.save_ys))
    result = diffrax.RESULTS.where(going(final), diffrax.RESULTS.max_steps_reached, final.result)
    return Solved(ts=save_ts, ys=save_ys, t_end=t_end, y_end=y_end, result=result, num_steps=final.num_steps)


def _event(cond_fn, t, y, args):
    """The boolean event ``cond_fn(t, y, args)`` (a ``ValueError`` unless a bool scalar)."""
    value = cond_fn(t, y, args)
    if jnp.shape(value) != () or not jnp.issubdtype(jnp.result_type(value), jnp.bool_):
        raise ValueError(f"gradflow's solve loop takes a boolean scalar event; got {jnp.result_type(value)} "
                         f"of shape {jnp.shape(value)}")
    return value


def by_diffeqsolve(term, solver, controller, t0, t1, y0, args, ts, *, max_steps: int, event=None,
                   in_place: bool = True) -> Solved:
    """The same solve by ``diffrax.diffeqsolve`` (the engine's call before this loop): the
    reference :func:`solve` is tested against (``tests/test_loop.py``) and the baseline of
    ``benchmarks/first_call.py``'s compile ablation. Arguments and returns as :func:`solve`
    (``in_place`` is ignored: ``diffeqsolve`` always writes its save points in place)."""
    sol = diffrax.diffeqsolve(
        term, solver, t0=t0, t1=t1, dt0=None, y0=y0, args=args, stepsize_controller=controller,
        saveat=diffrax.SaveAt(subs=[diffrax.SubSaveAt(ts=ts), diffrax.SubSaveAt(t1=True)]),
        max_steps=max_steps, throw=False, event=None if event is None else diffrax.Event(event),
        adjoint=diffrax.ForwardMode())
    (save_ts, t_end), (ys, y_end) = sol.ts, sol.ys
    return Solved(ts=save_ts, ys=ys, t_end=t_end[0], y_end=jax.tree.map(lambda x: x[0], y_end), result=sol.result,
                  num_steps=sol.stats["num_steps"])
