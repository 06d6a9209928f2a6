"""The phase policy of ``solver="auto"``: which solver each unfinished lane runs in the next round.

A flow with a finite minimiser turns stiff once its fast modes have
converged: an explicit method's step is then limited by stability, ``h ≲ B/ρ`` (``ρ`` the
spectral radius of the log-time Jacobian ``∂F/∂y``, ``B ≈ 5.17`` the real-axis stability
boundary of Dopri8), and its step count grows ∝ ``ρ·τ``. The policy (Hairer & Wanner, *Solving
ODEs II*, Sec. IV.10: "stiffness detection" as in DOP853 / LSODA-style switching):

- every lane starts explicit (Dopri8) in short rounds of :data:`EXPLICIT_ROUND` steps;
- after each round that did not finish, the solve reports ``h·ρ`` (mean log-time step of the
  round × ``ρ`` at the round's end state, by power iteration with Jacobian–vector products:
  :func:`stiffness_ratio`); an explicit lane with ``h·ρ > STIFF_ON·B`` (its steps are
  stability-limited) switches to the implicit phase (:data:`IMPLICIT`, Rodas4 with solves
  preconditioned by a symmetric eigendecomposition, for gradient flows of at least
  :data:`EIGEN_MIN_STATE` parameters, whose Jacobian block is symmetric by :func:`asymmetry`,
  in rounds of :data:`gradflow._engine.rosenbrock.EIGEN_RODAS4_ROUND` steps, one
  eigendecomposition each; from :data:`KRYLOV_MIN_STATE` parameters on :data:`KRYLOV`, Rodas4
  with conjugate-gradient solves on Jacobian–vector products, no dense matrix; else :data:`IMPLICIT_FALLBACK`, Rodas4 with an LU factorisation per
  step: :mod:`gradflow._engine.rosenbrock`);
- an implicit lane whose ``h·ρ < STIFF_OFF·B`` (its steps are small enough for Dopri8 to be
  stable at no loss) switches back to explicit.

Lanes that finish in their first explicit round (e.g. non-stiff flows) never pay for the detector
beyond its ``POWER_ITERATIONS`` Jacobian–vector products at the end of that round.
"""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from . import rosenbrock as _rosenbrock
from .solvers import AUTO, code_of, spec

__all__ = ["EXPLICIT_ROUND", "phase_of_lanes", "stiffness_ratio", "DOPRI8_BOUNDARY", "blas_threads"]

EXPLICIT_ROUND = 64
"""``auto``: steps per explicit round (stiffness is checked after each)."""

DOPRI8_BOUNDARY = 5.17
"""Where Dopri8's stability region meets the negative real axis (computed from diffrax's
tableau: ``|R(−x)| = 1`` at ``x ≈ 5.167``)."""

STIFF_ON = 0.5
"""An explicit lane switches to the implicit phase when ``h·ρ > STIFF_ON·DOPRI8_BOUNDARY``."""

STIFF_OFF = 0.25
"""An implicit lane switches back to explicit when ``h·ρ < STIFF_OFF·DOPRI8_BOUNDARY``."""

POWER_ITERATIONS = 12
"""Power iterations (Jacobian–vector products) per estimate of ``ρ``."""

EIGEN = "ros34pw2-eigh"
"""The W-method with a symmetric eigendecomposition (:class:`gradflow._engine.rosenbrock.EigenW`)."""

EIGEN_RODAS4 = "rodas4-eigh"
"""Rodas4 with the exact Jacobian through solves preconditioned by a symmetric eigendecomposition
(:class:`gradflow._engine.rosenbrock.EigenRodas4`)."""

IMPLICIT = EIGEN_RODAS4
"""The implicit solver of ``auto`` for gradient flows (a symmetric Jacobian block, see
:func:`asymmetry`): Rodas4 (order 4) with the exact Jacobian applied by refined solves
preconditioned by one eigendecomposition of the Hessian per round of
:data:`gradflow._engine.rosenbrock.EIGEN_RODAS4_ROUND` steps (no factorisation per step, any
step size). Measured on the conditioning draws at ``d = 20`` (421 states, t1 = 1e6, rtol 1e-8):
``benchmarks/STIFF_d20.md``, against ROS34PW2 with the same eigendecomposition (``ros34pw2-eigh``,
order 3: 484 and 742 steps at κ = 20 and 50, over the 400 that Rodas4's order 4 stays under) and
Rodas4 with an LU factorisation per step."""

