"""Rosenbrock solvers for diffrax, for the stiff phase of ``solver="auto"``: one class,
:class:`Rosenbrock`, driven by a :class:`Tableau` (the method's coefficients) and a linear-solve
strategy (how ``W⁻¹ r`` is applied, ``W = I/(hγ) − J``). The named solvers:

- :func:`EigenW` (``solver="ros34pw2-eigh"``): ROS34PW2 whose ``W⁻¹`` is two products with the
  eigenvectors of the Hessian, from one ``jnp.linalg.eigh`` per solve (:class:`Eigen`), for any
  step size and any time;
- :func:`EigenRodas4` (``solver="rodas4-eigh"``, the implicit phase of ``auto`` for gradient
  flows): RODAS4 with the exact Jacobian through refined solves preconditioned by the same
  eigendecomposition (:class:`EigenRefined`; order 4, no factorisation per step);
- :func:`KrylovRodas4` (``solver="rodas4-krylov"``, the implicit phase of ``auto`` for gradient
  flows of many parameters): RODAS4 with the exact Jacobian, each stage system solved by
  conjugate gradients on Jacobian–vector products (:class:`Krylov`; no matrix of size ``n × n``,
  memory ``O(n)``);
- :func:`Rodas4` (``solver="rodas4"``, the implicit phase of ``auto`` for other fields and
  small states): order 4, a fresh Jacobian and LU factorisation every step (:class:`DenseLU`);
- :func:`Ros34pw2` (``solver="ros34pw2"``): a Rosenbrock–W method of order 3 that reuses its
  Jacobian and ``W⁻¹`` over many steps (:class:`HeldInverse`), with the step-size hold of
  :class:`HoldStep` (why ``auto`` does not use it: :class:`gradflow._engine.policy.AutoPolicy`, ``implicit``).

Why not diffrax's own implicit solvers: diffrax 0.7.2 has no Rosenbrock method, and its
implicit Runge–Kutta methods (``Kvaerno5`` etc.) solve every stage with an ``optimistix`` root
finder that builds its Jacobian afresh per stage (``VeryChord``) or per Newton iteration
(``Newton``). On the conditioning draws of the paper (Fig. 12, ``d = 20``: 421 states) that is
~20 dense Jacobians and LU factorisations per step (measured: ``Kvaerno5`` + Newton 85 steps in
14 s for κ = 1; ``Kvaerno5`` + ``VeryChord`` 1211 steps in 135 s). A Rosenbrock step needs one
Jacobian (``jax.jacfwd``, one batched Jacobian–vector product), one LU factorisation of
``I/(hγ) − J`` and six triangular solves, and no Newton iteration (so no convergence failure).

The method is Hairer & Wanner's RODAS4 (*Solving Ordinary Differential Equations II*, 2nd ed.,
Springer 1996, Sec. IV.7, the ``RODAS`` code; coefficients as in OrdinaryDiffEq.jl's
``Rodas4Tableau``), in the form (``W = I/(hγ) − J``, ``J = ∂f/∂y`` and ``f_t = ∂f/∂t`` at
the step start; Sec. IV.7, Eq. 7.25, the form of every :class:`Tableau`)::

    u_i = y0 + Σ_{j<i} a_ij k_j,   W k_i = f(t0 + c_i h, u_i) + h d_i f_t + Σ_{j<i} (C_ij / h) k_j,
    y1 = y0 + Σ_j m_j k_j,   error estimate Σ_j e_j k_j
    (RODAS4: m_j = a_6j for j < 6 and m_6 = 1, so y1 = u_6 + k_6; error estimate k_6).

Dense output (every method): cubic Hermite from ``f(y0)`` and ``f(y1)`` (one extra field evaluation per step).
"""

from __future__ import annotations

import abc

import dataclasses
from typing import ClassVar

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import lineax as lx
import numpy as np
from jax.flatten_util import ravel_pytree

from . import _pinned

__all__ = ["Tableau", "RODAS4", "ROS34PW2", "Rosenbrock", "LinearSolve", "DenseLU", "HeldInverse", "Eigen", "EigenRefined",
           "Krylov", "krylov_solve", "Rodas4", "Ros34pw2", "EigenW", "EigenRodas4", "KrylovRodas4", "WrappingController", "HoldStep", "HOLD_MAX",
           "MAX_AGE", "REFINE", "KRYLOV_FRACTION", "KRYLOV_FLOOR", "KRYLOV_MAX_STEPS"]

# --- the methods' coefficients ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Tableau:
    """A Rosenbrock method in the form of this module's docstring (Hairer & Wanner 1996,
    Sec. IV.7, Eq. 7.25), ``s`` stages; tuples, so that a solver holding it is hashable.

    ``gamma`` the diagonal ``γ`` (``W = I/(hγ) − J``); ``a`` ``(s, s)`` strictly lower, the stage
    arguments ``y0 + Σ a_ij k_j``; ``C`` ``(s, s)`` strictly lower, ``Σ (C_ij / h) k_j`` on the
    right; ``c`` ``(s,)`` stage times; ``d`` ``(s,)``, ``h d_i ∂f/∂t`` on the right; ``m`` ``(s,)``
    the solution ``y1 = y0 + Σ m_j k_j``; ``e`` ``(s,)`` the error estimate ``Σ e_j k_j``;
    ``order`` and ``error_order`` (the embedded method's order + 1, as diffrax counts it)."""

    name: str
    gamma: float
    a: tuple
    C: tuple
    c: tuple
    d: tuple
    m: tuple
    e: tuple
    order: int
    error_order: int

    @classmethod
    def of(cls, name, gamma, a, C, c, d, m, e, order, error_order):
        rows = lambda x: tuple(tuple(float(v) for v in row) for row in np.asarray(x))
        vec = lambda x: tuple(float(v) for v in np.asarray(x))
        return cls(name, float(gamma), rows(a), rows(C), vec(c), vec(d), vec(m), vec(e), order, error_order)


