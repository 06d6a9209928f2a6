"""``bound``: the measured ratios ``s_j/s_0`` against Theorem 3.3(b) along the trajectory.

Beyond the paper (Thm 3.3(b)): for the logistic teacher under Assumption 3.1
(``a(0) = 0``, ``u(0)`` sorted decreasingly, token 0 = top ``u(0)``, ``δ = min_{i<j}(u_i(0) −
u_j(0))``) and every ``j ≠ 0``, ``t ≥ 0``::

    s_j(t)/s_0(t) ≤ 1/(1 + (δ/n) Γ(t)).

Runs: Fig. 2's draws (:func:`gradflow.sims.draws.fig2_init`) to ``t1``, its GD twin (lr 0.1, ``Γ`` the
Riemann sum), and the random logistic experiment of the theorem checks
(:func:`gradflow.theory.experiments.logistic_trials`, ``trials`` draws, two shapes, ``t1 = 1e12``).
Panel (a): Fig. 2's ``s_j/s_0`` (``log s_j/s_0 = a_j − a_0`` from logits) and the bound.
Panel (b): the bound in exponent form, ``min_j log(s_0/s_j) / log(1 + (δ/n)Γ)`` for every run
(scale-free; ``≥ 1`` exactly where the bound holds). Grey: the same with a deliberately wrong ``δ' = 2(u_0(0) − u_1(0))``
(the negative control of ``gradflow check thm3.3b``), which must fall below 1. Slack is measured in
log form, ``min_{t>0, j≠0} [(a_0 − a_j) − log(1 + (δ/n)Γ)]``, by
:func:`gradflow.theory.polarisation.ratio_bound`.
"""

from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D

from gradflow.theory.experiments import lanes, logistic_trials
from gradflow.theory.polarisation import ratio_bound

from gradflow.sims import style
from gradflow.sims.beyond._helpers import long_run, long_run_config, require_ok
from gradflow.sims._common import phases, thin
from gradflow.sims.build import Figure


def config(quick: bool) -> dict:
    return long_run_config(quick, 1000, sweep_trials=4 if quick else 16, sweep_seed=0)


def sorted_delta(u0: np.ndarray) -> tuple[np.ndarray, float, float]:
    """``(order, δ, δ')`` from ``u(0)``: indices by decreasing ``u(0)``, the theorem's
    ``δ = min_{i<j}(u_i(0) − u_j(0))`` and the control's ``δ' = 2(u_0(0) − u_1(0))``."""
    order = np.argsort(-u0, kind="stable")
    us = u0[order]
    return order, float(np.min(us[:-1] - us[1:])), float(2.0 * (us[0] - us[1]))


def log_excess(lane: dict, delta: float) -> np.ndarray:
    """``log max_j (s_j/s_0)(1 + (δ/n)Γ)`` at each saved ``t`` of a lane (≤ 0 where the bound holds)."""
    order, _, _ = sorted_delta(lane["u"][0])
    a = lane["a"][:, order]
    n = a.shape[1]
    return np.max(a[:, 1:] - a[:, :1], axis=1) + np.log1p(delta / n * lane["Gamma"])


def exponent_ratio(lane: dict, delta: float) -> np.ndarray:
    """``min_j log(s_0/s_j) / log(1 + (δ/n)Γ)`` at the saved ``t > 0`` of a lane: the bound in
    exponent form, ``≥ 1`` exactly where it holds (scale-free, unlike the ratio itself)."""
    order, _, _ = sorted_delta(lane["u"][0])
    pos = lane["t"] > 0
    a = lane["a"][pos][:, order]
    return np.min(a[:, :1] - a[:, 1:], axis=1) / np.log1p(delta / a.shape[1] * lane["Gamma"][pos])


