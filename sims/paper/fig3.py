"""Fig. 3: better-conditioned designs keep the attention spread; ill-conditioned ones polarise it.

Paper setting (the authors' notebook): square loss ``Σ(y − X W s)²`` with ``d = m = 20``, the singular values
of ``X`` set to ``linspace(1, 1/κ, 20)``, seed 123 per κ, GD lr 1e-3 for 3e5 iterations. We
draw the gradient flow (solid) to ``t = 300`` with GD overlaid (markers, ``t = lr·k``).
Panels: ``a_i(t)`` for κ = 1 and κ = 5 (as in the paper), and ``max_i s_i(t)`` for every κ.
"""

from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D

from gradflow.sims import style

from gradflow.sims.paper import conditioning
from gradflow.sims._common import thin
from gradflow.sims.build import Figure

TIME_LABEL = "flow time $t$  (GD: $t = \\eta k$)"


def config(quick: bool) -> dict:
    return conditioning.config(quick)


def compute(cfg: dict, progress: bool = False) -> dict[str, np.ndarray]:
    return conditioning.compute(cfg, progress)


def plot_logits(ax, data, i_kappa, marks):
    t, pos = data["t"], data["t"] > 0
    n = data["a"].shape[-1]
    cols = style.colors(n)
    for i in range(n):
        ax.plot(t[pos], data["a"][i_kappa, pos, i], color=cols[i], **style.FLOW)
        if "gd_a" in data:
            ax.plot(data["gd_t"][marks], data["gd_a"][i_kappa, marks, i], color=cols[i], **style.GD)
    ax.set_xscale("log")
    ax.set_xlabel(TIME_LABEL)


def plot(data: dict, cfg: dict):
    fig, axes = style.figure(1, 3, height=2.4)
    kappas = list(data["kappas"])
    marks = thin(len(data["gd_t"]), 30)
    for ax, kappa in zip(axes[0][:2], (kappas[0], kappas[-1])):
        i = kappas.index(kappa)
        plot_logits(ax, data, i, marks)
        ax.set_ylabel("logits $a_i(t)$")
        ax.set_title(f"$\\kappa = {kappa:g}$: final $\\max_i s_i = {data['s'][i, -1].max():.3f}$")
    ax = axes[0][2]
    cols = style.colors(len(kappas))
    t, pos = data["t"], data["t"] > 0
    for i, kappa in enumerate(kappas):
        ax.plot(t[pos], data["s"][i, pos].max(axis=1), color=cols[i], label=f"$\\kappa={kappa:g}$", **style.FLOW)
        ax.plot(data["gd_t"][marks], data["gd_s"][i, marks].max(axis=1), color=cols[i], **style.GD)
    ax.axhline(1.0 / data["s"].shape[-1], color="0.5", linewidth=0.6, linestyle=":")
    ax.set_xscale("log")
    ax.set_xlabel(TIME_LABEL)
    ax.set_ylabel("$\\max_i s_i(t)$")
    ax.set_title("larger $\\kappa$ → sparser $s$")
    handles, labels = ax.get_legend_handles_labels()
    handles += [Line2D([], [], color="k", **style.FLOW), Line2D([], [], color="k", **style.GD)]
    labels += ["flow", f"GD $\\eta={cfg['lr']:g}$"]
    ax.legend(handles, labels, loc="upper left")
    fig.suptitle(
        f"Fig. 3 — square loss $\\sum(y - XWs)^2$, $d=m={cfg['d']}$, singular values of $X$ in "
        f"$[1/\\kappa, 1]$, seed {cfg['seed']}; flow to $t={cfg['t1']:g}$, GD {cfg['gd_steps']:.0e} it.",
        fontsize=8,
    )
    return fig


FIGURE = Figure(
    title="Conditioning (square loss with design): a_i(t) for kappa=1 and 5, max s vs kappa; flow + GD",
    config=config,
    compute=compute,
    plot=plot,
    summary=conditioning.summary,
)
