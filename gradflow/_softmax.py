"""``softmax`` and ``log_softmax`` with derivatives that keep their digits at large logit gaps.

Values are those of :func:`jax.nn.softmax` / :func:`jax.nn.log_softmax` (max subtracted). The
derivatives differ: JAX differentiates softmax as ``s ⊙ (t − ⟨s, t⟩)``. Once one weight ``s_m``
rounds to ``1`` (a logit gap ≳ 37 in float64, ≳ 17 in float32) the ``m``-th entry
``s_m (t_m − ⟨s, t⟩)`` is the difference of two numbers that agree to the last bit: it comes out
``0`` or of the wrong sign, the derivative no longer sums to zero, and a gradient flow on a loss
built on it stalls or drifts exactly where token selection happens (the long-horizon regime of the
paper's Thm 3.3 and of max-margin attention). Here every derivative is written in the *centred*
form (the one :func:`gradflow.attention.maps.softmax_vjp` uses for the value-softmax field): entries other
than the top index ``m`` are computed directly, and the ``m``-th one as minus the sum of the
others, which has no cancellation.

Both functions carry a :func:`jax.custom_jvp` whose tangent map is a program of linear operations
chosen so that JAX's *transpose* of it (reverse mode: ``grad``, ``vjp``) is the centred VJP as
well; forward mode (``jvp``, ``jacfwd``) and higher derivatives (``hessian``) work too.

Softmax, top index ``m``, ``u = s ⊙ t``:

* JVP ``J t``: ``w = u − s Σu``; entries ``j ≠ m`` are ``w_j``, entry ``m`` is ``−Σ_{j≠m} w_j``;
* VJP ``J g`` (the transpose, ``J`` is symmetric): ``c = g − g_m``, ``s ⊙ (c − ⟨s, c⟩)``.

Log-softmax, ``d = e_m − s`` computed as ``d_m = Σ_{j≠m} s_j``, ``d_j = −s_j``:

* JVP: entries ``j ≠ m`` are ``t_j − ⟨s, t⟩``, entry ``m`` is ``⟨d, t⟩``;
* VJP: ``g_o − s Σ g_o + g_m d`` with ``g_o`` = ``g`` with its ``m``-th entry set to ``0``.
"""

from __future__ import annotations

import functools
import operator

import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from ._errors import bad_arg

__all__ = ["softmax", "log_softmax"]


def _check(x, axis) -> int:
    """Validate ``(x, axis)`` before tracing; returns ``axis`` as a non-negative int."""
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        x = jnp.asarray(x)
        dtype = x.dtype
    if not jnp.issubdtype(dtype, jnp.floating):
        raise bad_arg("x", x, "a real floating-point array (float16/32/64); cast integer logits first")
    ndim = jnp.ndim(x)
    if ndim == 0:
        raise bad_arg("x", x, "an array with at least one axis")
    try:
        ax = operator.index(axis)
    except TypeError:
        raise bad_arg("axis", axis, f"an int in [-{ndim}, {ndim - 1}] (one axis)") from None
    if not -ndim <= ax < ndim:
        raise bad_arg("axis", axis, f"an int in [-{ndim}, {ndim - 1}] for x of shape {tuple(jnp.shape(x))}")
    return ax % ndim


def _top_mask(s, axis):
    """One-hot (in ``s``'s dtype) of the first largest entry along ``axis``; a constant for autodiff."""
    s = jax.lax.stop_gradient(s)
    m = jnp.argmax(s, axis=axis, keepdims=True)
    idx = jax.lax.broadcasted_iota(m.dtype, s.shape, axis)
    return (idx == m).astype(s.dtype)


def _sum(x, axis):
    return jnp.sum(x, axis=axis, keepdims=True)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _softmax(x, axis):
    return jax.nn.softmax(x, axis=axis)


@_softmax.defjvp
def _softmax_jvp(axis, primals, tangents):
    (x,), (t,) = primals, tangents
    s = _softmax(x, axis)
    onehot = _top_mask(s, axis)
    u = s * t
    w = u - s * _sum(u, axis)
    w_off = w * (1 - onehot)
    return s, w_off - onehot * _sum(w_off, axis)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _log_softmax(x, axis):
    return jax.nn.log_softmax(x, axis=axis)


@_log_softmax.defjvp
def _log_softmax_jvp(axis, primals, tangents):
    (x,), (t,) = primals, tangents
    y = _log_softmax(x, axis)
    s = jnp.exp(y)
    onehot = _top_mask(s, axis)
    off = 1 - onehot
    d = onehot * _sum(s * off, axis) - s * off  # e_m − s, without the cancellation in 1 − s_m
    u = t - _sum(s * t, axis)
    return y, u * off + onehot * _sum(d * t, axis)


def softmax(x: Float[ArrayLike, "..."], axis: int = -1) -> Float[Array, "..."]:
    """Softmax along ``axis``, a drop-in for :func:`jax.nn.softmax` whose derivatives stay exact
    to rounding when one weight is within float epsilon of ``1``.

    **Arguments:** ``x`` real floating array of any shape with ``ndim ≥ 1``; ``axis`` one int
    (default ``-1``).
    **Returns:** ``exp(x − max) / Σ exp(x − max)`` along ``axis``; shape and dtype of ``x``.
    **Derivatives:** ``jvp``/``jacfwd``, ``grad``/``vjp``/``jacrev`` and higher orders, all in the
    centred form of this module's docstring (paper Eqs. 2–4 use the same Jacobian
    ``J(s) = diag(s) − s sᵀ``).
    **Raises:** :class:`gradflow.GradflowValueError` for an integer/complex/0-d ``x`` or an
    ``axis`` that is not one int within ``x.ndim``.

    >>> import jax, jax.numpy as jnp, gradflow
    >>> x = jnp.array([60.0, 0.0, 0.0])
    >>> float(jax.grad(lambda z: gradflow.log_softmax(z)[0])(x)[0])  # exact: 2e^{-60}
    1.7513...e-26
    """
    ax = _check(x, axis)
    return _softmax(jnp.asarray(x), ax)


def log_softmax(x: Float[ArrayLike, "..."], axis: int = -1) -> Float[Array, "..."]:
    """Log-softmax along ``axis``, a drop-in for :func:`jax.nn.log_softmax` with the centred
    derivatives of :func:`softmax` (the top entry's derivative ``1 − s_m`` is formed as
    ``Σ_{j≠m} s_j``; JAX's rounds to ``0`` at logit gaps ≳ 37 in float64).

    **Arguments / Returns / Raises:** as :func:`softmax`; returns ``x − logsumexp(x)`` along
    ``axis``, shape and dtype of ``x``.
    """
    ax = _check(x, axis)
    return _log_softmax(jnp.asarray(x), ax)
