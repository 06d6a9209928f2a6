"""The gradient-flow vector field (paper Eqs. 2–4) and its log-time reparametrisation.

State ``y = (V, a, Γ)``. In flow time ``t``:

* ``dV/dt = −∇_V L``, ``da/dt = −∇_a L`` (autodiff of ``L(V, a) = ℓ(β(V, a))``; for the
  value-softmax model this is ``dV/dt = r sᵀ``, ``da/dt = J(s) Vᵀ r``, paper Eqs. 2–4);
* ``dΓ/dt = γ(β)`` — the polarisation coefficient carried as a quadrature state (paper Thm 3.3).

The integrator runs in ``τ = log(1 + t)``, where ``dy/dτ = (1 + t)·dy/dt``. The late-time
dynamics of the logistic flow (loss ≈ 1/t, ``u_0 ≈ log t``) are smooth in ``τ``, so
``t = 1e12`` (``τ ≈ 27.6``) and ``t = 1e30`` (``τ ≈ 69``) take a few hundred steps.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from . import maps as _maps
from .losses import AbstractLoss
from .models import AbstractModel

__all__ = ["gradient_field", "flow_field", "log_time_field", "t_of_tau", "tau_of_t"]


def gradient_field(model: AbstractModel, loss: AbstractLoss, V: Array, a: Array) -> tuple[Array, Array]:
    """``(dV/dt, da/dt) = −∇L(V, a)`` (paper Eqs. 2–4). Shapes and dtypes as ``V`` and ``a``.

    Autodiff throughout, with two exceptions for models that do not override ``weights``/``loss``:
    the L1 map slides along its kinks (:func:`_l1_sliding_field`), and the softmax's own
    derivative is applied in the exact centred form :func:`gradflow.maps.softmax_vjp` (plain
    autodiff loses the top logit's velocity, and ``Σ_i da_i/dt = 0``, once the logit gap exceeds
    ~37 in float64). At the kinks of ``relu`` and ``sparsemax`` autodiff already gives the
    Filippov field, the limit of gradient descent (:data:`KINKED_MAPS`).
    """
    if _plain_map(model, "l1"):
        return _l1_sliding_field(model, loss, V, a)
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
    return _plain_map(model, "softmax")


def _plain_map(model: AbstractModel, name: str) -> bool:
    """Whether ``L = loss_of_weights(V, map(logits(V, a) / T))`` with ``map = name`` holds as the
    base class defines it."""
    cls = type(model)
    return model.normalization == name and cls.weights is AbstractModel.weights and cls.loss is AbstractModel.loss


KINK_BAND = 1e-9
"""L1 map: a logit with ``|z_i| ≤ KINK_BAND·max_j |z_j|`` counts as at its kink ``z_i = 0``."""

KINKED_MAPS = frozenset({"l1", "relu", "sparsemax"})
"""Maps whose flow has kinks, and the rule each follows there (a Filippov solution, the limit
of gradient descent as ``lr → 0``; ``z`` the logits over the temperature).

* ``l1`` (``|z|/Σ|z|``, kink ``z_i = 0``): the field may point towards the kink from both
  sides, so the flow *slides* along it: :func:`_l1_sliding_field` with :data:`KINK_BAND`.