KRYLOV = "rodas4-krylov"
"""Rodas4 with the exact Jacobian through conjugate-gradient solves on Jacobian–vector products
(:class:`gradflow._engine.rosenbrock.KrylovRodas4`): the implicit solver of ``auto`` for gradient
flows of at least :data:`KRYLOV_MIN_STATE` parameters."""

KRYLOV_MIN_STATE = 2000
"""``auto`` runs :data:`KRYLOV` instead of :data:`IMPLICIT` for gradient flows of at least this
many parameters per lane. Measured (square family, t1 = 1e6, rtol 1e-8, warm, 2 cores, 2026-12-05):
:data:`KRYLOV` already wins from ``d = 20`` (421 states: 0.006 / 0.031 / 0.067 s against 0.017 /
0.145 / 0.258 s for ``rodas4-eigh`` at κ = 1 / 20 / 50, ``benchmarks/RESULTS.md``, "Stiff
flows"), and by far at ``d = 32`` (1,057: 0.013 against 0.33 s) and ``d = 64`` (4,161: 0.038
against 23.0 s; κ = 5, ``benchmarks/SCALE.md``); at ``d = 12`` (156) only within the noise (a
development measurement). The threshold stays at 2000 for now so that the paper's
conditioning draws (``d = 20``) keep the implicit path their committed figures were computed with;
flows of the size where a dense eigendecomposition costs seconds (``d ≳ 44``) get the Krylov path.
(Lowering it is safe by these measurements: on the ``d = 20``, ``32`` and ``64`` draws the Krylov
path is as close or closer to SciPy Radau than the dense ones.)"""

IMPLICIT_FALLBACK = "rodas4"
"""The implicit solver of ``auto`` for fields whose Jacobian is not symmetric (not a
gradient flow): Rodas4, a fresh Jacobian and LU factorisation every step."""

EIGEN_MIN_STATE = 128
"""``auto`` uses the solvers for gradient flows only (``gradient_only`` in
:data:`gradflow._engine.solvers.SOLVER_TABLE`) only for at least this many parameters per
lane. On small states a factorisation per step costs little (set when :data:`EIGEN`, of order 3,
was the implicit phase: conditioning draw d = 4, 21 states, κ = 20, t1 = 1e5, rtol 1e-8: 969 steps
with :data:`EIGEN`, under 400 with Rodas4)."""

SYMMETRY_TOL = _rosenbrock.SYMMETRY_TOL
"""A lane counts as a gradient flow when :func:`asymmetry` is at most this."""

EXPLICIT = "dopri8"
"""The explicit solver of ``auto``."""

BLAS_THREADS = 1
"""BLAS/LAPACK threads while an implicit solve runs (:func:`blas_threads`)."""


@functools.lru_cache(maxsize=1)
def _threadpools():
    # JAX's CPU LAPACK calls the OpenBLAS that SciPy ships, which loads only with SciPy's linalg.
    # The controller sees only the libraries loaded when it is built: load SciPy's first, or the
    # limit below does nothing in a process that has not imported scipy.linalg yet.
    import scipy.linalg  # noqa: F401
    import threadpoolctl

    return threadpoolctl.ThreadpoolController()


