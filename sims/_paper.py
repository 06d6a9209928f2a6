"""Run helpers shared by the paper-figure modules (the initial draws are :mod:`gradflow.sims.draws`)."""

from __future__ import annotations

import jax
import numpy as np

import gradflow
from gradflow.flow import gradient_field
from gradflow.models import get_model

__all__ = [
    "gd_record",
    "flow_times",
    "grad_norms",
    "flow_status",
]


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