_GAMMA = 0.25
_A = np.array([
    [0.0, 0.0, 0.0, 0.0, 0.0],
    [1.544, 0.0, 0.0, 0.0, 0.0],
    [0.9466785280815826, 0.2557011698983284, 0.0, 0.0, 0.0],
    [3.314825187068521, 2.896124015972201, 0.9986419139977817, 0.0, 0.0],
    [1.221224509226641, 6.019134481288629, 12.53708332932087, -0.687886036105895, 0.0],
    [1.221224509226641, 6.019134481288629, 12.53708332932087, -0.687886036105895, 1.0],
])
_C = np.array([
    [0.0, 0.0, 0.0, 0.0, 0.0],
    [-5.6688, 0.0, 0.0, 0.0, 0.0],
    [-2.430093356833875, -0.2063599157091915, 0.0, 0.0, 0.0],
    [-0.1073529058151375, -9.594562251023355, -20.47028614809616, 0.0, 0.0],
    [7.496443313967647, -10.24680431464352, -33.99990352819905, 11.7089089320616, 0.0],
    [8.083246795921522, -7.981132988064893, -31.52159432874371, 16.31930543123136, -6.058818238834054],
])
_CT = (0.0, 0.386, 0.21, 0.63, 1.0, 1.0)
_D = (0.25, -0.1043, 0.1035, -0.0362, 0.0, 0.0)

RODAS4 = Tableau.of(
    "rodas4", _GAMMA,
    a=np.pad(_A, ((0, 0), (0, 1))),  # six stages: u_i for i = 1..6 (u_1 = y0)
    C=np.pad(_C, ((0, 0), (0, 1))),
    c=_CT, d=_D,
    m=np.append(_A[5], 1.0),  # y1 = u_6 + k_6
    e=np.eye(6)[5],  # error estimate k_6
    order=4, error_order=4,
)
"""RODAS4 (Hairer & Wanner 1996, Sec. IV.7; coefficients as in OrdinaryDiffEq.jl's
``Rodas4Tableau``): six stages, order 4, embedded order 3, L-stable, stiffly accurate."""

# ROS34PW2 (J. Rang, L. Angermann, "New Rosenbrock W-methods of order 3 for partial
# differential algebraic equations of index 1", BIT 45 (2005) 761–787), in its published form
#   (I − hγJ) k_i = h f(y0 + Σ α_ij k_j) + hJ Σ_{j<i} γ_ij k_j,   y1 = y0 + Σ b_i k_i,
# transformed once here to the form used below (Hairer & Wanner 1996, Sec. IV.7, Eq. 7.25).
_W_GAMMA = 0.435866521508459
_W_ALPHA = np.array([
    [0.0, 0.0, 0.0, 0.0],
    [0.87173304301691801, 0.0, 0.0, 0.0],
    [0.84457060015369423, -0.11299064236484185, 0.0, 0.0],
    [0.0, 0.0, 1.0, 0.0],
])
_W_GAMMAS = np.array([
    [_W_GAMMA, 0.0, 0.0, 0.0],
    [-0.87173304301691801, _W_GAMMA, 0.0, 0.0],
    [-0.90338057013044082, 0.054180672388095326, _W_GAMMA, 0.0],
    [0.24212380706095346, -1.2232505839045147, 0.54526025533510214, _W_GAMMA],
])
_W_B = np.array([0.24212380706095346, -1.2232505839045147, 1.5452602553351020, 0.435866521508459])
_W_BHAT = np.array([0.37810903145819369, -0.096042292212423178, 0.5, 0.21793326075422950])
_W_GINV = np.linalg.inv(_W_GAMMAS)


def _clean(x):
    return np.where(np.abs(x) < 1e-14, 0.0, x)  # exact zeros where the transformation leaves round-off


ROS34PW2 = Tableau.of(
    "ros34pw2", _W_GAMMA,
    a=_clean(np.tril(_W_ALPHA @ _W_GINV, -1)),                          # stage arguments y0 + Σ a_ij U_j
    C=_clean(np.tril(np.diag(1 / np.diag(_W_GAMMAS)) - _W_GINV, -1)),   # Σ (C_ij / h) U_j on the right
    c=_clean(_W_ALPHA.sum(axis=1)),                                     # stage times c_i
    d=_clean(_W_GAMMAS.sum(axis=1)),                                    # h d_i ∂f/∂t on the right
    m=_clean(_W_B @ _W_GINV),                                           # y1 = y0 + Σ m_j U_j
    e=_clean((_W_B - _W_BHAT) @ _W_GINV),                               # error estimate Σ e_j U_j (3 − 2)
    order=3, error_order=3,
)
"""ROS34PW2 (Rang & Angermann 2005): four stages, order 3 (embedded order 2), L-stable and
stiffly accurate, a W-method (its order conditions hold for any matrix in place of ``J``)."""


