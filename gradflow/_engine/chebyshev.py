"""A stabilised explicit (Runge–Kutta–Chebyshev) solver for gradient flows: ``solver="rkc"``.

The method is RKC, the damped second-order Runge–Kutta–Chebyshev method of Sommeijer, Shampine
& Verwer ("RKC: an explicit solver for parabolic PDEs", J. Comput. Appl. Math. 88 (1998) 315;
the coefficients as in their code ``rkc.f``, after van der Houwen & Sommeijer 1980). With ``s``
stages (``s`` field evaluations a step, no linear algebra) it is stable on the real interval
``[−β(s), 0]`` with ``β(s) ≈ 0.65·s²`` (damping ``ε = 2/13``): the step size a stiff, real
spectrum allows grows with the square of the work per step, where an explicit method's grows
linearly. A gradient flow ``dθ/dt = −∇L(θ)`` has the Jacobian ``−∇²L``: symmetric, its
spectrum real, which is exactly the case the method is made for.

One step from ``(τ0, y0)`` to ``τ1 = τ0 + h``:

1. ``ρ``, the spectral radius of the parameter block of ``J = ∂f(τ1, ·)/∂y`` at ``y0``, by a power
   iteration on exact Jacobian–vector products (``jax.linearize`` of the field), warm-started
   from the previous step's iterate (:func:`spectral_radius`), times :data:`SAFETY`. The
   Jacobian is taken at the step's *end* time: in the engine's log time ``τ`` the field is
   ``(1 + t)·(−∇L)``, whose Jacobian grows like ``e^τ`` within the step.
2. The stage number ``s = 1 + ⌊√(1 + 1.54·h·ρ)⌋`` (``rkc.f``'s rule: ``h·ρ ≤ (s² − 1)/1.54``,
   inside ``β(s)``), at least 2. If that exceeds the stage cap ``s_max`` (:func:`stage_cap`:
   ``√(rtol / (10 ε))``, where the stages' round-off, ``∝ s²·ε``, stays ten times below the
   tolerance, as ``rkc.f`` caps it), the step is taken as ``k`` equal substeps of at most
   ``s_max`` stages each (``rkc.f`` shrinks the step instead; the substeps keep the step
   controller's steps accuracy-limited and spend no rejected step on stability).
3. The stages (the three-term Chebyshev recurrence; ``T_j`` the Chebyshev polynomials,
   ``w0 = 1 + ε/s²``, ``w1 = T_s'(w0)/T_s''(w0)``, ``b_j = T_j''(w0)/T_j'(w0)²`` for ``j ≥ 2``,
   ``b_0 = b_1 = b_2``, ``a_j = 1 − b_j·T_j(w0)``)::

       Y_0 = y0,   Y_1 = y0 + μ̃_1 h F_0,   μ̃_1 = b_1 w1,
       Y_j = (1 − μ_j − ν_j) y0 + μ_j Y_{j−1} + ν_j Y_{j−2} + μ̃_j h F(Y_{j−1}) − a_{j−1} μ̃_j h F_0,
       μ_j = 2 w0 b_j / b_{j−1},  ν_j = −b_j / b_{j−2},  μ̃_j = 2 w1 b_j / b_{j−1},
       y1 = Y_s;

   each stage's time is ``τ0 + c_j h`` with ``c_j`` from the same recurrence (``c_s = 1``).
4. The error estimate of ``rkc.f``: ``0.8 (y0 − y1) + 0.4 h (F(y0) + F(y1))``, an estimate of
   the local error ``O(h³)`` of the second-order step (so ``error_order = 3`` for the step
   controller); with substeps, the sum of theirs.

Cost of a step: ``k·s`` field evaluations (each stage one, plus ``F(y1)``, which the error
estimate and the dense output share), one more for ``F(y0)``, and the power iteration's
Jacobian–vector products (one or two a step once warm). Memory: a few state vectors. Dense
output: cubic Hermite from ``F(y0)`` and ``F(y1)``.

**Under ``vmap``** (lanes of :func:`gradflow.integrate_batch`): the stage and substep loops are
``lax.while_loop`` s whose trip counts are per lane; a batched while loop runs until its last
lane is done, each lane's state frozen (``select``) after its own count. So lanes get their own
``s``, ``k`` and results, bit for bit those of a lane solved alone, but every lane of a batch
pays for the largest ``k·s`` of the batch in wall clock. Batch lanes of similar stiffness
together (e.g. one configuration per batch) where that matters.

**When it is the right method:** a gradient flow (a symmetric Jacobian: real eigenvalues, so
the real stability interval is what matters), many parameters (where an implicit step's linear
algebra costs many gradients), moderate stiffness (``h·ρ`` up to about ``0.65·s_max²``,
``≈ 3e6`` at ``rtol = 1e-8``) and moderate accuracy (second order: at tight tolerances the
accuracy-limited step is small and a high-order method takes fewer gradients). Negative curvature
(a saddle) is no stability problem: those modes grow and are resolved by the error control.
**What it assumes when chosen by name for another field:** eigenvalues of the Jacobian near the
negative real axis. A field with complex eigenvalues far from it (rotation, a non-gradient
field) is outside the stability region whatever ``s``: the error control then rejects steps
until they are small, and the method is slow but not wrong.
"""

