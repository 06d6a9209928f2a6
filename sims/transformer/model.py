"""A small decoder-only transformer (equinox) with a pluggable attention kernel (SPEC §7).

Pre-LN blocks ``x + Attn(LN(x))`` then ``x + MLP(LN(x))`` (MLP ``×4``, GELU), a final
LayerNorm and a linear read-out. Single-sequence modules (``tokens (T,) -> logits (T, n_out)``);
batches go through ``jax.vmap``. Parameters are float32 whatever JAX's x64 flag says.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, Int

from gradflow._errors import bad_arg

from .kernels import attention_weights, check_kernel

__all__ = ["Attention", "Block", "Transformer", "init_transformer"]

DTYPE = jnp.float32


class Attention(eqx.Module):
    """Multi-head attention with one of the Table 1 kernels (``kernels.attention_weights``).

    ``__call__(x (T, D)) -> (out (T, D), weights (H, T, T))``. The ``mlp`` kernel owns one
    feature map ``φ``: a 2-layer GELU MLP ``d_h -> 2 d_h -> d_h`` shared by queries and keys
    and by the heads of the layer.
    """

    wq: eqx.nn.Linear
    wk: eqx.nn.Linear
    wv: eqx.nn.Linear
    wo: eqx.nn.Linear
    phi: eqx.nn.MLP | None
    n_heads: int = eqx.field(static=True)
    kernel: str = eqx.field(static=True)
    normalise: bool = eqx.field(static=True)
    causal: bool = eqx.field(static=True)

    def __init__(self, d_model: int, n_heads: int, kernel: str, normalise: bool, causal: bool, *, key):
        check_kernel(kernel, normalise)
        if d_model % n_heads:
            raise bad_arg("n_heads", n_heads, f"a divisor of d_model = {d_model}")
        kq, kk, kv, ko, kp = jr.split(key, 5)
        lin = lambda k: eqx.nn.Linear(d_model, d_model, use_bias=False, key=k, dtype=DTYPE)  # noqa: E731
        self.wq, self.wk, self.wv, self.wo = lin(kq), lin(kk), lin(kv), lin(ko)
        d_h = d_model // n_heads
        self.phi = (eqx.nn.MLP(d_h, d_h, 2 * d_h, depth=1, activation=jax.nn.gelu, key=kp, dtype=DTYPE)
                    if kernel == "mlp" else None)
        self.n_heads, self.kernel, self.normalise, self.causal = n_heads, kernel, normalise, causal

    def __call__(self, x: Float[Array, "T D"]):
        T, D = x.shape
        H = self.n_heads

        def heads(lin):
            return jax.vmap(lin)(x).reshape(T, H, D // H).transpose(1, 0, 2)

        q, k, v = heads(self.wq), heads(self.wk), heads(self.wv)
        w = jax.vmap(lambda qh, kh: attention_weights(qh, kh, self.kernel, self.normalise,
                                                      causal=self.causal, phi=self.phi))(q, k)
        out = jnp.einsum("hqk,hkd->qhd", w, v).reshape(T, D)
        return jax.vmap(self.wo)(out), w


class Block(eqx.Module):
    """Pre-LN transformer block: ``x + Attn(LN(x))``, then ``x + W2 gelu(W1 LN(x))`` (width ``4D``)."""

    ln1: eqx.nn.LayerNorm
    attn: Attention
    ln2: eqx.nn.LayerNorm
    fc1: eqx.nn.Linear
    fc2: eqx.nn.Linear

    def __init__(self, d_model, n_heads, kernel, normalise, causal, *, key):
        ka, k1, k2 = jr.split(key, 3)
        self.ln1 = eqx.nn.LayerNorm(d_model, dtype=DTYPE)
        self.attn = Attention(d_model, n_heads, kernel, normalise, causal, key=ka)
        self.ln2 = eqx.nn.LayerNorm(d_model, dtype=DTYPE)
        self.fc1 = eqx.nn.Linear(d_model, 4 * d_model, key=k1, dtype=DTYPE)
        self.fc2 = eqx.nn.Linear(4 * d_model, d_model, key=k2, dtype=DTYPE)

    def __call__(self, x):
        h, w = self.attn(jax.vmap(self.ln1)(x))
        x = x + h
        x = x + jax.vmap(lambda y: self.fc2(jax.nn.gelu(self.fc1(y))))(jax.vmap(self.ln2)(x))
        return x, w


class Transformer(eqx.Module):
    """Token and (optional) learned position embeddings, ``n_layers`` blocks, LN, read-out.

    **Arguments:** ``n_vocab`` input ids, ``n_out`` output classes, ``max_len`` positions
    (``None``: no position embedding, as in the group task), ``d_model`` (128), ``n_layers`` (2),
    ``n_heads`` (4), ``kernel``/``normalise`` (Table 1), ``causal``, ``key``.

    ``__call__(tokens (T,) int) -> (logits (T, n_out) float32, attention (n_layers, H, T, T))``.
    """

    embed: eqx.nn.Embedding
    pos: eqx.nn.Embedding | None
    blocks: list
    ln_f: eqx.nn.LayerNorm
    head: eqx.nn.Linear

    def __init__(self, n_vocab: int, n_out: int, max_len: int | None, *, d_model: int = 128,
                 n_layers: int = 2, n_heads: int = 4, kernel: str = "softmax", normalise: bool = True,
                 causal: bool = True, key):
        ke, kp, kh, *kb = jr.split(key, 3 + n_layers)
        init = jax.nn.initializers.normal(0.02)
        self.embed = eqx.nn.Embedding(weight=init(ke, (n_vocab, d_model), DTYPE))
        self.pos = None if max_len is None else eqx.nn.Embedding(weight=init(kp, (max_len, d_model), DTYPE))
        self.blocks = [Block(d_model, n_heads, kernel, normalise, causal, key=k) for k in kb]
        self.ln_f = eqx.nn.LayerNorm(d_model, dtype=DTYPE)
        self.head = eqx.nn.Linear(d_model, n_out, key=kh, dtype=DTYPE)

    def __call__(self, tokens: Int[Array, " T"]):
        x = jax.vmap(self.embed)(tokens)
        if self.pos is not None:
            x = x + jax.vmap(self.pos)(jnp.arange(tokens.shape[0]))
        maps = []
        for block in self.blocks:
            x, w = block(x)
            maps.append(w)
        return jax.vmap(self.head)(jax.vmap(self.ln_f)(x)), jnp.stack(maps)


def init_transformer(seed: int, *args, **kwargs) -> Transformer:
    """A :class:`Transformer` (same arguments, no ``key``) initialised from NumPy's ``default_rng(seed)``.

    The module's structure comes from ``eqx.filter_eval_shape`` and its leaves are drawn in
    NumPy, because equinox's own eager initialisers compile dozens of small XLA programs
    (about 10 s on two busy cores, longer than a quick training run). Initial values:
    embeddings ``N(0, 0.02²)``; LayerNorm weight 1, bias 0; linear weights ``(out, in)``
    ``U(±1/√in)`` (PyTorch's and equinox's default); linear biases 0.
    """
    abstract = eqx.filter_eval_shape(lambda: Transformer(*args, key=jr.PRNGKey(0), **kwargs))
    rng = np.random.default_rng(seed)

    def draw(path, leaf):
        if not isinstance(leaf, jax.ShapeDtypeStruct):
            return leaf
        name = jax.tree_util.keystr(path)
        if name.startswith((".embed.", ".pos.")):
            value = 0.02 * rng.standard_normal(leaf.shape)
        elif ".ln" in name:
            value = np.ones(leaf.shape) if name.endswith(".weight") else np.zeros(leaf.shape)
        elif name.endswith(".weight"):
            bound = 1 / np.sqrt(leaf.shape[1])
            value = rng.uniform(-bound, bound, leaf.shape)
        else:
            value = np.zeros(leaf.shape)
        return jnp.asarray(value, leaf.dtype)

    return jax.tree_util.tree_map_with_path(draw, abstract)