def _combine(coeffs, ks, start=None):
    """``start + Σ_j coeffs[j]·ks[j]`` over the nonzero coefficients (``start`` may be ``None``)."""
    terms = [k if c == 1.0 else c * k for c, k in zip(coeffs, ks) if c != 0.0]
    total = sum(terms[1:], terms[0]) if terms else None
    if start is None:
        return total if total is not None else jnp.zeros_like(ks[0])
    return start if total is None else start + total


def _stages(tab: Tableau, f, t0, t1, y0, flat0, unravel, f0, ft, solve):
    """The stages of the method ``tab`` in the form of the module docstring, with ``solve(r)``
    returning ``(W⁻¹ r, record)`` (:meth:`LinearSolve.prepare`). Returns ``(y1, error estimate,
    dense_info, records)``: pytrees like ``y0``, and the list of the stage solves' records."""
    h = t1 - t0
    ks, records = [], []
    for i in range(len(tab.c)):
        fi = f0 if i == 0 else f(t0 + tab.c[i] * h, _combine(tab.a[i][:i], ks, flat0))
        rhs = fi + (h * tab.d[i]) * ft if tab.d[i] != 0.0 else fi
        if i > 0 and any(tab.C[i][:i]):
            rhs = rhs + _combine(tab.C[i][:i], ks) / h
        k, record = solve(rhs)
        ks.append(k)
        records.append(record)
    return (*_solution(tab, f, t1, y0, flat0, unravel, f0, h, ks), records)


def _solution(tab: Tableau, f, t1, y0, flat0, unravel, f0, h, ks):
    """``(y1, error estimate, dense_info)`` from the stages ``ks`` (a list of flat vectors)."""
    # a trailing unit weight (RODAS4: y1 = u_6 + k_6) is added last, as the published form reads
    unit_last = tab.m[-1] == 1.0
    n = len(ks) - unit_last
    flat1 = _combine(tab.m[:n], ks[:n], flat0)
    if unit_last:
        flat1 = flat1 + ks[-1]
    f1 = f(t1, flat1)
    y1 = unravel(flat1)
    return y1, unravel(_combine(tab.e, ks)), dict(y0=y0, y1=y1, k0=unravel(h * f0), k1=unravel(h * f1))


def _stages_looped(tab: Tableau, f, t0, t1, y0, flat0, unravel, f0, ft, solve):
    """:func:`_stages` with the stages after the first in one ``lax.scan``: the field and the
    stage solve are traced twice (the first stage and the loop body) instead of once per stage,
    so the compiled step is smaller when the field is a large model (a transformer's gradient
    and its linearisation in every stage solve). The arithmetic is that of :func:`_stages` in the
    same order (coefficients that are zero or one add and multiply exactly), so the two agree to
    round-off (XLA may fuse the loop differently; ``tests/test_stiff.py`` checks one step of every
    strategy). The stage solves' records come out of the loop stacked along a leading stage axis
    (the records: the first stage's, then the loop's)."""
    h = t1 - t0
    s = len(tab.c)
    a, C = jnp.asarray(tab.a, flat0.dtype), jnp.asarray(tab.C, flat0.dtype)
    c, d = jnp.asarray(tab.c, jnp.result_type(h)), jnp.asarray(tab.d, jnp.result_type(h))  # as floats meet h
    has_C = jnp.asarray([any(row[:i]) for i, row in enumerate(tab.C)])
    rhs0 = f0 + (h * tab.d[0]) * ft if tab.d[0] != 0.0 else f0
    k0, record0 = solve(rhs0)
    ks = jnp.zeros((s,) + flat0.shape, flat0.dtype).at[0].set(k0)

    def weighted(coeffs, ks, i):
        # Σ_{j<i} coeffs_j k_j from zero, term by term in the order of :func:`_combine`
        total = jnp.zeros_like(flat0)
        for j in range(s - 1):
            total = total + jnp.where((j < i) & (coeffs[j] != 0.0), coeffs[j] * ks[j], 0.0)
        return total

    def stage(ks, i):
        fi = f(t0 + c[i] * h, flat0 + weighted(a[i], ks, i))
        rhs = jnp.where(d[i] != 0.0, fi + (h * d[i]) * ft, fi)
        rhs = jnp.where(has_C[i], rhs + weighted(C[i], ks, i) / h, rhs)
        k, record = solve(rhs)
        return ks.at[i].set(k), record

    ks, looped = jax.lax.scan(stage, ks, jnp.arange(1, s))
    return (*_solution(tab, f, t1, y0, flat0, unravel, f0, h, list(ks)), [record0, looped])


# --- how W⁻¹ r is applied -------------------------------------------------------------------------

