"""``gamma``: the polarisation coefficient ``Γ(t) = ∫₀ᵗ γ dt`` against ``log t``.

Beyond the paper (Thm 3.3(c), Lemma 3.5). Fig. 2's draws
(:func:`gradflow.sims.draws.fig2_init`, seed 123, ``n = d = 8``) under

- the logistic teacher with ``β* = ρ·β̂*`` for ``ρ ∈ rhos`` (``β̂*`` Fig. 2's unit teacher), to
  ``t1 = 1e30``: ``Γ = Θ(log t)`` with slope ``dΓ/dlog t → 1/ρ²`` (fitted over ``fit_window`` by
  :func:`gradflow.theory.polarisation.asymptotic_fits`);
- the square loss ``½‖β* − β‖²`` (Eq. 8, ``ρ = 1``) from Fig. 2's ``V(0)`` and from ``V(0) = 0``
  (Lemma 3.5, ``a(0) = a0_scale·randn(n)`` drawn from ``RandomState(seed + 1)``), to
  ``square_t1``: ``Γ`` reaches a plateau ``Γ(∞)`` (:func:`gradflow.theory.square.partial_polarisation`).

GD (lr 0.1, ``Γ`` as the Riemann sum ``Σ lr·γ_k``) overlays the ``ρ = 1`` logistic run and the
square run from Fig. 2's ``V(0)``. Panels: (a) logistic ``Γ(t)`` (semilog-x) with the fitted lines; (b) square ``Γ(t)``;
(c) the local slope ``‖β*‖²·dΓ/dlog t = ‖β*‖²·t·γ(t)`` (log–log): → 1 for every logistic run, → 0 for
the square loss (drawn while ``|γ| >`` :data:`GAMMA_FLOOR`).
"""

from __future__ import annotations

import jax
import numpy as np
from matplotlib.lines import Line2D

import gradflow
from gradflow.theory.experiments import lanes
from gradflow.theory.polarisation import asymptotic_fits
from gradflow.theory.square import partial_polarisation

from gradflow.sims import style
from gradflow.sims.beyond._helpers import long_run_config, require_ok, sci, valid_arrays
from gradflow.sims.grids import flow_times, gd_record
from gradflow.sims._common import phases, thin
from gradflow.sims.draws import fig2_init
from gradflow.sims.build import Figure

SQUARE_COLORS = ("tab:red", "tab:brown")
GAMMA_FLOOR = 1e-7
"""Panel (c) hides square-loss points with ``|γ| <`` this: below it ``γ`` is solver round-off
(the square runs use rtol 1e-8, atol 1e-10), not dynamics."""


def config(quick: bool) -> dict:
    return long_run_config(quick, 1000, rhos=[0.5, 1.0, 2.0], square_t1=1e4, a0_scale=0.01, fit_window=[1e12, 1e30])


def _square_a0(cfg):
    return cfg["a0_scale"] * np.random.RandomState(cfg["seed"] + 1).randn(cfg["n"])


