"""``norm-square`` and ``norm-logistic``: six normalisation maps under the square loss and under the
logistic teacher (paper appendix), one module (:data:`SQUARE`, :data:`LOGISTIC`).

- ``norm-square``: loss ``½‖Vα − β*‖²``; paper setting ``n = d = 10``, seed 42, GD lr 0.1 for
  5000 iterations (flow time 500). Claim: under square loss none of the maps polarises much (the
  loss reaches 0 at a spread ``α``).
- ``norm-logistic``: the logistic teacher; GD lr 0.5 for 1e5 iterations (flow time 5e4). Claim:
  the normalised non-negative maps (softmax, L1, L2, ReLU-normalised) polarise; the element-wise
  sigmoid and the signed sum map do not.

Rows: maps; columns ``α_i(t)`` and ``a_i(t)`` (log-x); flow solid, GD markers.

Six maps ``a ↦ α`` (L1 ``|z|/Σ|z|``, signed sum ``z/Σz``, L2 ``z²/Σz²``, softmax, ReLU-normalised,
element-wise sigmoid), ``n = d = 10``, the authors' draws (:func:`gradflow.sims.draws.normalization_init`:
every map starts from the same ``(V0, a0)``, ``a0 ≈ 1``). The flow of each map (solid) is drawn
with GD at the authors' step size (markers, ``t = lr·k``).

Kinked maps: under the logistic loss the L1 map drives some ``a_i`` to its kink at 0, where the
field flips sign; the flow then slides along the kink (Filippov: the logit stays at 0 while the
gradient pushes it back from both sides), which gradflow integrates exactly (the default run ends
``ok`` at ``t1``; it agrees with GD to first order in the step size). Should a map's default run
still not be ``ok``, we keep its status and the time it reached and integrate again with
``fallback`` (a low-order solver at a loose tolerance); the figure says which run it draws, and
plots only points the drawn run reached.
"""

from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D

import gradflow

from gradflow.sims import style
from gradflow.sims._common import phases, thin
from gradflow.sims.paper._runs import flow_status
from gradflow.sims.grids import flow_times, gd_record
from gradflow.sims.build import Figure
from gradflow.sims.draws import normalization_init

MAPS = ["l1", "sum", "l2", "softmax", "relu", "sigmoid"]
LABELS = {
    "l1": "L1  $|z|/\\sum|z|$",
    "sum": "sum  $z/\\sum z$",
    "l2": "L2  $z^2/\\sum z^2$",
    "softmax": "softmax",
    "relu": "ReLU  $\\mathrm{relu}(z)/\\sum\\mathrm{relu}(z)$",
    "sigmoid": "sigmoid (not normalised)",
}
FALLBACK = {"solver": "tsit5", "rtol": 1e-4, "atol": 1e-6, "max_steps": 200_000}


def config(loss_kind: str, quick: bool) -> dict:
    if loss_kind == "square":  # ½‖Vα − β*‖², lr 0.1, 5000 it.
        lr, steps = 0.1, 5000
    else:  # logistic teacher, lr 0.5, 1e5 it.
        lr, steps = 0.5, 10_000 if quick else 100_000
    return {
        "loss": loss_kind,
        "seed": 42,
        "n": 10,
        "maps": MAPS,
        "lr": lr,
        "gd_steps": steps,
        "gd_snapshots": 300 if quick else 1000,
        "t1": lr * steps,
        "flow_points": 300 if quick else 600,
        "rtol": 1e-8,
        "atol": 1e-10,
        "max_steps": 16384,
        "fallback": FALLBACK,
    }


def _loss(cfg, beta_star):
    if cfg["loss"] == "square":
        return gradflow.SquareLoss(beta_star)  # scale ½ (paper Eq. 8)
    return gradflow.LogisticTeacher(beta_star)


