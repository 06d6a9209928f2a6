"""``kl``: soft-target cross-entropy (the appendix "KL" experiment).

``ℓ(β) = −Σ_k p*_k log softmax(β)_k`` with class logits ``β = V s`` (``V`` of shape ``(k, n)``,
the transpose of the authors' ``(n, k)`` matrix: :func:`gradflow.sims.draws.kl_init`), ``d = k = 10``,
seed 123, ``p* = softmax(10·rand(10))``, GD lr 0.1 for 1e7 iterations (flow time 1e6).
With a soft target the loss has a finite minimiser (``softmax(Vs) = p*``, loss ``= H(p*)``), so
the flow comes to rest at a finite ``a``: the attention need not go one-hot.
Panels: ``KL(p*‖softmax(Vs)) = L − H(p*)`` (log–log), ``‖∇_V L‖`` and ``‖∇_a L‖`` (log–log),
``a_i(t)`` and ``s_i(t)`` (log-x); flow solid, GD markers.
"""

from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D

import gradflow

from gradflow.sims import style
from gradflow.sims._common import phases, thin
from gradflow.sims.paper._runs import flow_status, grad_norms
from gradflow.sims.grids import flow_times, gd_record
from gradflow.sims.draws import kl_init
from gradflow.sims.build import Figure

FLOOR = 1e-15
"""KL values below this are float64 rounding noise and are not drawn."""

GRAD_FLOOR = 1e-14
"""Gradient norms below this are float64 rounding noise (the flow is at rest) and are not drawn."""


def config(quick: bool) -> dict:
    return {
        "seed": 123,
        "n": 10,
        "k": 10,
        "lr": 0.1,
        "gd_steps": 100_000 if quick else 10_000_000,
        "gd_snapshots": 300 if quick else 1000,
        "t1": 1e4 if quick else 1e6,
        "flow_points": 300 if quick else 500,
        "solver": "auto",
        "rtol": 1e-8,
        "atol": 1e-10,
        "max_steps": 16384,
    }


def kl_divergence(p_star, beta) -> np.ndarray:
    """``KL(p* ‖ softmax(β))`` for logits ``beta (..., k)``, computed directly (not as ``L − H``)."""
    beta = np.asarray(beta)
    logq = beta - beta.max(-1, keepdims=True)
    logq = logq - np.log(np.exp(logq).sum(-1, keepdims=True))
    return np.sum(p_star * (np.log(p_star) - logq), axis=-1)


def compute(cfg: dict, progress: bool = False) -> dict[str, np.ndarray]:
    V0, a0, p_star = kl_init(cfg["seed"], cfg["n"], cfg["k"])
    loss = gradflow.SoftTargetCrossEntropy(p_star)
    record = gd_record(cfg["gd_steps"], cfg["gd_snapshots"])
    gd_t = cfg["lr"] * record
    ts = flow_times(cfg["t1"], cfg["flow_points"], gd_t)
    with phases(["flow", "gd"], progress, "kl") as advance:
        flow = gradflow.simulate(loss, V0, a0, t1=cfg["t1"], ts=ts, rtol=cfg["rtol"], atol=cfg["atol"],
                                 solver=cfg["solver"], max_steps=cfg["max_steps"])
        advance("flow")
        gd = gradflow.descend(loss, V0, a0, lr=cfg["lr"], steps=cfg["gd_steps"], record=record)
        advance("gd")
    if gd.status != "ok":
        raise RuntimeError(f"kl: GD status {gd.status}")
    st = flow_status(flow)
    data = {"t": ts, "gd_t": gd_t, "p_star": p_star, "valid": np.asarray(flow.valid),
            "flow_status": np.asarray(int(flow.status_code)), "flow_steps": np.asarray(st["steps"]),
            "flow_t_end": np.asarray(st["t_end"]),
            "flow_t_steady": np.asarray(st["t_steady"] if st["t_steady"] is not None else -1.0)}
    for prefix, tr in (("", flow), ("gd_", gd)):
        V, a, s = np.asarray(tr.V), np.asarray(tr.a), np.asarray(tr.s)
        gV, ga = grad_norms(loss, V, a)
        data.update({f"{prefix}a": a, f"{prefix}s": s, f"{prefix}loss": np.asarray(tr.loss),
                     f"{prefix}kl": kl_divergence(p_star, np.einsum("tkn,tn->tk", V, s)),
                     f"{prefix}grad_V": gV, f"{prefix}grad_a": ga})
    return data


def _status_line(data) -> str:
    st = gradflow.STATUS[int(data["flow_status"])]
    line = f"flow: {st}, {int(data['flow_steps'])} steps, reached $t={float(data['flow_t_end']):.3g}$"
    if float(data["flow_t_steady"]) > 0:
        line += f", at rest from $t={float(data['flow_t_steady']):.3g}$"
    return line