class LinearSolve(eqx.Module):
    """How a :class:`Rosenbrock` method applies ``W⁻¹ = (I/(hγ) − J)⁻¹`` to its stages' right-hand
    sides: the protocol every strategy implements (:class:`DenseLU`, :class:`HeldInverse`,
    :class:`Eigen`, :class:`EigenRefined`, :class:`Krylov`).

    The arguments the methods share: ``f(t, x)`` the field on flat ``(n,)`` vectors; ``t0`` the
    step's start time; ``t1`` the solve's end; ``h`` the step size; ``gamma`` the tableau's ``γ``;
    ``flat0`` ``(n,)`` the state at ``t0``; ``n_p`` the size of its parameter block (the state is
    ``(params, quadratures)`` flattened; the field does not read the quadratures);
    ``state`` the strategy's solver state (a pytree, carried from step to step by diffrax)."""

    @abc.abstractmethod
    def init(self, f, t0, t1, flat0, n_p):
        """The solver state at the solve's start (a pytree; ``None`` for none)."""

    @abc.abstractmethod
    def prepare(self, f, t0, h, gamma, flat0, n_p, state):
        """``(solve, state)`` for one step: ``solve(r) -> (x, record)`` with ``x ≈ W⁻¹ r`` ``(n,)``
        and ``record`` a pytree of what the strategy counts per stage solve (``None``: nothing),
        and the solver state to carry (before :meth:`finish`)."""

    def finish(self, state, records):
        """The solver state after the step's stage solves: ``records`` is the list of the records
        ``solve`` returned (those of a loop of stages stacked along a leading axis,
        :func:`_stages_looped`). Default: ``state`` unchanged."""
        return state


def _no_record(solve):
    """``solve`` returning ``(x, None)``: a strategy that records nothing per stage solve."""
    return lambda r: (solve(r), None)


class DenseLU(LinearSolve):
    """A fresh Jacobian (``jax.jacfwd``) and LU factorisation of ``W = I/(hγ) − J`` every step.
    No solver state."""

    def init(self, f, t0, t1, flat0, n_p):
        return None

    def prepare(self, f, t0, h, gamma, flat0, n_p, state):
        jac = jax.jacfwd(lambda x: f(t0, x))(flat0)
        W = jnp.eye(flat0.size, dtype=flat0.dtype) / (h * gamma) - jac
        lu = jsl.lu_factor(W)
        return _no_record(lambda r: jsl.lu_solve(lu, r)), None


HOLD_MAX = 1.2
""":class:`HoldStep` keeps the step size when the controller proposes to grow it by a factor in
``[1, HOLD_MAX]`` (as Hairer & Wanner's RADAU5 does), so that :func:`Ros34pw2` reuses ``W⁻¹``."""

MAX_AGE = 32
""":class:`HeldInverse` recomputes its Jacobian at the latest after this many accepted steps on one
``W⁻¹`` (a W-method stays of order 3 with any Jacobian; a stale one costs accuracy per step
on flows whose Jacobian drifts, e.g. by the factor ``e^τ`` of log time)."""

_SAME_H = 1e-9
"""``W⁻¹`` is reused when the step size equals the one it was built for to this relative
tolerance (the controller's held step, up to the rounding of ``t0 + h``). Reusing it across a
changed step size is allowed for a W-method but measured worse (more steps and rejections)."""


class HeldInverse(LinearSolve):
    """One Jacobian (``jax.jacfwd``) and one explicit inverse of ``W = I/(hγ) − J`` serve many steps
    of a W-method: they are reused while the step size is unchanged (:class:`HoldStep` holds it)
    for at most :data:`MAX_AGE` steps, and recomputed at the step start whenever the step size
    changes (a rejected step always changes it). (The explicit inverse: with hundreds of states a
    dense product is several times cheaper than the two triangular solves of an LU factorisation
    on CPU, and a W-method needs no more than some fixed linear map ``W⁻¹`` per step: its rounding
    only perturbs the matrix standing for ``J``.)

    Solver state: ``(W⁻¹, h_W, age)`` of the matrix in use (``h_W = NaN``: none yet). Under
    ``vmap`` with a per-lane decision both branches are computed (``lax.cond`` becomes a select):
    batched lanes then pay a Jacobian and an inverse every step."""

    def init(self, f, t0, t1, flat0, n_p):
        t_dtype = jnp.result_type(t0, t1)
        return jnp.zeros((flat0.size, flat0.size), flat0.dtype), jnp.full((), jnp.nan, t_dtype), jnp.zeros((), jnp.int32)

    def prepare(self, f, t0, h, gamma, flat0, n_p, state):
        inv_w, h_w, age = state
        reuse = (age < MAX_AGE) & (jnp.abs(h - h_w) <= _SAME_H * jnp.abs(h))

        def refresh(_):
            jac = jax.jacfwd(lambda x: f(t0, x))(flat0)
            return jnp.linalg.inv(jnp.eye(flat0.size, dtype=flat0.dtype) / (h * gamma) - jac)

        inv_w = jax.lax.cond(reuse, lambda _: inv_w, refresh, None)
        new_state = (inv_w, jnp.where(reuse, h_w, h), jnp.where(reuse, age + 1, 0).astype(jnp.int32))
        return _no_record(lambda r: inv_w @ r), new_state


EIGEN_ROUND = 128
""":func:`EigenW` computes its Jacobian once per solve (in ``init``); ``solver="auto"`` runs it in
rounds of at most this many steps, so the Jacobian is recomputed at least this often."""


def _split(y0):
    """Flat size of the parameter block: ``y0 = (params, quadratures)``, else the whole state."""
    if isinstance(y0, tuple) and len(y0) == 2:
        return ravel_pytree(y0[0])[0].size
    return ravel_pytree(y0)[0].size


