"""The engine's tuning knobs and call observers, for the benchmarks that measure them: overridden
through these context managers (validated, restored on exit, compiled programs dropped), never by
assigning the engine's private attributes from outside. ``gradflow.internal`` exports both.

A knob changes how a run is executed (round length, lanes per vmapped solve, unrolled stages,
XLA options, the W-method's matrix age), not what the flow is; results agree within the
tolerances under any setting (``tests/test_performance.py``, ``tests/test_erk.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import jax

from .._errors import bad_arg
from . import _fastjit, batch, loop, rosenbrock, solvers

__all__ = ["KNOBS", "engine_knobs", "observe_rounds"]

KNOBS = {
    "round_steps": (batch, "ROUND_STEPS"),
    "lanes_per_solve": (batch, "LANES_PER_SOLVE"),
    "unroll_lanes": (batch, "UNROLL_LANES"),
    "fast_compile": (_fastjit, "FAST_COMPILE"),
    "held_inverse_max_age": (rosenbrock, "MAX_AGE"),
    "unrolled_dopri8": (solvers, "UnrolledDopri8"),
    "loop_by_diffeqsolve": (loop, "solve"),
}
"""Knob name → (module, attribute): ``round_steps`` the longest round (:data:`batch.ROUND_STEPS`);
``lanes_per_solve`` lanes per vmapped solve (:data:`batch.LANES_PER_SOLVE`); ``unroll_lanes`` the
batch size from which Dopri8's stages are unrolled (:data:`batch.UNROLL_LANES`); ``fast_compile``
the XLA options of the engine's programs (:data:`_fastjit.FAST_COMPILE`; ``()``: XLA's defaults);
``held_inverse_max_age`` steps one ``W⁻¹`` of ``ros34pw2`` may serve (:data:`rosenbrock.MAX_AGE`);
``unrolled_dopri8`` ``False``: batched solves run diffrax's own Dopri8 (its stage loop) instead of
:class:`gradflow._engine.erk.UnrolledDopri8`; ``loop_by_diffeqsolve`` ``True``: rounds step by
``diffrax.diffeqsolve`` (:func:`gradflow._engine.loop.by_diffeqsolve`, the reference the engine's
own loop is tested against) instead of the engine's loop."""

_ENGINE_LOOP = loop.solve
"""The engine's own solve loop (``loop_by_diffeqsolve=False``)."""


def _value(name, value):
    if name == "unrolled_dopri8":
        if not isinstance(value, bool):
            raise bad_arg("unrolled_dopri8", value, "True or False")
        import diffrax

        from .erk import UnrolledDopri8

        return UnrolledDopri8 if value else diffrax.Dopri8
    if name == "loop_by_diffeqsolve":
        if not isinstance(value, bool):
            raise bad_arg("loop_by_diffeqsolve", value, "True or False")
        return loop.by_diffeqsolve if value else _ENGINE_LOOP
    if name == "fast_compile":
        if not isinstance(value, tuple):
            raise bad_arg("fast_compile", value, "a tuple of (option, value) pairs; () for XLA's defaults")
        return value
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise bad_arg(name, value, "an integer ≥ 0")
    return value


@contextlib.contextmanager
def engine_knobs(**values):
    """Run the enclosed code with the knobs :data:`KNOBS` named in ``values`` set, then restore
    them. Compiled programs are dropped on entry and exit (``jax.clear_caches``), so no program
    built under one setting serves the other; stored programs are keyed by the knobs' values.

    **Raises:** :class:`gradflow.GradflowValueError` for an unknown knob or a value of the wrong kind."""
    unknown = sorted(set(values) - set(KNOBS))
    if unknown:
        raise bad_arg("engine knob", unknown[0], f"one of {sorted(KNOBS)}")
    new = {name: _value(name, v) for name, v in values.items()}
    old = {name: getattr(*KNOBS[name]) for name in new}
    for name, v in new.items():
        setattr(*KNOBS[name], v)
    jax.clear_caches()
    try:
        yield
    finally:
        for name, v in old.items():
            setattr(*KNOBS[name], v)
        jax.clear_caches()


@contextlib.contextmanager
def observe_rounds(observer: Callable):
    """Call ``observer(kind, rnd, run)`` for every round the engine runs from the host while the
    enclosed code runs, and return what it returns: ``kind`` ``"fused"`` (a round fused with the
    finish: every round of a single run, the explicit rounds of a small batch) or ``"bucket"`` (a
    round of a bucket of a batch's lanes); ``rnd`` the :class:`gradflow._engine.settings.Round`
    (its solver code and steps); ``run()`` runs the round as the engine would. An observer times
    it, counts it, or returns a recorded result in its place (then it must return what ``run()``
    returned for the same call). Restored on exit."""
    fused0, solve0 = batch._fused_round, batch._solve_jit

    def fused(flow, fargs, params0, state, settings, rnd, *lanes):
        return observer("fused", rnd, lambda: fused0(flow, fargs, params0, state, settings, rnd, *lanes))

    def solve(flow, fargs, y0, tau0, settings, rnd):
        if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((y0, tau0))):  # traced inside a fused round
            return solve0(flow, fargs, y0, tau0, settings, rnd)
        return observer("bucket", rnd, lambda: solve0(flow, fargs, y0, tau0, settings, rnd))

    batch._fused_round, batch._solve_jit = fused, solve
    try:
        yield
    finally:
        batch._fused_round, batch._solve_jit = fused0, solve0