from __future__ import annotations

from typing import ClassVar

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .rosenbrock import _split  # the parameter block's flat size, as the Rosenbrock solvers split it

__all__ = ["RKC", "DAMPING", "SAFETY", "POWER_TOL", "POWER_COLD", "POWER_WARM", "MAX_STAGES", "stage_cap",
           "stages_for", "spectral_radius", "rkc_step"]

DAMPING = 2.0 / 13.0
"""``ε`` of ``w0 = 1 + ε/s²`` (``rkc.f``): the stability polynomial stays at least about
``1 − ε·(2/3)`` inside ``(−β(s), 0)`` away from its ends, so stiff modes are damped, not only
bounded, at the cost of ``β(s) ≈ 0.65·s²`` instead of ``2·s²``."""

SAFETY = 1.2
"""The power iteration's estimate of ``ρ`` is multiplied by this before the stage number is
chosen (``rkc.f``'s factor): the estimate approaches ``ρ`` from below, and the Hessian moves
within the step."""

POWER_TOL = 0.01
"""The power iteration stops once its estimate changes by at most this fraction between two
iterations (or after :data:`POWER_COLD` / :data:`POWER_WARM` iterations). Together with
:data:`SAFETY`: an estimate a few per cent low stays inside the stability interval."""

POWER_COLD = 60
"""Most power iterations at the first step of a solve (a fixed pseudo-random start vector)."""

POWER_WARM = 1
"""Power iterations at later steps: one product from the previous step's iterate, so that the
iteration continues along the path, one product a step (``rkc.f`` re-estimates only every 25
steps). Its estimate of ``‖J v‖`` is at most ``ρ``; :data:`SAFETY` covers the lag while the
iterate turns towards a new top eigenvector, and the error control catches what it does not (an
unstable mode grows by orders of magnitude in one step, so its step is rejected)."""

MAX_STAGES = 20000
"""The stage cap never exceeds this (:func:`stage_cap`; reached for ``rtol ≥ 1e-6``)."""

ROUNDOFF = 10.0
""":func:`stage_cap`: the stages' round-off ``s²·ε`` stays this factor below ``rtol``."""


def stage_cap(rtol):
    """The most stages of one (sub)step: ``round(√(rtol / (ROUNDOFF·ε)))`` (``ε`` the float64 unit
    round-off; ``rkc.f``'s rule), between 2 and :data:`MAX_STAGES`. ``rtol`` a scalar (may be a
    traced array). Returns an int32 scalar array (e.g. 2122 at ``rtol = 1e-8``, 212 at 1e-10)."""
    eps = float(np.finfo(np.float64).eps)
    cap = jnp.round(jnp.sqrt(jnp.asarray(rtol, jnp.float64) / (ROUNDOFF * eps)))
    return jnp.clip(cap, 2, MAX_STAGES).astype(jnp.int32)


