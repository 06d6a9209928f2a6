"""``gd-vs-flow``: how far gradient descent is from the flow at equal flow time, and where large
steps change the outcome.

Beyond the paper (the authors' figures ran GD, "t" = iteration; GD is the explicit Euler scheme
of the flow, so at flow time ``t = lr·k`` it should differ from the flow by ``O(lr)``).
Fig. 2's draws (:func:`gradflow.sims.draws.fig2_init`, seed 123, ``n = d = 8``).

- (a) Error against step size: ``lr = T/K`` for ``K ∈ ks``; GD is recorded at the flow times
  ``t_j = T·j/M`` (``j = 0..M``, exact multiples of ``lr``) and compared with the flow (Dopri8,
  rtol 1e-12) there: ``max_j ‖θ_GD(t_j) − θ(t_j)‖₂`` (``θ = (V, a)``) and ``max_j ‖s_GD − s‖_∞``,
  for the logistic teacher and the square loss ``½‖β* − β‖²``; log–log, with the fitted order
  (slope over ``lr ≤ fit_lr_max``).
- (b) Logistic teacher, large steps, to ``t = long_t``: the top token's weight under GD at
  ``big_lrs`` against the flow. Every lr keeps the flow's winner ``argmax u(0)``: from
  ``a(0) = 0`` the top token's ``u`` and ``a`` increments are the largest at every step, for any
  lr, and ``γ ≤ 1`` bounds the gradient (no divergence). ``winner_draws`` random draws of the
  theory checks' random experiment (:func:`gradflow.theory.experiments.logistic_draws`) are checked at ``big_lrs`` too.
- (c) Square loss, to flow time ``square_t``, ``lr ∈ square_lrs``: final ``s_i`` per token
  (converged runs) and the runs that diverge (``descend`` status ``nonfinite``), against the
  stability limits ``2/λ_max(∇²L)`` at ``θ(0)`` and at the flow's limit point.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from matplotlib.lines import Line2D

import gradflow
from gradflow.theory.experiments import fit_line, logistic_draws

from gradflow.sims import style
from gradflow.sims.beyond._helpers import require_ok, sci
from gradflow.sims.grids import flow_times, gd_record
from gradflow.sims._common import phases
from gradflow.sims.draws import fig2_init
from gradflow.sims.build import Figure


def config(quick: bool) -> dict:
    return {
        "seed": 123,
        "n": 8,
        "T": 100.0,
        "M": 20,
        "ks": [100, 200, 500, 1000, 2000] + ([] if quick else [5000, 10_000, 20_000, 50_000, 100_000]),
        "fit_lr_max": 0.2,
        "flow_rtol": 1e-12,
        "flow_atol": 1e-14,
        "long_t": 1e4 if quick else 1e5,
        "big_lrs": [0.1, 10.0, 100.0, 1000.0],
        "winner_draws": 2 if quick else 16,
        "winner_lrs": [1.0, 10.0, 100.0, 1000.0, 10_000.0],
        "square_t": 1e4,
        "square_lrs": [float(x) for x in np.round(np.linspace(1.0, 17.0, 9 if quick else 33), 3)],
    }


def _hessian_lmax(loss, V, a) -> float:
    """Largest eigenvalue of ``∇²L(V, a)`` (value-softmax model, autodiff Hessian)."""
    model = gradflow.get_model("value-softmax")
    d, n = V.shape

    def L(theta):
        return model.loss(loss, theta[: d * n].reshape(d, n), theta[d * n:])

    H = jax.jit(jax.hessian(L))(jnp.concatenate([jnp.ravel(V), jnp.asarray(a)]))
    return float(np.linalg.eigvalsh(np.asarray(H))[-1])


def _errors(loss, V0, a0, cfg):
    """Max-over-time GD-vs-flow distances for each ``K`` (in params and in ``s``)."""
    T, M = cfg["T"], cfg["M"]
    t_cmp = T * np.arange(M + 1) / M
    flow = gradflow.simulate(loss, V0, a0, t1=T, ts=t_cmp, rtol=cfg["flow_rtol"], atol=cfg["flow_atol"])
    require_ok("gd-vs-flow", flow=flow)
    err_theta, err_s = [], []
    for K in cfg["ks"]:
        if K % M:
            raise RuntimeError(f"gd-vs-flow: K = {K} is not a multiple of M = {M}")
        gd = gradflow.descend(loss, V0, a0, lr=T / K, steps=K, record=np.arange(M + 1) * (K // M))
        require_ok("gd-vs-flow", gd=gd)
        dV = np.asarray(gd.V) - np.asarray(flow.V)
        da = np.asarray(gd.a) - np.asarray(flow.a)
        err_theta.append(float(np.max(np.sqrt(np.sum(dV**2, axis=(1, 2)) + np.sum(da**2, axis=1)))))
        err_s.append(float(np.max(np.abs(np.asarray(gd.s) - np.asarray(flow.s)))))
    return np.asarray(err_theta), np.asarray(err_s), flow


def fitted_order(lrs: np.ndarray, errors: np.ndarray, lr_max: float) -> float:
    """Slope of ``log error`` against ``log lr`` over ``lr ≤ lr_max`` (the convergence order)."""
    keep = lrs <= lr_max
    return fit_line(np.log(lrs[keep]), np.log(errors[keep]))[0]


def compute(cfg: dict, progress: bool = False) -> dict[str, np.ndarray]:
    V0, a0, b = fig2_init(cfg["seed"], cfg["n"])
    logistic, square = gradflow.LogisticTeacher(b), gradflow.SquareLoss(b)
    lrs = cfg["T"] / np.asarray(cfg["ks"], float)
    out = {"lrs": lrs}
    with phases(["order", "large lr logistic", "winners", "square lr sweep"], progress, "gd-vs-flow") as advance:
        for name, loss in (("logistic", logistic), ("square", square)):
            e_th, e_s, _ = _errors(loss, V0, a0, cfg)
            out[f"{name}_err_theta"], out[f"{name}_err_s"] = e_th, e_s
        advance("order")
        long_t = cfg["long_t"]
        flow = gradflow.simulate(logistic, V0, a0, t1=long_t, ts=flow_times(long_t, 400, t_min=1e-2))
        require_ok("gd-vs-flow", flow=flow)
        top = int(np.argmax(np.asarray(flow.u[0])))
        out.update(long_t_flow=np.asarray(flow.t), long_s_flow=np.asarray(flow.s[:, top]), top=np.asarray(top))
        big_t, big_s, big_win = [], [], []
        for lr in cfg["big_lrs"]:
            steps = max(int(round(long_t / lr)), 1)
            rec = gd_record(steps, 200)
            gd = gradflow.descend(logistic, V0, a0, lr=lr, steps=steps, record=rec)
            require_ok("gd-vs-flow", gd=gd)
            pad = 201 - len(rec)  # fixed length for the npz: repeat the last recorded point
            big_t.append(np.pad(np.asarray(gd.t), (0, pad), mode="edge"))
            big_s.append(np.pad(np.asarray(gd.s[:, top]), (0, pad), mode="edge"))
            big_win.append(int(np.argmax(np.asarray(gd.s[-1]))))
        out.update(big_lrs=np.asarray(cfg["big_lrs"]), big_t=np.stack(big_t), big_s=np.stack(big_s),
                   big_winner=np.asarray(big_win))
        advance("large lr logistic")
        same, total = 0, 0
        for grp in logistic_draws(cfg["winner_draws"], 0):
            for V, beta in zip(grp["V0s"], grp["betas"]):
                win = int(np.argmax(V.T @ beta))
                loss = gradflow.LogisticTeacher(beta)
                for lr in cfg["winner_lrs"]:
                    gd = gradflow.descend(loss, V, np.zeros(V.shape[1]), lr=lr, steps=1000,
                                          record=np.array([0, 1000]))
                    require_ok("gd-vs-flow", gd=gd)
                    same += int(np.argmax(np.asarray(gd.a[-1])) == win)
                    total += 1
        out.update(winner_same=np.asarray(same), winner_total=np.asarray(total))
        advance("winners")
        # the flow's end state only; a grid as long as _errors' reuses its compiled solve
        sq_flow = gradflow.simulate(square, V0, a0, t1=cfg["square_t"], ts=np.linspace(0.0, cfg["square_t"], cfg["M"] + 1))
        require_ok("gd-vs-flow", square_flow=sq_flow)
        s_final, status, t_end = [], [], []
        for lr in cfg["square_lrs"]:
            steps = int(round(cfg["square_t"] / lr))
            gd = gradflow.descend(square, V0, a0, lr=lr, steps=steps, record=np.array([0, steps]))
            s_final.append(np.asarray(gd.s[-1]))
            status.append(int(np.asarray(gd.status_code)))
            t_end.append(float(gd.t_end))
        out.update(
            square_lrs=np.asarray(cfg["square_lrs"]),
            square_s_final=np.stack(s_final),
            square_status=np.asarray(status),
            square_t_end=np.asarray(t_end),
            square_flow_s=np.asarray(sq_flow.s[-1]),
            square_lmax0=np.asarray(_hessian_lmax(square, V0, a0)),
            square_lmax_end=np.asarray(_hessian_lmax(square, sq_flow.V[-1], sq_flow.a[-1])),
        )
        advance("square lr sweep")
    return out


def plot(data: dict, cfg: dict):
    fig, axes = style.figure(1, 3, height=3.2)
    ax_e, ax_b, ax_q = axes[0]
    lrs = data["lrs"]
    styles = {"logistic": "tab:blue", "square": "tab:red"}
    for name, c in styles.items():
        for key, marker, what in (("err_theta", "o", "$\\|\\theta_{GD}-\\theta\\|$"), ("err_s", "s", "$\\|s_{GD}-s\\|_\\infty$")):
            e = data[f"{name}_{key}"]
            p = fitted_order(lrs, e, cfg["fit_lr_max"])
            ax_e.plot(lrs, e, color=c, marker=marker, markersize=3, linewidth=1.0,
                      linestyle="-" if key == "err_theta" else "--", label=f"(a) {name} {what}: order {p:.3f}")
    ref = lrs / lrs[-1] * data["logistic_err_theta"][-1] * 0.3
    ax_e.plot(lrs, ref, color="0.5", linestyle=":", linewidth=0.9, label="(a) slope 1")
    # the orders in the legend are least-squares slopes over eta <= fit_lr_max only (the
    # asymptotic regime of an O(eta) error); the line marks where that fit window ends
    ax_e.axvline(cfg["fit_lr_max"], color="0.6", linewidth=0.8, linestyle="-.",
                 label=f"(a) $\\eta = {cfg['fit_lr_max']:g}$: the orders are fitted left of it")
    ax_e.set_xscale("log")
    ax_e.set_yscale("log")
    ax_e.set_xlabel("step size $\\eta$")
    ax_e.set_ylabel(f"max over $t \\leq {cfg['T']:g}$ of the distance")
    ax_e.set_title("(a) GD $-$ flow at equal $t$: $O(\\eta)$")

    top = int(data["top"])
    tf, pos = data["long_t_flow"], data["long_t_flow"] > 0
    ax_b.plot(tf[pos], data["long_s_flow"][pos], color="k", label="flow", **style.FLOW)
    cols = style.colors(len(data["big_lrs"]) + 1)[1:]
    for k, lr in enumerate(data["big_lrs"]):
        gt, gp = data["big_t"][k], data["big_t"][k] > 0
        ax_b.plot(gt[gp], data["big_s"][k][gp], color=cols[k], linestyle="--", marker="o", markersize=2,
                  markerfacecolor="none", markeredgewidth=0.5, linewidth=0.8,
                  label=f"GD $\\eta = {lr:g}$" + ("" if data["big_winner"][k] == top else ": winner CHANGED"))
    ax_b.set_xscale("log")
    ax_b.set_xlabel("flow time $t$  (GD: $t = \\eta k$)")
    ax_b.set_ylabel(f"weight of the top-$u(0)$ token $s_{{{top}}}$")
    ax_b.set_title("(b) logistic: large $\\eta$ bends\nthe path, not the winner")
    kept = bool(np.all(data["big_winner"] == top))
    ax_b.legend(loc="upper left", title="winner = the flow's" if kept else None, title_fontsize=style.NOTE,
                borderaxespad=0.3, labelspacing=0.25)
    ax_b.set_ylim(None, 1.45)  # room on top for the legend
    ax_b.set_yticks([0.25, 0.5, 0.75, 1.0])

    qlr = data["square_lrs"]
    ok = data["square_status"] == 0
    n = data["square_s_final"].shape[1]
    qcols = style.colors(n)
    for i in range(n):
        ax_q.plot(qlr[ok], data["square_s_final"][ok, i], color=qcols[i], marker="o", markersize=2.2, linewidth=0.8,
                  linestyle="--", markerfacecolor="none", markeredgewidth=0.6)
        ax_q.plot([0.0], [data["square_flow_s"][i]], color=qcols[i], marker="_", markersize=9, markeredgewidth=1.5,
                  clip_on=False)
    winners = np.argmax(data["square_s_final"], axis=1)
    flow_win = int(np.argmax(data["square_flow_s"]))
    ymax = float(np.max(data["square_s_final"][ok])) * 1.08
    changed = 0
    for lr, w, good in zip(qlr, winners, ok):
        if good and w != flow_win:  # in two staggered rows: adjacent step sizes are closer than a digit
            ax_q.text(lr, ymax * (1.0 if changed % 2 == 0 else 0.975), str(w), fontsize=style.NOTE, ha="center",
                      color=qcols[w])
            changed += 1
        elif not good:
            ax_q.plot(lr, ymax * 0.97, marker="x", color="k", markersize=3.5)
    ax_q.text(0.5, ymax, f"winner {flow_win} (as the flow)", fontsize=style.NOTE, color=qcols[flow_win])
    for lm, ls in ((data["square_lmax0"], ":"), (data["square_lmax_end"], "--")):
        ax_q.axvline(2.0 / float(lm), color="0.35", linestyle=ls, linewidth=0.9)
    ax_q.set_xlim(-0.5, qlr[-1] + 0.5)
    ax_q.set_ylim(None, ymax * 1.06)
    ax_q.set_xlabel(f"step size $\\eta$ (square loss, to $t = {sci(cfg['square_t'])}$)")
    ax_q.set_ylabel("final $s_i$ (bars at $\\eta = 0$: flow)")
    ax_q.set_title("(c) square: other winners (digits),\nthen divergence (x)")
    handles = [Line2D([], [], color="k", **style.FLOW),
               Line2D([], [], color="k", linestyle="--", marker="o", markersize=2, markerfacecolor="none", linewidth=0.8)]
    handles += [Line2D([], [], color="0.35", linestyle=ls, linewidth=0.9) for ls in (":", "--")]
    labels = ["gradient flow (diffrax)", "gradient descent", "(c) $2/\\lambda_{max}(\\nabla^2 L)$ at $\\theta(0)$",
              "(c) $2/\\lambda_{max}(\\nabla^2 L)$ at the flow's limit"]
    # one legend below the panels, panel (a)'s entries first (inside (a) at a readable size it covered the curves)
    a_handles, a_labels = ax_e.get_legend_handles_labels()
    fig.legend(a_handles + handles, a_labels + labels, loc="outside lower center", ncol=3, labelspacing=0.3)
    fig.suptitle(f"GD against the flow — Fig. 2 draws ($n=d={cfg['n']}$, seed {cfg['seed']})", fontsize=9)
    return fig


def summary(data: dict, cfg: dict) -> dict:
    lrs = data["lrs"]
    qlr, st = data["square_lrs"], data["square_status"]
    flow_win = int(np.argmax(data["square_flow_s"]))
    ok = st == 0
    changed = [float(lr) for lr, s, good in zip(qlr, data["square_s_final"], ok) if good and int(np.argmax(s)) != flow_win]
    return {
        "fit_lr_max": cfg["fit_lr_max"],
        "order_logistic_theta": fitted_order(lrs, data["logistic_err_theta"], cfg["fit_lr_max"]),
        "order_logistic_s": fitted_order(lrs, data["logistic_err_s"], cfg["fit_lr_max"]),
        "order_square_theta": fitted_order(lrs, data["square_err_theta"], cfg["fit_lr_max"]),
        "order_square_s": fitted_order(lrs, data["square_err_s"], cfg["fit_lr_max"]),
        "err_theta_logistic_at_lr_0.1": float(np.interp(np.log(0.1), np.log(lrs[::-1]), data["logistic_err_theta"][::-1])),
        "logistic_big_lr_winner_kept": bool(np.all(data["big_winner"] == int(data["top"]))),
        "logistic_random_draws_winner_kept": f"{int(data['winner_same'])}/{int(data['winner_total'])}",
        "square_flow_winner": flow_win,
        "square_lrs_winner_changed": changed,
        "square_smallest_diverging_lr": float(qlr[~ok].min()) if np.any(~ok) else None,
        "square_largest_converging_lr": float(qlr[ok].max()) if np.any(ok) else None,
        "square_2_over_lmax_at_init": 2.0 / float(data["square_lmax0"]),
        "square_2_over_lmax_at_flow_limit": 2.0 / float(data["square_lmax_end"]),
    }


FIGURE = Figure(
    title="Beyond the paper: GD-vs-flow distance against step size (order 1) and where large steps change the outcome",
    config=config,
    compute=compute,
    plot=plot,
    summary=summary,
)