@contextlib.contextmanager
def blas_threads(solver_name: str):
    """Run the enclosed solve with :data:`BLAS_THREADS` BLAS threads if ``solver_name`` is ``auto``
    or an implicit solver (``implicit`` in :data:`gradflow._engine.solvers.SOLVER_TABLE`: it
    factorises dense matrices) (via ``threadpoolctl``; restored on exit); otherwise do nothing.

    On CPU, JAX's LU factorisations and triangular solves call the LAPACK/BLAS that SciPy ships
    (OpenBLAS). Its worker threads help little on the matrices of an implicit step (hundreds of
    states) and cost a great deal once the cores are shared: measured on the paper's
    conditioning draw at ``d = 20`` (421 states) on 2 cores at load ~5, one LU of ``W`` took 90 ms
    with OpenBLAS's default 2 threads and 5 ms with one; the κ = 2 run went from 0.32 s to 0.04 s.
    XLA's own kernels (matrix products, the field) are not affected."""
    if not (solver_name == AUTO or spec(solver_name).implicit):
        yield
        return
    with _threadpools().limit(limits=BLAS_THREADS, user_api="blas"):
        yield


def start_vector(shape, dtype, seed: int):
    """A fixed standard-normal draw for the detector's products, made with NumPy while tracing (a
    constant of the detector's program).

    **Arguments:** ``shape`` a tuple of ints; ``dtype`` a float dtype; ``seed`` an int.
    **Returns:** a JAX array of ``shape`` and ``dtype``: ``np.random.RandomState(seed)``'s
    ``standard_normal`` draw (NumPy's legacy generator, whose stream is frozen across NumPy
    versions, so the detector's verdicts do not move with a NumPy upgrade).

    Drawn with :func:`jax.random.normal` inside the program instead, its Threefry and
    inverse-erf kernels were most of the detector's XLA compile: 0.34 s against 0.12 s for the
    75-parameter deep linear net of ``benchmarks/first_call.py`` (paired runs, 2026-12-05); at
    2**18 states the detector still compiled faster with the constant (0.46 s against 0.59 s,
    development measurement)."""
    return jnp.asarray(np.random.RandomState(seed).standard_normal(shape), dtype)


def stiffness_ratio(field, y, dtau, iterations: int = POWER_ITERATIONS):
    """``dtau·ρ``, with ``ρ`` the spectral radius of ``∂field/∂y`` at ``y`` by power iteration.

    **Arguments:** ``field`` a function of the state pytree ``y`` (the log-time field at the
    current ``τ``); ``y`` a pytree of float arrays; ``dtau`` the step size (scalar).

    **Returns:** a scalar, ``dtau·‖J vₖ‖`` with ``vₖ`` the normalised ``k``-th power iterate
    from a fixed pseudo-random start (:func:`start_vector`; a lower bound of ``dtau·ρ`` for
    normal ``J``, the case of a gradient flow near a minimiser, where ``J`` is minus a Hessian).
    ``0`` for a zero field."""
    flat, unravel = ravel_pytree(y)
    jvp = lambda v: ravel_pytree(jax.jvp(field, (y,), (unravel(v),))[1])[0]
    v0 = start_vector(flat.shape, flat.dtype, 0)

    def body(_, carry):
        v, _ = carry
        w = jvp(v)
        n = jnp.linalg.norm(w)
        return jnp.where(n > 0, w / jnp.where(n > 0, n, 1.0), v), n

    _, rho = jax.lax.fori_loop(0, iterations, body, (v0 / jnp.linalg.norm(v0), jnp.zeros((), flat.dtype)))
    return dtau * rho


def asymmetry(field, y, seed: int = 1):
    """``‖(P − Pᵀ) v‖ / ‖P v‖`` for the parameter block ``P`` of ``∂field/∂y`` at ``y`` and a fixed
    pseudo-random ``v`` (:func:`start_vector` of ``seed``; one Jacobian–vector and one
    vector–Jacobian product): ``0`` up to round-off for a gradient flow (``P = −c·∇²L``), of
    order one for a generic non-gradient field
    (for a Gaussian ``v``, ``(P − Pᵀ) v = 0`` only if ``P`` is symmetric, with probability one).

    **Arguments:** ``field`` a function of the state ``y``; ``y`` either ``(params, quadratures)``
    (the engine's state: ``P`` is the block of ``params``; the quadratures, which the field does not
    read, only add rows) or any pytree (``P`` the whole Jacobian).

    **Returns:** a scalar ≥ 0 (``0`` where ``P v = 0``)."""
    split = isinstance(y, tuple) and len(y) == 2
    block = y[0] if split else y
    flat, unravel = ravel_pytree(block)
    v = unravel(start_vector(flat.shape, flat.dtype, seed))
    full = (lambda b: (b, jax.tree.map(jnp.zeros_like, y[1]))) if split else (lambda b: b)
    pick = (lambda out: out[0]) if split else (lambda out: out)
    jv = ravel_pytree(pick(jax.jvp(field, (y,), (full(v),))[1]))[0]
    _, vjp = jax.vjp(field, y)
    vj = ravel_pytree(pick(vjp(full(v))[0]))[0]
    n = jnp.linalg.norm(jv)
    return jnp.where(n > 0, jnp.linalg.norm(jv - vj) / jnp.where(n > 0, n, 1.0), 0.0)