def stages_for(h_rho, cap):
    """``(k, s)``: the substeps and stages per substep for a step with ``h·ρ = h_rho`` (ρ with its
    safety factor) and the stage cap ``cap``: the fewest substeps ``k`` with
    ``1.54·h·ρ/k ≤ (cap − 1)² − 1``, then ``s = 1 + ⌊√(1 + 1.54·h·ρ/k)⌋ ≥ 2`` (so ``s ≤ cap``)."""
    h_rho = jnp.maximum(jnp.asarray(h_rho, jnp.float64), 0.0)
    room = (cap.astype(jnp.float64) - 1.0) ** 2 - 1.0
    k = jnp.maximum(jnp.ceil(1.54 * h_rho / room), 1.0)
    s = 1.0 + jnp.floor(jnp.sqrt(1.0 + 1.54 * h_rho / k))
    return k.astype(jnp.int32), jnp.clip(s, 2, cap).astype(jnp.int32)


def spectral_radius(jvp, v0, max_iterations, tol=POWER_TOL, min_iterations=2):
    """``(ρ, v, iterations)``: the spectral radius of a symmetric linear map by power iteration.

    **Arguments:** ``jvp`` a linear map of flat ``(n,)`` vectors (``J v``); ``v0`` ``(n,)`` the start
    vector (any nonzero vector; normalised here); ``max_iterations`` an int; ``tol`` the relative
    change of the estimate at which to stop.

    **Returns:** ``ρ = ‖J v_k‖`` for the normalised iterate ``v_k`` (for symmetric ``J`` a lower
    bound of the spectral radius that converges to it, whatever the signs of the eigenvalues:
    an indefinite Hessian's largest ``|λ|`` is found), the next iterate ``J v_k / ‖J v_k‖`` (the
    next call's warm start; ``v_k`` if ``J v_k = 0``) and the number of products. ``ρ`` is
    ``NaN`` if a product was not finite."""
    n0 = jnp.linalg.norm(v0)
    v0 = v0 / jnp.where(n0 > 0, n0, 1.0)

    def cond(c):
        i, _, rho, prev = c
        moving = jnp.abs(rho - prev) > tol * rho
        return (i < max_iterations) & ((i < min_iterations) | moving) & jnp.isfinite(rho)

    def body(c):
        i, v, rho, _ = c
        w = jvp(v)
        n = jnp.linalg.norm(w)
        v = jnp.where(n > 0, w / jnp.where(n > 0, n, 1.0), v)
        return i + 1, v, jnp.where(jnp.isfinite(n), n, jnp.nan), rho

    zero = jnp.zeros((), v0.dtype)
    i, v, rho, _ = jax.lax.while_loop(cond, body, (jnp.zeros((), jnp.int32), v0, zero, zero - 1.0))
    return rho, v, i


