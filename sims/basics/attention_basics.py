"""Attention basics: softmax, temperature, the ``1/√d_k`` scaling, the causal mask (docs: Figures, "Attention basics").

The non-plotting logic behind the figure ids ``softmax-temperature``, ``scaling``,
``causal-mask`` and ``it-animal``:

- :func:`softmax_weights` / :func:`softmax_entropy` — one row of scores through
  ``softmax(a / T)`` (the five-word "it" example and the temperature knob);
- :func:`attention_weights` — ``softmax(QKᵀ/√d_k)`` with an optional causal mask
  (scaled dot-product attention, causal mask); masked logits are set to
  ``jnp.finfo(dtype).min`` (docs: Solvers, "Numerical rules"), never ``−inf``;
- :func:`dot_products`, :func:`max_weights` — the ``1/√d_k`` experiment;
- :func:`coreference_dataset`, :func:`train_projection` — a small synthetic co-reference
  task and the optax training of ``W_Q, W_K`` on it, so that "it" attends to its animate
  antecedent (the ``it-animal`` figure asks whether that picture needs learning).

Everything is float64 (importing :mod:`gradflow` enables x64). Bad arguments raise
:class:`gradflow.GradflowValueError` naming the argument, the value and what is accepted.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, ArrayLike, Float, Int, Real

import gradflow  # enables float64; gradflow.softmax / log_softmax (centred derivatives)
from gradflow.internal import bad_arg
from gradflow.attention.maps import apply_map
from gradflow.attention.maps import softmax_entropy as _softmax_entropy

__all__ = [
    "FIVE_WORDS",
    "FIVE_SCORES",
    "SENTENCE",
    "IT_INDEX",
    "ANIMAL_INDEX",
    "softmax_weights",
    "softmax_entropy",
    "causal_mask",
    "attention_weights",
    "dot_products",
    "max_weights",
    "vocabulary",
    "embeddings",
    "random_projection",
    "coreference_dataset",
    "it_scores",
    "it_row",
    "encode",
    "train_projection",
]

FIVE_WORDS: tuple[str, ...] = ("animal", "the", "street", "because", "tired")
"""The keys of the worked five-word example (query "it")."""

FIVE_SCORES: tuple[float, ...] = (5.2, -1.3, 2.8, 0.4, 3.6)
"""The worked example's dot-product scores of "it" against :data:`FIVE_WORDS`."""

SENTENCE: tuple[str, ...] = (
    "the", "animal", "did", "not", "cross", "the", "street", "because", "it", "was", "too", "tired",
)
"""Seed 001's sentence, 12 tokens."""

IT_INDEX = SENTENCE.index("it")
ANIMAL_INDEX = SENTENCE.index("animal")

# The toy co-reference task: "the X did not V the Y because it was too ADJ", exactly one of
# X, Y animate; "it" refers to the animate noun.
ANIMATE: tuple[str, ...] = ("animal", "dog", "cat", "horse", "cow", "bird", "fox", "sheep")
PLACES: tuple[str, ...] = ("street", "road", "river", "bridge", "field", "fence", "wall", "hill")
VERBS: tuple[str, ...] = ("cross", "climb", "reach", "enter", "jump")
ADJECTIVES: tuple[str, ...] = ("tired", "hungry", "scared", "slow")


def _check_temperature(temperature) -> float:
    t = float(temperature)
    if not (math.isfinite(t) and t > 0):
        raise bad_arg("temperature", temperature, "a finite number > 0")
    return t


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise bad_arg(name, value, f"an integer >= {minimum}")
    return int(value)


def softmax_weights(scores: Real[ArrayLike, "... n"] | Sequence[float], temperature: float = 1.0) -> Float[Array, "... n"]:
    """``softmax(scores / T)`` over the last axis (temperature).

    **Arguments:** ``scores`` shape ``(..., n)``, any float (cast to float64);
    ``temperature`` ``T > 0`` (default ``1``): ``T < 1`` sharpens, ``T > 1`` flattens.

    **Returns:** float64 weights of the same shape, each row summing to 1.

    **Raises:** :class:`gradflow.GradflowValueError` if ``T`` is not a finite number ``> 0``
    or ``scores`` has no last axis.
    """
    t = _check_temperature(temperature)
    a = jnp.asarray(scores, dtype=jnp.float64)
    if a.ndim < 1 or a.shape[-1] < 1:
        raise bad_arg("scores", np.shape(scores), "an array of shape (..., n) with n >= 1")
    return apply_map(a, "softmax", t)