def eigen_jacobian(f, t0, flat0, n_p, time_factor=jnp.exp):
    """``(Q, μ, R, asym)`` for :class:`Eigen`: ``G = ∂f(t0, ·)/∂y / c(t0)`` at ``flat0``
    (``jax.jacfwd``), ``Q diag(μ) Qᵀ`` the eigendecomposition (``jnp.linalg.eigh``) of the
    symmetric part of its parameter block ``P = G[:n_p, :n_p]``, ``R = G[n_p:, :n_p]`` the
    quadrature rows, ``asym = ‖P − Pᵀ‖_F / ‖P‖_F``."""
    G = jax.jacfwd(lambda x: f(t0, x))(flat0) / time_factor(t0)
    P = G[:n_p, :n_p]
    asym = jnp.linalg.norm(P - P.T) / jnp.maximum(jnp.linalg.norm(P), jnp.finfo(P.dtype).tiny)
    mu, Q = jnp.linalg.eigh(0.5 * (P + P.T))
    return Q, mu, G[n_p:, :n_p], asym


def eigen_solve(Q, QT, mu, R, c0, hg, r, n_p):
    """``x = W⁻¹ r`` with ``W = I/hg − c0·[[Q diag(μ) Qᵀ, 0], [R, 0]]`` (block lower triangular):
    ``x_p = Q diag(1/(1/hg − c0 μ)) Qᵀ r_p``, ``x_q = hg (r_q + c0 R x_p)``."""
    xp = Q @ ((QT @ r[:n_p]) / (1.0 / hg - c0 * mu))
    return jnp.concatenate([xp, hg * (r[n_p:] + c0 * (R @ xp))])


class Eigen(LinearSolve):
    """``W⁻¹`` from one symmetric eigendecomposition per solve, for fields ``F(τ, y) = c(τ)·f(y)``
    (``c = time_factor``; ``exp`` for the engine's log time ``τ = log(1 + t)``, where
    ``c = 1 + t = dt/dτ``) whose Jacobian block over the parameters is symmetric (a gradient flow,
    ``∂f/∂params = −∇²L``), and whose other states (quadratures, ``y = (params, quadratures)``)
    are not read by the field, so that the Jacobian ``[[P, 0], [R, 0]]`` is block lower triangular.

    In ``init`` (once per solve): ``G = ∂f/∂y`` (``jax.jacfwd``), ``P = Q diag(μ) Qᵀ``
    (``jnp.linalg.eigh``) — :func:`eigen_jacobian`. At every stage of every step the matrix
    standing for ``∂F/∂y`` is ``c(τ0)·G`` at the step start ``τ0`` (the time factor exact, ``G``
    as of the solve's start) and ``W⁻¹ r`` is two products with ``Q`` (:func:`eigen_solve`), for
    *any* step size. A non-symmetric ``P`` (``asym`` beyond ``AutoPolicy.symmetry_tol``) is replaced by its
    symmetric part (still a W-method, with worse stability); ``solver="auto"`` sends such fields
    to :func:`Rodas4` instead (:func:`gradflow._engine.stiff.asymmetry`).

    Solver state ``(Q, Qᵀ, μ, R, asym)``, constant over the solve (so diffrax's per-step state
    select is free)."""

    time_factor: object = jnp.exp

    def init(self, f, t0, t1, flat0, n_p):
        Q, mu, R, asym = eigen_jacobian(f, t0, flat0, n_p, self.time_factor)
        return Q, Q.T, mu, R, asym

    def prepare(self, f, t0, h, gamma, flat0, n_p, state):
        Q, QT, mu, R, _ = state
        c0, hg = self.time_factor(t0), h * gamma
        return _no_record(lambda r: eigen_solve(Q, QT, mu, R, c0, hg, r, n_p)), state


REFINE = 3
""":class:`EigenRefined`: refinement sweeps per stage (:func:`refined_solve`). Each sweep multiplies
the error of the matrix standing for the Jacobian by ``O(h)``, and Rodas4 with a Jacobian off by
``O(h^k)`` is of order ``min(4, k + 1)``: three sweeps keep its order 4 with an out-of-date
eigendecomposition (``tests/test_stiff.py``)."""

EIGEN_RODAS4_ROUND = 64
""":func:`EigenRodas4`'s round length under ``solver="auto"`` (one eigendecomposition per round):
the sweeps converge at the rate ``‖W_old⁻¹ (J − J_old)‖``, so a fresher preconditioner keeps
the refined solves closer to exact. Measured at ``d = 20`` (three sweeps): κ = 20 / 50 take
207 / 320 steps with 64 steps per round, 234 / 327 with 128."""


def refined_solve(jvp, precond, hg, r, iterations):
    """``x ≈ (I/hg − J)⁻¹ r`` for the exact ``J`` (``jvp(v) = J v``) by ``iterations`` sweeps of
    Richardson iteration preconditioned by ``precond(r) ≈ (I/hg − J_old)⁻¹ r``, from
    ``x = precond(r)``: ``x ← x + precond(r − x/hg + J x)``. The error contracts per sweep by the
    factor ``‖precond·(J − J_old)‖`` (for a stale Hessian of a gradient flow in log time at most
    about ``‖∇²L − ∇²L_old‖ / λ_min`` in the stiff modes, ``hg·c·‖∇²L − ∇²L_old‖`` in the others).

    **Arguments:** ``jvp`` and ``precond`` linear maps of flat vectors; ``hg`` the step size times
    the method's ``γ``; ``r`` ``(n,)``; ``iterations`` a Python int ≥ 0.
    **Returns:** ``(n,)``, the same dtype as ``r``."""
    x = precond(r)
    for _ in range(iterations):
        x = x + precond(r - x / hg + jvp(x))
    return x