def compute(cfg: dict, progress: bool = False, with_gd: bool = True) -> dict[str, np.ndarray]:
    """Flow (primary, and the fallback run where the primary is not ``ok``) and GD per map.

    Arrays are stacked over maps (axis 0, order ``cfg["maps"]``). ``valid`` marks the saved
    points the drawn run reached; unreached points hold the last saved state (never NaN).
    ``status`` / ``t_end`` are those of the primary run; ``drawn_status`` / ``drawn_t_end`` /
    ``used_fallback`` those of the run drawn.
    """
    beta_star, V0, a0 = normalization_init(cfg["seed"], cfg["n"])
    loss = _loss(cfg, beta_star)
    record = gd_record(cfg["gd_steps"], cfg["gd_snapshots"])
    gd_t = cfg["lr"] * record
    ts = flow_times(cfg["t1"], cfg["flow_points"], gd_t if with_gd else ())
    keys = ("s", "a", "valid", "status", "t_end", "steps", "drawn_status", "drawn_t_end", "drawn_steps", "used_fallback")
    out: dict[str, list] = {k: [] for k in keys}
    if with_gd:
        out.update(gd_s=[], gd_a=[], gd_status=[])
    with phases(cfg["maps"], progress, f"norm-{cfg['loss']}") as advance:
        for name in cfg["maps"]:
            flow = gradflow.simulate(loss, V0, a0, t1=cfg["t1"], ts=ts, rtol=cfg["rtol"], atol=cfg["atol"],
                                     normalization=name, max_steps=cfg["max_steps"])
            first = flow_status(flow)
            drawn = flow
            if flow.status != "ok":
                fb = cfg["fallback"]
                drawn = gradflow.simulate(loss, V0, a0, t1=cfg["t1"], ts=ts, rtol=fb["rtol"], atol=fb["atol"],
                                          normalization=name, solver=fb["solver"], max_steps=fb["max_steps"])
            out["s"].append(np.asarray(drawn.s))
            out["a"].append(np.asarray(drawn.a))
            out["valid"].append(np.asarray(drawn.valid))
            out["status"].append(int(flow.status_code))
            out["t_end"].append(first["t_end"])
            out["steps"].append(first["steps"])
            out["drawn_status"].append(int(drawn.status_code))
            out["drawn_t_end"].append(float(drawn.t_end))
            out["drawn_steps"].append(int(drawn.num_steps))
            out["used_fallback"].append(drawn is not flow)
            if with_gd:
                gd = gradflow.descend(loss, V0, a0, lr=cfg["lr"], steps=cfg["gd_steps"], record=record, normalization=name)
                out["gd_s"].append(np.asarray(gd.s))
                out["gd_a"].append(np.asarray(gd.a))
                out["gd_status"].append(int(gd.status_code))
            advance(name)
    data = {k: np.asarray(v) for k, v in out.items()}
    data["t"] = ts
    if with_gd:
        data["gd_t"] = gd_t
    return data


def top_share(s) -> np.ndarray | np.floating:
    """Polarisation of weights ``s (..., n)``: the largest share ``max_i |s_i| / Σ_i |s_i|``,
    shape ``(...)`` (a NumPy scalar for one row ``s (n,)``).

    Equals ``max_i s_i`` for maps onto the simplex (softmax, L1, L2, ReLU); for the un-normalised
    sigmoid it measures concentration rather than saturation (all ``σ(a_i) → 1`` is not polarised).
    Ranges from ``1/n`` (uniform) to ``1`` (one-hot)."""
    m = np.abs(np.asarray(s))
    return m.max(axis=-1) / m.sum(axis=-1)


def final_share(data: dict) -> np.ndarray:
    """Top share (:func:`top_share`) at the last point each map's drawn flow reached, per map."""
    last = np.array([np.flatnonzero(v)[-1] for v in data["valid"]])
    return np.array([top_share(data["s"][m, last[m]]) for m in range(len(last))])


def _status_text(data, m, cfg) -> str:
    st = gradflow.STATUS[int(data["status"][m])]
    if not data["used_fallback"][m]:
        return f"flow: {st}, {int(data['steps'][m])} steps"
    fb = cfg["fallback"]
    dst = gradflow.STATUS[int(data["drawn_status"][m])]
    return (f"dopri8 rtol {cfg['rtol']:g}: {st} at $t={data['t_end'][m]:.3g}$ (kink);\n"
            f"drawn: {fb['solver']} rtol {fb['rtol']:g}: {dst} at $t={data['drawn_t_end'][m]:.3g}$")


