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
import enum
from collections.abc import Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from .._errors import bad_arg
from .._validate import check_positive, check_positive_int, check_times
from . import rosenbrock
from .erk import UnrolledDopri8
from .rosenbrock import EigenRodas4, EigenW, HoldStep, Rodas4, Ros34pw2
from .stiff import asymmetry, stiffness_ratio

__all__ = [
    "Flow", "SolveState", "Status", "SOLVERS", "STEADY_FRACTION", "ROUNDOFF_FIELD", "STALL_ULPS",
    "check_settings", "default_ts", "log_taus", "resolve_solver", "make_solver", "rhs", "solve_lane",
]


class Status(enum.IntEnum):
    """How a run ended. The integer is what result files store (``status_code``); the name is
    the public status string (``traj.status``); :attr:`message` explains it."""

    ok = 0
    max_steps = 1
    stalled = 2
    nonfinite = 3
    solver_failed = 4

    @property
    def message(self) -> str:
        return _MESSAGES[self.name]


_MESSAGES = {
    "ok": "reached t1, or came to rest within tolerance (t_steady) and holds that state",
    "max_steps": "the step budget (max_steps) ran out before t1",
    "stalled": "the log-time step collapsed below STALL_ULPS·eps·max(1, τ1) with a finite field "
               "around: a blow-up, kink or singularity ahead",
    "nonfinite": "the field at the reached state, or within a few minimal steps ahead of a stall, "
                 "is NaN/inf (for GD: the iterate diverged)",
    "solver_failed": "another solver failure (e.g. the implicit solver's Newton iteration)",
}

