"""Data shared by Figs. 3 and 12: square loss with an ill-conditioned design (paper Figs. 3/12).

For each κ in ``kappas``: the authors' draws (:func:`gradflow.sims.draws.conditioning_init`, seed 123
per κ), loss ``Σ(y − X W s)²`` (no ½: ``SquareLoss(y, X, scale=1)``), the gradient flow
(diffrax, ``solver="auto"``) to ``t1`` and GD at the authors' lr 1e-3 for ``gd_steps``
iterations (flow time ``t = lr·k``). The claim (empirical, no theorem): the final attention
``s`` gets sparser as κ grows (κ = 1 stays near uniform, κ = 5 nearly one-hot).
"""

from __future__ import annotations

import numpy as np

import gradflow

from gradflow.sims._common import phases
from gradflow.sims.paper._runs import grad_norms
from gradflow.sims.grids import flow_times, gd_record
from gradflow.sims.draws import conditioning_init

__all__ = ["config", "compute", "summary", "increases_with_kappa"]


def config(quick: bool) -> dict:
    return {
        "seed": 123,
        "d": 20,
        "kappas": [1, 2, 3, 4, 5],
        "lr": 1e-3,
        "gd_steps": 300_000,
        "gd_snapshots": 300 if quick else 1000,
        "t1": 300.0,
        "flow_points": 300 if quick else 600,
        "rtol": 1e-10,
        "atol": 1e-12,
    }


def _append_run(out: dict, prefix: str, loss, run) -> None:
    """Append one run's logits, weights, loss and gradient norms to ``out[prefix + key]``."""
    gW, ga = grad_norms(loss, run.V, run.a)
    for key, val in (("a", run.a), ("s", run.s), ("loss", run.loss), ("grad_W", gW), ("grad_a", ga)):
        out[prefix + key].append(np.asarray(val))


def compute(cfg: dict, progress: bool = False, with_gd: bool = True) -> dict[str, np.ndarray]:
    """Flow (and GD unless ``with_gd=False``) for every κ. Arrays are stacked over κ (axis 0).

    **Raises:** ``RuntimeError`` if a flow or a GD run does not finish with status ``ok``
    (every κ ≤ 5 run finishes at these settings; a failure means the figure would be wrong).
    """
    record = gd_record(cfg["gd_steps"], cfg["gd_snapshots"])
    gd_t = cfg["lr"] * record
    ts = flow_times(cfg["t1"], cfg["flow_points"], gd_t if with_gd else ())
    out: dict[str, list] = {k: [] for k in ("a", "s", "loss", "grad_W", "grad_a", "flow_steps", "flow_status")}
    if with_gd:
        out.update({k: [] for k in ("gd_a", "gd_s", "gd_loss", "gd_grad_W", "gd_grad_a")})
    with phases([f"kappa={k}" for k in cfg["kappas"]], progress, "conditioning") as advance:
        for kappa in cfg["kappas"]:
            W0, a0, X, y = conditioning_init(kappa, cfg["seed"], cfg["d"])
            loss = gradflow.SquareLoss(y, design=X, scale=1.0)
            flow = gradflow.simulate(loss, W0, a0, t1=cfg["t1"], ts=ts, rtol=cfg["rtol"], atol=cfg["atol"])
            if flow.status != "ok":
                raise RuntimeError(f"conditioning κ={kappa}: flow status {flow.status} at t={float(flow.t_end):g}")
            _append_run(out, "", loss, flow)
            out["flow_steps"].append(int(flow.num_steps))
            out["flow_status"].append(int(flow.status_code))
            if with_gd:
                gd = gradflow.descend(loss, W0, a0, lr=cfg["lr"], steps=cfg["gd_steps"], record=record)
                if gd.status != "ok":
                    raise RuntimeError(f"conditioning κ={kappa}: GD status {gd.status}")
                _append_run(out, "gd_", loss, gd)
            advance(f"kappa={kappa}")
    data = {k: np.asarray(v) for k, v in out.items()}
    data["t"] = ts
    data["kappas"] = np.asarray(cfg["kappas"], dtype=np.float64)
    if with_gd:
        data["gd_t"] = gd_t
    return data


def increases_with_kappa(kappas, max_s) -> bool:
    """The claim of Figs. 3/12: ``max_i s_i`` strictly increases with κ (κ sorted as given)."""
    kappas, max_s = np.asarray(kappas, float), np.asarray(max_s, float)
    return bool(np.all(np.diff(kappas) > 0) and np.all(np.diff(max_s) > 0))


def summary(data: dict, cfg: dict) -> dict:
    kappas = [float(k) for k in data["kappas"]]
    max_s = data["s"][:, -1].max(axis=1)
    out = {
        "t_final": float(data["t"][-1]),
        "max_s_final": dict(zip(map(str, kappas), map(float, max_s))),
        "entropy_final": {
            str(k): float(-(s * np.log(s)).sum()) for k, s in zip(kappas, data["s"][:, -1])
        },
        "loss_final": dict(zip(map(str, kappas), map(float, data["loss"][:, -1]))),
        "flow_steps": dict(zip(map(str, kappas), map(int, data["flow_steps"]))),
        "flow_status": {str(k): gradflow.STATUS[int(c)] for k, c in zip(kappas, data["flow_status"])},
        "max_s_increases_with_kappa": increases_with_kappa(kappas, max_s),
    }
    if "gd_s" in data:
        idx = np.searchsorted(data["t"], data["gd_t"])
        out["gd_max_s_final"] = dict(zip(map(str, kappas), map(float, data["gd_s"][:, -1].max(axis=1))))
        out["gd_vs_flow_max_abs_s"] = float(np.max(np.abs(data["gd_s"] - data["s"][:, idx])))
    return out
