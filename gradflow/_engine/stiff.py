"""The phase policy of ``solver="auto"``: which solver each unfinished lane runs in the next round.

A flow with a finite minimiser turns stiff once its fast modes have
converged: an explicit method's step is then limited by stability, ``h ≲ B/ρ`` (``ρ`` the
spectral radius of the log-time Jacobian ``∂F/∂y``, ``B ≈ 5.17`` the real-axis stability
boundary of Dopri8), and its step count grows ∝ ``ρ·τ``. The policy (Hairer & Wanner, *Solving
ODEs II*, Sec. IV.10: "stiffness detection" as in DOP853 / LSODA-style switching):

- every lane starts explicit (``policy.explicit``, Dopri8) in short rounds of
  ``policy.explicit_round`` steps;
- after each round that did not finish, the solve reports ``h·ρ`` (mean log-time step of the
  round × ``ρ`` at the round's end state, by power iteration with Jacobian–vector products:
  :func:`stiffness_ratio`); an explicit lane with ``h·ρ > stiff_on·B`` (its steps are
  stability-limited) switches to the implicit phase: for gradient flows (a symmetric Jacobian
  block by :func:`asymmetry`) Rodas4 with solves preconditioned by a symmetric eigendecomposition
  (``policy.implicit``, one eigendecomposition per round), from ``policy.krylov_min_state``
  parameters on Rodas4 with conjugate-gradient solves on Jacobian–vector products
  (``policy.krylov``, no dense matrix), and from ``policy.stabilised_min_state`` parameters the
  stabilised explicit ``policy.stabilised`` (RKC) in its place while a step needs no more
  stages than RKC's cap (:func:`within_stage_cap`); otherwise and below
  ``policy.eigen_min_state`` parameters
  Rodas4 with an LU factorisation per step (``policy.fallback``;
  :mod:`gradflow._engine.rosenbrock`);
- an implicit lane whose ``h·ρ < stiff_off·B`` (its steps are small enough for Dopri8 to be
  stable at no loss) switches back to explicit.

Every threshold and choice is a field of the run's :class:`gradflow._engine.policy.AutoPolicy`
(default :data:`gradflow._engine.policy.DEFAULT_POLICY`). Lanes that finish in their first
explicit round (e.g. non-stiff flows) never pay for the detector beyond its
``policy.power_iterations`` Jacobian–vector products at the end of that round.
"""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from . import chebyshev
from .policy import DEFAULT_POLICY, AutoPolicy
from .solvers import AUTO, code_of, spec

__all__ = ["phase_of_lanes", "within_stage_cap", "stiffness_ratio", "asymmetry", "blas_threads", "start_vector"]

@functools.lru_cache(maxsize=1)
def _threadpools():
    # JAX's CPU LAPACK calls the OpenBLAS that SciPy ships, which loads only with SciPy's linalg.
    # The controller sees only the libraries loaded when it is built: load SciPy's first, or the
    # limit below does nothing in a process that has not imported scipy.linalg yet.
    import scipy.linalg  # noqa: F401
    import threadpoolctl

    return threadpoolctl.ThreadpoolController()


@contextlib.contextmanager
def blas_threads(solver_name: str, threads: int = DEFAULT_POLICY.blas_threads):
    """Run the enclosed solve with ``threads`` BLAS threads (the run's
    :attr:`~gradflow._engine.policy.AutoPolicy.blas_threads`) if ``solver_name`` is ``auto``
    or an implicit solver (``implicit`` in :data:`gradflow._engine.solvers.SOLVER_TABLE`: it
    factorises dense matrices) (via ``threadpoolctl``; restored on exit); otherwise do nothing.

    On CPU, JAX's LU factorisations and triangular solves call the LAPACK/BLAS that SciPy ships
    (OpenBLAS). Its worker threads help little on the matrices of an implicit step (hundreds of
    states) and cost a great deal once the cores are shared: measured on the paper's
    conditioning draw at ``d = 20`` (421 states) on 2 cores at load ~5, one LU of ``W`` took 90 ms
    with OpenBLAS's default 2 threads and 5 ms with one; the κ = 2 run went from 0.32 s to 0.04 s
    (a development measurement, ``benchmarks/NOTES.md``).
    XLA's own kernels (matrix products, the field) are not affected."""
    if not (solver_name == AUTO or spec(solver_name).implicit):
        yield
        return
    with _threadpools().limit(limits=threads, user_api="blas"):
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
    75-parameter deep linear net of ``benchmarks/first_call.py`` (paired runs by hand; the
    detector's compile with the constant is a row of ``benchmarks/FIRST_CALL.md``'s program
    table); at 2**18 states the detector still compiled faster with the constant (0.46 s against
    0.59 s, development measurement)."""
    return jnp.asarray(np.random.RandomState(seed).standard_normal(shape), dtype)


def stiffness_ratio(field, y, dtau, iterations: int = DEFAULT_POLICY.power_iterations):
    """``dtau·ρ``, with ``ρ`` the spectral radius of ``∂field/∂y`` at ``y`` by power iteration.

    **Arguments:** ``field`` a function of the state pytree ``y`` (the log-time field at the
    current ``τ``); ``y`` a pytree of float arrays; ``dtau`` the step size (scalar);
    ``iterations`` the number of power iterations (a Python int, static).

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


