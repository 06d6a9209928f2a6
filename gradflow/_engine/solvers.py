"""Every solver the engine runs, in one table: its public name, the integer code lanes carry, how
it is built and which step-size controller it runs under.

``solver="auto"`` is not a solver but the phase policy of :mod:`gradflow._engine.stiff`, which
picks one of these per lane and round; its lanes carry these codes (integer arrays), never names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import diffrax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from .._errors import bad_arg
from . import chebyshev, rosenbrock
from .erk import UnrolledDopri8

__all__ = ["AUTO", "Controller", "PID", "PID_IMPLICIT", "HOLD", "SolverEntry", "SOLVER_TABLE", "SOLVERS", "StepBudget", "spec", "code_of", "make_solver",
           "make_controller", "resolve_solver"]

AUTO = "auto"
"""The phase policy (:mod:`gradflow._engine.stiff`): Dopri8 with stiffness detection, switching
stiff lanes to an implicit method of this table and back."""


def _tsit5(rtol, atol, batched):
    return diffrax.Tsit5()


def _dopri5(rtol, atol, batched):
    return diffrax.Dopri5()


def _dopri8(rtol, atol, batched):
    # ``batched``: the solve runs under ``vmap`` over many lanes (see
    # :data:`gradflow._engine.batch.UNROLL_LANES`): diffrax's Dopri8 with its stage loop written
    # out, the same method, ~1.8× faster per step at 1024 lanes; otherwise diffrax's own loop,
    # which traces the field once instead of 13 times (it compiles faster).
    return UnrolledDopri8() if batched else diffrax.Dopri8()


def _kvaerno5(rtol, atol, batched):
    # Newton (a fresh Jacobian per iteration) at the step controller's tolerances, stopped by its
    # convergence rate (Hairer–Wanner, κ = 1e-2) rather than by the size of the last update: once
    # h·‖∂f/∂y‖ is large, round-off in the update exceeds any tight tolerance, so an update-size
    # test fails, steps are rejected and the solve stalls.
    return diffrax.Kvaerno5(root_finder=optx.Newton(rtol=rtol, atol=atol, cauchy_termination=False))


def _rodas4(rtol, atol, batched):
    return rosenbrock.Rodas4()


def _ros34pw2(rtol, atol, batched):
    return rosenbrock.Ros34pw2()


def _ros34pw2_eigh(rtol, atol, batched):
    return rosenbrock.EigenW()


def _rodas4_eigh(rtol, atol, batched):
    return rosenbrock.EigenRodas4(iterations=rosenbrock.REFINE)


def _rodas4_krylov(rtol, atol, batched):
    # the inner solves are tied to the step controller's tolerances (traced arrays in the engine)
    return rosenbrock.KrylovRodas4(1e-8 if rtol is None else rtol, 1e-10 if atol is None else atol)


def _rkc(rtol, atol, batched):
    # the stage cap follows the step controller's rtol (round-off, :func:`chebyshev.stage_cap`)
    return chebyshev.RKC(1e-8 if rtol is None else rtol)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Controller:
    """The step-size controller a solver runs under: diffrax's :class:`diffrax.PIDController`
    with proportional and integral coefficients ``pcoeff``, ``icoeff``, wrapped in
    :class:`gradflow._engine.rosenbrock.HoldStep` when ``hold`` (the step size is kept while it
    would grow by a factor of at most ``HOLD_MAX``, so a W-method reuses its matrix)."""

    pcoeff: float = 0.0
    icoeff: float = 1.0
    hold: bool = False

    def build(self, rtol, atol, dtmin):
        """The controller at ``rtol``, ``atol`` that stalls (rather than forcing a step) below ``dtmin``."""
        ctrl = diffrax.PIDController(rtol=rtol, atol=atol, pcoeff=self.pcoeff, icoeff=self.icoeff, dtmin=dtmin,
                                     force_dtmin=False)
        return rosenbrock.HoldStep(ctrl, rosenbrock.HOLD_MAX) if self.hold else ctrl


PID = Controller()
"""diffrax's default PID coefficients (``pcoeff = 0``, ``icoeff = 1``: an integral controller),
for explicit methods."""

PID_IMPLICIT = Controller(pcoeff=0.3, icoeff=0.4)
"""The PI coefficients Hairer & Wanner recommend for implicit methods (``pcoeff = 0.3``,
``icoeff = 0.4``; diffrax's documentation suggests the same)."""

HOLD = Controller(pcoeff=0.3, icoeff=0.4, hold=True)
""":data:`PID_IMPLICIT` holding the step size while it would barely grow (ROS34PW2 reuses ``W⁻¹``)."""


@dataclasses.dataclass(frozen=True)
class SolverEntry:
    """One row of :data:`SOLVER_TABLE`.

    ``name``: the public ``solver`` name; ``code``: the integer lanes carry (> 0); ``make(rtol,
    atol, batched)``: the diffrax solver; ``controller``: its :class:`Controller` (:data:`PID`,
    :data:`PID_IMPLICIT` or :data:`HOLD`); ``implicit``:
    it factorises or decomposes dense matrices (BLAS threads limited,
    :func:`gradflow._engine.stiff.blas_threads`); ``gradient_only``: it assumes a symmetric
    parameter block of the Jacobian (a gradient flow, :func:`gradflow._engine.stiff.asymmetry`);
    ``auto_round``: its round length under ``auto`` (``None``: the step budget)."""

    name: str
    code: int
    make: Callable
    controller: Controller = PID
    implicit: bool = False
    gradient_only: bool = False
    auto_round: int | None = None


SOLVER_TABLE = (
    SolverEntry("tsit5", 1, _tsit5),
    SolverEntry("dopri5", 2, _dopri5),
    SolverEntry("dopri8", 3, _dopri8),
    SolverEntry("kvaerno5", 4, _kvaerno5, PID_IMPLICIT, implicit=True),
    SolverEntry("rodas4", 5, _rodas4, PID_IMPLICIT, implicit=True),
    SolverEntry("ros34pw2", 6, _ros34pw2, HOLD, implicit=True),
    SolverEntry("ros34pw2-eigh", 7, _ros34pw2_eigh, PID_IMPLICIT, implicit=True, gradient_only=True,
               auto_round=rosenbrock.EIGEN_ROUND),
    SolverEntry("rodas4-eigh", 8, _rodas4_eigh, PID_IMPLICIT, implicit=True, gradient_only=True,
               auto_round=rosenbrock.EIGEN_RODAS4_ROUND),
    SolverEntry("rodas4-krylov", 9, _rodas4_krylov, PID_IMPLICIT, implicit=True, gradient_only=True),
    SolverEntry("rkc", 10, _rkc, gradient_only=True),
)
"""The solvers, by code. ``tsit5``, ``dopri5``, ``dopri8``: diffrax's explicit methods (Dopri8:
order 8, the explicit phase of ``auto``). ``kvaerno5``: diffrax's ESDIRK with a Newton root
finder (a fresh Jacobian per iteration). ``rodas4``: Rosenbrock, L-stable, order 4, one Jacobian
and one LU factorisation per step (the implicit phase of ``auto`` for non-gradient fields and
small states). ``ros34pw2``: the Rosenbrock–W method ROS34PW2 (order 3) with a dense inverse
reused while its step size is held (fewer Jacobians, ~3× the steps of ``rodas4``).
``ros34pw2-eigh``: ROS34PW2 with ``(I/(hγ) − J)⁻¹`` from one symmetric eigendecomposition of the
Hessian per solve (about twice the steps of ``rodas4-eigh``). ``rodas4-eigh``: Rodas4 whose stage
systems with the exact Jacobian are solved by a few sweeps preconditioned by that
eigendecomposition (no factorisation per step; the implicit phase of ``auto`` for gradient flows
of at least ``AutoPolicy.eigen_min_state`` (128) parameters). ``rodas4-krylov``: Rodas4
whose stage systems with the exact Jacobian are solved by conjugate gradients on Jacobian–vector
products to a fraction of the step tolerance (no ``n × n`` matrix, memory ``O(n)``; the stiff
phase of ``auto`` for gradient flows of at least ``AutoPolicy.krylov_min_state`` (2000)
parameters once ``rkc``'s steps would need more stages than its cap). See :mod:`gradflow._engine.rosenbrock`. ``rkc``: the stabilised explicit
Runge–Kutta–Chebyshev method RKC (order 2), its stage number chosen every step from a power
iteration on Jacobian–vector products, for large gradient flows of moderate stiffness and
accuracy (no linear algebra, memory ``O(n)``; the stiff phase of ``auto`` for gradient flows of
at least ``AutoPolicy.stabilised_min_state`` (2000) parameters while its steps need at most its
stage cap; :mod:`gradflow._engine.chebyshev`)."""

_BY_NAME = {s.name: s for s in SOLVER_TABLE}
_BY_CODE = {s.code: s for s in SOLVER_TABLE}

SOLVERS = (AUTO,) + tuple(s.name for s in SOLVER_TABLE)
"""Accepted ``solver`` names: ``auto`` (the default) and every name of :data:`SOLVER_TABLE`.

``auto``, for every flow: ``dopri8`` (explicit, 8th order) with stiffness detection. A flow
without a finite minimiser (e.g. the logistic teacher) is non-stiff in log time and stays on
``dopri8``; a flow with a finite minimiser (square loss, soft-target cross-entropy, most users'
losses) becomes stiff once the fast modes have converged (explicit steps are then
stability-limited, their number ∝ t1): ``auto`` runs ``dopri8`` in short rounds, estimates after
each round whether its steps were stability-limited (``h·ρ`` against Dopri8's stability boundary)
and switches such a lane to an implicit method, and back to ``dopri8`` when the implicit steps
get small (:mod:`gradflow._engine.stiff`). The implicit method: for gradient flows (the
Jacobian's parameter block symmetric, :func:`gradflow._engine.stiff.asymmetry`) with at least
``AutoPolicy.stabilised_min_state`` (2000) parameters ``rkc`` while its steps need at most its
stage cap, past it ``rodas4-krylov`` (from ``AutoPolicy.krylov_min_state``, 2000); ``rodas4-eigh``
with at least ``AutoPolicy.eigen_min_state`` (128); ``rodas4`` otherwise.
Implicit solves run with one BLAS thread (:func:`gradflow._engine.stiff.blas_threads`). The
metadata's ``solver`` field records the name asked for (``auto`` included)."""


def spec(key: str | int | np.integer) -> SolverEntry:
    """The row of :data:`SOLVER_TABLE` with this name or code (``KeyError`` if none)."""
    return _BY_CODE[int(key)] if not isinstance(key, str) else _BY_NAME[key]


def code_of(name: str) -> int:
    """The integer code of a concrete solver name."""
    return _BY_NAME[name].code


def make_solver(code: int | np.integer, rtol=None, atol=None, batched: bool = False):
    """The diffrax solver of code ``code`` (``batched``: the solve is traced under ``vmap``)."""
    return spec(code).make(rtol, atol, batched)


def make_controller(code: int | np.integer, rtol, atol, dtmin, budget=None, tau1=None):
    """The step-size controller of code ``code``: a :class:`diffrax.PIDController` at ``rtol``,
    ``atol`` that stalls (rather than forcing a step) below ``dtmin``; with ``budget`` (an integer
    array) it ends the solve after that many steps (:class:`StepBudget`, ``tau1`` the end of the
    solve)."""
    ctrl = spec(code).controller.build(rtol, atol, dtmin)
    if budget is not None and tau1 is None:
        raise ValueError("make_controller: a step budget needs tau1, the end of the solve")
    return ctrl if budget is None else StepBudget(ctrl, budget, tau1)


class StepBudget(rosenbrock.WrappingController):
    """``inner``'s step-size control, and the solve ended (result ``max_steps_reached``) once
    ``budget`` steps (accepted and rejected) are taken short of the end ``tau1``.

    This is the solve loop's own ``max_steps`` as a runtime value: the solve ends after the same
    step, in the same state and with the same result as under ``max_steps = budget`` (an event
    that fires at that step still wins), while ``max_steps`` itself, a Python integer (the bound
    of the while loop, :func:`gradflow._engine.loop.solve`, as in ``diffeqsolve``), stays one
    constant (the longest round). So rounds of any length run one
    compiled program per solver instead of one per length (the engine's first round is shorter
    than the later ones).

    **Arguments:** ``inner`` the step-size controller that decides the steps; ``budget`` the most
    steps, an integer scalar array (traced); ``tau1`` the end of the solve, a float scalar in the
    solve's time variable (the engine's log time ``τ = log(1 + t)``): a step that reaches it ends
    the solve ``successful`` even on the budget's last step."""

    inner: diffrax.AbstractAdaptiveStepSizeController
    budget: Any
    tau1: Any

    def wrap(self, direction):
        return StepBudget(self.inner.wrap(direction), self.budget, self.tau1 * direction)

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        tnext, state = self.inner.init(terms, t0, t1, y0, dt0, args, func, error_order)
        return tnext, (state, jnp.zeros((), jnp.asarray(self.budget).dtype))

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        state, taken = controller_state
        keep, next_t0, next_t1, made_jump, state, result = self.inner.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, state)
        taken = taken + 1
        spent = diffrax.is_okay(result) & (taken >= self.budget) & ~(keep & (next_t0 >= self.tau1))
        result = diffrax.RESULTS.where(spent, diffrax.RESULTS.max_steps_reached, result)
        return keep, next_t0, next_t1, made_jump, (state, taken), result


def resolve_solver(solver: str) -> str:
    """``solver`` checked: ``"auto"`` or a concrete name of :data:`SOLVER_TABLE`.

    **Raises:** :class:`gradflow.GradflowValueError` for a name not in :data:`SOLVERS`."""
    if not isinstance(solver, str) or solver not in SOLVERS:
        raise bad_arg("solver", solver, f"one of {list(SOLVERS)}")
    return solver