def plot(data: dict, cfg: dict):
    fig, axes = style.figure(2, 2, height=4.2)
    (ax_l, ax_g), (ax_a, ax_s) = axes
    keep = data["valid"] & (data["t"] > 0)
    t, gt = data["t"][keep], data["gd_t"]
    marks = thin(len(gt), 35)
    gpos = marks[gt[marks] > 0]

    def logline(ax, x, y, floor=FLOOR, **kw):
        ok = y > floor
        ax.plot(x[ok], y[ok], **kw)

    logline(ax_l, t, data["kl"][keep], color="C0", **style.FLOW)
    logline(ax_l, gt[gpos], data["gd_kl"][gpos], color="C0", **style.GD)
    for key, c in (("grad_V", "C3"), ("grad_a", "C2")):
        logline(ax_g, t, data[key][keep], floor=GRAD_FLOOR, color=c, **style.FLOW)
        logline(ax_g, gt[gpos], data[f"gd_{key}"][gpos], floor=GRAD_FLOOR, color=c, **style.GD)
    n = data["a"].shape[-1]
    cols = style.colors(n)
    for i in range(n):
        ax_a.plot(t, data["a"][keep, i], color=cols[i], **style.FLOW)
        ax_a.plot(gt[marks], data["gd_a"][marks, i], color=cols[i], **style.GD)
        ax_s.plot(t, data["s"][keep, i], color=cols[i], **style.FLOW)
        ax_s.plot(gt[marks], data["gd_s"][marks, i], color=cols[i], **style.GD)
    for ax in (ax_l, ax_g):
        ax.set_yscale("log")
    for ax in (ax_l, ax_g, ax_a, ax_s):
        ax.set_xscale("log")
        ax.set_xlim(1e-3 / 2, 2 * cfg["t1"])
        ax.set_xlabel("flow time $t$  (GD: $t = \\eta k$)")
        if not data["valid"][-1]:
            ax.axvline(float(data["flow_t_end"]), color="r", linewidth=0.8, linestyle="--")
    ax_l.set_title("$\\mathrm{KL}(p^*\\,\\|\\,\\mathrm{softmax}(Vs)) = L - H(p^*)$")
    ax_g.set_title("$\\|\\nabla_V L\\|$ and $\\|\\nabla_a L\\|$")
    ax_a.set_title("logits $a_i(t)$: bounded, come to rest")
    ax_s.set_title(f"weights $s_i(t)$: final $\\max_i s_i = {data['s'][keep][-1].max():.4f}$")
    ax_l.text(0.02, 0.04, _status_line(data), transform=ax_l.transAxes, fontsize=style.NOTE, color="0.25")
    ax_g.legend([Line2D([], [], color="C3", **style.FLOW), Line2D([], [], color="C2", **style.FLOW),
                 Line2D([], [], color="k", **style.FLOW), Line2D([], [], color="k", **style.GD)],
                ["$\\|\\nabla_V L\\|$", "$\\|\\nabla_a L\\|$", "flow", f"GD $\\eta={cfg['lr']:g}$, {cfg['gd_steps']:.0e} it."],
                loc="lower left")
    fig.suptitle(f"Soft-target cross-entropy, $d=k={cfg['k']}$, $p^*=\\mathrm{{softmax}}(10\\,u)$, seed {cfg['seed']}: "
                 f"flow to $t={cfg['t1']:g}$", fontsize=8)
    return fig


def summary(data: dict, cfg: dict) -> dict:
    last = np.flatnonzero(data["valid"])[-1]
    idx = np.searchsorted(data["t"], data["gd_t"])
    ok = data["valid"][idx]
    p = data["p_star"]
    return {
        "flow_status": gradflow.STATUS[int(data["flow_status"])],
        "flow_steps": int(data["flow_steps"]),
        "flow_t_end": float(data["flow_t_end"]),
        "flow_t_steady": float(data["flow_t_steady"]) if float(data["flow_t_steady"]) > 0 else None,
        "max_s_final": float(data["s"][last].max()),
        "argmax_s_final": int(np.argmax(data["s"][last])),
        "kl_final": float(data["kl"][last]),
        "grad_norm_final": float(np.hypot(data["grad_V"][last], data["grad_a"][last])),
        "a_final": data["a"][last].tolist(),
        "entropy_p_star": float(-(p * np.log(p)).sum()),
        "gd_max_s_final": float(data["gd_s"][-1].max()),
        "gd_kl_final": float(data["gd_kl"][-1]),
        "gd_vs_flow_max_abs_s": float(np.max(np.abs(data["gd_s"][ok] - data["s"][idx[ok]]))),
    }


FIGURE = Figure(
    title="Soft-target cross-entropy: KL, gradient norms, a_i(t), s_i(t); attention stops short of one-hot",
    config=config,
    compute=compute,
    plot=plot,
    summary=summary,
)
