"""Replicator form of the flow (paper Eqs. 2–4) and the reduced ``(u, a)`` system
(paper Eqs. 6–7, sign corrected), each integrated independently (:mod:`gradflow.theory._reduced`) and compared with the full
``(V, a)`` flow of the engine. Margin ``log10(tol / max error)``.
"""

from __future__ import annotations

import math

import numpy as np

import gradflow

from ._reduced import integrate_reduced
from ._result import CheckResult, Verdict, combine
from .experiments import as_list, lanes, logistic_trials

__all__ = ["STATEMENTS", "REPLICATOR_TOL", "replicator_agrees", "run_replicator"]

STATEMENTS = {
    "replicator": "Eqs. 2-4, 6-7: p-space replicator ds/dt = J(s)^2 V^T r matches softmax(a(t)); "
    "reduced (u, a) system matches the full (V, a) flow",
}

REPLICATOR_TOL = 1e-6
"""Tolerance on the max error (``s``: absolute; ``u``, ``a``: relative to ``1 + |x|``)."""


def replicator_agrees(traj: gradflow.Trajectory, losses, tol: float = REPLICATOR_TOL, power: int = 2) -> Verdict:
    """Compare a logistic-teacher value-softmax trajectory (``a(0)`` arbitrary) with (1) the
    replicator ODE in probability space (``s`` against the flow's ``softmax(a(t))``, ``u``) and (2)
    the reduced ``(u, a)`` system (``u``, ``a``), all integrated from the trajectory's
    ``u(0), a(0)``. ``power=1`` integrates the wrong replicator ``ds/dt = J(s) Vᵀ r`` (control).
    """
    ls = lanes(traj)
    losses = as_list(losses, len(ls))
    margins, oks, errs = [], [], []
    for lane, loss in zip(ls, losses):
        b = np.asarray(loss.teacher)
        red = integrate_reduced(lane["u"][:1], lane["a"][:1], [float(b @ b)], lane["t"], power=power)
        e = dict(
            s_replicator=float(np.max(np.abs(red["s"][0] - lane["s"]))),
            u_replicator=float(np.max(np.abs(red["u_replicator"][0] - lane["u"]) / (1 + np.abs(lane["u"])))),
            u_reduced=float(np.max(np.abs(red["u_logit"][0] - lane["u"]) / (1 + np.abs(lane["u"])))),
            a_reduced=float(np.max(np.abs(red["a"][0] - lane["a"]) / (1 + np.abs(lane["a"])))),
        )
        worst = max(e.values())
        margins.append(math.inf if worst == 0 else float(np.log10(tol / worst)) if np.isfinite(worst) else -math.inf)
        errs.append(e)
        oks.append(lane["ok"] and bool(red["ok"][0]))
    return combine(margins, dict(errors=errs, tol=tol, power_of_J=power), oks)


def run_replicator(trials: int = 16, seed: int = 0) -> CheckResult:
    """Default: the logistic experiment (both shapes, ``t1 = 1e12``). Control: the wrong replicator
    ``ds/dt = J(s) Vᵀ r`` (one ``J``: the logit-space field applied to probabilities)."""
    runs = logistic_trials(trials, seed)
    mains, ctrls = [], []
    for tr, ls, _ in runs:
        mains.append(replicator_agrees(tr, ls))
        ctrls.append(replicator_agrees(tr, ls, power=1))

    def merge(vs):
        return combine(
            [m for v in vs for m in v.margins],
            dict(errors=[e for v in vs for e in v.details["errors"]], tol=REPLICATOR_TOL),
            [not v.details.get("solver_not_ok_trials") for v in vs],
        )

    return CheckResult.from_verdicts(
        "replicator", STATEMENTS["replicator"], merge(mains), merge(ctrls), "wrong replicator ds/dt = J(s) V^T r (one J)"
    )