def within_stage_cap(h_rho, rtol) -> np.ndarray:
    """Whether an RKC step at ``h·ρ = h_rho`` (NumPy ``(k,)``; ``NaN``, no measurement yet, counts
    as within) needs no substeps at the run's ``rtol``: RKC's own rule
    (:func:`gradflow._engine.chebyshev.stages_for` of ``SAFETY·h·ρ`` under
    :func:`gradflow._engine.chebyshev.stage_cap`), so ``1 + √(1 + 1.54·1.2·h·ρ)`` stages at most
    the cap ``√(rtol/(10 ε))``. Returns a ``(k,)`` bool array."""
    h_rho = np.nan_to_num(np.asarray(h_rho, np.float64), nan=0.0)
    k, _ = chebyshev.stages_for(chebyshev.SAFETY * h_rho, chebyshev.stage_cap(float(rtol)))
    return np.asarray(k) == 1


def phase_of_lanes(solver: str, num_steps: np.ndarray, max_steps: int, stiff=None, h_rho=None, asym=None,
                   state_size: int = 0, policy: AutoPolicy = DEFAULT_POLICY, rtol: float = 1e-8
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The solver each lane runs next, how many steps it may take in that round, and its phase.

    **Arguments:** ``solver`` the run's solver name (``auto`` or a name of
    :data:`gradflow._engine.solvers.SOLVER_TABLE`); ``num_steps`` ``(k,)`` int, the steps each
    unfinished lane has taken so far (all phases); ``max_steps`` the run's budget; ``stiff``
    ``(k,)`` bool, the lanes' current phase (``True``: implicit; default all explicit); ``h_rho``
    ``(k,)`` float, ``h·ρ`` reported by each lane's last round (``NaN``: none yet); ``asym``
    ``(k,)`` float, the Jacobian's asymmetry at the end of that round (:func:`asymmetry`; default
    ``NaN``, unknown): implicit lanes run ``policy.implicit`` if it is at most
    ``policy.symmetry_tol`` (a gradient flow), else ``policy.fallback`` (when ``policy.implicit``
    is for gradient flows only; any other implicit solver runs regardless); ``state_size`` the
    number of parameters per lane: below ``policy.eigen_min_state`` the fallback runs too, from
    ``policy.krylov_min_state`` on ``policy.krylov`` runs in place of ``policy.implicit``, and from
    ``policy.stabilised_min_state`` on a symmetric lane runs ``policy.stabilised`` instead while
    its ``h_rho`` is :func:`within_stage_cap` at ``rtol`` (the run's relative tolerance);
    ``policy`` the run's :class:`gradflow._engine.policy.AutoPolicy` (used
    only for ``auto``).

    **Returns:** ``(codes, left, stiff)``: ``(k,)`` arrays of solver codes
    (:func:`gradflow._engine.solvers.spec` gives each one's row), of steps the lane may take next
    (``0``: the lane's budget is spent, it ends as ``max_steps``; the caller caps it at its round
    length) and of the updated phases.
    """
    num_steps = np.asarray(num_steps, dtype=np.int64)
    budget = np.maximum(max_steps - num_steps, 0)
    if solver != AUTO:
        return np.full(num_steps.shape, code_of(solver), np.int64), budget, np.zeros(num_steps.shape, bool)
    p = policy
    stiff = np.zeros(num_steps.shape, bool) if stiff is None else np.asarray(stiff, bool).copy()
    if h_rho is not None:
        h_rho = np.asarray(h_rho, dtype=np.float64)
        stiff = np.where(stiff, ~(h_rho < p.stiff_off * p.explicit_boundary), h_rho > p.stiff_on * p.explicit_boundary)
    symmetric = np.zeros(num_steps.shape, bool) if asym is None else np.asarray(asym, np.float64) <= p.symmetry_tol
    symmetric = symmetric & (state_size >= p.eigen_min_state)
    eigen, fallback = spec(p.krylov if state_size >= p.krylov_min_state else p.implicit), spec(p.fallback)
    implicit = np.where(symmetric | (not eigen.gradient_only), eigen.code, fallback.code)
    if state_size >= p.stabilised_min_state:
        # a stiff gradient flow whose steps need no more stages than the cap: the stabilised
        # explicit method (the policy's ``stabilised`` field: the argument)
        within = np.ones(num_steps.shape, bool) if h_rho is None else within_stage_cap(h_rho, rtol)
        implicit = np.where(symmetric & within, spec(p.stabilised).code, implicit)
    codes = np.where(stiff, implicit, code_of(p.explicit)).astype(np.int64)
    implicit_round = np.array([spec(c).auto_round or b for c, b in zip(implicit.ravel(), budget.ravel())],
                              dtype=np.int64).reshape(budget.shape)
    left = np.where(stiff, np.minimum(budget, implicit_round), np.minimum(budget, p.explicit_round))
    return codes, left, stiff
