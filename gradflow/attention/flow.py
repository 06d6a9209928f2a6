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
from .._errors import bad_arg
from .losses import AbstractLoss
from .models import AbstractModel

__all__ = ["gradient_field", "flow_field", "log_time_field", "t_of_tau", "tau_of_t"]


def gradient_field(model: AbstractModel, loss: AbstractLoss, V: Array, a: Array) -> tuple[Array, Array]:
    """``(dV/dt, da/dt) = −∇L(V, a)`` (paper Eqs. 2–4). Shapes and dtypes as ``V`` and ``a``.

    Autodiff throughout, with these exceptions for models that do not override ``weights``/``loss``:
    the L1 map slides along its kinks (:func:`_l1_sliding_field`), and the softmax's own
    derivative is applied in the exact centred form :func:`gradflow.attention.maps.softmax_vjp` (plain
    autodiff loses the top logit's velocity, and ``Σ_i da_i/dt = 0``, once the logit gap exceeds
    ~37 in float64). At the kinks of ``relu`` and ``sparsemax`` autodiff already gives the
    Filippov field, the limit of gradient descent, when the logits are ``a`` itself; for a model
    whose logits depend on other parameters (the tied model) all three kinked maps slide along
    their kinks by :func:`_kink_sliding_field` (:data:`KINKED_MAPS`).

    **Raises:** :class:`gradflow.GradflowValueError` (while tracing) for a kinked map on a model
    that overrides ``logits`` with logits that are not one vector ``(n,)`` (the sliding rule solves
    for one vector; such a model is refused rather than integrated without it).
    """
    if _logits_move(model) and any(_plain_map(model, name) for name in KINKED_MAPS):
        return _kink_sliding_field(model, loss, V, a)
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


def _logits_move(model: AbstractModel) -> bool:
    """Whether the model's logits are a function of more than ``a`` (it overrides ``logits``, as
    the tied model's ``z = U a`` does): a logit held at its kink then needs the other
    parameters' motion accounted for (:func:`_kink_sliding_field`)."""
    return type(model).logits is not AbstractModel.logits


KINK_BAND = 1e-9
"""L1 map: a logit with ``|z_i| ≤ KINK_BAND·max_j |z_j|`` counts as at its kink ``z_i = 0``."""

SLIDING_BAND = 1e-6
"""Logits that depend on other parameters (:func:`_kink_sliding_field`): a logit with
``|h_i| ≤ SLIDING_BAND·max_j |h_j|`` (``h`` the signed distance to the kink) counts as at its kink."""

SLIDING_RESTORE = 1.0
""":func:`_kink_sliding_field`: a sliding logit is steered to ``ḣ_i = −r_i h_i`` rather than ``0``,
``r_i = SLIDING_RESTORE · (jump of ḣ_i across the kink) / max_j |h_j|`` (about one over the time
the logit's own motion takes to cross the scale of ``h``), so that integration errors do not carry
it out of :data:`SLIDING_BAND`; ``|r_i h_i| ≤ 1e-6`` of that jump."""

SLIDING_ITERATIONS = 8
"""Active-set iterations of :func:`_kink_sliding_field` (each one ``n × n`` solve, and one more
for the final sets); a set of
sliding logits it has not settled in this many gives a ``NaN`` field (status ``nonfinite``)."""

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

Logits that depend on other parameters (the tied model ``z = U a``, any model that overrides
``logits``): a logit at its kink is moved by ``U`` and ``a``, and the field may point towards the
kink from both sides, so the flow *slides* along it (for all three maps; the rules above are not
exact there: the chatter ends the run at ``max_steps``). :func:`_kink_sliding_field` takes the
smallest element of the convex hull of the one-sided gradients, the field a Filippov solution of
a gradient flow follows: a sliding logit's velocity is ``0`` and its side is decided by the
field, a logit within :data:`SLIDING_BAND` of its kink counts as at it, and a restoring term
steers sliding logits back to the kink. The value-softmax and row-wise models keep the rules
above (their fields are unchanged bit for bit).

