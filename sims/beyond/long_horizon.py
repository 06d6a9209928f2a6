"""``long-horizon``: Fig. 2's run continued from the paper's ``t = 1e5`` to ``t = 1e30``.

Beyond the paper (asymptotics derived from the flow, Thm 3.3; docs: Model, "Derived asymptotics"). Same draws as Fig. 2
(:func:`gradflow.sims.draws.fig2_init`, seed 123, ``n = d = 8``); the flow (Dopri8 in log time) to
``t1 = 1e30`` and GD at the authors' lr 0.1 (``1e6`` iterations, i.e. up to ``t = 1e5``, where
the paper stopped). Panels: (a) ``s_i(t)`` log–log; (b) ``1 − s_0`` (from logits) and the
entropy ``H(s)``, with the fit ``1 − s_0 ≈ C/log² t`` of
:func:`gradflow.theory.polarisation.asymptotic_fits` over ``fit_window``; (c) the local exponent
``d log(1 − s_0) / d log log t``, which creeps towards ``−2`` (``Θ(1/log² t)``), sharper than
the ``O(1/log t)`` that Thm 3.3(b) with ``Γ = Θ(log t)`` gives (exponent ``−1``).
"""

from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D

from gradflow.theory.experiments import lanes
from gradflow.theory.polarisation import asymptotic_fits

from gradflow.sims import style
from gradflow.sims.beyond._helpers import long_run, long_run_config, one_minus_top, require_ok, valid_arrays
from gradflow.sims._common import phases, thin
from gradflow.sims.build import Figure

PAPER_GD_END = 1e5
"""Flow time where the paper's GD stopped (lr 0.1 × 1e6 iterations)."""


def config(quick: bool) -> dict:
    return long_run_config(quick, 1500, fit_window=[1e12, 1e30])


def compute(cfg: dict, progress: bool = False) -> dict[str, np.ndarray]:
    with phases(["flow", "gd"], progress, "long-horizon") as advance:
        beta_star, loss, flow, gd = long_run(cfg, advance)
    require_ok("long-horizon", flow=flow, gd=gd)
    t, s, a, u, H, G, L = valid_arrays(flow, "t", "s", "a", "u", "entropy", "Gamma", "loss")
    top = int(np.argmax(u[0]))
    fits = asymptotic_fits(lanes(flow)[0], float(beta_star @ beta_star), tuple(cfg["fit_window"]))
    gd_t, gd_s, gd_a, gd_H = valid_arrays(gd, "t", "s", "a", "entropy")
    return {
        "t": t, "s": s, "u": u, "entropy": H, "Gamma": G, "loss": L,
        "one_minus_s0": one_minus_top(a, top),
        "top": np.asarray(top),
        "flow_steps": np.asarray(flow.num_steps),
        "fit_C": np.asarray(fits["one_minus_s0_vs_inv_log2t"]),
        "fit_loglog_slope": np.asarray(fits["one_minus_s0_loglog_slope"]),
        "fit_dGamma_dlogt": np.asarray(fits["dGamma_dlogt_normalized"]),
        "fit_loss_slope": np.asarray(fits["loss_loglog_slope"]),
        "gd_t": gd_t, "gd_s": gd_s, "gd_entropy": gd_H, "gd_one_minus_s0": one_minus_top(gd_a, top),
    }


def local_exponent(t: np.ndarray, y: np.ndarray, t_min: float = 10.0):
    """``(t, d log y / d log log t)`` on the saved times ``t ≥ t_min`` (central differences)."""
    keep = t >= t_min
    x = np.log(np.log(t[keep]))
    return t[keep], np.gradient(np.log(y[keep]), x)


