"""Fig. 2: the logistic-teacher flow polarises ``s`` while preserving the order of ``u``.

Paper setting (the authors' notebook): ``n = d = 8``, seed 123, GD with lr 0.1 for 1e6 iterations. We draw
the flow (diffrax, log time) to ``t = 1e12`` and overlay GD on the flow-time axis ``t = lr·k``.
Left: ``s_i(t)`` (log–log). Right: ``u_i(t) = ⟨v_i, β*⟩`` (semilog-x).
"""

from __future__ import annotations

import numpy as np

import gradflow

from gradflow.sims import style
from gradflow.sims._common import phases, thin
from gradflow.sims.draws import fig2_init
from gradflow.sims.grids import flow_times, gd_record
from gradflow.sims.build import Figure


def config(quick: bool) -> dict:
    return {
        "seed": 123,
        "n": 8,
        "lr": 0.1,
        "gd_steps": 20_000 if quick else 1_000_000,
        "gd_snapshots": 2000,
        "t1": 1e12,
        "flow_points": 2000,
        "rtol": 1e-10,
        "atol": 1e-12,
    }


def compute(cfg: dict, progress: bool = False) -> dict[str, np.ndarray]:
    V0, a0, beta_star = fig2_init(cfg["seed"], cfg["n"])
    loss = gradflow.LogisticTeacher(beta_star)
    record = gd_record(cfg["gd_steps"], cfg["gd_snapshots"])
    t_gd = cfg["lr"] * record
    ts = flow_times(cfg["t1"], cfg["flow_points"], t_gd, t_min=1e-2)
    with phases(["flow", "gd"], progress, "fig2") as advance:
        flow = gradflow.simulate(loss, V0, a0, t1=cfg["t1"], ts=ts, rtol=cfg["rtol"], atol=cfg["atol"])
        advance("flow")
        gd = gradflow.descend(loss, V0, a0, lr=cfg["lr"], steps=cfg["gd_steps"], record=record)
        advance("gd")
    if flow.status != "ok" or gd.status != "ok":
        raise RuntimeError(f"fig2: flow status {flow.status}, GD status {gd.status}")
    return {
        "t": np.asarray(flow.t),
        "s": np.asarray(flow.s),
        "u": np.asarray(flow.u),
        "Gamma": np.asarray(flow.Gamma),
        "entropy": np.asarray(flow.entropy),
        "loss": np.asarray(flow.loss),
        "flow_steps": np.asarray(flow.num_steps),
        "gd_k": np.asarray(gd.k),
        "gd_t": np.asarray(gd.t),
        "gd_s": np.asarray(gd.s),
        "gd_u": np.asarray(gd.u),
    }


def _order(data) -> np.ndarray:
    """Token indices sorted by ``u_i(0)``, largest first (the paper's ranking)."""
    return np.argsort(-data["u"][0])


def plot(data: dict, cfg: dict):
    fig, axes = style.figure(1, 2, height=2.5)
    ax_s, ax_u = axes[0]
    order = _order(data)
    cols = style.colors(len(order))
    t, pos = data["t"], data["t"] > 0
    gd_t = data["gd_t"]
    marks = thin(len(gd_t), 45)
    for rank, i in enumerate(order):
        c = cols[rank]
        label = f"$i={rank}$" + (" (top $u$)" if rank == 0 else "")
        ax_s.plot(t[pos], data["s"][pos, i], color=c, label=label, **style.FLOW)
        ax_s.plot(gd_t[marks], data["gd_s"][marks, i], color=c, **style.GD)
        ax_u.plot(t[pos], data["u"][pos, i], color=c, **style.FLOW)
        ax_u.plot(gd_t[marks], data["gd_u"][marks, i], color=c, **style.GD)
    for ax in (ax_s, ax_u):
        ax.set_xscale("log")
        ax.set_xlabel("flow time $t$  (GD: $t = \\eta k$)")
        ax.axvline(gd_t[-1], color="0.5", linewidth=0.6, linestyle=":")
    ax_s.set_yscale("log")
    ax_s.set_ylabel("attention weight $s_i(t)$")
    ax_s.set_title("weights polarise towards one-hot")
    ax_u.set_ylabel("$u_i(t) = \\langle v_i, \\beta^*\\rangle$")
    ax_u.set_title("order of $u$ kept; $u_0 \\sim \\log t$")
    handles, labels = ax_s.get_legend_handles_labels()
    from matplotlib.lines import Line2D

    handles += [Line2D([], [], color="k", **style.FLOW), Line2D([], [], color="k", **style.GD)]
    labels += ["gradient flow (diffrax)", f"GD, $\\eta={cfg['lr']}$, {cfg['gd_steps']:.0e} it."]
    fig.legend(handles, labels, loc="outside lower center", ncol=5)  # the colours hold in both panels
    ax_u.text(gd_t[-1], ax_u.get_ylim()[0], " end of GD", fontsize=style.NOTE, color="0.4", va="bottom")
    fig.suptitle(f"Fig. 2 — logistic teacher, $n=d={cfg['n']}$, seed {cfg['seed']}", fontsize=9)
    return fig


def summary(data: dict, cfg: dict) -> dict:
    order = _order(data)
    s_final = data["s"][-1]
    u = data["u"][:, order]
    s = data["s"][1:, order]  # t > 0
    gd_idx = np.searchsorted(data["t"], data["gd_t"])
    return {
        "flow_steps": int(data["flow_steps"]),
        "t_final": float(data["t"][-1]),
        "s_top_final": float(s_final[order[0]]),
        "one_minus_s_top_final": float(1 - s_final[order[0]]),
        "entropy_final": float(data["entropy"][-1]),
        "Gamma_final": float(data["Gamma"][-1]),
        "u_order_preserved": bool(np.all(np.diff(u, axis=1) < 0)),
        "s_order_preserved_t_gt_0": bool(np.all(np.diff(s, axis=1) < 0)),
        "gd_vs_flow_max_abs_s": float(np.max(np.abs(data["gd_s"] - data["s"][gd_idx]))),
        "gd_s_top_at_end": float(data["gd_s"][-1, order[0]]),
    }


FIGURE = Figure(
    title="Logistic teacher (n=d=8): s_i(t) log-log and u_i(t), flow to 1e12 with GD overlay",
    config=config,
    compute=compute,
    plot=plot,
    summary=summary,
)