* ``relu`` (``relu(z)/Σ relu(z)``, kink ``z_i = 0``) and ``sparsemax`` (kink ``z_i = τ(z)``,
  where ``i`` leaves the support): plain autodiff, no rule of its own. Outside the support
  (``z_i < 0``, resp. ``z_i < τ``) the weight is ``0`` and ``∂L/∂z_i = 0``. When the logits
  are ``a`` itself (value-softmax and row-wise models) that logit is frozen, and for sparsemax
  the threshold too (``Σ_{support} ż = 0`` keeps ``τ`` fixed, and ``τ`` is continuous when the
  support loses a member), so the outside field is tangent to the kink: a logit that reaches
  its kink from inside crosses it transversally (the adaptive step shrinks to the crossing; it
  ends ``~1e-9`` behind) and stays there. That is the Filippov solution which GD converges
  to: GD overshoots by ``O(lr)`` and is then frozen with zero gradient (``relu'(0) = 0``);
  no frozen logit ever comes back, since neither ``z_i`` nor ``τ`` moves. A start exactly on
  a kink is outside (``relu'(0) = 0``): frozen, as in GD. The relu map's denominator
  ``Σ relu(z)`` stays positive along this flow (the map is scale-invariant, so ``⟨z, ż⟩ = 0``
  over the support and ``‖relu(z)‖`` is constant between crossings); initial logits with none
  positive are refused with :class:`gradflow.GradflowValueError` (the map is undefined there).

Where it can be fooled: a model whose logits depend on other parameters (the tied model
``z = U a``) moves a frozen logit through them, and the field may point towards the kink
from both sides; that genuine sliding is not handled for ``relu``/``sparsemax`` (nor is the
L1 rule, which holds the logit's cotangent at ``0``, exact there): the adaptive solver
chatters across the kink and the run ends ``max_steps`` (measured: tied, n = 6, most seeds).
Crossings also cost accuracy: the step that crosses is accepted on an error estimate that
assumes a smooth field, so the end state agrees with a ``rtol = 1e-12`` run to ``~1e-6``
rather than ``1e-8`` (measured: the sparsemax norm-logistic run to ``t = 20``, 7e-7; event
location at the crossing would restore it)."""


def _l1_sliding_field(model: AbstractModel, loss: AbstractLoss, V: Array, a: Array) -> tuple[Array, Array]:
    """``−∇L`` for the L1 map ``s = |z|/Σ|z|`` (``z = logits/T``) with Filippov sliding at its kinks.

    With ``g = ∂L/∂|z|``, the field of a logit is ``dz_i = −sign(z_i)·g_i``: if ``g_i > 0`` it
    points towards ``0`` from both sides, the Filippov solution stays at ``z_i = 0`` (sliding)
    and the other coordinates move with ``z_i = 0``; if ``g_i < 0`` the logit leaves the kink.
    So a logit within :data:`KINK_BAND` of its kink gets cotangent ``0`` while ``g_i > 0`` (for
    the value-softmax model, whose logits are ``a``, this is exactly ``da_i/dt = 0``) and
    ``−g_i`` on its own side otherwise (``+`` at ``0`` exactly). Away from the kinks this is
    plain autodiff. Without it an adaptive solver chatters across ``z_i = 0`` (the field flips
    sign there) and stops at ``max_steps``.
    """
    z, logits_vjp = jax.vjp(model.logits, V, a)
    zt = z / model.temperature
    m = jnp.abs(zt)
    gV, gm = jax.grad(lambda V_, m_: model.loss_of_weights(loss, V_, _maps._normalize(m_)), argnums=(0, 1))(V, m)
    side = jnp.where(zt < 0, -1.0, 1.0).astype(z.dtype)
    at_kink = m <= KINK_BAND * jnp.max(m, axis=-1, keepdims=True)
    gz = jnp.where(at_kink & (gm > 0), 0.0, side * gm) / model.temperature
    gV_logits, ga = logits_vjp(gz.astype(z.dtype))
    return -(gV + gV_logits).astype(V.dtype), -ga


def flow_field(model: AbstractModel, loss: AbstractLoss, y: tuple) -> tuple:
    """``dy/dt`` for ``y = (V, a, Γ)`` in flow time."""
    V, a, _ = y
    dV, da = gradient_field(model, loss, V, a)
    return dV, da, model.gamma(loss, V, a)


def t_of_tau(tau: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
    """Flow time ``t = exp(τ) − 1``."""
    return jnp.expm1(tau)


def tau_of_t(t: Float[ArrayLike, "..."]) -> Float[Array, "..."]:
    """Log time ``τ = log(1 + t)``."""
    return jnp.log1p(t)


def log_time_field(tau, y, args):
    """``dy/dτ = (1 + t)·dy/dt`` with ``t = expm1(τ)``; ``args = (model, loss)`` (diffrax signature)."""
    model, loss = args
    scale = jnp.exp(tau)
    return jax.tree.map(lambda f: scale * f, flow_field(model, loss, y))
