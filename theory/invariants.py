"""Exact identities of the flow (paper Eqs. 2–5): conservation of ``Σ_i a_i``, the frozen part
of ``V`` orthogonal to ``β*`` (logistic teacher), and the output response of Lemma D.2.

Margins are in decades: ``log10(tol / err)`` — positive when the error is below ``tol``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import expit

import gradflow

from ._result import CheckResult, Verdict, any_of, combine, merge, over_time
from .experiments import as_list, lanes, logistic_draws, logistic_trials, square_trials


def _pool(verdicts):
    """Pool per-group verdicts; the tolerance and the power of J are shared settings."""
    return merge(verdicts, scalar_keys=("tol", "tol_fd", "power_of_J"))

__all__ = [
    "STATEMENTS",
    "SUM_A_TOL",
    "V_PERP_TOL",
    "LEMD2_TOL",
    "sum_a_conserved",
    "v_perp_frozen",
    "output_response",
    "output_response_along",
    "LEMD2_FD_TOL",
    "run_inv_sum_a",
    "run_inv_v_perp",
    "run_lemD2",
]

STATEMENTS = {
    "inv.sum_a": "Eqs. 2-4 (1^T J = 0): sum_i a_i(t) is conserved",
    "inv.v_perp": "Eqs. 2-5 (logistic teacher): (I - b*b*^T/|b*|^2) V(t) is constant under the logistic teacher",
    "lemD.2": "Lemma D.2: d beta/dt = (|s|^2 I + V J(s)^2 V^T) r along the integrated trajectory "
    "(finite differences of the saved states) and at its points (autodiff)",
}

SUM_A_TOL = 1e-9
"""Tolerance on ``max_t |Σa(t) − Σa(0)| / (1 + max_t ‖a(t)‖_∞)`` (a linear invariant: Runge–Kutta
methods preserve it up to round-off)."""

V_PERP_TOL = 1e-9
"""Tolerance on ``max_t ‖P⊥(V(t) − V(0))‖_F / (1 + max_t ‖V(t)‖_F)``."""

LEMD2_TOL = 1e-9
"""Tolerance on the relative error ``‖dβ/dt − formula‖ / ‖dβ/dt‖`` (max over saved points), with
``dβ/dt`` the autodiff JVP along the engine's field at the saved states."""

LEMD2_FD_TOL = 3e-3
"""Tolerance on the relative error ``‖Dβ − formula‖ / ‖formula‖`` with ``Dβ`` the 7-point finite
difference (in ``τ = log(1 + t)``) of ``β = V s`` over the *saved* states: it fails if the states
were integrated with another field. Measured on the logistic experiment (401 log-spaced saves over
15 decades, 16 trials): max 3.5e-4 (5 points: 1.4e-3; 9 points: 1.8e-4), worst around
``t ≈ 40–100`` where ``s`` moves fastest in ``τ``; about 10×. (The square-loss runs converge like
``e^{−λt}``, which no polynomial in ``τ`` on this grid resolves: they are checked at points only.)"""


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
    """Lemma D.2 (with the square on ``J(s)``, which the printed lemma drops; docs: The model and equations) at every saved point of given value-softmax
    trajectories. ``dβ/dt`` is the JVP of ``β(V, a)`` along the autodiff field
    (:func:`gradflow.gradient_field`); the formula is ``(‖s‖² I + V J(s)^power Vᵀ) r`` with
    ``r = −∇ℓ(β)``. ``power=1`` is the printed (wrong) version, used as a negative control.
    Margin ``log10(tol / max relative error)``.
    """
    ls = lanes(traj)
    losses = as_list(losses, len(ls))
    model = gradflow.get_model("value-softmax")
    margins, errs, oks, times, last = [], [], [], [], []
    for lane, loss in zip(ls, losses):
        got, formula = _response_batch(model, loss, jnp.asarray(lane["V"]), jnp.asarray(lane["a"]), power)
        got, formula = np.asarray(got), np.asarray(formula)
        scale = np.linalg.norm(got, axis=1)
        keep = scale > 0
        rel = np.linalg.norm(got - formula, axis=1)[keep] / scale[keep]
        err = float(np.max(rel)) if keep.any() else math.inf
        errs.append(err)
        margins.append(_decades(tol, err))
        _, t_w, lv = over_time(lane["t"][keep], np.log10(tol / np.maximum(rel, 1e-300))) if keep.any() else (0, math.nan, math.nan)
        times.append(t_w)
        last.append(lv)
        oks.append(lane["ok"])
    return combine(margins, dict(max_rel_err=errs, tol=tol, power_of_J=power), oks, times, last)


