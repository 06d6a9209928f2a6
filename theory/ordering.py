"""Theorem 3.2: order preservation (a) and repulsion (b) for the logistic teacher.

Indices are sorted by ``u(0)`` (descending): ``π = argsort(−u(0))``, so "``i < j``" below means
``u_{π(i)}(0) > u_{π(j)}(0)`` (SPEC §3.4: the theorem holds for ``i < j``, gaps oriented positively).
"""

from __future__ import annotations

import numpy as np

import gradflow

from ._result import CheckResult, Verdict, combine
from ._sweeps import ascent_sweep, lanes, logistic_sweep

__all__ = ["order_preserved", "repulsion", "STATEMENTS", "run_thm3_2a", "run_thm3_2b"]

STATEMENTS = {
    "thm3.2a": "Thm 3.2(a): for t > 0, u keeps the order of u(0), and s (and a) take that order strictly",
    "thm3.2b": "Thm 3.2(b): u_i - u_j strictly increasing for i < j, and Phi_ij = -(e^-a_i - e^-a_j)(u_i - u_j) > 0",
}


def _sorted(lane):
    order = np.argsort(-lane["u"][0], kind="stable")
    pos = lane["t"] > 0
    return order, pos


def order_preserved(traj: gradflow.Trajectory) -> Verdict:
    """Thm 3.2(a) on given trajectories (batched or single; ``u`` must be recorded).

    Per trial, with ``π`` the order of ``u(0)``: the margin is the smallest gap between
    consecutive sorted entries of ``u``, ``a`` and ``s`` over the saved ``t > 0``
    (``min_k x_{π(k)} − x_{π(k+1)}``). Positive iff every order is kept strictly.

    **Raises:** :class:`gradflow.GradflowValueError` if the trajectory has no ``u``.
    """
    if traj.u is None:
        raise gradflow.GradflowValueError("traj: got a trajectory without u; expected a run with a teacher loss")
    margins, gaps_u, gaps_a, gaps_s, oks = [], [], [], [], []
    for lane in lanes(traj):
        order, pos = _sorted(lane)
        mins = []
        for key in ("u", "a", "s"):
            x = lane[key][pos][:, order]
            mins.append(float(np.min(x[:, :-1] - x[:, 1:])) if x.size else -np.inf)
        gaps_u.append(mins[0])
        gaps_a.append(mins[1])
        gaps_s.append(mins[2])
        margins.append(min(mins))
        oks.append(lane["ok"])
    return combine(margins, dict(min_gap_u=gaps_u, min_gap_a=gaps_a, min_gap_s=gaps_s), oks)


def repulsion(traj: gradflow.Trajectory) -> Verdict:
    """Thm 3.2(b) on given trajectories.

    Per trial, sub-margins: (1) the smallest increment, between consecutive saved times, of
    any consecutive sorted gap ``u_{π(k)} − u_{π(k+1)}`` (so all gaps ``i < j`` increase);
    (2) the smallest ``Φ_ij = −(e^{−a_i} − e^{−a_j})(u_i − u_j)`` over pairs ``i < j`` and saved
    ``t > 0``. The margin is their minimum. ``details`` also reports whether the ``a`` gaps
    increase as well (claimed in the paper's text; reported, not part of ``holds``).
    """
    if traj.u is None:
        raise gradflow.GradflowValueError("traj: got a trajectory without u; expected a run with a teacher loss")
    margins, incs, phis, a_inc, oks = [], [], [], [], []
    for lane in lanes(traj):
        order, pos = _sorted(lane)
        u = lane["u"][:, order]
        a = lane["a"][:, order]
        gap = u[:, :-1] - u[:, 1:]
        inc = float(np.min(np.diff(gap, axis=0))) if gap.shape[0] > 1 else -np.inf
        ga = a[:, :-1] - a[:, 1:]
        a_inc.append(float(np.min(np.diff(ga, axis=0))) if ga.shape[0] > 1 else -np.inf)
        up, ap = u[pos], a[pos]
        i, j = np.triu_indices(u.shape[1], 1)
        # −(e^{−a_i} − e^{−a_j}) = e^{−a_j}·expm1(a_j − a_i) ... written stably as below
        phi = -(np.exp(-ap[:, i]) - np.exp(-ap[:, j])) * (up[:, i] - up[:, j])
        phi_min = float(np.min(phi)) if phi.size else -np.inf
        incs.append(inc)
        phis.append(phi_min)
        margins.append(min(inc, phi_min))
        oks.append(lane["ok"])
    return combine(
        margins,
        dict(min_gap_increment_u=incs, min_phi=phis, min_gap_increment_a=a_inc, a_gaps_increasing=[x > 0 for x in a_inc]),
        oks,
    )


def _run(check_id, fn, trials, seed):
    verdicts = [fn(traj) for traj, _, _ in logistic_sweep(trials, seed)]
    margins = [m for v in verdicts for m in v.margins]
    details = {}
    for v in verdicts:
        for k, val in v.details.items():
            details.setdefault(k, [])
            details[k] = list(details[k]) + (list(val) if isinstance(val, (list, tuple)) else [val])
    oks = [not v.details.get("solver_not_ok_trials") for v in verdicts]
    main = combine(margins, details, oks)
    ctrl_traj, _ = ascent_sweep(trials, seed)
    control = fn(ctrl_traj)
    return CheckResult.from_verdicts(
        check_id, STATEMENTS[check_id], main, control, "reversed field (gradient ascent on the logistic loss), t1 = 1e4"
    )


def run_thm3_2a(trials: int = 16, seed: int = 0) -> CheckResult:
    """Default experiment for Thm 3.2(a): the logistic sweep (``a(0) = 0``, random ``V(0)``,
    ``β*``, two shapes, ``t1 = 1e12``). Control: the reversed field, where ``a`` orders opposite to ``u``."""
    return _run("thm3.2a", order_preserved, trials, seed)


def run_thm3_2b(trials: int = 16, seed: int = 0) -> CheckResult:
    """Default experiment for Thm 3.2(b) (as :func:`run_thm3_2a`). Control: the reversed
    field, where ``Φ_ij < 0``."""
    return _run("thm3.2b", repulsion, trials, seed)