SOLVERS = ("auto", "tsit5", "dopri5", "dopri8", "kvaerno5", "rodas4", "ros34pw2", "ros34pw2-eigh", "rodas4-eigh")
"""Accepted ``solver`` names. ``auto``: ``dopri8`` (explicit, 8th order) for flows without a
finite minimiser (e.g. the logistic teacher, non-stiff in log time). For flows with a finite
minimiser (``steady`` flows: square loss, soft-target cross-entropy, most users' losses) the flow
becomes stiff once the fast modes have converged (explicit steps are then stability-limited, their
number ∝ t1): ``auto`` runs ``dopri8`` in short rounds, estimates after each round whether its
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
    """What the engine integrates (hashable: a static argument of the compiled solve; a new
    ``Flow`` equal to an earlier one reuses its compilation).

    - ``field(params, args)``: ``d params/dt`` in flow time, same pytree structure as ``params``.
    - ``rates(params, args)``: ``dict`` of scalar quadrature integrands, or ``None``.
    - ``observe(params, args)``: ``dict`` of arrays computed at the save points, or ``None``.
    - ``steady``: stop once the flow is at rest within tolerance (:func:`_steady`); for flows
      with a finite minimiser. Otherwise only a non-finite field stops the solve early.
    - ``steady_on_quadratures``: whether the quadrature states take part in the relative rest
      test (their rates must then vanish at rest, as Γ's does); they never take part in the
      round-off test.
    """

    field: Callable
    rates: Callable | None = None
    observe: Callable | None = None
    steady: bool = False
    steady_on_quadratures: bool = False


def rhs(flow: Flow, y, args):
    """``dy/dt`` for ``y = (params, quadratures)`` in flow time."""
    params, _ = y
    return flow.field(params, args), ({} if flow.rates is None else flow.rates(params, args))


def _log_time_rhs(tau, y, args):
    """``dy/dτ = (1 + t)·dy/dt`` with ``t = expm1(τ)`` (diffrax signature; ``args = (flow, fargs, rtol, atol)``)."""
    flow, fargs = args[0], args[1]
    scale = jnp.exp(tau)
    return jax.tree.map(lambda f: scale * f, rhs(flow, y, fargs))


STEADY_FRACTION = 1e-3
"""Steady-state stop for flows with a finite minimiser: the solve ends once every component
moves by less than ``STEADY_FRACTION × (atol + rtol·|y|)`` per unit of log time ``τ``, or
once the flow-time field is at round-off level (:data:`ROUNDOFF_FIELD`)."""

ROUNDOFF_FIELD = 1024
"""At a minimiser the computed field is round-off, about ``ε·|y|`` (``ε`` the float64
machine epsilon), and ``(1 + t)·ε·|y|`` exceeds any tolerance once ``t`` is large: the
relative test alone would then never fire and the solver would integrate noise to ``t1``.
So a field below ``ROUNDOFF_FIELD·ε·(1 + max|params|)`` per unit of flow time also counts as rest."""

STALL_ULPS = 1024
"""The solve stalls (status ``stalled``) when its log-time step ``dτ`` falls below
``STALL_ULPS·eps·max(1, τ1)`` (≈ 6e-12 at ``t1 = 1e12``): a step that small moves the time by
a few hundred ulps, i.e. the solver cannot make progress (a singularity, kink or blow-up ahead)."""


def _all_finite(tree):
    return jax.tree.reduce(jnp.logical_and, jax.tree.map(lambda x: jnp.all(jnp.isfinite(x)), tree), True)


def _max_abs(tree):
    return jax.tree.reduce(jnp.maximum, jax.tree.map(lambda x: jnp.max(jnp.abs(x)), tree))


def _steady(tau, y, args, **kwargs):
    """Event: the flow is at rest within tolerance (see :data:`STEADY_FRACTION`), or its field is
    non-finite (see :func:`_nonfinite`)."""
    flow, fargs, rtol, atol = args
    f = rhs(flow, y, fargs)
    scale = jnp.exp(tau)
    fs, ys = (f, y) if flow.steady_on_quadratures else (f[0], y[0])
    ratio = jax.tree.map(lambda fi, yi: jnp.max(scale * jnp.abs(fi) / (atol + rtol * jnp.abs(yi))), fs, ys)
    relative = jax.tree.reduce(jnp.maximum, ratio) < STEADY_FRACTION
    params, fparams = y[0], f[0]  # quadratures grow linearly at rest: not part of the round-off test
    noise = ROUNDOFF_FIELD * jnp.finfo(jax.tree.leaves(params)[0].dtype).eps * (1 + _max_abs(params))
    return relative | (_max_abs(fparams) < noise) | ~_all_finite(f)


def _nonfinite(tau, y, args, **kwargs):
    """Event: the field at the accepted state is non-finite (stop at once, keep this finite state)."""
    return ~_all_finite(_log_time_rhs(tau, y, args))


def _nonfinite_ahead(flow, fargs, tau, y, dtmin):
    """After a stall: does the field turn non-finite within a few ``dtmin`` of ``(tau, y)``?
    (Explicit Euler probes at ``dtmin·4^k``, ``k = 0..5``; then the status is ``nonfinite``.)"""
    args = (flow, fargs)
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
    time where it stopped (``tau_end = τ1`` after a steady stop); ``tau_steady``: log time of the
    steady stop (``inf`` if none); ``num_steps``: solver steps taken (accepted and rejected);
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

    Save points before ``tau0`` are not computed here (``reached = False``). For steady flows
    the solve stops at a steady state (:func:`_steady`); the points after it hold that state and
    count as reached (the flow has converged to within tolerance)."""
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
        args=(flow, fargs, rtol, atol),
        stepsize_controller=_controller(solver_name, rtol, atol, dtmin),
        saveat=saveat,
        max_steps=max_steps,
        throw=False,
        event=diffrax.Event(_steady if flow.steady else _nonfinite),
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
    at_rest = (sol.result == diffrax.RESULTS.event_occurred) & ~bad_end
    code = jnp.where(bad_end, Status.nonfinite, jnp.where(at_rest, Status.ok, code))
    if flow.steady:  # hold the steady state at the remaining save points
        later = at_rest & (taus >= tau0) & ~reached
        ys = jax.tree.map(lambda s, e: _where_leading(later, e[None], s), ys, y_end)
        reached = reached | later
    return SolveState(
        ys=ys,
        reached=reached,
        y_end=y_end,
        tau_end=jnp.where(at_rest, tau1, tau_end[0]),
        tau_steady=jnp.where(at_rest, tau_end[0], jnp.inf),
        num_steps=sol.stats["num_steps"],
        code=code,
        h_rho=_h_rho(flow, fargs, rtol, atol, tau0, tau_end[0], y_end, sol.stats["num_steps"]),
        asym=_asym(flow, fargs, rtol, atol, tau_end[0], y_end),
    )


def _h_rho(flow, fargs, rtol, atol, tau0, tau_end, y_end, num_steps):
    """``h·ρ`` of a finished solve for the ``auto`` phase policy (``NaN`` unless ``flow.steady``)."""
    if not flow.steady:
        return jnp.full((), jnp.nan, tau_end.dtype)
    dtau = (tau_end - tau0) / jnp.maximum(num_steps, 1)
    field = lambda y: _log_time_rhs(tau_end, y, (flow, fargs, rtol, atol))
    return stiffness_ratio(field, y_end, dtau)


def _asym(flow, fargs, rtol, atol, tau_end, y_end):
    """Asymmetry of the parameter block of the Jacobian at ``y_end`` (``NaN`` unless ``flow.steady``)."""
    if not flow.steady:
        return jnp.full((), jnp.nan, tau_end.dtype)
    return asymmetry(lambda y: _log_time_rhs(tau_end, y, (flow, fargs, rtol, atol)), y_end)


def resolve_solver(solver: str, steady: bool) -> str:
    """The concrete solver name for ``solver`` (``"auto"`` decided by whether the flow has a
    finite minimiser: see :data:`SOLVERS`).

    **Raises:** :class:`gradflow.GradflowValueError` for a name not in :data:`SOLVERS`."""
    from .stiff import AUTO_STIFF

    if not isinstance(solver, str) or solver not in SOLVERS:
        raise bad_arg("solver", solver, f"one of {list(SOLVERS)}")
    if solver != "auto":
        return solver
    return AUTO_STIFF if steady else "dopri8"


def check_settings(t1, ts, rtol, atol, max_steps, solver, steady: bool):
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
    return t1, ts, log_taus(ts, t1), rtol, atol, max_steps, resolve_solver(solver, steady)