def plot(data: dict, cfg: dict):
    fig, axes = style.figure(1, 3, height=3.1)  # room for the 2-row legend under the panels
    ax_s, ax_p, ax_e = axes[0]
    t, pos = data["t"], data["t"] > 0
    gd_t, marks = data["gd_t"], thin(len(data["gd_t"]), 30)
    order = np.argsort(-data["u"][0])
    cols = style.colors(len(order))
    for rank, i in enumerate(order):
        ax_s.plot(t[pos], data["s"][pos, i], color=cols[rank], label=f"$i={rank}$", **style.FLOW)
        ax_s.plot(gd_t[marks], data["gd_s"][marks, i], color=cols[rank], **style.GD)
    ax_s.set_yscale("log")
    ax_s.set_ylabel("$s_i(t)$ ($i$ ranked by $u_i(0)$)")
    ax_s.set_title("(a) weights to $t = 10^{30}$")

    ax_p.plot(t[pos], data["one_minus_s0"][pos], color="k", label="$1 - s_0$", **style.FLOW)
    ax_p.plot(t[pos], data["entropy"][pos], color="tab:purple", label="entropy $H(s)$ (nats)", **style.FLOW)
    ax_p.plot(gd_t[marks], data["gd_one_minus_s0"][marks], color="k", **style.GD)
    ax_p.plot(gd_t[marks], data["gd_entropy"][marks], color="tab:purple", **style.GD)
    lo, hi = cfg["fit_window"]
    tf = np.geomspace(1e3, t[-1], 200)
    C = float(data["fit_C"])
    ax_p.plot(tf, C / np.log(tf) ** 2, color="tab:orange", linestyle="--", linewidth=1.0,
              label=f"fit $C/\\log^2 t$, $C={C:.2f}$")
    ax_p.axvspan(lo, hi, color="tab:orange", alpha=0.08, linewidth=0)
    ax_p.set_yscale("log")
    ax_p.set_title("(b) polarisation is logarithmically slow")
    ax_p.legend(loc="lower left")

    te, ex = local_exponent(t, data["one_minus_s0"])
    ax_e.plot(te, ex, color="k", **style.FLOW)
    ax_e.axhline(-2, color="tab:orange", linestyle="--", linewidth=1.0, label="$-2$: $\\Theta(1/\\log^2 t)$")
    ax_e.axhline(-1, color="0.5", linestyle=":", linewidth=1.0, label="$-1$: $O(1/\\log t)$ (Thm 3.3)")
    ax_e.set_ylim(min(-3.0, float(np.min(ex[te > 1e2])) - 0.2), 0.5)
    ax_e.set_ylabel("$d\\,\\log(1-s_0)\\,/\\,d\\,\\log\\log t$")
    ax_e.set_title("(c) local exponent of $1 - s_0$")
    ax_e.legend(loc="upper right")

    for ax in (ax_s, ax_p, ax_e):
        ax.set_xscale("log")
        ax.set_xlabel("flow time $t$  (GD: $t = \\eta k$)")
        ax.axvline(PAPER_GD_END, color="0.4", linewidth=0.7, linestyle=":")
    ax_e.text(PAPER_GD_END, ax_e.get_ylim()[0] + 0.3, " paper's GD stops\n ($t = 10^5$)", fontsize=style.NOTE, color="0.3",
              va="bottom")
    handles, labels = ax_s.get_legend_handles_labels()  # panel (a)'s colours, then the line styles
    handles += [Line2D([], [], color="k", **style.FLOW), Line2D([], [], color="k", **style.GD)]
    labels += ["gradient flow (diffrax)", f"GD, $\\eta={cfg['lr']}$, {cfg['gd_steps']:.0e} it."]
    fig.legend(handles, labels, loc="outside lower center", ncol=5)
    fig.suptitle(f"Fig. 2 continued to $t = 10^{{30}}$ — logistic teacher, $n=d={cfg['n']}$, seed {cfg['seed']}",
                 fontsize=9)
    return fig


def summary(data: dict, cfg: dict) -> dict:
    t = data["t"]
    at = lambda T: int(np.argmin(np.abs(np.log(t[1:] / T)))) + 1  # noqa: E731
    te, ex = local_exponent(t, data["one_minus_s0"])
    out = {
        "flow_steps": int(data["flow_steps"]),
        "t_final": float(t[-1]),
        "fit_window": cfg["fit_window"],
        "fit_C_one_minus_s0_vs_inv_log2t": float(data["fit_C"]),
        "fit_loglog_exponent_one_minus_s0": float(data["fit_loglog_slope"]),
        "fit_dGamma_dlogt_normalized": float(data["fit_dGamma_dlogt"]),
        "fit_loss_loglog_slope": float(data["fit_loss_slope"]),
        "local_exponent_at_t1": float(ex[-1]),
        "gd_t_end": float(data["gd_t"][-1]),
        "gd_one_minus_s0_end": float(data["gd_one_minus_s0"][-1]),
    }
    for T in (1e5, 1e12, 1e20, 1e30):
        if T <= t[-1]:
            i = at(T)
            oms = float(data["one_minus_s0"][i])
            out[f"t={T:.0e}"] = dict(one_minus_s0=oms, entropy=float(data["entropy"][i]), Gamma=float(data["Gamma"][i]),
                                     one_minus_s0_times_log2t=oms * float(np.log(t[i])) ** 2)
    return out


FIGURE = Figure(
    title="Beyond the paper: Fig. 2's flow continued to t = 1e30 (s_i, 1 - s_0, entropy, C/log^2 t fit)",
    config=config,
    compute=compute,
    plot=plot,
    summary=summary,
)
