"""One log-time solve of a gradient flow over any parameter pytree: its events and statuses.

The engine knows no model. A :class:`Flow` says what to integrate:

* ``field(params, args)``: ``d params/dt`` in flow time (a pytree shaped like ``params``),
  e.g. ``−∇L`` (:func:`gradflow.integrate`) or the value-softmax field with its exact centred
  softmax derivative (:func:`gradflow.simulate`);
* ``rates(params, args)``: a dict of scalar integrands carried as quadrature states
  (``Q_name(t) = ∫_{t0}^t rate dt`` from the start time ``t0``, default 0, e.g. the polarisation coefficient Γ of paper Eq. 6);
* ``observe(params, args)``: a dict of arrays evaluated at the save points (metrics).

The ODE state is ``y = (params, quadratures)`` and the solve runs in log time
``τ = log(1 + t)``, ``dy/dτ = (1 + t)·dy/dt``: flows whose late phase is slow in ``t`` (the
logistic loss ≈ 1/t) are smooth in ``τ``, so ``t = 1e12`` (``τ ≈ 27.6``) takes tens of steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp

from .._status import Status
from . import _fastjit, loop
from .solvers import make_controller, make_solver
from .policy import DEFAULT_POLICY
from .stiff import asymmetry, stiffness_ratio

__all__ = ["Flow", "FlowArgs", "SolveState", "Status", "REST_FRACTION", "STALL_ULPS", "at_rest", "nonfinite_ahead", "rhs",
           "solve_lane", "stall_dtmin", "stiffness_of"]


@dataclasses.dataclass(frozen=True)
class Flow:
    """What the engine integrates, and how (hashable: a static argument of the compiled solve; a
    new ``Flow`` equal to an earlier one reuses its compilation).

    - ``field(params, args)``: ``d params/dt`` in flow time, same pytree structure as ``params``.
    - ``rates(params, args)``: ``dict`` of scalar quadrature integrands, or ``None``.
    - ``observe(params, args)``: ``dict`` of arrays computed at the save points, or ``None``.
    - ``rest_stop``: stop once the flow is at rest (:func:`at_rest`, a criterion that cannot fire
      while the flow still moves in log time by more than the tolerance); the later save points
      then hold the rest state and the quadratures continue as ``g(θ*)·(t − t_rest)``. ``False``:
      integrate to ``t1`` whatever happens (only a non-finite field stops the solve early).
    - ``detect_stiffness``: after each round of a lane that goes on, the engine measures ``h·ρ``
      and the Jacobian's asymmetry at its end (:func:`stiffness_of`) for the phase policy of
      ``solver="auto"`` (:mod:`gradflow._engine.stiff`); ``False`` for a fixed solver.
    """

    field: Callable
    rates: Callable | None = None
    observe: Callable | None = None
    rest_stop: bool = True
    detect_stiffness: bool = True


class FlowArgs(NamedTuple):
    """diffrax ``args`` of a solve: the :class:`Flow`, its arguments ``fargs`` and the
    controller's tolerances (which the rest test measures the movement left in)."""

    flow: Flow
    fargs: Any
    rtol: Any = None
    atol: Any = None


@_fastjit.filter_jit
def call_user(fn: Callable, params, args):
    """``fn(params, args)`` (a :class:`Flow`'s ``field`` or ``rates``, or another user function)
    as a jit of its own, nested in the engine's programs.

    A solve's program evaluates the field at several sites (the solver's stages, the rest test's
    linearisation, the stiffness detector's products, the Jacobian of an implicit solver, the
    save points). As a nested jit, ``fn`` is traced once per function and argument shapes (and
    static leaves of ``args``), and that trace, or its cached derivative, is reused by every
    site and by every later program of the process instead of tracing the user's Python again.
    XLA inlines the nested call first thing, so each compiled program and its results are the
    same (``tests/test_performance.py``). As under :func:`jax.jit`, a value ``fn`` reads from a
    global is the one it had at its first trace (the docs of :func:`gradflow.integrate` say so).

    **Arguments:** ``fn`` hashable (a static argument); ``params`` a pytree of arrays; ``args``
    any pytree (array leaves traced, the others static). **Returns:** ``fn(params, args)``."""
    return fn(params, args)