def rkc_step(f, t0, h, y0, f0, s, damping=DAMPING):
    """One RKC step of ``s`` stages (the module's scheme, step 3) on flat vectors.

    **Arguments:** ``f(t, y)`` the field on flat ``(n,)`` vectors; ``t0``, ``h`` scalars; ``y0``
    ``(n,)``; ``f0 = f(t0, y0)``; ``s`` an int32 scalar ``≥ 2`` (may be traced; the stage loop is a
    ``lax.while_loop``); ``damping`` ``ε``.

    **Returns:** ``(y1, f1, err)``: ``y1 = Y_s``, ``f1 = f(t0 + h, y1)``, and ``rkc.f``'s error
    estimate ``0.8 (y0 − y1) + 0.4 h (f0 + f1)``, all ``(n,)``."""
    sf = s.astype(y0.dtype)
    w0 = 1.0 + damping / sf ** 2
    t1_ = w0 ** 2 - 1.0
    t2_ = jnp.sqrt(t1_)
    arg = sf * jnp.log(w0 + t2_)
    w1 = jnp.sinh(arg) * t1_ / (jnp.cosh(arg) * sf * t2_ - w0 * jnp.sinh(arg))
    b_jm1 = 1.0 / (2.0 * w0) ** 2
    mus = w1 * b_jm1
    y_jm1 = y0 + h * mus * f0
    one, zero = jnp.ones((), y0.dtype), jnp.zeros((), y0.dtype)
    # carry: j, Y_{j-1}, Y_{j-2}, c_{j-1}, c_{j-2}, b_{j-1}, b_{j-2}, T_{j-1}, T_{j-2}, T', T''
    carry = (jnp.asarray(2, jnp.int32), y_jm1, y0, mus, zero, b_jm1, b_jm1, w0, one, one, zero, zero, zero)

    def body(c):
        j, y_jm1, y_jm2, th_jm1, th_jm2, b_jm1, b_jm2, z_jm1, z_jm2, dz_jm1, dz_jm2, d2z_jm1, d2z_jm2 = c
        z = 2.0 * w0 * z_jm1 - z_jm2
        dz = 2.0 * w0 * dz_jm1 - dz_jm2 + 2.0 * z_jm1
        d2z = 2.0 * w0 * d2z_jm1 - d2z_jm2 + 4.0 * dz_jm1
        b = d2z / dz ** 2
        a_jm1 = 1.0 - z_jm1 * b_jm1
        mu = 2.0 * w0 * b / b_jm1
        nu = -b / b_jm2
        mus = mu * w1 / w0
        fj = f(t0 + h * th_jm1, y_jm1)
        y = mu * y_jm1 + nu * y_jm2 + (1.0 - mu - nu) * y0 + h * mus * (fj - a_jm1 * f0)
        th = mu * th_jm1 + nu * th_jm2 + mus * (1.0 - a_jm1)
        return (j + 1, y, y_jm1, th, th_jm1, b, b_jm1, z, z_jm1, dz, dz_jm1, d2z, d2z_jm1)

    out = jax.lax.while_loop(lambda c: c[0] <= s, body, carry)
    y1 = out[1]
    f1 = f(t0 + h, y1)
    err = 0.8 * (y0 - y1) + 0.4 * h * (f0 + f1)
    return y1, f1, err


class RKCState(eqx.Module):
    """:class:`RKC`'s state between steps: ``v`` ``(n_p,)`` the power iteration's iterate (the next
    warm start), ``rho`` the last estimate of ``ρ`` (without :data:`SAFETY`), ``warm`` whether
    ``v`` is warm, and counters over the accepted steps of the solve (int64 scalars):
    ``evals`` field evaluations, ``jvps`` Jacobian–vector products, ``most`` the most stages of
    one (sub)step, ``substeps`` substeps (``k`` summed over steps)."""

    v: jax.Array
    rho: jax.Array
    warm: jax.Array
    evals: jax.Array
    jvps: jax.Array
    most: jax.Array
    substeps: jax.Array