def _fd_weights(h: np.ndarray) -> np.ndarray:
    """Weights ``w`` with ``f'(0) ≈ Σ_i w_i f(h_i)`` exact for polynomials of degree ``< len(h)``."""
    m = h.size
    A = np.vander(h, m, increasing=True).T  # A[p, i] = h_i^p
    rhs = np.zeros(m)
    rhs[1] = 1.0
    return np.linalg.solve(A, rhs)


def _residual_np(loss, beta):
    """``r = −∇ℓ(β)`` in NumPy (rows of ``beta``) for the logistic teacher and the square loss."""
    if isinstance(loss, gradflow.LogisticTeacher):
        b = np.asarray(loss.beta_star)
        m = beta @ b
        return expit(-m)[:, None] * b[None, :]
    if isinstance(loss, gradflow.SquareLoss) and loss.design is None:
        return 2.0 * loss.scale * (np.asarray(loss.target)[None, :] - beta)
    raise gradflow.GradflowValueError(f"losses: got {loss!r}; expected LogisticTeacher or SquareLoss without a design")


def output_response_along(traj: gradflow.Trajectory, losses, tol: float = LEMD2_FD_TOL, power: int = 2,
                          stencil: int = 7) -> Verdict:
    """Lemma D.2 along the integrated trajectory: ``dβ/dt`` from finite differences of the saved
    states against the formula ``(‖s‖² I + V J(s)^power Vᵀ) r`` evaluated (in NumPy) at the same
    states, ``s = softmax(a)``, ``β = V s``. The derivative is taken in ``τ = log(1 + t)`` with
    ``stencil``-point weights on the (non-uniform) save grid, centred where possible; points at or
    after the steady-state time (``traj.t_steady``: the state is held there) are skipped. Margin
    ``log10(tol / max relative error)`` with its time. Unlike :func:`output_response` this fails
    when the saved trajectory was not integrated along the field (wrong field, temperature,
    solver error)."""
    ls = lanes(traj)
    losses = as_list(losses, len(ls))
    steady = np.atleast_1d(np.asarray(traj.t_steady, float)) if traj.t_steady is not None else np.full(len(ls), np.inf)
    margins, errs, oks, times, last = [], [], [], [], []
    half = stencil // 2
    for lane, loss, t_st in zip(ls, losses, steady):
        t, V, a = lane["t"], lane["V"], lane["a"]
        z = np.exp(a - a.max(axis=1, keepdims=True))
        s = z / z.sum(axis=1, keepdims=True)
        beta = np.einsum("tdn,tn->td", V, s)
        r = _residual_np(loss, beta)
        Vtr = np.einsum("tdn,td->tn", V, r)
        Ju = s * Vtr - s * np.sum(s * Vtr, axis=1, keepdims=True)
        if power == 2:
            Ju = s * Ju - s * np.sum(s * Ju, axis=1, keepdims=True)
        formula = np.sum(s * s, axis=1, keepdims=True) * r + np.einsum("tdn,tn->td", V, Ju)
        tau = np.log1p(t)
        keep = np.flatnonzero((t > 0) & (t < t_st))
        keep = keep[(keep >= 1) & (keep + half < t.size) & (t[np.minimum(keep + half, t.size - 1)] < t_st)]
        rel = np.full(t.size, np.nan)
        for k in keep:
            lo = max(0, min(k - half, t.size - stencil))
            idx = np.arange(lo, lo + stencil)
            w = _fd_weights(tau[idx] - tau[k])
            dbeta_dtau = w @ beta[idx]
            want = (1.0 + t[k]) * formula[k]
            rel[k] = np.linalg.norm(dbeta_dtau - want) / np.linalg.norm(want)
        ok_pts = np.isfinite(rel)
        err = float(np.max(rel[ok_pts])) if ok_pts.any() else math.inf
        k_worst = int(np.nanargmax(rel)) if ok_pts.any() else 0
        m_t = np.log10(tol / np.maximum(rel[ok_pts], 1e-300))
        _, _, lv = over_time(t[ok_pts], m_t) if ok_pts.any() else (None, None, math.nan)
        errs.append(err)
        margins.append(_decades(tol, err))
        times.append(float(t[k_worst]))
        last.append(lv)
        oks.append(lane["ok"])
    return combine(margins, dict(max_rel_err_fd=errs, tol_fd=tol, power_of_J=power), oks, times, last)