Where it can be fooled: (1) with ``z = U a`` the kink is curved in ``(U, a)``, and a step that
starts on it evaluates its stages ``O(h²)`` off it; :data:`SLIDING_BAND` (``1e-6`` relative,
against :data:`KINK_BAND`'s ``1e-9``) keeps them inside at the steps the tolerance allows (at
``1e-9``, with 4000 steps, 20 of 24 tied runs still ended ``max_steps``), at a price: a logit that reaches its kink is
captured up to ``1e-6·max|h|`` early and relaxes onto it over a flow time, so the state there is
accurate to ``~1e-6``; runs take more steps (tied, n = 6, to ``1e12``: median 374 for
sparsemax, 1613 for relu, 2929 for l1, at most 5816: ``benchmarks/NOTES.md``, "Kinked maps"; the
rules for users: docs, Solvers and statuses, Kinks).
(2) sparsemax with two or more logits at the kink at once: the hull used is spanned by one-logit flips (a
parallelotope), not by all ``2^k`` supports; when all of them slide the field is the same (the
one tangent to every kink), but which of them leave is decided on the parallelotope. (3) a
concave kink (``L`` bends down across it) never slides: its logit keeps the side it is on
(``relu'(0) = 0`` at ``0``), which is how GD resolves such a non-unique Filippov solution.
(4) the relu map's denominator ``Σ relu(z)`` is no longer conserved, and can reach ``0`` (the
last positive logit driven to its kink): the map is undefined there and the run ends
``nonfinite`` or ``stalled`` (measured: 1 of 12 relu seeds). (5) logits that are not one
vector (row-wise logits that depend on ``V``) are refused with :class:`gradflow.GradflowValueError`.

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


def _kink_sides(name: str, zt: Array, gs: Array, band: float):
    """One kinked map's pieces at the logits ``zt`` (shape ``(n,)``) with ``gs = ∂ℓ/∂s``:
    ``(h, gz0, c, u)``, each of shape ``(n,)``.

    ``h`` is the signed distance to the kink (positive on the side where the logit's weight
    moves with it: relu ``z_i``, sparsemax ``z_i − τ``, l1 ``z_i``); a logit with ``|h_i| ≤ band``
    is at its kink. ``gz0 = ∂L/∂z`` with every logit at its kink on the other side
    (``relu'(0) = 0``: outside; l1: the negative side), ``c_i`` the jump of ``∂L/∂z`` when
    kinked logit ``i`` alone goes to the positive side, along ``e_i − u·1_{u>0}`` (``u = 0``
    except sparsemax, ``1_{S0}/|S0|`` on the strict support ``S0``: the threshold moves with the
    support). ``c_i > 0`` is a convex kink (``L ≈ c_i·relu(h_i)`` nearby, or ``c_i/2·|h_i|``
    for l1), where the flow can slide; ``c_i ≤ 0`` a concave one, which it never slides along."""
    zero = jnp.zeros_like(zt)
    if name == "relu":
        p = jax.nn.relu(zt)
        s = p / jnp.sum(p)
        inside_grad = (gs - jnp.sum(s * gs)) / jnp.sum(p)
        h = zt
        kinked = jnp.abs(h) <= band * jnp.max(jnp.abs(h))
        return h, jnp.where(kinked | (h < 0), 0.0, inside_grad), jnp.where(kinked, inside_grad, 0.0), zero
    if name == "l1":  # s = |z|/Σ|z|; gm = ∂L/∂|z|
        m = jnp.abs(zt)
        gm = (gs - jnp.sum(m * gs) / jnp.sum(m)) / jnp.sum(m)
        h = zt
        kinked = m <= band * jnp.max(m)
        side = jnp.where(kinked | (h < 0), -1.0, 1.0).astype(zt.dtype)
        return h, side * gm, jnp.where(kinked, 2.0 * gm, 0.0), zero
    # sparsemax: s = relu(z − τ), τ = (Σ_support z − 1)/|support|
    s = _maps.sparsemax(zt)
    on = s > 0
    tau = (jnp.sum(jnp.where(on, zt, 0.0)) - 1.0) / jnp.sum(on)
    h = zt - tau
    # the largest logit is on the support whatever the band (so the strict support is never empty)
    kinked = (jnp.abs(h) <= band * jnp.max(jnp.abs(h))) & (zt < jnp.max(zt))
    strict = (h > 0) & ~kinked
    k0 = jnp.sum(strict).astype(zt.dtype)
    m0 = jnp.sum(jnp.where(strict, gs, 0.0)) / k0
    gz0 = jnp.where(strict, gs - m0, 0.0)
    c = jnp.where(kinked, k0 / (k0 + 1.0) * (gs - m0), 0.0)
    return h, gz0, c, jnp.where(strict, 1.0 / k0, 0.0)