class EigenRefined(Eigen):
    """The exact Jacobian at the step start (a linearisation of the field: Jacobian–vector
    products), applied by :func:`refined_solve` with ``iterations`` sweeps preconditioned by
    :class:`Eigen`'s ``W⁻¹`` (the eigendecomposition from ``init``, once per solve, with the time
    factor ``c(τ0)`` of the step). A method that needs the exact Jacobian (RODAS4: order 1 with the
    stale matrix alone) keeps its order with :data:`REFINE` sweeps (``tests/test_stiff.py``).
    Solver state as :class:`Eigen`'s."""

    iterations: int = REFINE

    def prepare(self, f, t0, h, gamma, flat0, n_p, state):
        Q, QT, mu, R, _ = state
        c0, hg = self.time_factor(t0), h * gamma
        precond = lambda r: eigen_solve(Q, QT, mu, R, c0, hg, r, n_p)
        _, jvp = jax.linearize(lambda x: f(t0, x), flat0)
        return _no_record(lambda r: refined_solve(jvp, precond, hg, r, self.iterations)), state


KRYLOV_FRACTION = 1e-2
""":class:`Krylov`: the stage systems are solved to this fraction of the step controller's
tolerance, component by component (``|residual_i| ≤ KRYLOV_FRACTION·(atol + rtol·|y0_i|)`` for the
system scaled to ``(I − hγJ) x = hγ r``, whose matrix is ``≥ I`` where ``−J`` is positive
semidefinite, so the solution error is at most the residual in the 2-norm). Rosenbrock methods
need the *exact* Jacobian (RODAS4 drops to order 1 with a wrong one, :class:`EigenRefined`), but an
inexact *solve* only perturbs each stage by its residual: the stages enter ``y1`` and the error
estimate with coefficients of order ten, so solve errors a hundred times below the local error
tolerance leave the accepted steps and the error estimate as with exact solves (inexact
Rosenbrock / Rosenbrock–Krylov methods: Tranquilli & Sandu, SIAM J. Sci. Comput. 36 (2014)
A1313). ``tests/test_stiff.py`` checks order 4 and agreement with the dense path. Measured on the
square family at ``d = 32`` (κ = 5, rtol 1e-8): 1e-2, 1e-3 and 1e-4 gave the same 102 steps and
the same results to every digit printed (``benchmarks/SCALE.md``'s setting; a development
measurement, ``benchmarks/NOTES.md``)."""

KRYLOV_FLOOR = 1e-12
""":func:`krylov_solve`: no component of the residual is asked to be below this fraction of the
largest component of the scaled right-hand side. The residual of the scaled system carries
round-off of about ``ε·‖I − hγJ‖·‖x‖``: a tolerance below it is never met, and CG would run to
:data:`KRYLOV_MAX_STEPS` and fall back to GMRES (measured: ``‖I − hγJ‖ = 5000``, absolute
tolerance ``1e-12`` on a right-hand side of size 50: 2000 CG iterations, then GMRES). At
``rtol = 1e-8`` the controller's scale is ``1e-10`` of the state, a hundred times above it."""

KRYLOV_MAX_STEPS = 2000
""":class:`Krylov`: at most this many conjugate-gradient iterations per stage solve (then the
GMRES fallback, with as many); a solve that still misses the tolerance leaves an inexact stage,
which the step controller sees in its error estimate."""


def krylov_solve(jvp, hg, r, n_p, scale, max_steps=KRYLOV_MAX_STEPS):
    """``x ≈ (I/hg − J)⁻¹ r`` with ``J = [[P, 0], [R, 0]]`` (``jvp(v) = J v``; the quadrature rows
    ``R`` block lower triangular, as in :func:`eigen_solve`) from Jacobian–vector products only:
    the parameter block ``(I − hg·P) x_p = hg·r_p`` by conjugate gradients (``lineax.CG``; the
    matrix is symmetric and ``≥ I`` where ``P`` is negative semidefinite, near a minimiser of a
    gradient flow), with restarted GMRES (``lineax.GMRES``) if CG breaks down or does not converge
    (an indefinite matrix: a Hessian with negative eigenvalues and a large step); then
    ``x_q = hg (r_q + R x_p)`` from one more product.

    **Arguments:** ``jvp`` a linear map of flat ``(n,)`` vectors; ``hg`` the step size times the
    method's ``γ``; ``r`` ``(n,)``; ``n_p`` the size of the parameter block; ``scale`` ``(n_p,)``
    the tolerance of each component of the residual (and of the last update) of the scaled system
    (lineax's ``atol``; at least :data:`KRYLOV_FLOOR` of the largest component of ``hg·r_p``);
    ``max_steps`` iterations per method.

    **Returns:** ``(x, iterations, fallback)``: ``x`` ``(n,)`` as ``r``; the CG iterations (plus
    the GMRES ones, if it ran); ``fallback`` whether GMRES ran."""
    pad = jnp.zeros(r.size - n_p, r.dtype)
    struct = jax.ShapeDtypeStruct((n_p,), r.dtype)
    mv = lambda v: v - hg * jvp(jnp.concatenate([v, pad]))[:n_p]
    b = hg * r[:n_p]
    scale = jnp.maximum(scale, KRYLOV_FLOOR * jnp.max(jnp.abs(b)))
    spd = lx.FunctionLinearOperator(mv, struct, tags=(lx.symmetric_tag, lx.positive_semidefinite_tag))
    cg = lx.linear_solve(spd, b, lx.CG(rtol=0.0, atol=scale, max_steps=max_steps), throw=False)
    ok = (cg.result == lx.RESULTS.successful) & jnp.all(jnp.isfinite(cg.value))

    def gmres(_):
        sol = lx.linear_solve(lx.FunctionLinearOperator(mv, struct), b,
                              lx.GMRES(rtol=0.0, atol=scale, max_steps=max_steps), throw=False)
        return sol.value, sol.stats["num_steps"]

    # one branch for all lanes of a vmap (a batched predicate would make the cond a select that
    # runs GMRES for every lane), then each lane keeps its own result
    skip = lambda _: (jnp.zeros_like(cg.value), jnp.zeros_like(cg.stats["num_steps"]))
    gm, more = jax.lax.cond(_pinned.any_lane(~ok), gmres, skip, None)
    xp, more = jnp.where(ok, cg.value, gm), jnp.where(ok, 0, more)
    xq = hg * (r[n_p:] + jvp(jnp.concatenate([xp, pad]))[n_p:])
    return jnp.concatenate([xp, xq]), cg.stats["num_steps"] + more, ~ok


