"""The two synthetic tasks of the paper's Sec. 4 (SPEC §7), generated from a seed with NumPy.

**Induction** (causal, with positions): vocabulary of ``vocab`` content tokens ``0 … vocab−1``
plus ``BOS = vocab``. A sequence is ``[BOS, t_1 … t_n, q, c]`` with ``n = n_context`` (10)
distinct content tokens, ``q = t_p`` a repeat of an earlier token with a successor
(``1 ≤ p < n``) and target ``c = t_{p+1}``. The model reads the first ``n + 2`` tokens and is
trained on the last position (predict ``c``) plus ``aux_weight ×`` the next-token loss.

**Groups** (non-causal, no positions): the ``vocab`` content tokens are split into ``K``
contiguous groups of ``vocab // K``; a sequence is ``[CLS, x_1 … x_n]`` with ``n`` distinct
tokens from one group and ``CLS = vocab``; the label is the group, read out at CLS.
"""

from __future__ import annotations

import numpy as np

from gradflow._errors import bad_arg

__all__ = ["induction_batch", "group_batch", "group_of"]


def _distinct(rng: np.random.Generator, n_seq: int, pool: int, n: int) -> np.ndarray:
    """``(n_seq, n)`` rows of ``n`` distinct integers from ``range(pool)``, uniformly."""
    return np.argsort(rng.random((n_seq, pool)), axis=1)[:, :n]


def _check(n_seq: int, vocab: int, n_context: int, need: int) -> None:
    if not (isinstance(n_seq, (int, np.integer)) and n_seq >= 1):
        raise bad_arg("n_seq", n_seq, "an integer >= 1")
    if not (isinstance(n_context, (int, np.integer)) and n_context >= 2):
        raise bad_arg("n_context", n_context, "an integer >= 2")
    if not (isinstance(vocab, (int, np.integer)) and vocab >= need):
        raise bad_arg("vocab", vocab, f"an integer >= {need} for n_context = {n_context}")


def induction_batch(seed: int, n_seq: int, *, vocab: int = 50, n_context: int = 10) -> np.ndarray:
    """Induction sequences ``[BOS, t_1 … t_n, q, c]`` (SPEC §7).

    **Returns:** int32 array ``(n_seq, n_context + 3)``; column 0 is ``BOS = vocab``, columns
    ``1 … n_context`` are distinct tokens in ``[0, vocab)``, column ``n_context + 1`` is the
    query ``q = t_p`` with ``1 ≤ p < n_context`` uniform, and the last column is ``c = t_{p+1}``.

    **Raises:** :class:`GradflowValueError` if ``vocab < n_context`` or the sizes are not positive.
    """
    _check(n_seq, vocab, n_context, n_context)
    rng = np.random.default_rng(seed)
    toks = _distinct(rng, n_seq, vocab, n_context)
    p = rng.integers(0, n_context - 1, size=n_seq)  # 0-based index of q inside toks
    rows = np.arange(n_seq)
    seq = np.empty((n_seq, n_context + 3), np.int32)
    seq[:, 0] = vocab
    seq[:, 1:n_context + 1] = toks
    seq[:, n_context + 1] = toks[rows, p]
    seq[:, n_context + 2] = toks[rows, p + 1]
    return seq


def group_of(tokens: np.ndarray, *, vocab: int = 48, n_groups: int = 4) -> np.ndarray:
    """Group index of content tokens (``token // (vocab // n_groups)``)."""
    return np.asarray(tokens) // (vocab // n_groups)


def group_batch(seed: int, n_seq: int, *, vocab: int = 48, n_groups: int = 4,
                n_context: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Group-classification sequences ``[CLS, x_1 … x_n]`` and labels (SPEC §7).

    **Returns:** ``(tokens, labels)``: int32 ``(n_seq, n_context + 1)`` with ``CLS = vocab`` in
    column 0 and ``n_context`` distinct tokens of group ``label`` after it; int32 ``(n_seq,)``
    labels in ``[0, n_groups)``. Group ``g`` holds tokens ``g·m … (g+1)·m − 1``, ``m = vocab // n_groups``.

    **Raises:** :class:`GradflowValueError` if a group has fewer than ``n_context`` tokens.
    """
    if not (isinstance(n_groups, (int, np.integer)) and n_groups >= 2):
        raise bad_arg("n_groups", n_groups, "an integer >= 2")
    _check(n_seq, vocab, n_context, n_context * n_groups)
    m = vocab // n_groups
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, n_groups, size=n_seq).astype(np.int32)
    toks = _distinct(rng, n_seq, m, n_context) + m * labels[:, None]
    seq = np.empty((n_seq, n_context + 1), np.int32)
    seq[:, 0] = vocab
    seq[:, 1:] = toks
    return seq, labels