def compute(cfg: dict, progress: bool = False) -> dict[str, np.ndarray]:
    V0, a0, b = fig2_init(cfg["seed"], cfg["n"])
    rhos = np.asarray(cfg["rhos"], float)
    logistic = [gradflow.LogisticTeacher(r * b) for r in rhos]
    square = gradflow.SquareLoss(b)
    ts = flow_times(cfg["t1"], cfg["flow_points"], t_min=1e-2)
    ts_sq = flow_times(cfg["square_t1"], cfg["flow_points"], t_min=1e-2)
    rec = gd_record(cfg["gd_steps"], cfg["gd_snapshots"])
    i1 = int(np.argmin(np.abs(rhos - 1.0)))
    with phases(["logistic flow", "square flow", "gd"], progress, "gamma") as advance:
        lg = gradflow.simulate_batch(logistic, np.stack([V0] * len(rhos)), np.stack([a0] * len(rhos)),
                                     t1=cfg["t1"], ts=ts, rtol=cfg["rtol"], atol=cfg["atol"])
        advance("logistic flow")
        sq = gradflow.simulate_batch(square, np.stack([V0, np.zeros_like(V0)]), np.stack([a0, _square_a0(cfg)]),
                                     t1=cfg["square_t1"], ts=ts_sq, rtol=1e-8, atol=1e-10)
        advance("square flow")
        gd_l = gradflow.descend(logistic[i1], V0, a0, lr=cfg["lr"], steps=cfg["gd_steps"], record=rec)
        gd_s = gradflow.descend(square, V0, a0, lr=cfg["lr"], steps=cfg["gd_steps"], record=rec)
        advance("gd")
    require_ok("gamma", logistic=lg, square=sq, gd_logistic=gd_l, gd_square=gd_s)
    if not (np.all(np.asarray(lg.valid)) and np.all(np.asarray(sq.valid))):
        raise RuntimeError("gamma: a flow did not reach every save point")
    window = tuple(cfg["fit_window"])
    slopes = [asymptotic_fits(lane, float(r * r), window)["dGamma_dlogt"] for lane, r in zip(lanes(lg), rhos)]
    plateau = partial_polarisation(sq)
    beta = lambda tr: np.einsum("btdn,btn->btd", np.asarray(tr.V), np.asarray(tr.s))  # noqa: E731
    gammas = np.stack([np.asarray(jax.vmap(loss.gamma)(bt)) for loss, bt in zip(logistic, beta(lg))])
    sq_gammas = np.stack([np.asarray(jax.vmap(square.gamma)(bt)) for bt in beta(sq)])
    gl_t, gl_G = valid_arrays(gd_l, "t", "Gamma")
    gs_t, gs_G = valid_arrays(gd_s, "t", "Gamma")
    return {
        "rhos": rhos,
        "t": ts,
        "Gamma": np.asarray(lg.Gamma),
        "gamma": gammas,
        "fit_slope": np.asarray(slopes),
        "fit_intercept": np.asarray([
            np.mean(G[(ts >= window[0]) & (ts <= window[1])] - k * np.log(ts[(ts >= window[0]) & (ts <= window[1])]))
            for G, k in zip(np.asarray(lg.Gamma), slopes)
        ]),
        "sq_t": ts_sq,
        "sq_Gamma": np.asarray(sq.Gamma),
        "sq_gamma": sq_gammas,
        "sq_Gamma_end": np.asarray(plateau.details["Gamma_end"]),
        "sq_max_s_end": np.asarray(plateau.details["max_s_end"]),
        "sq_plateau_margin": np.asarray([m["plateau"] for m in plateau.details["sub_margins"]]),
        "gd_logistic_t": gl_t, "gd_logistic_Gamma": gl_G,
        "gd_square_t": gs_t, "gd_square_Gamma": gs_G,
    }