def rhs(flow: Flow, y, args):
    """``dy/dt`` for ``y = (params, quadratures)`` in flow time."""
    params, _ = y
    return call_user(flow.field, params, args), ({} if flow.rates is None else call_user(flow.rates, params, args))


def _log_time_rhs(tau, y, args: FlowArgs):
    """``dy/dτ = (1 + t)·dy/dt`` with ``t = expm1(τ)`` (diffrax signature)."""
    scale = jnp.exp(tau)
    return jax.tree.map(lambda f: scale * f, rhs(args.flow, y, args.fargs))


REST_FRACTION = 1e-2
"""The rest stop (:func:`at_rest`) fires once the movement the flow has left, as bounded through
its local linearisation, is below ``REST_FRACTION`` of the tolerance ``atol + rtol·|θ|`` in every
component."""


RATE_GROWTH = 2.0
"""A quadrature's integrand counts as singular at the rest state when, where the linearisation
says the flow ends, it is more than this many times larger (:func:`at_rest`): a regular integrand
changes there by a sub-tolerance amount, one like ``1/|θ − θ*|`` by orders of magnitude."""


def at_rest(tau, params, f, u, ju, rtol, atol, rates=None, rates_at=None):
    """Whether the flow is at rest at log time ``tau``: the movement left to it, bounded through
    its local linearisation, is below :data:`REST_FRACTION` of the tolerance (the argument:
    docs, "Solvers and statuses", the rest stop).

    In log time the velocity is ``v = (1 + t)·f`` (``f`` the flow-time field at ``params``) and
    ``dv/dτ = v + (1 + t)·J v`` (``J = ∂f/∂θ``). Along ``v`` the log-time contraction rate is

        ``κ = −(1 + t)·⟨u, J u⟩/⟨u, u⟩ − 1``  (``u = f/max|f|``, the Rayleigh quotient of ``−J``),

    so under the local linearisation ``|v|`` decays like ``exp(−κ·Δτ)`` and the flow moves at most
    ``‖v‖_tol/κ`` more (``‖v‖_tol = max_i |v_i|/(atol + rtol|θ_i|)``). The flow is at rest when
    ``κ > 0`` and that bound is below :data:`REST_FRACTION`, or when ``f = 0`` exactly.

    - At a minimiser the computed ``f`` is round-off; ``J`` there is minus the Hessian, so
      ``κ ≈ t·λ`` (``λ`` the curvature along the noise) grows as fast as ``|v|``: the bound tends
      to ``|f|/λ``, round-off over curvature, and the test fires.
    - On a flow without a finite minimiser (logistic, exponential loss, max-margin token
      selection) ``θ`` moves by O(1) per unit of ``log t`` forever: ``|v|`` stays O(1) while ``κ``
      is at most O(1/τ) (``κ = 0`` exactly for ``e^{−w}``), so the bound stays ≫ the tolerance.
    - Algebraic convergence to a degenerate minimum (``w⁴``: ``w ∼ t^{−1/2}``, ``κ → 1/2``): the
      bound is ``|v|/κ = w``, the distance left, which falls below the tolerance only when the
      flow has no more than that left to move.
    - Near a saddle the field grows along the unstable direction (``κ < 0`` once that direction
      dominates ``v``): not at rest.

    With quadratures (``rates``: their integrands ``g`` at ``params``; ``rates_at(θ)`` evaluates
    them elsewhere), after a stop each is continued as ``g(θ_rest)·(t − t_rest)``. That is wrong
    without bound for an integrand singular at the rest state (``1/|θ − θ*|``, whose integral
    diverges), so the stop also evaluates every ``g`` where the linearisation says the flow ends,
    ``θ + (1 + t)·max|f|/κ·u``: if one is non-finite there, or more than :data:`RATE_GROWTH`
    times larger (plus ``atol``), the flow is not at rest; it goes on and ends ``max_steps`` (or
    ``nonfinite`` where the state reaches the singularity), never a finite wrong integral with
    status ``ok``. A smooth integrand changes there by what the state changes, below the
    tolerance; one that vanishes at the rest state (γ = ‖r‖ at an interpolating minimum) stays
    at its round-off level.

    **Arguments:** ``tau`` log time; ``params`` the parameter pytree; ``f`` the flow-time field
    there; ``u = f/max|f|`` (``f`` itself where ``f = 0``) and ``ju = J·u`` (pytrees like ``f``,
    from :func:`_field_and_jvp`); ``rtol``, ``atol`` the tolerances; ``rates`` a dict of scalars and
    ``rates_at`` a function of ``θ`` returning such a dict (or ``None``: no quadratures).
    **Returns:** a bool scalar."""
    scale = jnp.exp(tau)
    dot = lambda a, b: sum(jnp.sum(x * y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
    kappa = -scale * dot(u, ju) / dot(u, u) - 1.0
    speed = jax.tree.reduce(jnp.maximum, jax.tree.map(
        lambda fi, pi: jnp.max(scale * jnp.abs(fi) / (atol + rtol * jnp.abs(pi))), f, params))
    fmax = _max_abs(f)
    rest = (fmax == 0) | ((kappa > 0) & (speed < REST_FRACTION * kappa))
    if not rates:
        return rest
    # the integrands where the linearisation says the flow ends (θ + (1 + t)·max|f|/κ·u): one that
    # blows up there (non-finite, or more than RATE_GROWTH times larger) is singular at the rest state
    reach = jnp.where(fmax == 0, 0.0, scale * fmax / jnp.where(kappa > 0, kappa, 1.0))
    g_end = rates_at(jax.tree.map(lambda p, ui: p + reach * ui, params, u))
    singular = jnp.stack([~jnp.isfinite(g_end[k]) | (jnp.abs(g_end[k]) > RATE_GROWTH * jnp.abs(rates[k]) + atol)
                          for k in rates])
    return rest & ~jnp.any(singular)


def _field_and_jvp(flow: Flow, params, fargs):
    """``(f, u, J·u)``: the field ``f = field(params)``, its direction ``u = f/max|f|`` and the
    Jacobian applied to it (one linearisation of the field)."""
    f, lin = jax.linearize(lambda p: call_user(flow.field, p, fargs), params)
    fmax = _max_abs(f)
    u = jax.tree.map(lambda x: x / jnp.where(fmax > 0, fmax, 1.0), f)
    return f, u, lin(u)


STALL_ULPS = 1024
"""The solve stalls (status ``stalled``) when its log-time step ``dτ`` falls below
``STALL_ULPS·eps·max(1, τ1)`` (≈ 6e-12 at ``t1 = 1e12``): a step that small moves the time by
a few hundred ulps, i.e. the solver cannot make progress (a singularity, kink or blow-up ahead)."""


def _all_finite(tree):
    return jax.tree.reduce(jnp.logical_and, jax.tree.map(lambda x: jnp.all(jnp.isfinite(x)), tree), True)


def _max_abs(tree):
    return jax.tree.reduce(jnp.maximum, jax.tree.map(lambda x: jnp.max(jnp.abs(x)), tree))


def _rest_event(tau, y, args: FlowArgs, **kwargs):
    """Event: the flow is at rest (:func:`at_rest`), or its field is non-finite."""
    params = y[0]
    f, u, ju = _field_and_jvp(args.flow, params, args.fargs)
    rates_at = None if args.flow.rates is None else (lambda p: call_user(args.flow.rates, p, args.fargs))
    rates = {} if rates_at is None else rates_at(params)
    rest = at_rest(tau, params, f, u, ju, args.rtol, args.atol, rates, rates_at)
    return rest | ~_all_finite((f, rates))


def stall_dtmin(tau1):
    """The smallest log-time step of a solve that ends at log time ``tau1`` (a float scalar):
    :data:`STALL_ULPS` ulps of ``max(1, tau1)``; a step below it ends the solve ``stalled``."""
    return STALL_ULPS * jnp.finfo(jnp.result_type(tau1)).eps * jnp.maximum(1.0, tau1)


def nonfinite_ahead(flow, fargs, tau, y, dtmin):
    """After a stall: does the field turn non-finite within a few ``dtmin`` of ``(tau, y)``?
    (Explicit Euler probes at ``dtmin·4^k``, ``k = 0..5``; then the status is ``nonfinite``.)
    A program of its own, run by the engine only on lanes whose solve stalled
    (:func:`gradflow._engine.batch._probe_stalls`): a solve that does not stall never compiles it."""
    args = FlowArgs(flow, fargs)
    f = _log_time_rhs(tau, y, args)

    def probe(h):
        return _all_finite(_log_time_rhs(tau + h, jax.tree.map(lambda yi, fi: yi + h * fi, y, f), args))

    hs = dtmin * 4.0 ** jnp.arange(6)
    return ~(_all_finite(f) & jnp.all(jax.vmap(probe)(hs)))


def _where_leading(mask, new, old):
    """``jnp.where`` with ``mask`` over the leading axes of ``old``, broadcast over the rest."""
    return jnp.where(mask.reshape(mask.shape + (1,) * (old.ndim - mask.ndim)), new, old)


def _status_of(result):
    """The :class:`Status` code of a diffrax result (before events are interpreted)."""
    return jnp.where(
        result == diffrax.RESULTS.successful,
        Status.ok,
        jnp.where(
            result == diffrax.RESULTS.max_steps_reached,
            Status.max_steps,
            jnp.where(result == diffrax.RESULTS.dt_min_reached, Status.stalled, Status.solver_failed),
        ),
    )


class SolveState(eqx.Module):
    """Where a lane's solve stands (one lane, or many with a leading lane axis ``B``).

    ``ys``: the state ``(params, quadratures)`` at the save points (``(T, ...)``); ``reached``
    ``(T,)``: which save points the solve has reached; ``y_end``, ``tau_end``: the state and log
    time where it stopped (``tau_end = τ1`` after a rest stop, ``y_end`` then the rest state with
    its quadratures continued to ``τ1``); ``tau_steady``: log time of the
    rest stop (``inf`` if none); ``num_steps``: solver steps taken (accepted and rejected);
    ``code``: a :class:`Status` (``max_steps`` also means "not finished: continue");
    ``tau_start`` and ``round_steps``: log time where the lane's last solve started and the steps
    it took (what :func:`stiffness_of` measures the mean step from)."""

    ys: tuple
    reached: jax.Array
    y_end: tuple
    tau_end: jax.Array
    tau_steady: jax.Array
    num_steps: jax.Array
    code: jax.Array
    tau_start: jax.Array
    round_steps: jax.Array


def solve_lane(flow: Flow, fargs, y0, tau0, *, taus, rtol, atol, solver: int, max_steps: int,
               budget=None, batched: bool = False, vmapped: bool = True) -> SolveState:
    """One solve in log time from ``(tau0, y0)`` to ``taus[-1]``, saving at ``taus``, with
    the diffrax solver of code ``solver`` (:data:`gradflow._engine.solvers.SOLVER_TABLE`) and at most
    ``max_steps`` steps (a Python integer), or ``budget`` steps if given (an integer array
    ``≤ max_steps``, a runtime value: :class:`gradflow._engine.solvers.StepBudget`); ``batched``:
    it is throughput-bound, traced under ``vmap`` with many lanes
    (:func:`gradflow._engine.solvers.make_solver`); ``vmapped``: it may be traced under ``vmap``
    (the save points are then written in place, :func:`gradflow._engine.loop.solve`; ``False``
    for a single lane's program, which then compiles faster; the results are the same).

    The code is ``stalled`` where the step collapsed (:func:`stall_dtmin`), also when the field
    turns non-finite just ahead: the engine probes there (:func:`nonfinite_ahead`) and reports
    ``nonfinite``; ``nonfinite`` here means the field at the end state itself is non-finite.

    Save points before ``tau0`` are not computed here (``reached = False``). With
    ``flow.rest_stop`` the solve stops once the flow is at rest (:func:`at_rest`); the save points
    after it count as reached and hold the rest state, with each quadrature continued exactly as
    ``g(θ_rest)·(t − t_rest)`` (the integrand is constant at rest).

    The steps are diffrax's (its solvers and step-size controllers), run by the engine's own loop
    (:func:`gradflow._engine.loop.solve`: the steps, saves and results of ``diffrax.diffeqsolve``,
    in a program that compiles in less time)."""
    code, solver = solver, make_solver(solver, rtol, atol, batched)
    tau1 = taus[-1]
    dtmin = stall_dtmin(tau1)
    sol = loop.solve(
        diffrax.ODETerm(_log_time_rhs),
        solver,
        make_controller(code, rtol, atol, dtmin, budget, tau1),
        tau0,
        tau1,
        y0,
        FlowArgs(flow, fargs, rtol, atol),
        jnp.clip(taus, tau0, tau1),
        max_steps=max_steps,
        # No event without the rest stop: a state whose field is non-finite is never accepted in
        # practice, and one that were would stall the solve there (docs, "Solvers and statuses").
        event=_rest_event if flow.rest_stop else None,
        in_place=vmapped,
    )
    tau_s, ys, y_end, tau_end = sol.ts, sol.ys, sol.y_end, sol.t_end
    reached = (taus >= tau0) & jnp.isfinite(tau_s) & jax.tree.reduce(
        jnp.logical_and,
        jax.tree.map(lambda x: jnp.all(jnp.isfinite(x.reshape(x.shape[0], -1)), axis=1), ys),
    )
    code = _status_of(sol.result)
    # the field where the solve ended; after a stall the engine also probes just ahead of it
    # (:func:`nonfinite_ahead`, a program of its own)
    bad_end = ~_all_finite(_log_time_rhs(tau_end, y_end, FlowArgs(flow, fargs)))
    at_rest_ = (sol.result == diffrax.RESULTS.event_occurred) & ~bad_end
    code = jnp.where(bad_end, Status.nonfinite, jnp.where(at_rest_, Status.ok, code))
    if flow.rest_stop:  # the remaining save points: the rest state, quadratures continued linearly
        later = at_rest_ & (taus >= tau0) & ~reached
        rest = _continue_at_rest(flow, fargs, y_end, tau_end, taus)
        ys = jax.tree.map(lambda s, e: _where_leading(later, e, s), ys, rest)
        reached = reached | later
        # a lane at rest ends at tau1 (taus[-1]): its end state is the rest state there
        y_end = jax.tree.map(lambda e, r: jnp.where(at_rest_, r[-1], e), y_end, rest)
    return SolveState(
        ys=ys,
        reached=reached,
        y_end=y_end,
        tau_end=jnp.where(at_rest_, tau1, tau_end),
        tau_steady=jnp.where(at_rest_, tau_end, jnp.inf),
        num_steps=sol.num_steps,
        code=code,
        tau_start=jnp.asarray(tau0, tau1.dtype),
        round_steps=sol.num_steps,
    )


def _continue_at_rest(flow: Flow, fargs, y_rest, tau_rest, taus):
    """The state at the save points ``taus`` of a flow at rest from ``tau_rest`` on: ``params``
    held, each quadrature ``Q(t) = Q(t_rest) + g(θ_rest)·(t − t_rest)`` (shapes ``(T, ...)``)."""
    params, quads = y_rest
    held = jax.tree.map(lambda x: jnp.broadcast_to(x, taus.shape + x.shape), params)
    if not quads:
        return held, quads
    rates = call_user(flow.rates, params, fargs)
    dt = jnp.maximum(jnp.expm1(taus) - jnp.expm1(tau_rest), 0.0)
    return held, {k: quads[k] + rates[k] * dt for k in quads}


def stiffness_of(flow: Flow, fargs, y_end, tau_end, tau_start, round_steps,
                 iterations: int = DEFAULT_POLICY.power_iterations):
    """``(h·ρ, asymmetry)`` of a lane's last solve, for the phase policy of ``solver="auto"``
    (:func:`gradflow._engine.stiff.phase_of_lanes`): ``h`` the solve's mean log-time step, ``ρ``
    the spectral radius of the log-time Jacobian at its end state
    (:func:`gradflow._engine.stiff.stiffness_ratio`), and the relative asymmetry of the
    Jacobian's parameter block there (:func:`gradflow._engine.stiff.asymmetry`), which picks the
    implicit solver. A program of its own, run only for lanes that go on to another round: a
    run that ends in its first round never compiles it.

    **Arguments:** the lane's :class:`SolveState` fields ``y_end``, ``tau_end``, ``tau_start``,
    ``round_steps``; ``iterations`` the power iterations (the run's
    :attr:`gradflow._engine.policy.AutoPolicy.power_iterations`, a Python int).

    **Returns:** two float scalars in ``tau_end``'s dtype, ``h·ρ`` (dimensionless) and the
    relative asymmetry ``‖(P − Pᵀ) v‖ / ‖P v‖`` of the parameter block (:func:`gradflow._engine.stiff.asymmetry`)."""
    field = lambda y: _log_time_rhs(tau_end, y, FlowArgs(flow, fargs))
    dtau = (tau_end - tau_start) / jnp.maximum(round_steps, 1)
    return stiffness_ratio(field, y_end, dtau, iterations), asymmetry(field, y_end)