class RKC(diffrax.AbstractAdaptiveSolver):
    """The damped Runge–Kutta–Chebyshev method RKC (order 2, error estimate ``O(h³)``) with the
    stage number chosen every step from a power-iteration estimate of the spectral radius on exact
    Jacobian–vector products (the module's docstring: the scheme, the rules and their sources).

    **Fields:** ``rtol`` the step controller's relative tolerance (sets the stage cap,
    :func:`stage_cap`; a float or a traced scalar); ``safety`` (:data:`SAFETY`), ``damping``
    (:data:`DAMPING`), ``power_cold`` / ``power_warm`` (:data:`POWER_COLD`, :data:`POWER_WARM`)
    static.

    Use with a :class:`diffrax.PIDController`. The step's ``result`` is
    ``diffrax.RESULTS.breakdown`` (the engine's status ``solver_failed``) if the spectral
    estimate is not finite (a Jacobian–vector product of the field gave NaN/inf at a finite
    state), and the step's state is then returned unchanged with a zero error estimate, so that the
    step controller keeps it and the engine's solve loop ends on the failure at the step's start
    (:func:`gradflow._engine.loop.solve`: a failed step is not taken); an infinite estimate would
    instead be rejected over and over until the step collapses (status ``stalled``)."""

    rtol: object = 1e-8
    safety: float = eqx.field(static=True, default=SAFETY)
    damping: float = eqx.field(static=True, default=DAMPING)
    power_cold: int = eqx.field(static=True, default=POWER_COLD)
    power_warm: int = eqx.field(static=True, default=POWER_WARM)
    term_structure: ClassVar = diffrax.AbstractTerm
    interpolation_cls: ClassVar = diffrax.ThirdOrderHermitePolynomialInterpolation

    def order(self, terms):
        return 2

    def error_order(self, terms):
        return 3

    def init(self, terms, t0, t1, y0, args):
        flat0, _ = ravel_pytree(y0)
        n_p = _split(y0)
        v = jnp.asarray(np.random.RandomState(7).standard_normal(n_p), flat0.dtype)
        z = jnp.zeros((), jnp.int64)
        return RKCState(v, jnp.zeros((), flat0.dtype), jnp.zeros((), bool), z, z, z, z)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        del made_jump
        flat0, unravel = ravel_pytree(y0)
        n_p = _split(y0)
        n = flat0.size

        def f(t, x):
            return ravel_pytree(terms.vf(t, unravel(x), args))[0]

        h = jnp.asarray(t1 - t0, flat0.dtype)
        # ρ of the parameter block of ∂f(τ1, ·)/∂y at y0 (the quadrature rows add no eigenvalue);
        # one forward-over-reverse product per iteration (``jax.linearize`` would cost a pass more
        # for the one or two products of a warm start)
        pad = jnp.zeros((n - n_p,), flat0.dtype)
        full = (lambda v: jnp.concatenate([v, pad])) if n > n_p else (lambda v: v)
        jvp = lambda v: jax.jvp(lambda x: f(t1, x), (flat0,), (full(v),))[1][:n_p]
        warm = solver_state.warm
        max_it = jnp.where(warm, self.power_warm, self.power_cold)
        rho, v, its = spectral_radius(jvp, solver_state.v, max_it, min_iterations=jnp.where(warm, self.power_warm, 2))
        ok = jnp.isfinite(rho)
        k, s = stages_for(jnp.where(ok, self.safety * rho * h, 0.0), stage_cap(self.rtol))
        f0 = f(t0, flat0)
        hk = h / k.astype(h.dtype)

        def substep(c):
            i, y, fy, err = c
            ti = t0 + i.astype(h.dtype) * hk
            y1, f1, e = rkc_step(f, ti, hk, y, fy, s, self.damping)
            return i + 1, y1, f1, err + e

        carry = (jnp.zeros((), jnp.int32), flat0, f0, jnp.zeros_like(flat0))
        _, flat1, f1, err = jax.lax.while_loop(lambda c: (c[0] < k) & ok, substep, carry)
        err = jnp.where(ok, err, 0.0)  # the controller keeps it; the loop then ends on the failed result
        k64, s64 = k.astype(jnp.int64), s.astype(jnp.int64)
        state = RKCState(v=jnp.where(ok, v, solver_state.v), rho=rho, warm=ok | solver_state.warm,
                         evals=solver_state.evals + 1 + k64 * s64, jvps=solver_state.jvps + its.astype(jnp.int64),
                         most=jnp.maximum(solver_state.most, s64), substeps=solver_state.substeps + k64)
        y1 = unravel(flat1)
        dense_info = dict(y0=y0, y1=y1, k0=unravel(h * f0), k1=unravel(h * f1))
        result = diffrax.RESULTS.where(ok, diffrax.RESULTS.successful, diffrax.RESULTS.breakdown)
        return y1, unravel(err), dense_info, state, result

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)