def softmax_entropy(scores: Real[ArrayLike, "... n"] | Sequence[float], temperature: float = 1.0) -> Float[Array, "..."]:
    """Entropy (nats) of ``softmax(scores / T)`` from the logits (finite when a weight underflows), in ``[0, log n]``.

    Same arguments and errors as :func:`softmax_weights`; returns float64 of shape ``(...)``.
    """
    t = _check_temperature(temperature)
    a = jnp.asarray(scores, dtype=jnp.float64)
    if a.ndim < 1 or a.shape[-1] < 1:
        raise bad_arg("scores", np.shape(scores), "an array of shape (..., n) with n >= 1")
    return _softmax_entropy(a, t)


def causal_mask(n: int, t_k: int | None = None) -> jax.Array:
    """Boolean ``(n, t_k)`` mask (``t_k`` defaults to ``n``), ``True`` where query ``i`` may attend
    to key ``j`` (``j <= i``): lower-triangular including the diagonal. The one causal mask of
    ``gradflow.sims`` (the Sec. 4 kernels use it too).

    **Raises:** :class:`gradflow.GradflowValueError` if ``n`` or ``t_k`` is not an integer ``>= 1``.
    """
    n = _check_int("n", n, 1)
    t_k = n if t_k is None else _check_int("t_k", t_k, 1)
    return jnp.arange(t_k)[None, :] <= jnp.arange(n)[:, None]


def attention_weights(
    q: Real[ArrayLike, "t d_k"], k: Real[ArrayLike, "s d_k"], *, scale: bool = True, causal: bool = False
) -> Float[Array, "t s"]:
    """Attention weights ``softmax(QKᵀ / √d_k)`` row-wise (Vaswani et al. 2017).

    **Arguments:** ``q`` queries ``(t, d_k)``, ``k`` keys ``(s, d_k)`` (cast to float64);
    ``scale`` divide the scores by ``√d_k`` (default ``True``); ``causal`` mask key ``j > i``
    for query ``i`` (default ``False``; needs ``t == s``). Masked scores are replaced by
    ``jnp.finfo(float64).min`` before :func:`gradflow.softmax`, so masked weights are exactly
    ``0`` and row 0 of a causal matrix is exactly one-hot.

    **Returns:** float64 weights ``(t, s)``, rows summing to 1.

    **Raises:** :class:`gradflow.GradflowValueError` for non-2-D inputs, ``d_k < 1``,
    mismatched ``d_k``, or ``causal`` with ``t != s``.
    """
    q = jnp.asarray(q, dtype=jnp.float64)
    k = jnp.asarray(k, dtype=jnp.float64)
    if q.ndim != 2 or k.ndim != 2:
        raise bad_arg("q, k shapes", (q.shape, k.shape), "2-D arrays (t, d_k) and (s, d_k)")
    if q.shape[1] < 1:
        raise bad_arg("d_k", q.shape[1], "d_k >= 1")
    if q.shape[1] != k.shape[1]:
        raise bad_arg("k.shape[1]", k.shape[1], f"the same d_k as q ({q.shape[1]})")
    if causal and q.shape[0] != k.shape[0]:
        raise bad_arg("causal", (q.shape[0], k.shape[0]), "as many queries as keys (t == s) for a causal mask")
    scores = q @ k.T
    if scale:
        scores = scores / jnp.sqrt(jnp.asarray(q.shape[1], dtype=scores.dtype))
    if causal:
        scores = jnp.where(causal_mask(q.shape[0]), scores, jnp.finfo(scores.dtype).min)
    return gradflow.softmax(scores, axis=-1)


def _chunks(total: int, chunk: int) -> list[int]:
    return [min(chunk, total - i) for i in range(0, total, chunk)]


def dot_products(seed, d_k: int, n: int, *, chunk: int = 4096) -> np.ndarray:
    """``n`` independent samples of ``(QKᵀ)_ij = q·k`` with ``q, k`` i.i.d. ``N(0, I_{d_k})``.

    Seed 001, "なぜ1/√d_kで割るのか": ``Var(q·k) = d_k``. Drawn with
    ``numpy.random.default_rng(seed)`` in chunks of ``chunk`` pairs (``2·chunk·d_k`` normals
    at a time, to bound memory).

    **Returns:** float64 NumPy array ``(n,)``.
    **Raises:** :class:`gradflow.GradflowValueError` if ``d_k < 1`` or ``n < 2``.
    """
    d_k = _check_int("d_k", d_k, 1)
    n = _check_int("n", n, 2)
    rng = np.random.default_rng(seed)
    out = []
    for m in _chunks(n, chunk):
        qs = rng.standard_normal((m, d_k))
        ks = rng.standard_normal((m, d_k))
        out.append(np.einsum("bd,bd->b", qs, ks))
    return np.concatenate(out)