def phase_of_lanes(solver: str, num_steps: np.ndarray, max_steps: int, stiff=None, h_rho=None, asym=None,
                   state_size: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The solver each lane runs next, how many steps it may take in that round, and its phase.

    **Arguments:** ``solver`` the run's solver name (``auto`` or a name of
    :data:`gradflow._engine.solvers.SOLVER_TABLE`); ``num_steps`` ``(k,)`` int, the steps each
    unfinished lane has taken so far (all phases); ``max_steps`` the run's budget; ``stiff``
    ``(k,)`` bool, the lanes' current phase (``True``: implicit; default all explicit); ``h_rho``
    ``(k,)`` float, ``h·ρ`` reported by each lane's last round (``NaN``: none yet); ``asym``
    ``(k,)`` float, the Jacobian's asymmetry at the end of that round (:func:`asymmetry`; default
    ``NaN``, unknown): implicit lanes run :data:`IMPLICIT` if it is at most :data:`SYMMETRY_TOL`
    (a gradient flow), else :data:`IMPLICIT_FALLBACK` (when :data:`IMPLICIT` is for gradient flows
    only; any other :data:`IMPLICIT` runs regardless); ``state_size`` the number of parameters per
    lane: below :data:`EIGEN_MIN_STATE` the fallback runs too, from :data:`KRYLOV_MIN_STATE` on
    :data:`KRYLOV` runs in place of :data:`IMPLICIT`.

    **Returns:** ``(codes, left, stiff)``: ``(k,)`` arrays of solver codes
    (:func:`gradflow._engine.solvers.spec` gives each one's row), of steps the lane may take next
    (``0``: the lane's budget is spent, it ends as ``max_steps``; the caller caps it at its round
    length) and of the updated phases.
    """
    num_steps = np.asarray(num_steps, dtype=np.int64)
    budget = np.maximum(max_steps - num_steps, 0)
    if solver != AUTO:
        return np.full(num_steps.shape, code_of(solver), np.int64), budget, np.zeros(num_steps.shape, bool)
    stiff = np.zeros(num_steps.shape, bool) if stiff is None else np.asarray(stiff, bool).copy()
    if h_rho is not None:
        h_rho = np.asarray(h_rho, dtype=np.float64)
        stiff = np.where(stiff, ~(h_rho < STIFF_OFF * DOPRI8_BOUNDARY), h_rho > STIFF_ON * DOPRI8_BOUNDARY)
    symmetric = np.zeros(num_steps.shape, bool) if asym is None else np.asarray(asym, np.float64) <= SYMMETRY_TOL
    symmetric = symmetric & (state_size >= EIGEN_MIN_STATE)
    eigen, fallback = spec(KRYLOV if state_size >= KRYLOV_MIN_STATE else IMPLICIT), spec(IMPLICIT_FALLBACK)
    implicit = np.where(symmetric | (not eigen.gradient_only), eigen.code, fallback.code)
    codes = np.where(stiff, implicit, code_of(EXPLICIT)).astype(np.int64)
    implicit_round = np.array([spec(c).auto_round or b for c, b in zip(implicit.ravel(), budget.ravel())],
                              dtype=np.int64).reshape(budget.shape)
    left = np.where(stiff, np.minimum(budget, implicit_round), np.minimum(budget, EXPLICIT_ROUND))
    return codes, left, stiff