def _kink_sliding_field(model: AbstractModel, loss: AbstractLoss, V: Array, a: Array) -> tuple[Array, Array]:
    """``−∇L`` for a kinked map (:data:`KINKED_MAPS`) whose logits ``z = logits(V, a)/T`` depend
    on more than ``a`` (the tied model ``z = U a``), with Filippov sliding at the kinks.

    **Arguments:** ``V`` and ``a`` as the model takes them (tied: ``U`` of shape ``(D, D)``,
    ``a`` of shape ``(D,)``, float64); the logits must be one vector ``(n,)``.
    **Returns:** ``(dV/dt, da/dt)``, shapes and dtypes of ``V`` and ``a``.

    The rule. Near a point where the logits in ``I`` sit at their kinks (:data:`SLIDING_BAND`,
    relative to the largest ``|h|`` of :func:`_kink_sides`), ``L`` is smooth on each side of each
    kink, and the Filippov set of ``−∇L`` is the convex hull of the one-sided gradients. Their
    differences are normal to the kinks (``L`` is continuous across them), so the one element of
    the hull's affine span that is tangent to every kink is the span's point of least norm: where
    it lies in the hull it is the hull's smallest element, the field a sliding Filippov solution
    follows (in general a Filippov solution of a gradient flow of a tame ``L`` moves with the
    smallest element a.e.: Davis, Drusvyatskiy, Kakade & Lee 2020, *Stochastic subgradient method
    converges on tame functions*, Sec. 5). The one-sided cotangents are
    ``∂L/∂z = gz0 + Σ_{i∈I} σ_i c_i (e_i − u)`` with ``σ ∈ {0, 1}^I`` (relu and l1: the sides of
    different logits add up, so ``σ ∈ [0, 1]^I`` spans the hull exactly; sparsemax: exactly when
    ``|I| = 1``, otherwise ``σ ∈ [0, 1]^I`` spans the parallelotope on the one-logit flips), so
    with ``w = σ ⊙ c``, ``J = ∂z/∂(V, a)`` and ``K = (I − 1uᵀ) J Jᵀ (I − u1ᵀ)`` the kink velocities
    are ``ḣ(w) = ḣ(0) − K w``, and ``½‖field‖²`` has gradient ``−c ⊙ ḣ`` in ``σ``. Its minimiser
    over the box satisfies, for each convex kink (``c_i > 0``): ``ḣ_i = 0`` with ``0 < σ_i < 1``
    (the logit *slides*: the field points towards the kink from both sides), or ``σ_i = 0`` with
    ``ḣ_i ≤ 0`` (it leaves to, or stays on, the outside), or ``σ_i = 1`` with ``ḣ_i ≥ 0`` (to the
    inside). It is found by a primal–dual active-set iteration (:data:`SLIDING_ITERATIONS` masked
    ``n × n`` solves, fixed shapes, ``NaN`` if unsettled), with ``ḣ_i = 0`` replaced by the
    restoring target ``ḣ_i = −r_i h_i`` (:data:`SLIDING_RESTORE`). A concave kink (``c_i ≤ 0``)
    repels or is crossed: its logit takes the side it is on (``σ_i = 1`` for ``h_i > 0``, else
    ``0``: ``relu'(0) = 0``, as gradient descent). Away from the kinks this is ``−∇L``. ``J Jᵀ``
    comes from ``n`` VJP–JVP pairs of ``logits``.

    **Raises:** :class:`gradflow.GradflowValueError` (while tracing) if the logits are not a
    vector.
    """
    T = model.temperature
    z, logits_vjp = jax.vjp(model.logits, V, a)
    if z.ndim != 1:
        raise bad_arg("logits", tuple(z.shape), "one vector of logits (n,) for the kink sliding rule of "
                      f"the {model.normalization!r} map (row-wise logits that depend on V are not handled)")
    zt = z / T
    n = zt.shape[0]
    gV, gs = jax.grad(lambda V_, s_: model.loss_of_weights(loss, V_, s_), argnums=(0, 1))(
        V, _maps.get_map(model.normalization)(zt))
    h, gz0, c, u = _kink_sides(model.normalization, zt, gs.astype(zt.dtype), SLIDING_BAND)
    eye = jnp.eye(n, dtype=zt.dtype)
    lift = eye - jnp.outer(u, jnp.ones_like(u))  # w ↦ Σ w_i (e_i − u)

    def field(gz):
        gV_logits, ga = logits_vjp((gz / T).astype(z.dtype))
        return -(gV + gV_logits).astype(V.dtype), -ga

    def velocity(f):  # ż for the field f
        return jax.jvp(model.logits, (V, a), f)[1] / T

    gram = jax.vmap(lambda e: jax.jvp(model.logits, (V, a), logits_vjp(e))[1])(eye) / T**2  # J Jᵀ/T²
    K = lift.T @ gram @ lift
    kinked = c != 0
    convex = c > 0
    # restoring term (SLIDING_RESTORE): c_i K_ii is the jump of ḣ_i between the two sides
    rate = jnp.where(convex, c * jnp.diagonal(K), 0.0) / jnp.max(jnp.abs(h)) * SLIDING_RESTORE
    hdot0 = lift.T @ velocity(field(gz0)) + rate * h
    w_fixed = jnp.where(~convex & (h > 0), c, 0.0)  # concave kinks: the side they are on

    def solve(free, hi):
        w_nf = jnp.where(free, 0.0, jnp.where(hi, c, w_fixed))
        A = jnp.where(free[:, None] & free[None, :], K, 0.0) + jnp.diag(jnp.where(free, 0.0, 1.0))
        w = jnp.linalg.solve(A, jnp.where(free, hdot0 - K @ w_nf, w_nf))
        return w, hdot0 - K @ w

    def update(sets):
        """The next active sets, and ``w`` solved on the current ones."""
        lo, hi = sets
        free = convex & ~lo & ~hi
        w, hdot = solve(free, hi)
        lo_new = convex & ((free & (w < 0)) | (lo & (hdot <= 0)))
        hi_new = convex & ((free & (w > c)) | (hi & (hdot >= 0)))
        return (lo_new, hi_new), w

    none = jnp.zeros(n, bool)
    lo, hi = jax.lax.fori_loop(0, SLIDING_ITERATIONS, lambda _, sets: update(sets)[0], (none, none))
    (lo_next, hi_next), w = update((lo, hi))  # w on the final sets; they are settled if unchanged
    settled = jnp.all(lo_next == lo) & jnp.all(hi_next == hi)
    gz = gz0 + lift @ jnp.where(kinked, w, 0.0)
    gz = jnp.where(settled, gz, jnp.nan)
    return field(gz)


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