def compute(cfg: dict, progress: bool = False) -> dict[str, np.ndarray]:
    with phases(["flow", "gd", "sweep"], progress, "bound") as advance:
        b, loss, flow, gd = long_run(cfg, advance)
        sweep = [tr for tr, _, _ in logistic_trials(cfg["sweep_trials"], cfg["sweep_seed"])]
        advance("sweep")
    require_ok("bound", flow=flow, gd=gd, **{f"sweep{k}": tr for k, tr in enumerate(sweep)})
    fl, gl = lanes(flow)[0], lanes(gd)[0]
    order, delta, delta_ctrl = sorted_delta(fl["u"][0])
    sweep_lanes = [lane for tr in sweep for lane in lanes(tr)]
    sweep_t = sweep_lanes[0]["t"]
    if not all(lane["t"].shape == sweep_t.shape for lane in sweep_lanes):
        raise RuntimeError("bound: lanes of the random experiment did not reach every save point")
    sweep_deltas = [sorted_delta(lane["u"][0])[1:] for lane in sweep_lanes]
    verdicts = {
        "flow": ratio_bound(flow),
        "gd": ratio_bound(gd),
        "sweep": [ratio_bound(tr) for tr in sweep],
        "flow_control": ratio_bound(flow, delta=delta_ctrl),
        "sweep_control": [ratio_bound(tr, delta=[2 * (np.sort(u)[-1] - np.sort(u)[-2]) for u in np.asarray(tr.u[:, 0])])
                          for tr in sweep],
    }
    margins = lambda v: np.asarray([m for x in (v if isinstance(v, list) else [v]) for m in x.margins])  # noqa: E731
    return {
        "t": fl["t"], "s": fl["s"], "a": fl["a"], "u0": fl["u"][0], "Gamma": fl["Gamma"],
        "order": order, "delta": np.asarray(delta), "delta_control": np.asarray(delta_ctrl),
        "gd_t": gl["t"], "gd_s": gl["s"], "gd_Gamma": gl["Gamma"],
        "log_excess": log_excess(fl, delta), "log_excess_control": log_excess(fl, delta_ctrl),
        "gd_log_excess": log_excess(gl, delta),
        "ratio": exponent_ratio(fl, delta), "ratio_control": exponent_ratio(fl, delta_ctrl),
        "gd_ratio": exponent_ratio(gl, delta),
        "sweep_ratio": np.stack([exponent_ratio(lane, d) for lane, (d, _) in zip(sweep_lanes, sweep_deltas)]),
        "sweep_ratio_control": np.stack([exponent_ratio(lane, dc) for lane, (_, dc) in zip(sweep_lanes, sweep_deltas)]),
        "sweep_t": sweep_t,
        "sweep_log_excess": np.stack([log_excess(lane, d) for lane, (d, _) in zip(sweep_lanes, sweep_deltas)]),
        "sweep_log_excess_control": np.stack([log_excess(lane, dc) for lane, (_, dc) in zip(sweep_lanes, sweep_deltas)]),
        "margin_flow": margins(verdicts["flow"]),
        "margin_gd": margins(verdicts["gd"]),
        "margin_sweep": margins(verdicts["sweep"]),
        "margin_flow_control": margins(verdicts["flow_control"]),
        "margin_sweep_control": margins(verdicts["sweep_control"]),
    }


def plot(data: dict, cfg: dict):
    fig, axes = style.figure(1, 2, height=2.7)
    ax_r, ax_x = axes[0]
    t, pos = data["t"], data["t"] > 0
    order = data["order"]
    n = len(order)
    cols = style.colors(n)
    a = data["a"][:, order]
    gd_t, m = data["gd_t"], thin(len(data["gd_t"]), 30)
    gd_log = np.log(data["gd_s"][:, order[1:]]) - np.log(data["gd_s"][:, order[:1]])
    for j in range(1, n):
        ax_r.plot(t[pos], np.exp(a[pos, j] - a[pos, 0]), color=cols[j], label=f"$s_{j}/s_0$", **style.FLOW)
        ax_r.plot(gd_t[m], np.exp(gd_log[m, j - 1]), color=cols[j], **style.GD)
    bound = 1.0 / (1.0 + data["delta"] / n * data["Gamma"])
    wrong = 1.0 / (1.0 + data["delta_control"] / n * data["Gamma"])
    ax_r.plot(t[pos], bound[pos], color="k", linestyle="--", linewidth=1.2,
              label=f"bound $1/(1+\\frac{{\\delta}}{{n}}\\Gamma)$, $\\delta={float(data['delta']):.3f}$")
    ax_r.plot(t[pos], wrong[pos], color="0.55", linestyle=":", linewidth=1.2, label="wrong $\\delta'=2(u_0-u_1)$")
    ax_r.set_yscale("log")
    ax_r.set_ylabel("$s_j(t)/s_0(t)$")
    ax_r.set_title("(a) Fig. 2 run: ratios and the Thm 3.3(b) bound")
    ax_r.legend(loc="lower left", ncol=2)

    ax_x.axhspan(1e-3, 1.0, color="tab:red", alpha=0.08, linewidth=0)
    ax_x.axhline(1.0, color="k", linewidth=0.9)
    st = data["sweep_t"][data["sweep_t"] > 0]
    for k in range(data["sweep_ratio"].shape[0]):
        ax_x.plot(st, data["sweep_ratio"][k], color="tab:blue", alpha=0.35, linewidth=0.7)
        ax_x.plot(st, data["sweep_ratio_control"][k], color="0.6", alpha=0.6, linewidth=0.6, linestyle=":")
    ax_x.plot(t[pos], data["ratio"], color="k", **style.FLOW)
    ax_x.plot(t[pos], data["ratio_control"], color="0.45", linestyle="--", linewidth=1.0)
    gpos = gd_t > 0
    mg = thin(int(gpos.sum()) + 1, 30) - 1
    ax_x.plot(gd_t[gpos][mg], data["gd_ratio"][mg], color="k", **style.GD)
    ax_x.set_yscale("log")
    low = min(float(np.min(data["ratio_control"])), float(np.min(data["sweep_ratio_control"])))
    ax_x.set_ylim(min(0.3, 0.7 * low), None)
    ax_x.text(2e-2, 0.75, "bound violated (< 1)", fontsize=style.NOTE, color="tab:red", va="top")
    ax_x.set_ylabel("$\\min_j \\log(s_0/s_j)\\;/\\;\\log(1+\\frac{\\delta}{n}\\Gamma)$")
    ax_x.set_title("(b) bound in exponent form: holds iff $\\geq 1$")
    handles = [Line2D([], [], color="k", **style.FLOW), Line2D([], [], color="k", **style.GD),
               Line2D([], [], color="tab:blue", alpha=0.5, linewidth=0.7),
               Line2D([], [], color="0.45", linestyle="--", linewidth=1.0)]
    labels = ["Fig. 2 flow", f"Fig. 2 GD, $\\eta={cfg['lr']}$",
              f"{data['sweep_log_excess'].shape[0]} random draws (theory sweep, $t\\leq10^{{12}}$)",
              "wrong $\\delta'$ (control): falls below 1"]
    ax_x.legend(handles, labels, loc="upper left")
    for ax in (ax_r, ax_x):
        ax.set_xscale("log")
        ax.set_xlabel("flow time $t$  (GD: $t = \\eta k$)")
    fig.suptitle("Theorem 3.3(b) along the trajectory — min relative slack (panel b − 1): "
                 f"Fig. 2 flow {float(np.min(data['margin_flow'])):.2g}, random draws "
                 f"{float(np.min(data['margin_sweep'])):.2g}, GD {float(np.min(data['margin_gd'])):.2g}",
                 fontsize=8.5)
    return fig


