"""Theorem 3.3 (logistic teacher): loss → 0 (a), the ratio bound (b), ``Γ = Θ(log t)`` and
``s → e_0`` (c), with the derived asymptotic fits of SPEC §4.

Token ``0`` is the top-``u(0)`` token, ``δ = min_{i<j}(u_i(0) − u_j(0))`` over the sorted ``u(0)``.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import gradflow

from ._result import CheckResult, Verdict, combine, merge
from ._sweeps import LOGISTIC_T1, as_list, ascent_sweep, fit_line, lanes, logistic_sweep, square_sweep

__all__ = [
    "STATEMENTS",
    "FIT_WINDOW",
    "asymptotic_fits",
    "loss_vanishes",
    "ratio_bound",
    "gamma_log_growth",
    "run_thm3_3a",
    "run_thm3_3b",
    "run_thm3_3c",
]

STATEMENTS = {
    "thm3.3a": "Thm 3.3(a): L(t) -> 0 (strictly decreasing; fitted d log L / d log t = -1, i.e. L*t -> const)",
    "thm3.3b": "Thm 3.3(b): s_j(t)/s_0(t) <= 1/(1 + (delta/n) Gamma(t)) for all j != 0 and all t",
    "thm3.3c": "Thm 3.3(c): Gamma(t) = Theta(log t) (fitted |beta*|^2 dGamma/dlog t = 1) and s -> e_0",
}

FIT_WINDOW = (1e8, 1e12)
"""Flow-time window ``[t_lo, t_hi]`` of the asymptotic fits (the last four decades of the sweep)."""

RATE_TOL = 0.25
"""Allowed ``|fitted exponent − expected|`` for the loss rate (3.3a) and the Γ slope (3.3c)."""


def _window(lane, window):
    t = lane["t"]
    return (t >= window[0]) & (t <= window[1]) & (t > 0)


@np.errstate(divide="ignore", invalid="ignore")
def asymptotic_fits(lane: dict, beta_norm2: float, window=FIT_WINDOW) -> dict:
    """Late-time fits on one lane (from :func:`theory._sweeps.lanes`) over flow times in ``window``.

    **Returns:** dict with ``window``; ``dGamma_dlogt`` (slope of Γ vs log t) and
    ``dGamma_dlogt_normalised`` (times ``‖β*‖²``; → 1); ``loss_loglog_slope`` (→ −1);
    ``loss_t_normalised`` (``L·t·‖β*‖²`` at the window's end; → const ≈ 1); ``u0_vs_logt``
    (slope of ``u_0`` vs log t; → 1); ``u_rest_vs_logt`` (max slope of ``u_j``, ``j ≥ 1``; → 0,
    saturation); ``one_minus_s0_vs_inv_log2t`` (slope ``C`` of ``1 − s_0 ≈ C / log² t``) and
    ``one_minus_s0_loglog_slope`` (of ``log(1 − s_0)`` vs ``log log t``; → −2). From the ODE,
    ``x = a_0 − a_j`` obeys ``dx/d log t ≈ e^{−x} log t``, so ``e^x ≈ log² t / 2`` and
    ``1 − s_0 = Θ(1/log² t)`` — inside SPEC's ``O(1/log t)``, and sharper.
    """
    w = _window(lane, window)
    t = lane["t"][w]
    lt = np.log(t)
    order = np.argsort(-lane["u"][0], kind="stable")
    top = order[0]
    s0 = lane["s"][w][:, top]
    a = lane["a"][w]
    # 1 − s_0 from logits (no cancellation): Σ_{j≠0} exp(a_j − logsumexp(a))
    lse = np.logaddexp.reduce(a, axis=1)
    rest = np.delete(a, top, axis=1)
    one_m_s0 = np.exp(np.logaddexp.reduce(rest, axis=1) - lse)
    u = lane["u"][w]
    out = dict(window=[float(window[0]), float(window[1])], points=int(w.sum()))
    out["dGamma_dlogt"] = fit_line(lt, lane["Gamma"][w])[0]
    out["dGamma_dlogt_normalised"] = out["dGamma_dlogt"] * beta_norm2
    out["loss_loglog_slope"] = fit_line(lt, np.log(lane["loss"][w]))[0]
    out["loss_t_normalised"] = float(lane["loss"][w][-1] * t[-1] * beta_norm2) if t.size else math.nan
    out["u0_vs_logt"] = fit_line(lt, u[:, top])[0]
    out["u_rest_vs_logt"] = max(fit_line(lt, u[:, j])[0] for j in order[1:])
    out["one_minus_s0_vs_inv_log2t"] = fit_line(1.0 / lt**2, one_m_s0)[0]
    out["one_minus_s0_loglog_slope"] = fit_line(np.log(lt), np.log(one_m_s0))[0]
    out["s0_end"] = float(s0[-1]) if s0.size else math.nan
    return out


def _norm2(losses, k):
    teacher = losses[k].teacher
    return float(np.dot(teacher, teacher)) if teacher is not None else 1.0


@np.errstate(divide="ignore", invalid="ignore")
def loss_vanishes(traj: gradflow.Trajectory, losses, window=FIT_WINDOW, decades: float = 6.0) -> Verdict:
    """Thm 3.3(a) on given trajectories (``losses``: one loss or one per trajectory, for ``‖β*‖``).

    Sub-margins per trial: (1) ``min_k (L_k − L_{k+1})/L_k`` (strict decrease between saved
    points); (2) ``log10(L(0)/L(t_end)) − decades`` (the loss fell by more than ``decades``
    orders of magnitude, default 6); (3) ``RATE_TOL − |p + 1|`` with ``p`` the fitted
    ``d log L / d log t`` over ``window`` (the rate ``L ≈ const/t``).
    """
    ls = lanes(traj)
    losses = as_list(losses, len(ls))
    margins, oks, fits, subs = [], [], [], []
    for k, lane in enumerate(ls):
        L = lane["loss"]
        dec = float(np.min((L[:-1] - L[1:]) / L[:-1])) if L.size > 1 else -np.inf
        drop = float(np.log10(L[0] / L[-1]) - decades) if L[-1] > 0 else np.inf
        f = asymptotic_fits(lane, _norm2(losses, k), window) if lane["u"] is not None else {}
        p = f.get("loss_loglog_slope", fit_line(np.log(lane["t"][_window(lane, window)]), np.log(L[_window(lane, window)]))[0])
        rate = RATE_TOL - abs(p + 1.0) if np.isfinite(p) else -np.inf
        subs.append(dict(decrease=dec, drop=drop, rate=rate))
        margins.append(min(dec, drop, rate))
        fits.append(f)
        oks.append(lane["ok"])
    return combine(margins, dict(sub_margins=subs, fits=fits), oks)


def ratio_bound(traj: gradflow.Trajectory, delta=None) -> Verdict:
    """Thm 3.3(b) on given trajectories.

    Per trial the margin is ``min_{t>0, j≠0} [(a_0 − a_j) − log(1 + (δ/n)Γ)]``, the bound in log
    form (``log(s_0/s_j) = a_0 − a_j``, computed from logits so nothing underflows). ``delta``:
    ``None`` (the theorem's ``δ`` from ``u(0)``), a float, or one float per trajectory (e.g. a
    too-large ``δ`` as a negative control).
    """
    ls = lanes(traj)
    deltas = as_list(delta, len(ls)) if delta is not None and np.ndim(delta) > 0 else [delta] * len(ls)
    margins, oks, used = [], [], []
    for lane, dl in zip(ls, deltas):
        u0 = np.sort(lane["u"][0])[::-1]
        order = np.argsort(-lane["u"][0], kind="stable")
        n = u0.size
        dl = float(np.min(u0[:-1] - u0[1:])) if dl is None else float(dl)
        pos = lane["t"] > 0
        a = lane["a"][pos][:, order]
        lhs = a[:, :1] - a[:, 1:]
        rhs = np.log1p(dl / n * lane["Gamma"][pos])[:, None]
        margins.append(float(np.min(lhs - rhs)) if lhs.size else -np.inf)
        used.append(dl)
        oks.append(lane["ok"])
    return combine(margins, dict(delta=used), oks)


def gamma_log_growth(traj: gradflow.Trajectory, losses, window=FIT_WINDOW) -> Verdict:
    """Thm 3.3(c) on given trajectories.

    Sub-margins per trial: (1) ``RATE_TOL − |‖β*‖²·dΓ/dlog t − 1|`` (Γ grows like log t, with
    the slope the ODE predicts); (2) ``s_0(t_end) − ½`` (the top-``u(0)`` token holds the
    majority, ``s → e_0``); (3) the smallest decrease of ``1 − s_0`` between saved times in
    ``window`` (it keeps shrinking). The full :func:`asymptotic_fits` go into ``details``.
    """
    ls = lanes(traj)
    losses = as_list(losses, len(ls))
    margins, oks, fits, subs = [], [], [], []
    for k, lane in enumerate(ls):
        f = asymptotic_fits(lane, _norm2(losses, k), window)
        w = _window(lane, window)
        top = int(np.argmax(lane["u"][0]))
        oms = 1.0 - lane["s"][w][:, top]
        slope = RATE_TOL - abs(f["dGamma_dlogt_normalised"] - 1.0) if np.isfinite(f["dGamma_dlogt_normalised"]) else -np.inf
        major = float(lane["s"][-1][top] - 0.5)
        shrink = float(np.min(oms[:-1] - oms[1:])) if oms.size > 1 else -np.inf
        subs.append(dict(gamma_slope=slope, s0_majority=major, one_minus_s0_shrinks=shrink))
        margins.append(min(slope, major, shrink))
        fits.append(f)
        oks.append(lane["ok"])
    return combine(margins, dict(sub_margins=subs, fits=fits), oks)


def _fit_summary(fits: list) -> dict:
    keys = (
        "dGamma_dlogt_normalised",
        "loss_loglog_slope",
        "loss_t_normalised",
        "u0_vs_logt",
        "u_rest_vs_logt",
        "one_minus_s0_vs_inv_log2t",
        "one_minus_s0_loglog_slope",
    )
    out = {"window": list(FIT_WINDOW)}
    for key in keys:
        vals = np.array([f[key] for f in fits if f], dtype=float)
        out[key] = {"mean": float(np.mean(vals)), "min": float(np.min(vals)), "max": float(np.max(vals))}
    return out


def run_thm3_3a(trials: int = 16, seed: int = 0) -> CheckResult:
    """Default experiment: the logistic sweep (``t1 = 1e12``). Control: the reversed field
    (ascent), where the loss grows."""
    main = merge([loss_vanishes(tr, ls) for tr, ls, _ in logistic_sweep(trials, seed)])
    ctrl_traj, ctrl_losses = ascent_sweep(trials, seed)
    # evaluate the logistic loss ℓ (not the ascent objective −ℓ) along the reversed flow
    ell = jax.vmap(jax.vmap(lambda l, V, s: l.inner(V @ s), in_axes=(None, 0, 0)), in_axes=(0, 0, 0))
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *ctrl_losses)
    ctrl_traj = eqx.tree_at(lambda tr: tr.loss, ctrl_traj, ell(stacked, ctrl_traj.V, ctrl_traj.s))
    control = loss_vanishes(ctrl_traj, ctrl_losses, window=(1e2, 1e4))
    return CheckResult.from_verdicts(
        "thm3.3a", STATEMENTS["thm3.3a"], main, control, "reversed field (ascent on the logistic loss), t1 = 1e4",
        asymptotic_fits=_fit_summary(main.details["fits"]),
    )


def run_thm3_3b(trials: int = 16, seed: int = 0) -> CheckResult:
    """Default experiment: the logistic sweep. Control: the same trajectories against the bound
    with ``δ`` replaced by ``2(u_0(0) − u_1(0)) > δ`` (too large: violated at small t)."""
    sweep = logistic_sweep(trials, seed)
    main = merge([ratio_bound(tr) for tr, _, _ in sweep])
    too_big = []
    for tr, _, _ in sweep:
        u0 = np.sort(np.asarray(tr.u[:, 0]), axis=1)[:, ::-1]
        too_big.append(ratio_bound(tr, delta=list(2.0 * (u0[:, 0] - u0[:, 1]))))
    control = merge(too_big)
    return CheckResult.from_verdicts(
        "thm3.3b", STATEMENTS["thm3.3b"], main, control, "bound with delta = 2(u_0(0) - u_1(0)) (too large)"
    )


def run_thm3_3c(trials: int = 16, seed: int = 0) -> CheckResult:
    """Default experiment: the logistic sweep; fits over :data:`FIT_WINDOW`. Control: the square
    loss (Lemma 3.5 runs, ``t1 = 1e4``), where Γ saturates (slope → 0)."""
    main = merge([gamma_log_growth(tr, ls) for tr, ls, _ in logistic_sweep(trials, seed)])
    sq_traj, sq_losses, _ = square_sweep(trials, seed, True)
    control = gamma_log_growth(sq_traj, sq_losses, window=(1e1, 1e4))
    return CheckResult.from_verdicts(
        "thm3.3c", STATEMENTS["thm3.3c"], main, control, "square loss 1/2|beta* - beta|^2 from V(0) = 0 (Gamma saturates)",
        asymptotic_fits=_fit_summary(main.details["fits"]), t1=LOGISTIC_T1,
    )