def plot(data: dict, cfg: dict):
    fig, axes = style.figure(1, 3, height=3.2)  # room for the 3-row legend under the panels
    ax_G, ax_S, ax_d = axes[0]
    t, pos = data["t"], data["t"] > 0
    cols = style.colors(len(data["rhos"]))
    i1 = int(np.argmin(np.abs(data["rhos"] - 1.0)))
    m = thin(len(data["gd_logistic_t"]), 35)
    for k, rho in enumerate(data["rhos"]):
        label = f"$\\|\\beta^*\\| = {rho:g}$: fit slope {data['fit_slope'][k]:.4f} ($1/\\rho^2 = {1 / rho**2:g}$)"
        ax_G.plot(t[pos], data["Gamma"][k, pos], color=cols[k], label=label, **style.FLOW)
        tf = np.geomspace(1e4, t[-1], 50)
        ax_G.plot(tf, data["fit_slope"][k] * np.log(tf) + data["fit_intercept"][k], color="k", linestyle="--",
                  linewidth=0.7)
        ax_d.plot(t[pos], rho**2 * t[pos] * data["gamma"][k, pos], color=cols[k], **style.FLOW)
    ax_G.plot(data["gd_logistic_t"][m], data["gd_logistic_Gamma"][m], color=cols[i1], **style.GD)
    ax_G.set_ylabel("$\\Gamma(t) = \\int_0^t \\gamma\\,d\\tau$")
    ax_G.set_title("(a) logistic: $\\Gamma \\approx \\log t\\,/\\,\\|\\beta^*\\|^2$")
    sq_t, sq_pos = data["sq_t"], data["sq_t"] > 0
    names = ("Fig. 2 $V(0)$", "$V(0) = 0$ (Lemma 3.5)")
    for k, name in enumerate(names):
        c = SQUARE_COLORS[k]
        ax_S.plot(sq_t[sq_pos], data["sq_Gamma"][k, sq_pos], color=c,
                  label=f"{name}: $\\Gamma(\\infty) = {data['sq_Gamma_end'][k]:.3f}$", **style.FLOW)
        ax_S.axhline(data["sq_Gamma_end"][k], color=c, linestyle=":", linewidth=0.8)
        g = np.abs(data["sq_gamma"][k, sq_pos])
        ax_d.plot(sq_t[sq_pos], np.where(g > GAMMA_FLOOR, sq_t[sq_pos] * g, np.nan), color=c, **style.FLOW)
    ms = thin(len(data["gd_square_t"]), 35)
    ax_S.plot(data["gd_square_t"][ms], data["gd_square_Gamma"][ms], color=SQUARE_COLORS[0], **style.GD)
    ax_S.set_title("(b) square $\\frac{1}{2}\\|\\beta^*-\\beta\\|^2$: plateau")
    ax_d.axhline(1.0, color="0.4", linestyle="--", linewidth=0.8)
    ax_d.set_yscale("log")
    ax_d.set_ylim(1e-4, 10)
    ax_d.set_ylabel("$\\|\\beta^*\\|^2\\, d\\Gamma/d\\log t = \\|\\beta^*\\|^2 t\\,|\\gamma|$")
    ax_d.set_title("(c) local slope: $\\to 1$ vs $\\to 0$")
    for ax in (ax_G, ax_S, ax_d):
        ax.set_xscale("log")
        ax.set_xlabel("flow time $t$  (GD: $t = \\eta k$)")
    ax_S.set_xlim(1e-2, sq_t[-1])
    handles = [Line2D([], [], color="k", **style.FLOW), Line2D([], [], color="k", **style.GD),
               Line2D([], [], color="k", linestyle="--", linewidth=0.7)]
    labels = ["gradient flow (diffrax)", f"GD, $\\eta = {cfg['lr']}$, {cfg['gd_steps']:.0e} it. (Riemann sum)",
              f"fit over $t\\in[{sci(cfg['fit_window'][0])}, {sci(cfg['fit_window'][1])}]$ (theory.polarisation)"]
    colours, named = ax_G.get_legend_handles_labels()  # panels (a) and (b) first, in one legend under all panels
    squares, named_sq = ax_S.get_legend_handles_labels()
    fig.legend(colours + squares + handles, [f"(a) {x}" for x in named] + [f"(b) {x}" for x in named_sq] + labels,
               loc="outside lower center", ncol=3)
    fig.suptitle(f"Polarisation coefficient $\\Gamma(t)$ — Fig. 2 draws ($n=d={cfg['n']}$, seed {cfg['seed']})", fontsize=9)
    return fig


def summary(data: dict, cfg: dict) -> dict:
    return {
        "fit_window": cfg["fit_window"],
        "logistic": [
            dict(rho=float(r), dGamma_dlogt=float(k), normalized=float(k * r * r), Gamma_t1=float(G[-1]))
            for r, k, G in zip(data["rhos"], data["fit_slope"], data["Gamma"])
        ],
        "square_Gamma_end": [float(x) for x in data["sq_Gamma_end"]],
        "square_max_s_end": [float(x) for x in data["sq_max_s_end"]],
        "square_plateau_margin_log10": [float(x) for x in data["sq_plateau_margin"]],
        "gd_logistic_Gamma_end": float(data["gd_logistic_Gamma"][-1]),
        "gd_square_Gamma_end": float(data["gd_square_Gamma"][-1]),
    }


FIGURE = Figure(
    title="Beyond the paper: Gamma(t) vs log t, slope 1/|beta*|^2 (logistic) and plateau (square)",
    config=config,
    compute=compute,
    plot=plot,
    summary=summary,
)