def max_weights(seed, d_k: int, n_tokens: int, draws: int, *, chunk: int = 256) -> np.ndarray:
    """Largest attention weight of one query row over ``n_tokens`` keys, ``draws`` times.

    Each draw (``numpy.random.default_rng(seed)``): ``q ~ N(0, I_{d_k})``, keys
    ``K ~ N(0, I)`` of shape ``(n_tokens, d_k)``; the row ``softmax(K q)`` (unscaled) and
    ``softmax(K q / √d_k)`` (scaled) through :func:`attention_weights`.

    **Returns:** float64 NumPy array ``(draws, 2)``: column 0 unscaled, column 1 scaled.
    **Raises:** :class:`gradflow.GradflowValueError` if ``d_k < 1``, ``n_tokens < 1`` or ``draws < 1``.
    """
    d_k = _check_int("d_k", d_k, 1)
    n_tokens = _check_int("n_tokens", n_tokens, 1)
    draws = _check_int("draws", draws, 1)
    rng = np.random.default_rng(seed)
    chunk = min(chunk, draws)

    @jax.jit
    def largest(q, keys):  # (chunk, 1, d_k), (chunk, n_tokens, d_k) -> (chunk, 2)
        raw = jax.vmap(lambda qi, ki: attention_weights(qi, ki, scale=False))(q, keys)
        scaled = jax.vmap(lambda qi, ki: attention_weights(qi, ki, scale=True))(q, keys)
        return jnp.stack([raw.max(axis=(1, 2)), scaled.max(axis=(1, 2))], axis=1)

    out = []
    for _ in range(-(-draws // chunk)):  # full chunks only (one compilation), truncated below
        q = rng.standard_normal((chunk, 1, d_k))
        keys = rng.standard_normal((chunk, n_tokens, d_k))
        out.append(np.asarray(largest(q, keys)))
    return np.concatenate(out)[:draws]


# --------------------------------------------------------------------------------------
# "it → animal": embeddings, projections, the toy co-reference task and its training
# --------------------------------------------------------------------------------------


def vocabulary() -> tuple[str, ...]:
    """The sorted vocabulary of :data:`SENTENCE` and the toy co-reference task."""
    words = set(SENTENCE) | set(ANIMATE) | set(PLACES) | set(VERBS) | set(ADJECTIVES)
    words |= {"did", "not", "the", "because", "it", "was", "too"}
    return tuple(sorted(words))


def embeddings(seed: int, d: int, std: float) -> dict[str, np.ndarray]:
    """Deterministic random word embeddings, ``word -> (d,)`` float64 with i.i.d. ``N(0, std²)`` entries.

    Stands in for the pretrained GloVe-50 vectors attention primers use (none can be downloaded here).
    Drawn with ``jax.random.PRNGKey(seed)`` in the order of :func:`vocabulary`.

    **Raises:** :class:`gradflow.GradflowValueError` if ``d < 1`` or ``std`` is not ``> 0``.
    """
    d = _check_int("d", d, 1)
    if not (math.isfinite(float(std)) and float(std) > 0):
        raise bad_arg("std", std, "a finite number > 0")
    vocab = vocabulary()
    table = float(std) * np.asarray(jax.random.normal(jax.random.PRNGKey(seed), (len(vocab), d), dtype=jnp.float64))
    return {w: table[i] for i, w in enumerate(vocab)}


def random_projection(key: jax.Array, d: int, d_k: int) -> dict[str, jax.Array]:
    """Untrained ``W_Q, W_K`` of shape ``(d, d_k)``, i.i.d. ``N(0, 1/d)`` (a fan-in initialisation).

    **Returns:** ``{"wq": (d, d_k), "wk": (d, d_k)}`` float64.
    **Raises:** :class:`gradflow.GradflowValueError` if ``d < 1`` or ``d_k < 1``.
    """
    d = _check_int("d", d, 1)
    d_k = _check_int("d_k", d_k, 1)
    kq, kk = jax.random.split(key)
    std = 1.0 / math.sqrt(d)
    return {
        "wq": std * jax.random.normal(kq, (d, d_k), dtype=jnp.float64),
        "wk": std * jax.random.normal(kk, (d, d_k), dtype=jnp.float64),
    }


def encode(sentences: Sequence[Sequence[str]], emb: dict[str, np.ndarray]) -> np.ndarray:
    """Stack the embeddings of equal-length sentences: ``(B, L, d)`` float64.

    **Raises:** :class:`gradflow.GradflowValueError` for an unknown word or unequal lengths.
    """
    lengths = {len(s) for s in sentences}
    if len(lengths) != 1:
        raise bad_arg("sentences", sorted(lengths), "sentences of one common length")
    for s in sentences:
        for w in s:
            if w not in emb:
                raise bad_arg("word", w, "a word of gradflow's toy vocabulary")
    return np.stack([np.stack([emb[w] for w in s]) for s in sentences])


def coreference_dataset() -> tuple[list[tuple[str, ...]], np.ndarray]:
    """All sentences of the toy co-reference task and the position "it" refers to.

    Template ``the X did not V the Y because it was too ADJ`` (12 tokens, "it" at position 8)
    over ``X, Y`` one animate noun (:data:`ANIMATE`) and one place (:data:`PLACES`) in either
    order, ``V`` in :data:`VERBS`, ``ADJ`` in :data:`ADJECTIVES`; the target is the position of
    the animate noun (1 or 6). Seed 001's sentence is one of them.

    **Returns:** ``(sentences, targets)``: 2560 tuples of words and an int array ``(2560,)``.
    """
    sentences, targets = [], []
    for a, p, v, adj, animate_first in itertools.product(ANIMATE, PLACES, VERBS, ADJECTIVES, (True, False)):
        x, y = (a, p) if animate_first else (p, a)
        sentences.append(("the", x, "did", "not", v, "the", y, "because", "it", "was", "too", adj))
        targets.append(1 if animate_first else 6)
    return sentences, np.asarray(targets)


def it_scores(params: dict[str, ArrayLike], x: Real[ArrayLike, "L d"], it_index: int = IT_INDEX) -> Float[Array, " L"]:
    """Scaled scores of token ``it_index`` against the sentence ``x``: ``(x_it W_Q)(X W_K)ᵀ/√d_k``.

    ``params`` is ``{"wq": (d, d_k), "wk": (d, d_k)}``, or ``{}`` for raw embeddings
    (``Q = K = X``, ``d_k = d``, as in the classic GloVe illustration). Returns float64 ``(L,)``.
    """
    x = jnp.asarray(x, dtype=jnp.float64)
    if params:
        q, k = x @ params["wq"], x @ params["wk"]
    else:
        q, k = x, x
    return k @ q[it_index] / jnp.sqrt(jnp.asarray(q.shape[-1], dtype=q.dtype))


def it_row(params: dict[str, ArrayLike], x: Real[ArrayLike, "L d"], it_index: int = IT_INDEX) -> Float[Array, " L"]:
    """Attention of token ``it_index`` over the sentence: ``softmax`` of :func:`it_scores`.

    Same arguments as :func:`it_scores`; returns float64 weights ``(L,)`` summing to 1.
    """
    return gradflow.softmax(it_scores(params, x, it_index))


def train_projection(
    params: dict[str, ArrayLike],
    x: Real[ArrayLike, "B L d"],
    targets: Int[ArrayLike, " B"],
    *,
    steps: int,
    learning_rate: float,
    it_index: int = IT_INDEX,
) -> tuple[dict[str, Array], np.ndarray]:
    """Train ``W_Q, W_K`` with optax Adam (full batch) on the co-reference task.

    Loss: mean over sentences of ``−log α_it[target]``, the cross-entropy of the "it" row
    (:func:`it_scores` through ``log_softmax``) against the antecedent position. Embeddings stay fixed.

    **Returns:** ``(trained params, loss per step (steps,))``.
    **Raises:** :class:`gradflow.GradflowValueError` if ``steps < 1`` or ``learning_rate <= 0``.
    """
    steps = _check_int("steps", steps, 1)
    if not (math.isfinite(float(learning_rate)) and float(learning_rate) > 0):
        raise bad_arg("learning_rate", learning_rate, "a finite number > 0")
    x = jnp.asarray(x, dtype=jnp.float64)
    targets = jnp.asarray(targets)
    opt = optax.adam(float(learning_rate))

    def loss_fn(p):
        logp = gradflow.log_softmax(jax.vmap(lambda xi: it_scores(p, xi, it_index))(x), axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, targets[:, None], axis=1))

    @jax.jit
    def run(p):
        def step(carry, _):
            p, state = carry
            loss, grads = jax.value_and_grad(loss_fn)(p)
            updates, state = opt.update(grads, state, p)
            return (optax.apply_updates(p, updates), state), loss

        (p, _), losses = jax.lax.scan(step, (p, opt.init(p)), None, length=steps)
        return p, losses

    trained, losses = run(params)
    return trained, np.asarray(losses)
