"""The paper's initial draws, one copy each (from the authors' public notebook; docs: Figures).

Every ``*_init`` function reproduces the authors' notebook draws with NumPy's legacy
``RandomState(seed)`` in the authors' order, so GD from these states is the authors' run.
Shapes follow the engine's layout (``V`` is ``(d, n)``, column ``j`` = value of token ``j``).
Used by the figures, the tests and the benchmarks.
"""

from __future__ import annotations

import numpy as np

from gradflow.attention.sweep import fig2_init  # the one copy (gradflow's sweeps draw it too)

__all__ = ["fig2_init", "conditioning_init", "normalization_init", "massive_init", "kl_init"]


def conditioning_init(kappa: float, seed: int = 123, d: int = 20):
    """Figs. 3/12 draws: ``RandomState(seed)``, then in order
    ``W = 1e-5·randn(d, d)``, ``a = 1e-3·randn(d)``, ``X_raw = randn(d, d)`` (its singular values
    are replaced by ``linspace(1, 1/κ, d)``, singular vectors kept), ``y = randn(d)``.

    **Returns:** ``(W0 (d, d), a0 (d,), X (d, d), y (d,))`` float64; the loss is
    ``Σ(y − X W s)²`` (no ½), i.e. ``SquareLoss(y, X, scale=1)``.
    """
    rng = np.random.RandomState(seed)
    W0 = 1e-5 * rng.randn(d, d)
    a0 = 1e-3 * rng.randn(d)
    U, _, Vt = np.linalg.svd(rng.randn(d, d))
    X = U @ np.diag(np.linspace(1.0, 1.0 / kappa, d)) @ Vt
    y = rng.randn(d)
    return W0, a0, X, y


def normalization_init(seed: int = 42, n: int = 10):
    """Normalisation-map figures (paper appendix): ``RandomState(seed)``: ``β* = randn(n)`` normalised;
    then for every map the authors re-seed ``seed`` and draw ``V = 0.1·randn(n, n)``,
    ``a = 1 + 0.1·randn(n)``, so every map starts from the same ``(V0, a0)``.

    **Returns:** ``(beta_star (n,), V0 (n, n), a0 (n,))`` float64.
    """
    rng = np.random.RandomState(seed)
    beta_star = rng.randn(n)
    rng = np.random.RandomState(seed)
    V0 = 0.1 * rng.randn(n, n)
    a0 = 1.0 + 0.1 * rng.randn(n)
    return beta_star / np.linalg.norm(beta_star), V0, a0


def massive_init(D: int, seed: int = 42):
    """Massive-activation draws (paper appendix): ``RandomState(seed)``: ``β* = randn(D)`` normalised;
    re-seed ``seed``: a ``randn(D, D)`` draw is consumed (unused), then ``a = 1 + 0.1·randn(D)``;
    ``U(0) = I``.

    **Returns:** ``(beta_star (D,), U0 (D, D), a0 (D,))`` float64.
    """
    rng = np.random.RandomState(seed)
    beta_star = rng.randn(D)
    rng = np.random.RandomState(seed)
    rng.randn(D, D)  # consumed by the authors' notebook, unused
    a0 = 1.0 + 0.1 * rng.randn(D)
    return beta_star / np.linalg.norm(beta_star), np.eye(D), a0


def kl_init(seed: int = 123, n: int = 10, k: int = 10):
    """Soft-target cross-entropy ("KL") draws (paper appendix): ``RandomState(seed)``:
    ``V_authors = 0.1·randn(n, k)``, ``a = 0·randn(n)`` (consumed), ``p* = softmax(10·rand(k))``.

    The authors' ``V`` is ``(n, k)`` with class logits ``V_authorsᵀ s``; the engine's
    :class:`gradflow.SoftTargetCrossEntropy` takes ``β = V s`` with ``V`` of shape ``(k, n)``.
    We return ``V0 = V_authorsᵀ`` so that GD from ``V0`` is the authors' run (row ``i`` of the
    authors' matrix, the class-logit contribution of token ``i``, is column ``i`` here).

    **Returns:** ``(V0 (k, n), a0 (n,), p_star (k,))`` float64.
    """
    rng = np.random.RandomState(seed)
    V_authors = 0.1 * rng.randn(n, k)
    a0 = 0.0 * rng.randn(n)
    z = 10.0 * rng.rand(k)
    p = np.exp(z - z.max())
    return V_authors.T.copy(), a0, p / p.sum()
