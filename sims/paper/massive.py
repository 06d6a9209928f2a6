"""``massive``: massive activations in the tied model (paper appendix, tied model).

Tied model ``α = softmax(U a)``, ``β = U α`` with ``U(0) = I`` (:class:`gradflow.Tied`), logistic
teacher, ``D ∈ {10, 20, 50, 100}``, seed 42 (:func:`gradflow.sims.draws.massive_init`), GD lr 0.05 for
1e4 iterations (flow time 500). Claim: attention concentrates on one token and the selected
column of ``U`` grows far beyond the others. Rows: ``D``; columns: loss (log–log), ``α_i(t)``,
column norms ``‖U[:, j](t)‖`` (selected column highlighted), log-x; flow solid, GD markers.
"""

from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D

import gradflow

from gradflow.sims import style
from gradflow.sims._common import phases, thin
from gradflow.sims.grids import flow_times, gd_record
from gradflow.sims.draws import massive_init
from gradflow.sims.build import Figure


def config(quick: bool) -> dict:
    return {
        "seed": 42,
        "Ds": [10, 20, 50, 100],
        "lr": 0.05,
        "gd_steps": 2000 if quick else 10_000,
        "gd_snapshots": 200 if quick else 600,
        "t1": 100.0 if quick else 500.0,
        "flow_points": 200 if quick else 400,
        "rtol": 1e-8,
        "atol": 1e-10,
    }


def compute(cfg: dict, progress: bool = False) -> dict[str, np.ndarray]:
    """Per ``D`` (keys suffixed ``_D``): loss, α, column norms of ``U`` for flow and GD."""
    record = gd_record(cfg["gd_steps"], cfg["gd_snapshots"])
    gd_t = cfg["lr"] * record
    ts = flow_times(cfg["t1"], cfg["flow_points"], gd_t)
    data = {"t": ts, "gd_t": gd_t, "Ds": np.asarray(cfg["Ds"])}
    status, steps = [], []
    with phases([f"D={D}" for D in cfg["Ds"]], progress, "massive") as advance:
        for D in cfg["Ds"]:
            beta_star, U0, a0 = massive_init(D, cfg["seed"])
            loss = gradflow.LogisticTeacher(beta_star)
            flow = gradflow.simulate(loss, U0, a0, t1=cfg["t1"], ts=ts, rtol=cfg["rtol"], atol=cfg["atol"], model="tied")
            gd = gradflow.descend(loss, U0, a0, lr=cfg["lr"], steps=cfg["gd_steps"], record=record, model="tied")
            if flow.status != "ok" or gd.status != "ok":
                raise RuntimeError(f"massive D={D}: flow status {flow.status}, GD status {gd.status}")
            status.append(int(flow.status_code))
            steps.append(int(flow.num_steps))
            for prefix, tr in (("", flow), ("gd_", gd)):
                data[f"{prefix}loss_{D}"] = np.asarray(tr.loss)
                data[f"{prefix}alpha_{D}"] = np.asarray(tr.s)
                data[f"{prefix}colnorm_{D}"] = np.linalg.norm(np.asarray(tr.V), axis=1)  # (T, D): ‖U[:, j]‖
            advance(f"D={D}")
    data["flow_status"] = np.asarray(status)
    data["flow_steps"] = np.asarray(steps)
    return data


def plot(data: dict, cfg: dict):
    Ds = [int(D) for D in data["Ds"]]
    fig, axes = style.figure(len(Ds), 3, height=1.35 * len(Ds) + 0.5)
    t, pos, gt = data["t"], data["t"] > 0, data["gd_t"]
    marks = thin(len(gt), 30)
    for r, D in enumerate(Ds):
        ax_l, ax_s, ax_u = axes[r]
        ax_l.plot(t[pos], data[f"loss_{D}"][pos], color="C0", **style.FLOW)
        ax_l.plot(gt[marks], data[f"gd_loss_{D}"][marks], color="C0", **style.GD)
        ax_l.set_xscale("log")
        ax_l.set_yscale("log")
        ax_l.set_ylabel(f"$D={D}$\nloss")
        j = int(np.argmax(data[f"alpha_{D}"][-1]))
        for k in range(D):
            sel = k == j
            kw = dict(color="C3" if sel else "0.6", linewidth=1.4 if sel else 0.5, zorder=3 if sel else 1)
            ax_s.plot(t[pos], data[f"alpha_{D}"][pos, k], linestyle="-", **kw)
            ax_u.plot(t[pos], data[f"colnorm_{D}"][pos, k], linestyle="-", **kw)
        for ax, key in ((ax_s, "alpha"), (ax_u, "colnorm")):
            ax.plot(gt[marks], data[f"gd_{key}_{D}"][marks, j], color="C3", **style.GD)
            ax.set_xscale("log")
        others = np.delete(data[f"colnorm_{D}"][-1], j)
        ax_s.set_ylabel("$\\alpha_i(t)$")
        ax_u.set_ylabel("$\\|U[:, j]\\|$")
        ax_u.set_title(f"selected $j={j}$: {data[f'colnorm_{D}'][-1, j]:.2f}; others $\\leq$ {others.max():.2f}",
                       fontsize=style.NOTE)
        ax_s.set_title(f"$\\max_i \\alpha_i = {data[f'alpha_{D}'][-1].max():.4f}$", fontsize=style.NOTE)
        if r == len(Ds) - 1:
            for ax in axes[r]:
                ax.set_xlabel("flow time $t$  (GD: $t = \\eta k$)")
    fig.legend([Line2D([], [], color="k", **style.FLOW), Line2D([], [], color="k", **style.GD),
                       Line2D([], [], color="C3"), Line2D([], [], color="0.6", linewidth=0.5)],
                      ["flow", f"GD $\\eta={cfg['lr']:g}$", "selected token / column", "other tokens / columns"],
                      loc="outside lower center", ncol=4)
    fig.suptitle(f"Massive activations — tied model $\\alpha=\\mathrm{{softmax}}(Ua)$, $\\beta=U\\alpha$, $U(0)=I$, "
                 f"logistic teacher, seed {cfg['seed']}: flow to $t={cfg['t1']:g}$, GD {cfg['gd_steps']:.0e} it.",
                 fontsize=7.5)
    return fig


def summary(data: dict, cfg: dict) -> dict:
    out = {}
    for r, D in enumerate(int(D) for D in data["Ds"]):
        alpha, norms = data[f"alpha_{D}"][-1], data[f"colnorm_{D}"][-1]
        j = int(np.argmax(alpha))
        others = np.delete(norms, j)
        idx = np.searchsorted(data["t"], data["gd_t"])
        out[str(D)] = {
            "flow_status": gradflow.STATUS[int(data["flow_status"][r])],
            "flow_steps": int(data["flow_steps"][r]),
            "selected": j,
            "max_alpha_final": float(alpha[j]),
            "selected_column_norm": float(norms[j]),
            "other_column_norm_max": float(others.max()),
            "other_column_norm_median": float(np.median(others)),
            "ratio_selected_to_max_other": float(norms[j] / others.max()),
            "loss_final": float(data[f"loss_{D}"][-1]),
            "gd_max_alpha_final": float(data[f"gd_alpha_{D}"][-1].max()),
            "gd_vs_flow_max_abs_alpha": float(np.max(np.abs(data[f"gd_alpha_{D}"] - data[f"alpha_{D}"][idx]))),
        }
    return {"t1": cfg["t1"], "D": out}


FIGURE = Figure(
    title="Massive activations (tied U): loss, alpha_i(t), column norms of U for D=10..100; flow + GD",
    config=config,
    compute=compute,
    plot=plot,
    summary=summary,
)
