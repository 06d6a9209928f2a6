"""Fig. 12 (appendix): the conditioning runs of Fig. 3 in full, one row per κ.

Paper setting as :mod:`gradflow.sims.paper.fig3` (the authors' notebook). Rows κ ∈ {1, …, 5}; columns: the loss
``Σ(y − XWs)²`` (log–log), the gradient norms ``‖∇_W L‖`` and ``‖∇_a L‖`` (log–log) and the
logits ``a_i(t)`` (semilog-x). Flow solid, GD at lr 1e-3 as markers (``t = lr·k``).
"""

from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D

from gradflow.sims import style

from gradflow.sims.paper import conditioning
from gradflow.sims._common import thin
from gradflow.sims.build import Figure
from gradflow.sims.paper.fig3 import TIME_LABEL, plot_logits

FLOOR = 1e-30
"""Values below this (the loss reaches ~1e-21 for the flow, 0 in GD's last digits) are not drawn on log axes."""


def config(quick: bool) -> dict:
    return conditioning.config(quick)


def compute(cfg: dict, progress: bool = False) -> dict[str, np.ndarray]:
    return conditioning.compute(cfg, progress)


def _log_line(ax, t, y, **kw):
    keep = (t > 0) & (y > FLOOR)
    ax.plot(t[keep], y[keep], **kw)


def plot(data: dict, cfg: dict):
    kappas = list(data["kappas"])
    fig, axes = style.figure(len(kappas), 3, height=1.35 * len(kappas) + 0.4)
    marks = thin(len(data["gd_t"]), 30)
    t, gt = data["t"], data["gd_t"]
    c_loss, c_W, c_a = "C0", "C3", "C2"
    for i, kappa in enumerate(kappas):
        ax_l, ax_g, ax_a = axes[i]
        _log_line(ax_l, t, data["loss"][i], color=c_loss, **style.FLOW)
        _log_line(ax_l, gt[marks], data["gd_loss"][i, marks], color=c_loss, **style.GD)
        _log_line(ax_g, t, data["grad_W"][i], color=c_W, **style.FLOW)
        _log_line(ax_g, t, data["grad_a"][i], color=c_a, **style.FLOW)
        _log_line(ax_g, gt[marks], data["gd_grad_W"][i, marks], color=c_W, **style.GD)
        _log_line(ax_g, gt[marks], data["gd_grad_a"][i, marks], color=c_a, **style.GD)
        plot_logits(ax_a, data, i, marks)
        for ax in (ax_l, ax_g):
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel(TIME_LABEL)
        ax_l.set_ylabel(f"$\\kappa={kappa:g}$\nloss")
        ax_g.set_ylabel("gradient norm")
        ax_a.set_ylabel("$a_i(t)$")
        ax_a.set_title(f"final $\\max_i s_i = {data['s'][i, -1].max():.3f}$", fontsize=7)
        if i < len(kappas) - 1:
            for ax in axes[i]:
                ax.set_xlabel("")
    axes[0][0].set_title("loss $\\sum(y - XWs)^2$")
    axes[0][1].set_title("$\\|\\nabla_W L\\|$ and $\\|\\nabla_a L\\|$")
    axes[0][1].legend(
        [Line2D([], [], color=c_W, **style.FLOW), Line2D([], [], color=c_a, **style.FLOW),
         Line2D([], [], color="k", **style.FLOW), Line2D([], [], color="k", **style.GD)],
        ["$\\|\\nabla_W L\\|$", "$\\|\\nabla_a L\\|$", "flow", f"GD $\\eta={cfg['lr']:g}$"],
        loc="lower left", ncol=2,
    )
    fig.suptitle(
        f"Fig. 12 — conditioning, $d=m={cfg['d']}$, seed {cfg['seed']}: flow to $t={cfg['t1']:g}$, "
        f"GD {cfg['gd_steps']:.0e} it. at $\\eta={cfg['lr']:g}$",
        fontsize=8,
    )
    return fig


FIGURE = Figure(
    title="Conditioning, all kappa: loss, gradient norms, a_i(t) per kappa; flow + GD",
    config=config,
    compute=compute,
    plot=plot,
    summary=conditioning.summary,
)
