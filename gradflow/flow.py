"""The gradient-flow vector field (paper Eqs. 2–4) and its log-time reparametrisation.

State ``y = (V, a, Γ)``. In flow time ``t``:

* ``dV/dt = −∇_V L``, ``da/dt = −∇_a L`` (autodiff of ``L(V, a) = ℓ(β(V, a))``; for the
  value-softmax model this is ``dV/dt = r sᵀ``, ``da/dt = J(s) Vᵀ r``, SPEC §3.1);
* ``dΓ/dt = γ(β)`` — the polarisation coefficient carried as a quadrature state (SPEC §3.5).

The integrator runs in ``τ = log(1 + t)``, where ``dy/dτ = (1 + t)·dy/dt``. The late-time
dynamics of the logistic flow (loss ≈ 1/t, ``u_0 ≈ log t``) are smooth in ``τ``, so
``t = 1e12`` (``τ ≈ 27.6``) and ``t = 1e30`` (``τ ≈ 69``) take a few hundred steps.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from . import maps as _maps
from .losses import AbstractLoss
from .models import AbstractModel

__all__ = ["gradient_field", "flow_field", "log_time_field", "t_of_tau", "tau_of_t"]


def gradient_field(model: AbstractModel, loss: AbstractLoss, V: Array, a: Array) -> tuple[Array, Array]:
    """``(dV/dt, da/dt) = −∇L(V, a)`` (paper Eqs. 2–4). Shapes and dtypes as ``V`` and ``a``.

    Autodiff throughout, except that for the softmax map (models that do not override
    ``weights``/``loss``) the softmax's own derivative is applied in the exact centred form :func:`gradflow.maps.softmax_vjp`: plain autodiff loses the top
    logit's velocity (and ``Σ_i da_i/dt = 0``) once the logit gap exceeds ~37 in float64.
    """
    if not _plain_softmax(model):
        gV, ga = jax.grad(lambda V_, a_: model.loss(loss, V_, a_), argnums=(0, 1))(V, a)
        return -gV, -ga
    z, logits_vjp = jax.vjp(model.logits, V, a)
    s = _maps.softmax(z / model.temperature)
    gV, gs = jax.grad(lambda V_, s_: model.loss_of_weights(loss, V_, s_), argnums=(0, 1))(V, s)
    gz = (_maps.softmax_vjp(s, gs) / model.temperature).astype(z.dtype)
    gV_logits, ga = logits_vjp(gz)
    return -(gV + gV_logits).astype(V.dtype), -ga


def _plain_softmax(model: AbstractModel) -> bool:
    """Whether ``L = loss_of_weights(V, softmax(logits(V, a) / T))`` holds as the base class
    defines it (a subclass that overrides ``weights`` or ``loss`` is differentiated as written)."""
    cls = type(model)
    return (
        model.normalization == "softmax"
        and cls.weights is AbstractModel.weights
        and cls.loss is AbstractModel.loss
    )


def flow_field(model: AbstractModel, loss: AbstractLoss, y: tuple) -> tuple:
    """``dy/dt`` for ``y = (V, a, Γ)`` in flow time."""
    V, a, _ = y
    dV, da = gradient_field(model, loss, V, a)
    return dV, da, model.gamma(loss, V, a)


def t_of_tau(tau: Float[Array, "..."]) -> Float[Array, "..."]:
    """Flow time ``t = exp(τ) − 1``."""
    return jnp.expm1(tau)


def tau_of_t(t: Float[Array, "..."]) -> Float[Array, "..."]:
    """Log time ``τ = log(1 + t)``."""
    return jnp.log1p(t)


def log_time_field(tau, y, args):
    """``dy/dτ = (1 + t)·dy/dt`` with ``t = expm1(τ)``; ``args = (model, loss)`` (diffrax signature)."""
    model, loss = args
    scale = jnp.exp(tau)
    return jax.tree.map(lambda f: scale * f, flow_field(model, loss, y))