def plot(data: dict, cfg: dict, title: str):
    maps = list(cfg["maps"])
    fig, axes = style.figure(len(maps), 2, height=1.25 * len(maps) + 0.5)
    n = data["s"].shape[-1]
    cols = style.colors(n)
    marks = thin(len(data["gd_t"]), 30)
    for m, name in enumerate(maps):
        ax_s, ax_a = axes[m]
        keep = data["valid"][m] & (data["t"] > 0)
        t = data["t"][keep]
        for i in range(n):
            ax_s.plot(t, data["s"][m, keep, i], color=cols[i], **style.FLOW)
            ax_a.plot(t, data["a"][m, keep, i], color=cols[i], **style.FLOW)
            ax_s.plot(data["gd_t"][marks], data["gd_s"][m, marks, i], color=cols[i], **style.GD)
            ax_a.plot(data["gd_t"][marks], data["gd_a"][m, marks, i], color=cols[i], **style.GD)
        if not data["valid"][m][-1]:
            ax_s.axvline(data["drawn_t_end"][m], color="r", linewidth=0.8, linestyle="--")
        share = final_share(data)[m]
        ax_s.set_ylabel(f"{LABELS[name]}\n$\\alpha_i(t)$", fontsize=style.NOTE)
        ax_a.set_ylabel("$a_i(t)$")
        ax_s.text(0.01, 0.97, _status_text(data, m, cfg) + f"; top share {share:.3f}", transform=ax_s.transAxes,
                  fontsize=style.NOTE, va="top", color="0.25")
        for ax in (ax_s, ax_a):
            ax.set_xscale("log")
            if m == len(maps) - 1:
                ax.set_xlabel("flow time $t$  (GD: $t = \\eta k$)")
    axes[0][0].set_title("weights $\\alpha_i(t)$")
    axes[0][1].set_title("logits $a_i(t)$")
    axes[0][1].legend([Line2D([], [], color="k", **style.FLOW), Line2D([], [], color="k", **style.GD)],
                      ["gradient flow", f"GD $\\eta={cfg['lr']:g}$, {cfg['gd_steps']:.0e} it."],
                      loc="upper left")
    fig.suptitle(title, fontsize=8)
    return fig


def summary(data: dict, cfg: dict) -> dict:
    share = final_share(data)
    gd_share = top_share(data["gd_s"][:, -1]) if "gd_s" in data else None
    out = {}
    for m, name in enumerate(cfg["maps"]):
        row = {
            "flow_status": gradflow.STATUS[int(data["status"][m])],
            "flow_t_end": float(data["t_end"][m]),
            "flow_steps": int(data["steps"][m]),
            "top_share_final": float(share[m]),
            "max_weight_final": float(data["s"][m, np.flatnonzero(data["valid"][m])[-1]].max()),
        }
        if data["used_fallback"][m]:
            row.update(fallback=cfg["fallback"], fallback_status=gradflow.STATUS[int(data["drawn_status"][m])],
                       fallback_t_end=float(data["drawn_t_end"][m]), fallback_steps=int(data["drawn_steps"][m]))
        if gd_share is not None:
            row["gd_top_share_final"] = float(gd_share[m])
            row["gd_status"] = gradflow.STATUS[int(data["gd_status"][m])]
        out[name] = row
    return {"t1": cfg["t1"], "maps": out}


def _plot_square(data, cfg):
    return plot(data, cfg, f"Normalisations, square loss $\\frac{{1}}{{2}}\\|V\\alpha-\\beta^*\\|^2$, $n=d={cfg['n']}$, "
                           f"seed {cfg['seed']}: flow to $t={cfg['t1']:g}$ with GD")


def _plot_logistic(data, cfg):
    return plot(data, cfg, f"Normalisations, logistic teacher, $n=d={cfg['n']}$, seed {cfg['seed']}: "
                           f"flow to $t={cfg['t1']:g}$ with GD")


SQUARE = Figure(
    title="Six normalisation maps under square loss: alpha_i(t), a_i(t); flow + GD (none polarise)",
    config=lambda quick: config("square", quick),
    compute=compute,
    plot=_plot_square,
    summary=summary,
)
LOGISTIC = Figure(
    title="Six normalisation maps under logistic loss: normalised maps polarise, sigmoid does not; flow + GD",
    config=lambda quick: config("logistic", quick),
    compute=compute,
    plot=_plot_logistic,
    summary=summary,
)
