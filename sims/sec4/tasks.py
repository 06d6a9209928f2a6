"""The two synthetic tasks of the paper's Sec. 4, as the authors' code generates them
(``tml-epfl/softmax``, ``src/datasets.py``), drawn from a seed with NumPy.

**Induction** (causal, with positions): ``vocab`` ids with ``BOS = 0`` and content tokens
``1 … vocab−1``. A sequence is ``[BOS, t_1 … t_n, q, c]`` with ``n = n_context`` (10) distinct
content tokens, ``q = t_r`` with ``r`` uniform over ``1 … n`` (``query_last``, the authors'
rule: ``q`` may repeat ``t_n``, whose successor is then ``q`` itself) or over ``1 … n−1``, and
target ``c`` = the token after ``t_r``. With ``shift_query`` (the paper's main panel) the query
carries the id ``q + vocab``, so the model's input and output vocabularies are ``2·vocab``.
The model reads the first ``n + 2`` tokens and is trained on the last position (predict ``c``)
plus ``aux_weight ×`` the next-token loss of the other positions.

**Groups** (non-causal, no positions): content ids ``1 … vocab−1`` split into ``K`` contiguous
groups of ``m = (vocab−1)/K``; a sequence is ``[x_1 … x_n, CLS]`` with ``n`` distinct tokens of
one group (at ``vocab = 41``, ``m = n = 10``: the whole group, shuffled) and ``CLS = 0``
appended; the label is the group, read out at CLS.
"""

from __future__ import annotations

import numpy as np

from gradflow.internal import bad_arg

__all__ = ["induction_batch", "group_batch", "group_of", "BOS", "CLS"]

BOS = 0
CLS = 0


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


def induction_batch(seed: int, n_seq: int, *, vocab: int = 50, n_context: int = 10, shift_query: bool = True,
                    query_last: bool = True) -> np.ndarray:
    """Induction sequences ``[BOS, t_1 … t_n, q, c]`` (paper Sec. 4.1; the authors' ``InductionDataset``).

    **Arguments:** ``vocab`` ids including ``BOS = 0`` (50); ``n_context`` distinct content
    tokens (10); ``shift_query``: the query's id is ``q + vocab`` (default True, as in the
    paper's main panel); ``query_last``: the repeated position ``r`` is uniform over
    ``1 … n`` (True, the authors') or ``1 … n−1``.

    **Returns:** int32 array ``(n_seq, n_context + 3)``: column 0 is ``BOS``, columns
    ``1 … n`` distinct tokens in ``[1, vocab)``, column ``n + 1`` the query (``t_r`` or
    ``t_r + vocab``), the last column ``c = t_{r+1}`` (for ``r = n``: the query's id itself).

    **Raises:** :class:`GradflowValueError` if ``vocab − 1 < n_context`` or the sizes are not positive.
    """
    _check(n_seq, vocab, n_context, n_context + 1)
    for name, val in (("shift_query", shift_query), ("query_last", query_last)):
        if not isinstance(val, bool):
            raise bad_arg(name, val, "True or False")
    rng = np.random.default_rng(seed)
    toks = 1 + _distinct(rng, n_seq, vocab - 1, n_context)
    r = rng.integers(0, n_context if query_last else n_context - 1, size=n_seq)  # 0-based index of q in toks
    rows = np.arange(n_seq)
    q = toks[rows, r] + (vocab if shift_query else 0)
    seq = np.empty((n_seq, n_context + 3), np.int32)
    seq[:, 0] = BOS
    seq[:, 1:n_context + 1] = toks
    seq[:, n_context + 1] = q
    seq[:, n_context + 2] = np.concatenate([toks, q[:, None]], axis=1)[rows, r + 1]
    return seq


def group_of(tokens: np.ndarray, *, vocab: int = 41, n_groups: int = 4) -> np.ndarray:
    """Group index of content tokens ``1 … vocab−1`` (``(token − 1) // ((vocab − 1) / n_groups)``)."""
    return (np.asarray(tokens) - 1) // ((vocab - 1) // n_groups)


def group_batch(seed: int, n_seq: int, *, vocab: int = 41, n_groups: int = 4,
                n_context: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Group-classification sequences ``[x_1 … x_n, CLS]`` and labels (paper Sec. 4.2; the
    authors' ``ToyClsDataset``).

    **Returns:** ``(tokens, labels)``: int32 ``(n_seq, n_context + 1)`` with ``n_context``
    distinct tokens of group ``label`` then ``CLS = 0`` in the last column; int32 ``(n_seq,)``
    labels in ``[0, n_groups)``. Group ``g`` holds tokens ``1 + g·m … (g+1)·m``, ``m = (vocab−1)/n_groups``.

    **Raises:** :class:`GradflowValueError` if ``vocab − 1`` is not a multiple of ``n_groups`` or a
    group has fewer than ``n_context`` tokens.
    """
    if not (isinstance(n_groups, (int, np.integer)) and n_groups >= 2):
        raise bad_arg("n_groups", n_groups, "an integer >= 2")
    _check(n_seq, vocab, n_context, n_context * n_groups + 1)
    if (vocab - 1) % n_groups:
        raise bad_arg("vocab", vocab, f"1 + a multiple of n_groups = {n_groups} (ids 1 … vocab−1 split evenly)")
    m = (vocab - 1) // n_groups
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, n_groups, size=n_seq).astype(np.int32)
    toks = 1 + _distinct(rng, n_seq, m, n_context) + m * labels[:, None]
    seq = np.empty((n_seq, n_context + 1), np.int32)
    seq[:, :-1] = toks
    seq[:, -1] = CLS
    return seq, labels