class Krylov(LinearSolve):
    """The exact Jacobian at the step start as a linearisation of the field (``jax.linearize``:
    Jacobian–vector products), every stage system solved by :func:`krylov_solve` (conjugate
    gradients on the parameter block, the quadrature rows by substitution) to
    :data:`KRYLOV_FRACTION` of the step controller's tolerance ``rtol``, ``atol``. For gradient
    flows (a symmetric parameter block); nothing of size ``n × n`` is formed: memory ``O(n)``,
    cost per stage a number of Jacobian–vector products that grows with the spread of the
    step-scaled Hessian's spectrum (the stiff modes after convergence), not with ``n³``.

    Solver state: ``(iterations, solves, fallbacks, most)`` int32, counters over the accepted
    steps of the solve: Krylov iterations, stage solves, solves that fell back to GMRES, the most
    iterations of one solve (diagnostics: ``benchmarks/stiff.py``)."""

    rtol: object = 1e-8
    atol: object = 1e-10
    fraction: float = eqx.field(static=True, default=KRYLOV_FRACTION)
    max_steps: int = eqx.field(static=True, default=KRYLOV_MAX_STEPS)

    def init(self, f, t0, t1, flat0, n_p):
        return jnp.zeros((4,), jnp.int32)

    def prepare(self, f, t0, h, gamma, flat0, n_p, state):
        _, jvp = jax.linearize(lambda x: f(t0, x), flat0)
        hg = h * gamma
        scale = self.fraction * (self.atol + self.rtol * jnp.abs(flat0[:n_p]))

        def solve(r):
            x, iterations, fallback = krylov_solve(jvp, hg, r, n_p, scale, self.max_steps)
            return x, (iterations, fallback)

        return solve, state

    def finish(self, state, records):
        """The counters after the step's stage solves: each record is ``(iterations, fallback)``
        of one solve, or of a loop of solves stacked."""
        its = jnp.concatenate([jnp.ravel(r[0]) for r in records]).astype(jnp.int32)
        fb = sum(jnp.sum(r[1].astype(jnp.int32)) for r in records)
        step = jnp.stack([jnp.sum(its), jnp.asarray(its.size), fb, jnp.zeros(())]).astype(jnp.int32)
        return (state + step).at[3].set(jnp.maximum(state[3], jnp.max(its)))


# --- the solver -----------------------------------------------------------------------------------

class Rosenbrock(diffrax.AbstractAdaptiveSolver):
    """A Rosenbrock method (:class:`Tableau`) for ODEs ``dy/dt = f(t, y)`` on any pytree of float
    arrays, with ``W⁻¹ r`` applied by ``linear``, a :class:`LinearSolve` (:class:`DenseLU`,
    :class:`HeldInverse`, :class:`Eigen`, :class:`EigenRefined` or :class:`Krylov`; its
    :meth:`~LinearSolve.finish` updates its state from the step's stage solves' records). No Newton iteration, so no convergence failure. Use
    with a :class:`diffrax.PIDController` (the error estimate is the tableau's ``e``); dense output
    by cubic Hermite from ``f(y0)`` and ``f(y1)`` (one extra field evaluation per step).

    Cost per step: the tableau's stages (one field evaluation and one ``solve`` each, the first
    stage's field evaluation shared with ``∂f/∂t``), one field evaluation for the dense output,
    and what ``linear`` adds (a Jacobian and a factorisation for :class:`DenseLU`; two products
    with ``Q`` per solve for :class:`Eigen`; ``iterations`` Jacobian–vector products more per
    solve for :class:`EigenRefined`; one Jacobian–vector product per CG iteration, plus one, per
    solve for :class:`Krylov`).

    ``looped`` (default ``False``): the stages after the first run in one ``lax.scan``
    (:func:`_stages_looped`) instead of written out (:func:`_stages`): the same arithmetic in the
    same order, results equal to round-off, a traced step about half the size for
    :class:`Krylov` (``solver="rodas4-krylov"`` runs looped)."""

    tableau: Tableau = eqx.field(static=True)
    linear: LinearSolve
    looped: bool = eqx.field(static=True, default=False)
    term_structure: ClassVar = diffrax.AbstractTerm
    interpolation_cls: ClassVar = diffrax.ThirdOrderHermitePolynomialInterpolation

    def order(self, terms):
        return self.tableau.order

    def error_order(self, terms):
        return self.tableau.error_order

    def init(self, terms, t0, t1, y0, args):
        flat0, unravel = ravel_pytree(y0)
        f = lambda t, x: ravel_pytree(terms.vf(t, unravel(x), args))[0]
        return self.linear.init(f, t0, t1, flat0, _split(y0))

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        del made_jump
        flat0, unravel = ravel_pytree(y0)

        def f(t, x):
            return ravel_pytree(terms.vf(t, unravel(x), args))[0]

        f0, ft = jax.jvp(lambda t: f(t, flat0), (t0,), (jnp.ones_like(t0),))
        solve, state = self.linear.prepare(f, t0, t1 - t0, self.tableau.gamma, flat0, _split(y0), solver_state)
        stages = _stages_looped if self.looped else _stages
        y1, err, dense_info, records = stages(self.tableau, f, t0, t1, y0, flat0, unravel, f0, ft, solve)
        return y1, err, dense_info, self.linear.finish(state, records), diffrax.RESULTS.successful

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)


