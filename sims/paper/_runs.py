"""Run helpers shared by the paper-figure modules (the initial draws are :mod:`gradflow.sims.draws`)."""

from __future__ import annotations

import jax
import numpy as np

import gradflow
from gradflow.attention.flow import gradient_field
from gradflow.attention.models import get_model

__all__ = [
    "grad_norms",
    "flow_status",
]


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
