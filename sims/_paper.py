"""The paper's initial draws (from the authors' public notebook; docs: Figures) and run helpers shared by the paper-figure modules.

Every ``*_init`` function reproduces the authors' notebook draws with NumPy's legacy
``RandomState(seed)`` in the authors' order, so GD from these states is the authors' run.
Shapes follow the engine's layout (``V`` is ``(d, n)``, column ``j`` = value of token ``j``).
"""

from __future__ import annotations

import jax
import numpy as np

import gradflow
from gradflow.flow import gradient_field
from gradflow.models import get_model

__all__ = [
    "conditioning_init",
    "normalisation_init",
    "massive_init",
    "kl_init",
    "gd_record",
    "flow_times",
    "grad_norms",
    "flow_status",
]


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


def normalisation_init(seed: int = 42, n: int = 10):
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


def gd_record(steps: int, snapshots: int) -> np.ndarray:
    """Iteration ``0`` plus about ``snapshots`` log-spaced iteration indices up to ``steps``."""
    grid = np.unique(np.round(np.geomspace(1, steps, snapshots)).astype(np.int64))
    return np.concatenate([[0], grid])


def flow_times(t1: float, points: int, extra=(), t_min: float = 1e-3) -> np.ndarray:
    """``0``, ``points`` log-spaced flow times from ``t_min`` to ``t1``, and ``extra`` (e.g. the GD
    times ``lr·k``, so flow and GD can be compared at equal flow time); sorted, unique."""
    extra = np.asarray(extra, dtype=np.float64)
    grid = np.geomspace(t_min, t1, points)
    ts = np.unique(np.concatenate([[0.0], grid, extra[extra <= t1]]))
    return ts


def grad_norms(loss, V, a, *, normalization: str = "softmax", model: str = "value-softmax"):
    """Frobenius norms ``(‖∇_V L‖, ‖∇_a L‖)`` at every saved state (``V (T, …)``, ``a (T, …)``).

    **Returns:** two float64 arrays of shape ``(T,)``.
    """
    mdl = get_model(model, normalization)
    fn = jax.jit(jax.vmap(lambda V_, a_: gradient_field(mdl, loss, V_, a_)))
    dV, da = fn(np.asarray(V), np.asarray(a))
    dV, da = np.asarray(dV), np.asarray(da)
    return (np.sqrt((dV**2).reshape(len(dV), -1).sum(1)), np.sqrt((da**2).reshape(len(da), -1).sum(1)))


def flow_status(traj: gradflow.Trajectory) -> dict:
    """Status, steps, solver, reached and steady-state times of one flow, JSON-ready."""
    meta = traj.metadata
    t_steady = float(traj.t_steady) if traj.t_steady is not None else float("inf")
    return {
        "status": traj.status,
        "steps": int(traj.num_steps),
        "solver": meta.get("solver"),
        "rtol": meta.get("rtol"),
        "atol": meta.get("atol"),
        "t_end": float(traj.t_end),
        "t_steady": t_steady if np.isfinite(t_steady) else None,
    }
