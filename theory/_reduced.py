"""Independent integrations of the reduced systems (paper Eqs. 2–4, 6–7 and Lemma 3.5), written out by hand
(no autodiff of the loss, no engine field) and solved with their own diffrax solve.

Two systems share one state ``y = (u_L, a, u_P, s)``, all of shape ``(n,)``:

* logit space, the reduced ``(u, a)`` system (paper Eqs. 6–7 with the sign corrected, see docs: The model and equations; Lemma 3.5 for the square loss)::

      σ = softmax(a),  u̇_L = γ ‖β*‖² σ,  ȧ = γ σ ⊙ (u_L − ⟨σ, u_L⟩)

* probability space, the replicator ODE ``ds/dt = J(s)² Vᵀ r`` with ``Vᵀ r = γ u``
  (paper Eqs. 2–4)::

      u̇_P = γ ‖β*‖² s,  ṡ = γ J(s)^p u_P,  J(s) = diag(s) − s sᵀ

with ``γ = 1/(1 + exp⟨s, u⟩)`` (logistic teacher) or ``γ = 1 − ⟨s, u⟩/‖β*‖²`` (square target,
rank-one ``V``). ``p = 2`` is the correct power; ``p = 1`` is a deliberately wrong replicator
used as a negative control. Integrated in ``τ = log(1 + t)`` with Tsit5 (an explicit solver
unlike the engine's Dopri8/Kvaerno5) at tighter tolerances.
"""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["integrate_reduced"]


def _field(tau, y, args):
    b2, is_square, power = args
    uL, a, uP, s = y
    sig = jax.nn.softmax(a)
    mL = jnp.dot(sig, uL)
    mP = jnp.dot(s, uP)
    gL = jnp.where(is_square, 1.0 - mL / b2, jax.nn.sigmoid(-mL))
    gP = jnp.where(is_square, 1.0 - mP / b2, jax.nn.sigmoid(-mP))
    duL = gL * b2 * sig
    da = gL * sig * (uL - mL)
    duP = gP * b2 * s
    Ju = s * uP - s * mP  # J(s) u
    J2u = s * Ju - s * jnp.dot(s, Ju)  # J(s)² u
    ds = gP * jnp.where(power == 2, J2u, Ju)
    scale = jnp.exp(tau)  # dy/dτ = (1 + t) dy/dt
    return tuple(scale * f for f in (duL, da, duP, ds))


@eqx.filter_jit
def _solve(u0, a0, s0, b2, is_square, power, taus, max_steps):
    def one(u0_, a0_, s0_, b2_):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(_field),
            diffrax.Tsit5(),
            t0=0.0,
            t1=taus[-1],
            dt0=None,
            y0=(u0_, a0_, u0_, s0_),
            args=(b2_, is_square, power),
            stepsize_controller=diffrax.PIDController(rtol=1e-11, atol=1e-13),
            saveat=diffrax.SaveAt(ts=taus),
            max_steps=max_steps,
            throw=False,
        )
        return sol.ys, sol.result == diffrax.RESULTS.successful

    return jax.vmap(one)(u0, a0, s0, b2)


def integrate_reduced(u0, a0, beta_norm2, ts, *, square: bool = False, power: int = 2, max_steps: int = 65536):
    """Integrate both reduced systems for a batch of ``B`` runs and save at flow times ``ts``.

    **Arguments:** ``u0 (B, n)`` = ``V(0)ᵀβ*``; ``a0 (B, n)``; ``beta_norm2 (B,)`` = ``‖β*‖²``;
    ``ts (T,)`` increasing flow times starting at 0; ``square`` selects ``γ`` of the square
    target (Lemma 3.5) instead of the logistic teacher; ``power`` the power of ``J`` in the
    replicator (2 correct, 1 the wrong control).

    **Returns:** dict of NumPy arrays ``u_logit, a, u_replicator, s`` of shape ``(B, T, n)`` and
    ``ok (B,)`` (solver success).
    """
    u0 = jnp.asarray(u0, jnp.float64)
    a0 = jnp.asarray(a0, jnp.float64)
    s0 = jax.nn.softmax(a0, axis=-1)
    taus = jnp.log1p(jnp.asarray(ts, jnp.float64))
    ys, ok = _solve(
        u0, a0, s0, jnp.asarray(beta_norm2, jnp.float64), jnp.asarray(square), jnp.asarray(power), taus, max_steps
    )
    uL, a, uP, s = (np.asarray(x) for x in ys)
    return dict(u_logit=uL, a=a, u_replicator=uP, s=s, ok=np.asarray(ok))
