"""One log-time diffrax solve of a gradient flow over any parameter pytree: its events and statuses.

The engine knows no model. A :class:`Flow` says what to integrate:

* ``field(params, args)``: ``d params/dt`` in flow time (a pytree shaped like ``params``),
  e.g. ``−∇L`` (:func:`gradflow.integrate`) or the value-softmax field with its exact centred
  softmax derivative (:func:`gradflow.simulate`);
* ``rates(params, args)``: a dict of scalar integrands carried as quadrature states
  (``Q_name(t) = ∫₀ᵗ rate dt``, e.g. the polarisation coefficient Γ of paper Eq. 6);
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
import numpy as np
import optimistix as optx

from .._errors import bad_arg
from .._status import Status
from .._validate import check_positive, check_positive_int, check_times
from . import rosenbrock
from .erk import UnrolledDopri8
from .rosenbrock import EigenRodas4, EigenW, HoldStep, Rodas4, Ros34pw2
from .stiff import asymmetry, stiffness_ratio

__all__ = [
    "Flow", "FlowArgs", "SolveState", "Status", "SOLVERS", "REST_FRACTION", "STALL_ULPS", "at_rest",
    "check_settings", "default_ts", "log_taus", "resolve_solver", "make_solver", "rhs", "solve_lane",
]


SOLVERS = ("auto", "tsit5", "dopri5", "dopri8", "kvaerno5", "rodas4", "ros34pw2", "ros34pw2-eigh", "rodas4-eigh")
"""Accepted ``solver`` names. ``auto``, for every flow: ``dopri8`` (explicit, 8th order) with
stiffness detection. A flow without a finite minimiser (e.g. the logistic teacher) is non-stiff in
log time and stays on ``dopri8``; a flow with a finite minimiser (square loss, soft-target
cross-entropy, most users' losses) becomes stiff once the fast modes have converged (explicit
steps are then stability-limited, their number ∝ t1): ``auto`` runs ``dopri8`` in short rounds, estimates after each round whether its
steps were stability-limited (``h·ρ`` against Dopri8's stability boundary) and switches such a
lane to an implicit method, and back to ``dopri8`` when the implicit steps get small
(:mod:`gradflow._engine.stiff`). The implicit method: ``rodas4-eigh`` for gradient flows
(the Jacobian's parameter block symmetric, :func:`gradflow._engine.stiff.asymmetry`) with at
least :data:`gradflow._engine.stiff.EIGEN_MIN_STATE` parameters — Rodas4 (order 4, L-stable)
whose stage systems ``(I/(hγ) − J) k = r`` with the exact Jacobian are solved by a few sweeps
preconditioned by one symmetric eigendecomposition of the Hessian per round of steps (no
factorisation per step, :class:`gradflow._engine.rosenbrock.EigenRodas4`) — and ``rodas4``
otherwise (Rosenbrock, L-stable, order 4: one Jacobian and one LU factorisation per step,
:mod:`gradflow._engine.rosenbrock`). ``ros34pw2-eigh``: the Rosenbrock–W method ROS34PW2
(order 3) with ``(I/(hγ) − J)⁻¹`` from the eigendecomposition alone
(:class:`gradflow._engine.rosenbrock.EigenW`; about twice the steps of ``rodas4-eigh``).
``ros34pw2``: ROS34PW2 with a dense inverse that is
reused while its step size is held (fewer Jacobians, ~3× the steps of ``rodas4``).
``kvaerno5``: diffrax's ESDIRK with a Newton root finder (a fresh Jacobian
per iteration). The metadata's ``solver`` field records ``auto-stiff`` for such runs. Implicit
solves run with one BLAS thread (:func:`gradflow._engine.stiff.blas_threads`)."""


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
    - ``detect_stiffness``: the solve reports ``h·ρ`` and the Jacobian's asymmetry at its end
      (``SolveState.h_rho``, ``asym``) for the phase policy of ``solver="auto"``
      (:mod:`gradflow._engine.stiff`); ``False`` for a fixed solver.
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


def rhs(flow: Flow, y, args):
    """``dy/dt`` for ``y = (params, quadratures)`` in flow time."""
    params, _ = y
    return flow.field(params, args), ({} if flow.rates is None else flow.rates(params, args))


def _log_time_rhs(tau, y, args: FlowArgs):
    """``dy/dτ = (1 + t)·dy/dt`` with ``t = expm1(τ)`` (diffrax signature)."""
    scale = jnp.exp(tau)
    return jax.tree.map(lambda f: scale * f, rhs(args.flow, y, args.fargs))


REST_FRACTION = 1e-2
"""The rest stop (:func:`at_rest`) fires once the movement the flow has left, as bounded through
its local linearisation, is below ``REST_FRACTION`` of the tolerance ``atol + rtol·|θ|`` in every
component."""


def at_rest(tau, params, f, jf_dir, rtol, atol):
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

    **Arguments:** ``tau`` log time; ``params`` the parameter pytree; ``f`` the flow-time field
    there; ``jf_dir`` ``J·(f/max|f|)`` (a pytree like ``f``); ``rtol``, ``atol`` the tolerances.
    **Returns:** a bool scalar."""
    fmax = _max_abs(f)
    scale = jnp.exp(tau)
    safe = jnp.where(fmax > 0, fmax, 1.0)
    u = jax.tree.map(lambda x: x / safe, f)
    dot = lambda a, b: sum(jnp.sum(x * y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
    kappa = -scale * dot(u, jf_dir) / dot(u, u) - 1.0
    speed = jax.tree.reduce(jnp.maximum, jax.tree.map(
        lambda fi, pi: jnp.max(scale * jnp.abs(fi) / (atol + rtol * jnp.abs(pi))), f, params))
    return (fmax == 0) | ((kappa > 0) & (speed < REST_FRACTION * kappa))


def _field_and_jvp(flow: Flow, params, fargs):
    """``f = field(params)`` and ``J·(f/max|f|)`` (one linearisation of the field)."""
    f, lin = jax.linearize(lambda p: flow.field(p, fargs), params)
    fmax = _max_abs(f)
    u = jax.tree.map(lambda x: x / jnp.where(fmax > 0, fmax, 1.0), f)
    return f, lin(u)


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
    f, jf = _field_and_jvp(args.flow, params, args.fargs)
    rates = {} if args.flow.rates is None else args.flow.rates(params, args.fargs)
    rest = at_rest(tau, params, f, jf, args.rtol, args.atol)
    return rest | ~_all_finite((f, rates))


def _nonfinite(tau, y, args: FlowArgs, **kwargs):
    """Event: the field at the accepted state is non-finite (stop at once, keep this finite state)."""
    return ~_all_finite(_log_time_rhs(tau, y, args))


def _nonfinite_ahead(flow, fargs, tau, y, dtmin):
    """After a stall: does the field turn non-finite within a few ``dtmin`` of ``(tau, y)``?
    (Explicit Euler probes at ``dtmin·4^k``, ``k = 0..5``; then the status is ``nonfinite``.)"""
    args = FlowArgs(flow, fargs)
    f = _log_time_rhs(tau, y, args)

    def probe(h):
        return _all_finite(_log_time_rhs(tau + h, jax.tree.map(lambda yi, fi: yi + h * fi, y, f), args))

    hs = dtmin * 4.0 ** jnp.arange(6)
    return ~(_all_finite(f) & jnp.all(jax.vmap(probe)(hs)))


def make_solver(name: str, rtol=None, atol=None, batched: bool = False):
    """The diffrax solver for a concrete name of :data:`SOLVERS` (not ``auto``).

    ``batched``: the solve runs under ``vmap`` over many lanes
    (:data:`gradflow._engine.batch.UNROLL_LANES`); ``dopri8`` is then
    :class:`gradflow._engine.erk.UnrolledDopri8` (diffrax's Dopri8 with its stage loop
    written out: the same method, about 1.8× faster per step at 1024 lanes). Otherwise diffrax's
    own loop, which traces the field once instead of 13 times (it compiles faster)."""
    if name == "tsit5":
        return diffrax.Tsit5()
    if name == "dopri5":
        return diffrax.Dopri5()
    if name == "dopri8":
        return UnrolledDopri8() if batched else diffrax.Dopri8()
    if name == "kvaerno5":
        # Newton (a fresh Jacobian per iteration) at the step controller's tolerances, stopped by
        # its convergence rate (Hairer–Wanner, κ = 1e-2) rather than by the size of the last
        # update: once h·‖∂f/∂y‖ is large, round-off in the update exceeds any tight tolerance,
        # so an update-size test fails, steps are rejected and the solve stalls.
        return diffrax.Kvaerno5(root_finder=optx.Newton(rtol=rtol, atol=atol, cauchy_termination=False))
    if name == "rodas4":
        return Rodas4()
    if name == "ros34pw2":
        return Ros34pw2()
    if name == "ros34pw2-eigh":
        return EigenW()
    if name == "rodas4-eigh":
        return EigenRodas4(iterations=rosenbrock.REFINE)
    raise AssertionError(name)  # resolve_solver validated the name


def _controller(name, rtol, atol, dtmin):
    stall = dict(dtmin=dtmin, force_dtmin=False)
    if name in ("kvaerno5", "rodas4", "ros34pw2-eigh", "rodas4-eigh"):
        return diffrax.PIDController(rtol=rtol, atol=atol, pcoeff=0.3, icoeff=0.4, **stall)
    if name == "ros34pw2":  # hold the step size while it would barely grow: its LU is reused
        return HoldStep(diffrax.PIDController(rtol=rtol, atol=atol, pcoeff=0.3, icoeff=0.4, **stall), rosenbrock.HOLD_MAX)
    return diffrax.PIDController(rtol=rtol, atol=atol, **stall)


def default_ts(t1: float, num: int = 400) -> np.ndarray:
    """``t = 0`` followed by ``num`` log-spaced flow times from ``1e-3`` to ``t1``
    (``num`` linearly spaced points if ``t1 ≤ 1e-3``)."""
    if t1 <= 1e-3:
        return np.linspace(0.0, t1, num + 1)
    grid = np.geomspace(1e-3, t1, num)
    grid[-1] = t1
    return np.concatenate([[0.0], grid])


def log_taus(ts: np.ndarray, t1: float) -> np.ndarray:
    """Save points in log time; the last one is always ``log1p(t1)`` (the end of the solve)."""
    taus = np.log1p(ts)
    if ts[-1] != t1:
        taus = np.concatenate([taus, [np.log1p(t1)]])
    return taus


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
    time where it stopped (``tau_end = τ1`` after a rest stop); ``tau_steady``: log time of the
    rest stop (``inf`` if none); ``num_steps``: solver steps taken (accepted and rejected);
    ``code``: a :class:`Status` (``max_steps`` also means "not finished: continue"); ``h_rho``:
    mean log-time step of the solve × spectral radius of the log-time Jacobian at ``y_end``
    (:func:`gradflow._engine.stiff.stiffness_ratio`; ``NaN`` for flows without a finite
    minimiser, whose ``auto`` does not switch); ``asym``: relative asymmetry of the Jacobian's
    parameter block at ``y_end`` (:func:`gradflow._engine.stiff.asymmetry`; ``NaN`` likewise), which
    picks the implicit solver of ``auto``."""

    ys: tuple
    reached: jax.Array
    y_end: tuple
    tau_end: jax.Array
    tau_steady: jax.Array
    num_steps: jax.Array
    code: jax.Array
    h_rho: jax.Array
    asym: jax.Array


def solve_lane(flow: Flow, fargs, y0, tau0, taus, rtol, atol, solver_name: str, max_steps: int,
               batched: bool = False) -> SolveState:
    """One diffrax solve in log time from ``(tau0, y0)`` to ``taus[-1]``, saving at ``taus``
    (``batched``: it is traced under ``vmap``, see :func:`make_solver`).

    Save points before ``tau0`` are not computed here (``reached = False``). With
    ``flow.rest_stop`` the solve stops once the flow is at rest (:func:`at_rest`); the save points
    after it count as reached and hold the rest state, with each quadrature continued exactly as
    ``g(θ_rest)·(t − t_rest)`` (the integrand is constant at rest)."""
    solver = make_solver(solver_name, rtol, atol, batched)
    tau1 = taus[-1]
    dtmin = STALL_ULPS * jnp.finfo(tau1.dtype).eps * jnp.maximum(1.0, tau1)
    saveat = diffrax.SaveAt(subs=[diffrax.SubSaveAt(ts=jnp.clip(taus, tau0, tau1)), diffrax.SubSaveAt(t1=True)])
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(_log_time_rhs),
        solver,
        t0=tau0,
        t1=tau1,
        dt0=None,
        y0=y0,
        args=FlowArgs(flow, fargs, rtol, atol),
        stepsize_controller=_controller(solver_name, rtol, atol, dtmin),
        saveat=saveat,
        max_steps=max_steps,
        throw=False,
        event=diffrax.Event(_rest_event if flow.rest_stop else _nonfinite),
    )
    (tau_s, tau_end) = sol.ts
    ys, y_end = sol.ys
    y_end = jax.tree.map(lambda x: x[0], y_end)
    reached = (taus >= tau0) & jnp.isfinite(tau_s) & jax.tree.reduce(
        jnp.logical_and,
        jax.tree.map(lambda x: jnp.all(jnp.isfinite(x.reshape(x.shape[0], -1)), axis=1), ys),
    )
    code = _status_of(sol.result)
    bad_end = _nonfinite_ahead(flow, fargs, tau_end[0], y_end, jnp.where(code == Status.stalled, dtmin, 0.0))
    at_rest_ = (sol.result == diffrax.RESULTS.event_occurred) & ~bad_end
    code = jnp.where(bad_end, Status.nonfinite, jnp.where(at_rest_, Status.ok, code))
    if flow.rest_stop:  # the remaining save points: the rest state, quadratures continued linearly
        later = at_rest_ & (taus >= tau0) & ~reached
        ys = jax.tree.map(lambda s, e: _where_leading(later, e, s), ys, _continue_at_rest(flow, fargs, y_end, tau_end[0], taus))
        reached = reached | later
    detect = flow.detect_stiffness
    return SolveState(
        ys=ys,
        reached=reached,
        y_end=y_end,
        tau_end=jnp.where(at_rest_, tau1, tau_end[0]),
        tau_steady=jnp.where(at_rest_, tau_end[0], jnp.inf),
        num_steps=sol.stats["num_steps"],
        code=code,
        h_rho=_h_rho(flow, fargs, tau0, tau_end[0], y_end, sol.stats["num_steps"]) if detect else _nan(tau1),
        asym=_asym(flow, fargs, tau_end[0], y_end) if detect else _nan(tau1),
    )


def _nan(like):
    return jnp.full((), jnp.nan, like.dtype)


def _continue_at_rest(flow: Flow, fargs, y_rest, tau_rest, taus):
    """The state at the save points ``taus`` of a flow at rest from ``tau_rest`` on: ``params``
    held, each quadrature ``Q(t) = Q(t_rest) + g(θ_rest)·(t − t_rest)`` (shapes ``(T, ...)``)."""
    params, quads = y_rest
    held = jax.tree.map(lambda x: jnp.broadcast_to(x, taus.shape + x.shape), params)
    if not quads:
        return held, quads
    rates = flow.rates(params, fargs)
    dt = jnp.maximum(jnp.expm1(taus) - jnp.expm1(tau_rest), 0.0)
    return held, {k: quads[k] + rates[k] * dt for k in quads}


def _h_rho(flow, fargs, tau0, tau_end, y_end, num_steps):
    """``h·ρ`` of a finished solve for the ``auto`` phase policy."""
    dtau = (tau_end - tau0) / jnp.maximum(num_steps, 1)
    field = lambda y: _log_time_rhs(tau_end, y, FlowArgs(flow, fargs))
    return stiffness_ratio(field, y_end, dtau)


def _asym(flow, fargs, tau_end, y_end):
    """Asymmetry of the parameter block of the Jacobian at ``y_end``."""
    return asymmetry(lambda y: _log_time_rhs(tau_end, y, FlowArgs(flow, fargs)), y_end)


def resolve_solver(solver: str) -> str:
    """The concrete solver name for ``solver``: ``"auto"`` resolves to the phase policy
    :data:`gradflow._engine.stiff.AUTO_STIFF` (Dopri8 with stiffness detection, for every flow).

    **Raises:** :class:`gradflow.GradflowValueError` for a name not in :data:`SOLVERS`."""
    from .stiff import AUTO_STIFF

    if not isinstance(solver, str) or solver not in SOLVERS:
        raise bad_arg("solver", solver, f"one of {list(SOLVERS)}")
    return AUTO_STIFF if solver == "auto" else solver


def check_settings(t1, ts, rtol, atol, max_steps, solver):
    """Validate the solve settings shared by every front end.

    Returns ``(t1, ts, taus, rtol, atol, max_steps, name)``: ``ts`` defaults to
    :func:`default_ts`, ``taus`` are the log save times (:func:`log_taus`), ``name`` the resolved
    solver (:func:`resolve_solver`).

    **Raises:** :class:`gradflow.GradflowValueError` for ``t1`` not in ``(0, ∞)``, ``ts`` not a
    strictly increasing 1-D array in ``[0, t1]``, ``rtol`` not in ``(0, 1)``, ``atol ≤ 0``,
    ``max_steps`` not a positive integer, an unknown ``solver``."""
    t1, ts = check_times(t1, ts)
    if ts is None:
        ts = default_ts(t1)
    rtol = check_positive("rtol", rtol, upper=1.0)
    atol = check_positive("atol", atol)
    max_steps = check_positive_int("max_steps", max_steps)
    return t1, ts, log_taus(ts, t1), rtol, atol, max_steps, resolve_solver(solver)