def Rodas4() -> Rosenbrock:
    """RODAS4 with a fresh Jacobian and LU factorisation every step (``solver="rodas4"``): order 4,
    L-stable, stiffly accurate."""
    return Rosenbrock(RODAS4, DenseLU())


def Ros34pw2() -> Rosenbrock:
    """ROS34PW2 reusing its Jacobian and ``W⁻¹`` while the step size is held (``solver="ros34pw2"``,
    with :class:`HoldStep`). Against :func:`Rodas4`: about 3× the steps at ``rtol = 1e-8`` and a
    fraction of the cost per step (``benchmarks/STIFF_d20.md``)."""
    return Rosenbrock(ROS34PW2, HeldInverse())


def EigenW(time_factor=jnp.exp) -> Rosenbrock:
    """ROS34PW2 with ``W⁻¹`` from one symmetric eigendecomposition per solve
    (``solver="ros34pw2-eigh"``, :class:`Eigen`): a W-method keeps its order 3 with any matrix in
    place of the Jacobian (Rang & Angermann 2005); how far the Hessian may drift before steps are
    lost to stability is set by the caller's solve length (``auto``: rounds of
    :data:`EIGEN_ROUND` steps)."""
    return Rosenbrock(ROS34PW2, Eigen(time_factor))


def EigenRodas4(iterations: int = REFINE, time_factor=jnp.exp) -> Rosenbrock:
    """RODAS4 with the exact Jacobian through :func:`refined_solve` preconditioned by one symmetric
    eigendecomposition per solve (``solver="rodas4-eigh"``, :class:`EigenRefined`; the implicit
    phase of ``auto`` for gradient flows). Against :func:`EigenW`: about half the steps at
    ``rtol = 1e-8`` (``benchmarks/STIFF_d20.md``: κ = 20 / 50, 207 / 320 steps against 484 / 742)
    and the errors of :func:`Rodas4`, at about three times the cost per step."""
    return Rosenbrock(RODAS4, EigenRefined(time_factor, iterations))


def KrylovRodas4(rtol=1e-8, atol=1e-10) -> Rosenbrock:
    """RODAS4 with the exact Jacobian applied by Jacobian–vector products and every stage system
    solved by conjugate gradients to :data:`KRYLOV_FRACTION` of the step controller's ``rtol``,
    ``atol`` (``solver="rodas4-krylov"``, :class:`Krylov`; the stiff phase of ``auto`` for
    gradient flows of at least ``AutoPolicy.krylov_min_state`` (2000) parameters once ``rkc``'s
    steps would need more stages than its cap):
    the steps and errors of :func:`Rodas4`, memory ``O(n)``, no factorisation."""
    return Rosenbrock(RODAS4, Krylov(rtol, atol, KRYLOV_FRACTION, KRYLOV_MAX_STEPS), looped=True)


class WrappingController(diffrax.AbstractAdaptiveStepSizeController):
    """A step-size controller that wraps another, ``inner``, and reads its tolerances and norm
    from it (:class:`HoldStep`, :class:`gradflow._engine.solvers.StepBudget`)."""

    inner: eqx.AbstractVar[diffrax.AbstractAdaptiveStepSizeController]

    @property
    def rtol(self):
        return self.inner.rtol

    @property
    def atol(self):
        return self.inner.atol

    @property
    def norm(self):
        return self.inner.norm


class HoldStep(WrappingController):
    """A :class:`diffrax.PIDController` (``inner``) that keeps the current step size when it would
    grow it by a factor in ``[1, HOLD_MAX]`` (Hairer & Wanner 1996, Sec. IV.8, the step size
    strategy of RADAU5), so that :func:`Ros34pw2` can reuse ``W⁻¹``. Accepting, rejecting and
    shrinking are the PID controller's."""

    inner: diffrax.PIDController
    hold: float = HOLD_MAX

    def wrap(self, direction):
        return HoldStep(self.inner.wrap(direction), self.hold)

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        return self.inner.init(terms, t0, t1, y0, dt0, args, func, error_order)

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        keep, next_t0, next_t1, made_jump, state, result = self.inner.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state)
        h, proposed = t1 - t0, next_t1 - next_t0
        hold = keep & (proposed >= h) & (proposed <= self.hold * h)
        return keep, next_t0, jnp.where(hold, next_t0 + h, next_t1), made_jump, state, result
