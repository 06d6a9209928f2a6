"""Exact identities of the flow (SPEC §3.1, §3.5): conservation of ``Σ_i a_i``, the frozen part
of ``V`` orthogonal to ``β*`` (logistic teacher), and the output response of Lemma D.2.

Margins are in decades: ``log10(tol / err)`` — positive when the error is below ``tol``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

import gradflow

from ._result import CheckResult, Verdict, combine, merge
from ._sweeps import as_list, lanes, logistic_draws, logistic_sweep, square_sweep


def _pool(verdicts):
    """Pool per-group verdicts; the tolerance and the power of J are shared settings."""
    return merge(verdicts, scalar_keys=("tol", "power_of_J"))

__all__ = [
    "STATEMENTS",
    "SUM_A_TOL",
    "V_PERP_TOL",
    "LEMD2_TOL",
    "sum_a_conserved",
    "v_perp_frozen",
    "output_response",
    "run_inv_sum_a",
    "run_inv_v_perp",
    "run_lemD2",
]

STATEMENTS = {
    "inv.sum_a": "SPEC 3.5 (Eqs. 2-4, 1^T J = 0): sum_i a_i(t) is conserved",
    "inv.v_perp": "SPEC 3.2/3.5 (Eq. 5): (I - b*b*^T/|b*|^2) V(t) is constant under the logistic teacher",
    "lemD.2": "Lemma D.2: d beta/dt = (|s|^2 I + V J(s)^2 V^T) r at trajectory points",
}

SUM_A_TOL = 1e-9
"""Tolerance on ``max_t |Σa(t) − Σa(0)| / (1 + max_t ‖a(t)‖_∞)`` (a linear invariant: Runge–Kutta
methods preserve it up to round-off)."""

V_PERP_TOL = 1e-9
"""Tolerance on ``max_t ‖P⊥(V(t) − V(0))‖_F / (1 + max_t ‖V(t)‖_F)``."""

LEMD2_TOL = 1e-9
"""Tolerance on the relative error ``‖dβ/dt − formula‖ / ‖dβ/dt‖`` (max over saved points)."""


def _decades(tol, err):
    return math.inf if err == 0 else float(np.log10(tol / err))


def sum_a_conserved(traj: gradflow.Trajectory, tol: float = SUM_A_TOL) -> Verdict:
    """``Σ_i a_i`` constant (any loss, softmax-type map with ``1ᵀJ = 0``). Margin ``log10(tol/err)``."""
    margins, errs, oks = [], [], []
    for lane in lanes(traj):
        a = lane["a"].reshape(lane["a"].shape[0], -1)
        total = a.sum(axis=1)
        err = float(np.max(np.abs(total - total[0])) / (1.0 + np.max(np.abs(a))))
        errs.append(err)
        margins.append(_decades(tol, err))
        oks.append(lane["ok"])
    return combine(margins, dict(rel_drift=errs, tol=tol), oks)


def v_perp_frozen(traj: gradflow.Trajectory, losses, tol: float = V_PERP_TOL) -> Verdict:
    """``(I − β*β*ᵀ/‖β*‖²) V(t) = (I − β*β*ᵀ/‖β*‖²) V(0)`` for all saved ``t``. ``losses``: one loss
    with a teacher or one per trajectory. Margin ``log10(tol/err)``."""
    ls = lanes(traj)
    losses = as_list(losses, len(ls))
    margins, errs, oks = [], [], []
    for lane, loss in zip(ls, losses):
        b = np.asarray(loss.teacher)
        P = np.eye(b.size) - np.outer(b, b) / np.dot(b, b)
        V = lane["V"]
        drift = np.einsum("ij,tjn->tin", P, V - V[:1])
        err = float(np.max(np.linalg.norm(drift, axis=(1, 2))) / (1.0 + np.max(np.linalg.norm(V, axis=(1, 2)))))
        errs.append(err)
        margins.append(_decades(tol, err))
        oks.append(lane["ok"])
    return combine(margins, dict(rel_drift=errs, tol=tol), oks)


def _response(model, loss, V, a, power):
    """``(dβ/dt by autodiff along the engine's field, the Lemma D.2 formula with J^power)``."""
    dV, da = gradflow.gradient_field(model, loss, V, a)
    _, dbeta = jax.jvp(model.beta, (V, a), (dV, da))
    s = model.weights(V, a)
    r = loss.residual(model.beta(V, a))
    J = jnp.diag(s) - jnp.outer(s, s)
    Jp = J @ J if power == 2 else J
    formula = jnp.dot(s, s) * r + V @ (Jp @ (V.T @ r))
    return dbeta, formula


_response_batch = jax.jit(
    jax.vmap(_response, in_axes=(None, None, 0, 0, None)), static_argnums=(4,)
)


def output_response(traj: gradflow.Trajectory, losses, tol: float = LEMD2_TOL, power: int = 2) -> Verdict:
    """Lemma D.2 (with the square, SPEC §3.1) at every saved point of given value-softmax
    trajectories. ``dβ/dt`` is the JVP of ``β(V, a)`` along the autodiff field
    (:func:`gradflow.gradient_field`); the formula is ``(‖s‖² I + V J(s)^power Vᵀ) r`` with
    ``r = −∇ℓ(β)``. ``power=1`` is the printed (wrong) version, used as a negative control.
    Margin ``log10(tol / max relative error)``.
    """
    ls = lanes(traj)
    losses = as_list(losses, len(ls))
    model = gradflow.get_model("value-softmax")
    margins, errs, oks = [], [], []
    for lane, loss in zip(ls, losses):
        got, formula = _response_batch(model, loss, jnp.asarray(lane["V"]), jnp.asarray(lane["a"]), power)
        got, formula = np.asarray(got), np.asarray(formula)
        scale = np.linalg.norm(got, axis=1)
        keep = scale > 0
        err = float(np.max(np.linalg.norm(got - formula, axis=1)[keep] / scale[keep])) if keep.any() else math.inf
        errs.append(err)
        margins.append(_decades(tol, err))
        oks.append(lane["ok"])
    return combine(margins, dict(max_rel_err=errs, tol=tol, power_of_J=power), oks)


def run_inv_sum_a(trials: int = 16, seed: int = 0) -> CheckResult:
    """Default: the logistic sweep and the square-loss (Lemma 3.5) runs. Control: the
    un-normalised element-wise sigmoid map (``1ᵀ ∂s/∂a ≠ 0``), logistic teacher, ``t1 = 1e6``."""
    sq_traj, _, _ = square_sweep(trials, seed, True)
    main = _pool([sum_a_conserved(tr) for tr, _, _ in logistic_sweep(trials, seed)] + [sum_a_conserved(sq_traj)])
    grp = logistic_draws(trials, seed)[0]
    losses = [gradflow.LogisticTeacher(b) for b in grp["betas"]]
    ctrl = gradflow.simulate_batch(losses, grp["V0s"], grp["a0s"], t1=1e6, normalization="sigmoid")
    control = sum_a_conserved(ctrl)
    return CheckResult.from_verdicts(
        "inv.sum_a", STATEMENTS["inv.sum_a"], main, control, "element-wise sigmoid map (not normalised), logistic, t1 = 1e6"
    )


def run_inv_v_perp(trials: int = 16, seed: int = 0) -> CheckResult:
    """Default: the logistic sweep. Control: the square loss from a random ``V(0)``
    (``dV/dt = (β* − Vs)sᵀ`` moves ``V`` off the ``β*`` direction)."""
    main = _pool([v_perp_frozen(tr, ls) for tr, ls, _ in logistic_sweep(trials, seed)])
    sq_traj, sq_losses, _ = square_sweep(trials, seed, False)
    control = v_perp_frozen(sq_traj, sq_losses)
    return CheckResult.from_verdicts(
        "inv.v_perp", STATEMENTS["inv.v_perp"], main, control, "square loss from random V(0), t1 = 1e4"
    )


def run_lemD2(trials: int = 16, seed: int = 0) -> CheckResult:
    """Default: every saved point of the logistic sweep and of the square-loss runs from random
    ``V(0)``. Control: the printed formula without the square (``V J(s) Vᵀ``)."""
    sweep = logistic_sweep(trials, seed)
    sq_traj, sq_losses, _ = square_sweep(trials, seed, False)
    main = _pool([output_response(tr, ls) for tr, ls, _ in sweep] + [output_response(sq_traj, sq_losses)])
    control = _pool([output_response(tr, ls, power=1) for tr, ls, _ in sweep] + [output_response(sq_traj, sq_losses, power=1)])
    return CheckResult.from_verdicts(
        "lemD.2", STATEMENTS["lemD.2"], main, control, "the printed formula |s|^2 I + V J(s) V^T (square dropped)"
    )
