"""Helpers shared by the beyond-the-paper figures (``long-horizon``, ``gamma``, ``bound``,
``gd-vs-flow``, ``sinks-rowwise``): valid-point selection, stable ``1 − s_top``."""

from __future__ import annotations

import numpy as np

import gradflow
from gradflow.sims.draws import fig2_init
from gradflow.sims.grids import flow_times, gd_record


def long_run_config(quick: bool, flow_points: int, **extra) -> dict:
    """The settings the long-horizon figures share (``long-horizon``, ``gamma``, ``bound``): Fig. 2's
    draw (seed 123, ``n = 8``) followed by the flow to ``t = 1e30`` (rtol 1e-10, atol 1e-12;
    ``flow_points`` saves, 300 in quick mode) and its GD twin (lr 0.1, 1e6 iterations, 2e4 quick,
    300 recorded), plus the figure's own ``extra`` settings."""
    return {
        "seed": 123,
        "n": 8,
        "t1": 1e30,
        "flow_points": 300 if quick else flow_points,
        "rtol": 1e-10,
        "atol": 1e-12,
        "lr": 0.1,
        "gd_steps": 20_000 if quick else 1_000_000,
        "gd_snapshots": 300,
        **extra,
    }


def long_run(cfg: dict, advance) -> tuple:
    """Fig. 2's draw, its logistic teacher, the flow and the GD twin of :func:`long_run_config`'s
    settings ``cfg`` (calls ``advance("flow")`` and ``advance("gd")`` after each).

    Returns ``(beta_star, loss, flow, gd)``: ``beta_star (n,)``, the :class:`gradflow.LogisticTeacher`,
    the flow :class:`gradflow.Trajectory` (saves log-spaced from ``t = 1e-2``) and the GD one."""
    V0, a0, beta_star = fig2_init(cfg["seed"], cfg["n"])
    loss = gradflow.LogisticTeacher(beta_star)
    flow = gradflow.simulate(loss, V0, a0, t1=cfg["t1"], ts=flow_times(cfg["t1"], cfg["flow_points"], t_min=1e-2),
                             rtol=cfg["rtol"], atol=cfg["atol"])
    advance("flow")
    gd = gradflow.descend(loss, V0, a0, lr=cfg["lr"], steps=cfg["gd_steps"],
                          record=gd_record(cfg["gd_steps"], cfg["gd_snapshots"]))
    advance("gd")
    return beta_star, loss, flow, gd


def valid_arrays(traj: gradflow.Trajectory, *names: str) -> list[np.ndarray]:
    """``traj.<name>`` as NumPy arrays restricted to the reached save points (``traj.valid``)."""
    keep = np.asarray(traj.valid, bool)
    return [np.asarray(getattr(traj, name))[keep] for name in names]


def one_minus_top(a: np.ndarray, top: int) -> np.ndarray:
    """``1 − s_top = Σ_{j≠top} softmax(a)_j`` from the logits ``a (T, n)``, without cancellation."""
    lse = np.logaddexp.reduce(a, axis=-1)
    rest = np.logaddexp.reduce(np.delete(a, top, axis=-1), axis=-1)
    return np.exp(rest - lse)


def require_ok(fig_id: str, **runs: gradflow.Trajectory) -> None:
    """Raise ``RuntimeError`` naming the runs whose status is not ``ok``."""
    bad = {name: tr.status for name, tr in runs.items() if not tr.ok}
    if bad:
        raise RuntimeError(f"{fig_id}: runs not ok: {bad}")


def sci(x: float) -> str:
    """``x`` as mathtext: ``0``, ``10^{4}``, ``2\\cdot10^{4}`` or a plain ``%g`` for ``1e-2 < |x| < 1e3``."""
    if x == 0:
        return "0"
    if 1e-2 < abs(x) < 1e3:
        return f"{x:g}"
    exp = int(np.floor(np.log10(abs(x))))
    mant = x / 10.0**exp
    return f"10^{{{exp}}}" if np.isclose(mant, 1.0) else f"{mant:g}\\cdot10^{{{exp}}}"