def summary(data: dict, cfg: dict) -> dict:
    """Two slacks per run, both ``> 0`` exactly where the bound holds: the *log-slack*
    ``min_{t>0, j≠0} [(a_0 − a_j) − log(1 + (δ/n)Γ)]`` (→ 0 as ``t → 0``, where both sides
    vanish) and the *relative slack* ``min (a_0 − a_j)/log(1 + (δ/n)Γ) − 1`` (the margin of
    ``gradflow.theory.polarisation.ratio_bound``, scale-free; panel b minus 1)."""
    t = data["t"]
    le = data["log_excess"]
    pos = t > 0
    log_slack = lambda excess, times: float(-np.max(excess[..., times > 0]))  # noqa: E731
    return {
        "delta": float(data["delta"]),
        "bound_holds_flow": bool(np.all(data["margin_flow"] > 0)),
        "bound_holds_gd": bool(np.all(data["margin_gd"] > 0)),
        "bound_holds_sweep": bool(np.all(data["margin_sweep"] > 0)),
        "min_log_slack_flow": log_slack(le, t),
        "min_log_slack_flow_at_t": float(t[pos][int(np.argmax(le[pos]))]),
        "min_log_slack_gd": log_slack(data["gd_log_excess"], data["gd_t"]),
        "min_log_slack_sweep": log_slack(data["sweep_log_excess"], data["sweep_t"]),
        "min_relative_slack_flow": float(np.min(data["margin_flow"])),
        "min_relative_slack_flow_at_t": float(t[pos][int(np.argmin(data["ratio"]))]),
        "min_relative_slack_gd": float(np.min(data["margin_gd"])),
        "min_relative_slack_sweep": float(np.min(data["margin_sweep"])),
        "sweep_trials": int(data["margin_sweep"].size),
        "measured_over_bound_at_t1": float(np.exp(le[-1])),
        "control_delta": float(data["delta_control"]),
        "control_min_log_slack_flow": log_slack(data["log_excess_control"], t),
        "control_min_log_slack_sweep": log_slack(data["sweep_log_excess_control"], data["sweep_t"]),
        "control_min_relative_slack_flow": float(np.min(data["margin_flow_control"])),
        "control_min_relative_slack_sweep": float(np.min(data["margin_sweep_control"])),
        "control_violated_every_run": bool(np.all(data["margin_flow_control"] < 0) and np.all(data["margin_sweep_control"] < 0)),
    }


FIGURE = Figure(
    title="Beyond the paper: measured s_j/s_0 against the Thm 3.3(b) bound along the trajectory (min slack)",
    config=config,
    compute=compute,
    plot=plot,
    summary=summary,
)
