"""Rodas4: a stiffly accurate, L-stable Rosenbrock method (order 4, embedded order 3) as a
diffrax solver, for the stiff phase of ``solver="auto"``.

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
the step start)::

    u_i = y0 + Σ_{j<i} a_ij k_j,   W k_i = f(t0 + c_i h, u_i) + h d_i f_t + Σ_{j<i} (C_ij / h) k_j,
    y1 = u_6 + k_6 (= y0 + Σ_{j<6} a_6j k_j + k_6),   error estimate k_6.

Dense output: cubic Hermite from ``f(y0)`` and ``f(y1)`` (one extra field evaluation per step).
"""

from __future__ import annotations

from typing import ClassVar

import diffrax
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax.flatten_util import ravel_pytree

__all__ = ["Rodas4"]

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


class Rodas4(diffrax.AbstractAdaptiveSolver):
    """RODAS4 (Hairer & Wanner 1996, Sec. IV.7) for ODEs ``dy/dt = f(t, y)`` on any pytree of
    float arrays: one Jacobian and one LU factorisation per step, L-stable, stiffly accurate.

    Use with a :class:`diffrax.PIDController` (``order = 4``; the error estimate is the last
    stage increment)."""

    term_structure: ClassVar = diffrax.AbstractTerm
    interpolation_cls: ClassVar = diffrax.ThirdOrderHermitePolynomialInterpolation

    def order(self, terms):
        return 4

    def error_order(self, terms):
        return 4

    def init(self, terms, t0, t1, y0, args):
        return None

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        del solver_state, made_jump
        flat0, unravel = ravel_pytree(y0)
        h = t1 - t0

        def f(t, x):
            return ravel_pytree(terms.vf(t, unravel(x), args))[0]

        f0, ft = jax.jvp(lambda t: f(t, flat0), (t0,), (jnp.ones_like(t0),))
        jac = jax.jacfwd(lambda x: f(t0, x))(flat0)
        W = jnp.eye(flat0.size, dtype=flat0.dtype) / (h * _GAMMA) - jac
        lu = jsl.lu_factor(W)
        ks = []
        for i in range(6):
            if i == 0:
                fi = f0
            else:
                u = flat0 + sum(_A[i, j] * ks[j] for j in range(i) if _A[i, j] != 0.0)
                fi = f(t0 + _CT[i] * h, u)
            rhs = fi + (h * _D[i]) * ft if _D[i] != 0.0 else fi
            if i > 0:
                rhs = rhs + sum(_C[i, j] * ks[j] for j in range(i)) / h
            ks.append(jsl.lu_solve(lu, rhs))
        flat1 = flat0 + sum(_A[5, j] * ks[j] for j in range(5)) + ks[5]
        f1 = f(t1, flat1)
        y1 = unravel(flat1)
        dense_info = dict(y0=y0, y1=y1, k0=unravel(h * f0), k1=unravel(h * f1))
        return y1, unravel(ks[5]), dense_info, None, diffrax.RESULTS.successful

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)
