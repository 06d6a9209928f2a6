"""Attention kernels of the paper's Table 1, one head, with or without normalisation.

As the authors' ``src/attention.py`` (``tml-epfl/softmax``) computes them; their names: our
``elu`` is their ``coupled_linear``, ``elu-elu`` their ``linear``, ``linear`` their
``raw_dotproduct``.

Every kernel maps a query block ``q (T_q, d_h)`` and a key block ``k (T_k, d_h)`` to attention
weights ``w (T_q, T_k)``; the head's output is ``w @ v``.

| kernel    | score ``g(q_i, k_j)``                         | sign         |
|-----------|-----------------------------------------------|--------------|
| softmax   | ``exp(q_i·k_j/√d_h)`` (always normalised)      | positive     |
| sigmoid   | ``σ(q_i·k_j/√d_h)``                            | positive     |
| elu       | ``elu(q_i·k_j/√d_h) + 1``                      | positive     |
| elu-elu   | ``(elu(q_i)+1)·(elu(k_j)+1)`` (linear attention)| positive     |
| mlp       | ``φ(q_i)·φ(k_j)/√d_h``, ``φ`` a shared 2-layer GELU MLP | signed |
| linear    | ``q_i·k_j/√d_h``                               | signed       |

Normalisation divides a row by ``Σ_j g`` for the positive kernels and by ``max(|Σ_j g|, 1)``
for the signed ones (a guard, not an epsilon: rows whose sum is small are left unscaled).
The normalised logit kernels (sigmoid, elu) are computed as ``softmax(log g)``, which equals
``g / Σ g`` exactly: their terms underflow for logits below about −87 in float32, and the plain
quotient then has gradients ``∝ 1/(Σ g)²`` that overflow (training diverged with it). For the
product kernel elu-elu the sum is floored at ``finfo.tiny``.

Causal masks (key ``j > i`` hidden from query ``i``): the logit-based kernels (softmax,
sigmoid, elu) set the masked logits to the dtype's most negative finite value, which every
one of them maps to exactly 0 (``exp``, ``σ`` and ``elu+1`` all vanish there); the product
kernels (elu-elu, mlp, linear) have no logit to mask and their masked scores are set to 0
with ``jnp.where``. Either way a masked weight is exactly 0 and carries no gradient.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from gradflow.internal import bad_arg
from gradflow.sims.basics.attention_basics import causal_mask

__all__ = ["KERNELS", "SIGNED", "LOGIT_KERNELS", "kernel_weights", "check_kernel"]

KERNELS = ("softmax", "sigmoid", "elu", "elu-elu", "mlp", "linear")
"""Kernel names (paper Table 1)."""

SIGNED = ("mlp", "linear")
"""Kernels whose scores can be negative: normalised by ``max(|Σ|, 1)``."""

LOGIT_KERNELS = ("softmax", "sigmoid", "elu")
"""Kernels that are a function of the logit ``q·k/√d_h`` (masked through the logit)."""


def check_kernel(kernel: str, normalization: bool) -> None:
    """Raise :class:`GradflowValueError` unless ``(kernel, normalization)`` is a Table 1 variant."""
    if kernel not in KERNELS:
        raise bad_arg("kernel", kernel, f"one of {list(KERNELS)}")
    if not isinstance(normalization, bool):
        raise bad_arg("normalization", normalization, "True or False")
    if kernel == "softmax" and not normalization:
        raise bad_arg("normalization", normalization, "True for kernel 'softmax' (softmax is always normalised)")


def _log_score(logits, kernel: str):
    """``log g`` of the logit kernels: ``log σ(z) = −softplus(−z)``; ``log(elu(z) + 1)`` is ``z``
    for ``z ≤ 0`` and ``log1p(z)`` above. Finite wherever ``z`` is (``g`` itself underflows to
    0 below ``z ≈ −87`` in float32, and ``g / Σ g`` then has gradients ``∝ 1/(Σ g)²`` that
    overflow: the training loss turns NaN)."""
    if kernel == "sigmoid":
        return -jax.nn.softplus(-logits)
    return jnp.where(logits > 0, jnp.log1p(jnp.maximum(logits, 0)), logits)


def kernel_weights(
    q: Float[Array, "Tq dh"],
    k: Float[Array, "Tk dh"],
    kernel: str,
    normalization: bool,
    *,
    causal: bool = False,
    phi=None,
) -> Float[Array, "Tq Tk"]:
    """Attention weights of one head under ``kernel`` (paper Table 1).

    **Arguments:**

    - ``q``: queries ``(T_q, d_h)``; ``k``: keys ``(T_k, d_h)``; any float dtype (the result has it).
    - ``kernel``: one of :data:`KERNELS`; ``normalization``: divide rows by the normaliser above
      (must be True for softmax).
    - ``causal``: hide keys ``j > i`` (requires ``T_q == T_k``); masked weights are exactly 0.
    - ``phi``: the ``mlp`` kernel's feature map, a callable ``(d_h,) -> (d_f,)`` applied to each
      query and key row (required for ``mlp``, ignored otherwise).

    **Returns:** ``w (T_q, T_k)``; for softmax and the normalised positive kernels each row sums to 1.

    **Raises:** :class:`GradflowValueError` for an unknown kernel, un-normalised softmax, a
    missing ``phi`` for ``mlp``, or ``causal`` with ``T_q != T_k``.
    """
    check_kernel(kernel, normalization)
    t_q, d_h = q.shape
    t_k = k.shape[0]
    if causal and t_q != t_k:
        raise bad_arg("causal", (t_q, t_k), "T_q == T_k for a causal mask")
    if kernel == "mlp" and phi is None:
        raise bad_arg("phi", phi, "a feature map (d_h,) -> (d_f,) for kernel 'mlp'")
    dtype = q.dtype
    scale = jnp.asarray(1.0 / jnp.sqrt(d_h), dtype)
    visible = causal_mask(t_q, t_k) if causal else jnp.ones((t_q, t_k), bool)
    neg = jnp.finfo(dtype).min

    if kernel in LOGIT_KERNELS:
        logits = jnp.where(visible, (q @ k.T) * scale, neg)
        if kernel == "softmax":
            # JAX's softmax, not gradflow.softmax: these transformers are trained with Adam in
            # float32 as the authors train theirs (torch.softmax); the centred derivative matters
            # for long gradient flows at logit gaps beyond ~37 in float64, not here
            return jax.nn.softmax(logits, axis=-1)
        if normalization:  # g / Σ g = softmax(log g): exact, and stable where every g underflows
            return jax.nn.softmax(_log_score(logits, kernel), axis=-1)
        g = jax.nn.sigmoid(logits) if kernel == "sigmoid" else jax.nn.elu(logits) + 1
    elif kernel == "elu-elu":
        g = (jax.nn.elu(q) + 1) @ (jax.nn.elu(k) + 1).T
    elif kernel == "mlp":
        g = (jax.vmap(phi)(q) @ jax.vmap(phi)(k).T) * scale
    else:  # linear
        g = (q @ k.T) * scale
    g = jnp.where(visible, g, 0)  # exact 0 (already 0 for the logit kernels)
    if not normalization:
        return g
    total = jnp.sum(g, axis=-1, keepdims=True)
    if kernel in SIGNED:
        return g / jnp.maximum(jnp.abs(total), 1)
    return g / jnp.maximum(total, jnp.finfo(dtype).tiny)
