"""A small transformer (equinox) with a pluggable attention kernel, built as the authors' code
builds it (``tml-epfl/softmax``, ``src/model.py``; paper Sec. 4).

Pre-LN blocks ``x + o(Attn(LN(x)))`` then ``x + W2 gelu(W1 LN(x))`` (MLP ``×4``, exact GELU),
a final LayerNorm and a linear read-out. LayerNorm and the MLP can each be switched off (the
paper's Sec. 4.2 panels use all four combinations); without LayerNorm the final norm is the
identity, as in the authors' code. The q/k/v/o projections carry biases. Token and position
embeddings are ``nn.Embedding``-style ``N(0, 1)`` tables (``embed_std`` can change that).
Single-sequence modules (``tokens (T,) -> logits (T, n_out)``); batches go through
``jax.vmap``. Parameters are float32 whatever JAX's x64 flag says.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, Int

from gradflow.internal import bad_arg

from gradflow.sims.sec4.kernels import check_kernel, kernel_weights

__all__ = ["Attention", "Block", "Transformer", "init_transformer", "POSITIONS"]

DTYPE = jnp.float32

POSITIONS = ("add", "concat", "none")
"""Position embeddings: added to the token embedding, concatenated (half width each), or none."""


class Attention(eqx.Module):
    """Multi-head attention with one of the Table 1 kernels (``kernels.kernel_weights``).

    ``__call__(x (T, D)) -> (out (T, D), weights (H, T, T))``. The ``mlp`` kernel owns one
    feature map ``φ``: a 2-layer GELU MLP ``d_h -> 4 d_h -> d_h`` with biases, shared by queries
    and keys and by the heads of the layer (the authors' ``attn_mlp``).
    """

    wq: eqx.nn.Linear
    wk: eqx.nn.Linear
    wv: eqx.nn.Linear
    wo: eqx.nn.Linear
    phi: eqx.nn.MLP | None
    n_heads: int = eqx.field(static=True)
    kernel: str = eqx.field(static=True)
    normalization: bool = eqx.field(static=True)
    causal: bool = eqx.field(static=True)

    def __init__(self, d_model: int, n_heads: int, kernel: str, normalization: bool, causal: bool, *,
                 bias: bool = True, key):
        check_kernel(kernel, normalization)
        if d_model % n_heads:
            raise bad_arg("n_heads", n_heads, f"a divisor of d_model = {d_model}")
        kq, kk, kv, ko, kp = jr.split(key, 5)
        lin = lambda k: eqx.nn.Linear(d_model, d_model, use_bias=bias, key=k, dtype=DTYPE)  # noqa: E731
        self.wq, self.wk, self.wv, self.wo = lin(kq), lin(kk), lin(kv), lin(ko)
        d_h = d_model // n_heads
        self.phi = (eqx.nn.MLP(d_h, d_h, 4 * d_h, depth=1, activation=lambda x: jax.nn.gelu(x, approximate=False),
                               key=kp, dtype=DTYPE)
                    if kernel == "mlp" else None)
        self.n_heads, self.kernel, self.normalization, self.causal = n_heads, kernel, normalization, causal

    def __call__(self, x: Float[Array, "T D"]):
        T, D = x.shape
        H = self.n_heads

        def heads(lin):
            return jax.vmap(lin)(x).reshape(T, H, D // H).transpose(1, 0, 2)

        q, k, v = heads(self.wq), heads(self.wk), heads(self.wv)
        w = jax.vmap(lambda qh, kh: kernel_weights(qh, kh, self.kernel, self.normalization,
                                                      causal=self.causal, phi=self.phi))(q, k)
        out = jnp.einsum("hqk,hkd->qhd", w, v).reshape(T, D)
        return jax.vmap(self.wo)(out), w


def _gelu(x):
    return jax.nn.gelu(x, approximate=False)


class Block(eqx.Module):
    """Pre-LN block: ``x + Attn(LN(x))``, then ``x + W2 gelu(W1 LN(x))`` (width ``4D``); the
    LayerNorms are the identity when ``use_layernorm`` is False, the MLP half is skipped when
    ``use_mlp`` is False."""

    ln1: eqx.nn.LayerNorm | None
    attn: Attention
    ln2: eqx.nn.LayerNorm | None
    fc1: eqx.nn.Linear | None
    fc2: eqx.nn.Linear | None

    def __init__(self, d_model, n_heads, kernel, normalization, causal, *, use_mlp=True, use_layernorm=True,
                 bias=True, key):
        ka, k1, k2 = jr.split(key, 3)
        ln = (lambda: eqx.nn.LayerNorm(d_model, dtype=DTYPE)) if use_layernorm else (lambda: None)
        self.ln1 = ln()
        self.attn = Attention(d_model, n_heads, kernel, normalization, causal, bias=bias, key=ka)
        self.ln2 = ln() if use_mlp else None
        self.fc1 = eqx.nn.Linear(d_model, 4 * d_model, key=k1, dtype=DTYPE) if use_mlp else None
        self.fc2 = eqx.nn.Linear(4 * d_model, d_model, key=k2, dtype=DTYPE) if use_mlp else None

    def __call__(self, x):
        norm = lambda ln, y: y if ln is None else jax.vmap(ln)(y)  # noqa: E731
        h, w = self.attn(norm(self.ln1, x))
        x = x + h
        if self.fc1 is not None:
            x = x + jax.vmap(lambda y: self.fc2(_gelu(self.fc1(y))))(norm(self.ln2, x))
        return x, w


class Transformer(eqx.Module):
    """Token and (optional) learned position embeddings, ``n_layers`` blocks, LN, read-out.

    **Arguments:** ``n_vocab`` input ids, ``n_out`` output classes, ``max_len`` positions,
    ``positions`` one of :data:`POSITIONS` (``"add"``, ``"concat"``: token and position tables
    of width ``d_model/2`` side by side, ``"none"``), ``d_model`` (128), ``n_layers`` (2),
    ``n_heads`` (4), ``kernel``/``normalization`` (Table 1), ``causal``, ``use_mlp``,
    ``use_layernorm``, ``bias`` (q/k/v/o biases), ``key``.

    ``__call__(tokens (T,) int) -> (logits (T, n_out) float32, attention (n_layers, H, T, T))``.
    """

    embed: eqx.nn.Embedding
    pos: eqx.nn.Embedding | None
    blocks: list
    ln_f: eqx.nn.LayerNorm | None
    head: eqx.nn.Linear
    positions: str = eqx.field(static=True)

    def __init__(self, n_vocab: int, n_out: int, max_len: int, *, positions: str = "add", d_model: int = 128,
                 n_layers: int = 2, n_heads: int = 4, kernel: str = "softmax", normalization: bool = True,
                 causal: bool = True, use_mlp: bool = True, use_layernorm: bool = True, bias: bool = True,
                 key):
        if positions not in POSITIONS:
            raise bad_arg("positions", positions, f"one of {list(POSITIONS)}")
        ke, kp, kh, *kb = jr.split(key, 3 + n_layers)
        d_tok = d_model // 2 if positions == "concat" else d_model
        init = jax.nn.initializers.normal(1.0)
        self.embed = eqx.nn.Embedding(weight=init(ke, (n_vocab, d_tok), DTYPE))
        self.pos = (None if positions == "none" else
                    eqx.nn.Embedding(weight=init(kp, (max_len, d_model - d_tok if positions == "concat"
                                                      else d_model), DTYPE)))
        self.blocks = [Block(d_model, n_heads, kernel, normalization, causal, use_mlp=use_mlp,
                             use_layernorm=use_layernorm, bias=bias, key=k) for k in kb]
        self.ln_f = eqx.nn.LayerNorm(d_model, dtype=DTYPE) if use_layernorm else None
        self.head = eqx.nn.Linear(d_model, n_out, key=kh, dtype=DTYPE)
        self.positions = positions

    def __call__(self, tokens: Int[Array, " T"]):
        x = jax.vmap(self.embed)(tokens)
        if self.pos is not None:
            p = jax.vmap(self.pos)(jnp.arange(tokens.shape[0]))
            x = jnp.concatenate([x, p], -1) if self.positions == "concat" else x + p
        maps = []
        for block in self.blocks:
            x, w = block(x)
            maps.append(w)
        if self.ln_f is not None:
            x = jax.vmap(self.ln_f)(x)
        return jax.vmap(self.head)(x), jnp.stack(maps)


def init_transformer(seed: int, *args, embed_std: float = 1.0, **kwargs) -> Transformer:
    """A :class:`Transformer` (same arguments, no ``key``) initialised from NumPy's ``default_rng(seed)``.

    The module's structure comes from ``eqx.filter_eval_shape`` and its leaves are drawn in
    NumPy, because equinox's own eager initialisers compile dozens of small XLA programs
    (about 10 s on two busy cores, longer than a quick training run). Initial values, as
    PyTorch's defaults give them in the authors' code: embeddings ``N(0, embed_std²)``
    (``nn.Embedding``: ``embed_std = 1``); LayerNorm weight 1, bias 0; linear weights
    ``(out, in)`` and biases ``U(±1/√in)`` (``nn.Linear``).
    """
    abstract = eqx.filter_eval_shape(lambda: Transformer(*args, key=jr.PRNGKey(0), **kwargs))
    rng = np.random.default_rng(seed)
    fan_in = {}

    def draw(path, leaf):
        if not isinstance(leaf, jax.ShapeDtypeStruct):
            return leaf
        name = jax.tree_util.keystr(path)
        if name.startswith((".embed.", ".pos.")):
            value = embed_std * rng.standard_normal(leaf.shape)
        elif ".ln" in name:
            value = np.ones(leaf.shape) if name.endswith(".weight") else np.zeros(leaf.shape)
        elif name.endswith(".weight"):
            fan_in[name[:-len("weight")]] = leaf.shape[1]
            bound = 1 / np.sqrt(leaf.shape[1])
            value = rng.uniform(-bound, bound, leaf.shape)
        else:  # a linear bias: U(±1/√fan_in) of its layer (the weight comes first in the tree)
            bound = 1 / np.sqrt(fan_in[name[:-len("bias")]])
            value = rng.uniform(-bound, bound, leaf.shape)
        return jnp.asarray(value, leaf.dtype)

    return jax.tree_util.tree_map_with_path(draw, abstract)