def run_inv_sum_a(trials: int = 16, seed: int = 0) -> CheckResult:
    """Default: the logistic experiment and the square-loss (Lemma 3.5) runs. Control: the
    un-normalised element-wise sigmoid map (``1ᵀ ∂s/∂a ≠ 0``), logistic teacher, ``t1 = 1e6``."""
    sq_traj, _, _ = square_trials(trials, seed, True)
    main = _pool([sum_a_conserved(tr) for tr, _, _ in logistic_trials(trials, seed)] + [sum_a_conserved(sq_traj)])
    grp = logistic_draws(trials, seed)[0]
    losses = [gradflow.LogisticTeacher(b) for b in grp["betas"]]
    ctrl = gradflow.simulate_batch(losses, grp["V0s"], grp["a0s"], t1=1e6, normalization="sigmoid")
    control = sum_a_conserved(ctrl)
    return CheckResult.from_verdicts(
        "inv.sum_a", STATEMENTS["inv.sum_a"], main, control, "element-wise sigmoid map (not normalised), logistic, t1 = 1e6"
    )


def run_inv_v_perp(trials: int = 16, seed: int = 0) -> CheckResult:
    """Default: the logistic experiment. Control: the square loss from a random ``V(0)``
    (``dV/dt = (β* − Vs)sᵀ`` moves ``V`` off the ``β*`` direction)."""
    main = _pool([v_perp_frozen(tr, ls) for tr, ls, _ in logistic_trials(trials, seed)])
    sq_traj, sq_losses, _ = square_trials(trials, seed, False)
    control = v_perp_frozen(sq_traj, sq_losses)
    return CheckResult.from_verdicts(
        "inv.v_perp", STATEMENTS["inv.v_perp"], main, control, "square loss from random V(0), t1 = 1e4"
    )


def run_lemD2(trials: int = 16, seed: int = 0) -> CheckResult:
    """Default: the logistic experiment, by autodiff at every saved point (:func:`output_response`)
    and along the integrated trajectory (:func:`output_response_along`; a trial's margin is the
    smaller), and the square-loss runs from random ``V(0)`` at every saved point. Controls (the
    check fails if either holds): (1) the printed formula without the square (``V J(s) Vᵀ``), on
    the same trajectories; (2) the flow integrated at temperature ``T = 2`` (the first shape
    group's starts), checked as if it were the ``T = 1`` flow — a trajectory integrated with
    another field, as an engine that dropped the temperature would produce."""
    logistic = logistic_trials(trials, seed)
    sq_traj, sq_losses, _ = square_trials(trials, seed, False)
    runs = [(tr, ls) for tr, ls, _ in logistic] + [(sq_traj, sq_losses)]
    parts = []
    for tr, ls, _ in logistic:
        point, along = output_response(tr, ls), output_response_along(tr, ls)
        parts.append(combine(
            [min(x, y) for x, y in zip(point.margins, along.margins)],
            {**{k: v for k, v in point.details.items() if k != "solver_not_ok_trials"},
             "max_rel_err_fd": along.details["max_rel_err_fd"], "tol_fd": along.details["tol_fd"]},
            [o1 and o2 for o1, o2 in zip(_oks(point), _oks(along))],
            along.details["margin_t"],
            along.details["last_violation_t"],
        ))
    sq = output_response(sq_traj, sq_losses)
    main = _pool(parts + [sq])
    wrong_power = _pool([output_response_along(tr, ls, power=1) for tr, ls, _ in logistic]
                        + [output_response(tr, ls, power=1) for tr, ls in runs])
    grp = logistic_draws(trials, seed)[0]
    hot_losses = [gradflow.LogisticTeacher(b) for b in grp["betas"]]
    hot = gradflow.simulate_batch(hot_losses, grp["V0s"], grp["a0s"], t1=1e6, temperature=2.0)
    control = any_of({"printed_formula_J": wrong_power, "temperature_2_flow_as_T_1": output_response_along(hot, hot_losses)})
    return CheckResult.from_verdicts(
        "lemD.2", STATEMENTS["lemD.2"], main, control,
        "the printed formula |s|^2 I + V J(s) V^T (square dropped); the T = 2 flow checked as the T = 1 flow",
    )


def _oks(v):
    bad = set(v.details.get("solver_not_ok_trials", []))
    return [i not in bad for i in range(v.trials)]
