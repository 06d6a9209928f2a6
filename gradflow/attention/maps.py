"""Normalisation maps ``a ↦ weights`` (the paper's appendix normalisation experiments and Table 1).

Every map acts on the last axis of its input, so the same function serves a vector of
logits ``a`` of shape ``(n,)`` and a matrix of row logits ``A`` of shape ``(T, T)``.
Gradients come from JAX autodiff; none of the maps adds a silent epsilon.

Denominator guard (for the normalised maps ``l1``, ``sum``, ``l2``, ``relu``,
``sigmoid-norm``, ``elu-norm``): where a row's denominator is exactly ``0`` the weights
are undefined, and the map returns ``NaN`` for that row (computed with the "double
``where``" so gradients elsewhere stay finite). The flow reports this as status
``nonfinite`` with the time it happened rather than integrating through it.

Smoothness: ``softmax``, ``l2`` (away from ``z = 0``), ``sigmoid``, ``sigmoid-norm`` and
``linear`` are smooth; ``elu``/``elu-norm`` are C¹; ``l1`` and ``relu`` have kinks where a
coordinate reaches ``0``, ``sparsemax`` where one leaves its support (the flow's rule at each:
:data:`gradflow.attention.flow.KINKED_MAPS`), and ``sum`` is singular where ``Σ z`` crosses ``0``.
:data:`SMOOTH_MAPS` lists the smooth ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._errors import bad_arg
from .._softmax import softmax as _centred_softmax

__all__ = [
    "MAPS",
    "SMOOTH_MAPS",
    "NORMALISED_MAPS",
    "get_map",
    "apply_map",
    "softmax_entropy",
    "softmax_vjp",
    "weights_entropy",
]


def _normalize(num: Float[Array, "... n"]) -> Float[Array, "... n"]:
    """``num / Σ num`` over the last axis, ``NaN`` where the sum is exactly zero."""
    den = jnp.sum(num, axis=-1, keepdims=True)
    zero = den == 0
    safe = jnp.where(zero, jnp.ones_like(den), den)
    return jnp.where(zero, jnp.full_like(num, jnp.nan), num / safe)


def softmax(z: Float[Array, "... n"]) -> Float[Array, "... n"]:
    """Softmax over the last axis (max subtracted); its derivatives are the centred ones of
    :func:`gradflow.softmax` (exact when one weight rounds to 1)."""
    return _centred_softmax(z, axis=-1)


def softmax_vjp(s: Float[Array, "... n"], g: Float[Array, "... n"]) -> Float[Array, "... n"]:
    """``J(s) g = s ⊙ (g − ⟨s, g⟩)`` over the last axis, in a centred form that stays exact when
    ``1 − s_max`` rounds to ``0`` (``J(s)`` of paper Eqs. 2–4; docs: Solvers and statuses, numerical rules).

    Autodiff of softmax computes ``s_m (g_m − ⟨s, g⟩)`` for the top weight ``s_m ≈ 1``: ``⟨s, g⟩``
    rounds to ``g_m`` once the other weights fall below the float epsilon (logit gaps ≳ 37 in
    float64), and the top component comes out ``0`` or of the wrong sign, so ``Σ J g ≠ 0``.
    Here ``g`` is first centred at the top index ``m``: ``c = (g − g_m) − ⟨s, g − g_m⟩``, whose
    ``m``-th entry ``−Σ_{j≠m} s_j (g_j − g_m)`` has no cancellation. Entries with equal ``s`` and
    ``g`` get bitwise-equal results (ties stay exactly tied).

    **Arguments:** ``s`` softmax weights and ``g`` a cotangent, same shape ``(..., n)``.
    **Returns:** ``J(s) g``, shape and dtype of ``s``.
    """
    m = jnp.argmax(s, axis=-1, keepdims=True)
    gc = g - jnp.take_along_axis(g, m, axis=-1)
    return s * (gc - jnp.sum(s * gc, axis=-1, keepdims=True))


def l1(z):
    """``|z| / Σ |z|``."""
    return _normalize(jnp.abs(z))


def signed_sum(z):
    """``z / Σ z`` (signed; singular where ``Σ z = 0``)."""
    return _normalize(z)


def l2(z):
    """``z² / Σ z²``."""
    return _normalize(z * z)


def relu_norm(z):
    """``relu(z) / Σ relu(z)``."""
    return _normalize(jax.nn.relu(z))


def sigmoid(z):
    """Element-wise logistic sigmoid, not normalised."""
    return jax.nn.sigmoid(z)


def sigmoid_norm(z):
    """``σ(z) / Σ σ(z)``."""
    return _normalize(jax.nn.sigmoid(z))


def elu_plus_one(z):
    """``elu(z) + 1`` element-wise, not normalised (positive)."""
    return jax.nn.elu(z) + 1.0


def elu_norm(z):
    """``(elu(z) + 1) / Σ (elu(z) + 1)``."""
    return _normalize(jax.nn.elu(z) + 1.0)


def linear(z):
    """The identity map (no normalisation)."""
    return z


def sparsemax(z: Float[Array, "... n"]) -> Float[Array, "... n"]:
    """Euclidean projection of ``z`` onto the simplex (Martins & Astudillo, 2016)."""
    n = z.shape[-1]
    zs = jnp.flip(jnp.sort(z, axis=-1), axis=-1)
    k = jnp.arange(1, n + 1, dtype=z.dtype)
    cums = jnp.cumsum(zs, axis=-1)
    support = 1 + k * zs > cums
    k_z = jnp.sum(support, axis=-1, keepdims=True)
    tau = (jnp.take_along_axis(cums, k_z.astype(jnp.int32) - 1, axis=-1) - 1) / k_z.astype(z.dtype)
    return jax.nn.relu(z - tau)


MAPS: dict[str, Callable[[Array], Array]] = {
    "softmax": softmax,
    "l1": l1,
    "sum": signed_sum,
    "l2": l2,
    "relu": relu_norm,
    "sigmoid": sigmoid,
    "sigmoid-norm": sigmoid_norm,
    "elu": elu_plus_one,
    "elu-norm": elu_norm,
    "linear": linear,
    "sparsemax": sparsemax,
}
"""Registry of normalisation maps by name (the paper's appendix normalisation experiments)."""

SMOOTH_MAPS = frozenset({"softmax", "l2", "sigmoid", "sigmoid-norm", "linear"})
"""Maps that are smooth wherever they are defined (safe for high-order adaptive solvers)."""

NORMALISED_MAPS = frozenset({"softmax", "l1", "sum", "l2", "relu", "sigmoid-norm", "elu-norm", "sparsemax"})
"""Maps whose weights sum to one."""


def get_map(name: str) -> Callable[[Array], Array]:
    """Return the map registered as ``name``.

    **Raises:** :class:`gradflow.GradflowValueError` for an unknown name.
    """
    try:
        return MAPS[name]
    except (KeyError, TypeError):
        raise bad_arg("normalization", name, f"one of {sorted(MAPS)}") from None


def apply_map(
    a: Float[ArrayLike, "... n"], normalization: str = "softmax", temperature: float | Float[ArrayLike, ""] = 1.0
) -> Float[Array, "... n"]:
    """Weights ``map(a / temperature)`` over the last axis.

    **Arguments:** ``a`` logits, any shape ``(..., n)``, floating; ``normalization`` a name of
    :data:`MAPS` (default ``"softmax"``); ``temperature`` ``T > 0`` (default ``1``; for
    softmax the usual temperature, for other maps a rescaling of the logits).

    **Returns:** the weights, same shape and dtype as ``a``.

    **Raises:** :class:`gradflow.GradflowValueError` for an unknown name or a concrete
    ``temperature`` that is not positive and finite.
    """
    fn = get_map(normalization)
    if not isinstance(temperature, jax.core.Tracer) and jnp.ndim(temperature) == 0:
        if isinstance(temperature, bool) or not (float(temperature) > 0 and math.isfinite(float(temperature))):
            raise bad_arg("temperature", temperature, "a positive finite number")
    return fn(a / temperature)


def softmax_entropy(a: Float[ArrayLike, "... n"], temperature: float | Float[ArrayLike, ""] = 1.0) -> Float[Array, "..."]:
    """Entropy (nats) of ``softmax(a / T)`` computed from logits (docs: Solvers and statuses, numerical rules).

    ``H = −Σ exp(logp)·logp`` with ``logp = log_softmax(a / T)``; value and gradient stay
    finite when a weight underflows to exactly ``0``.
    """
    logp = jax.nn.log_softmax(a / temperature, axis=-1)
    return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


def weights_entropy(s: Float[ArrayLike, "... n"]) -> Float[Array, "..."]:
    """Entropy (nats) of ``|s| / Σ|s|`` (the normalised magnitudes of the weights).

    Used for maps other than softmax (for non-negative maps this is the entropy of the
    normalised weights). Zero weights contribute ``0`` (double ``where``); an all-zero row
    has entropy ``0``.
    """
    m = jnp.abs(s)
    total = jnp.sum(m, axis=-1, keepdims=True)
    p = m / jnp.where(total > 0, total, 1.0)
    pos = p > 0
    safe = jnp.where(pos, p, 1.0)
    return -jnp.sum(jnp.where(pos, p * jnp.log(safe), 0.0), axis=-1)
