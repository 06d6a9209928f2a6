"""``sinks-rowwise``: attention sinks in the row-wise model (paper Sec. 4.1; docs: Model, "Attention sinks").

Row-wise model (:class:`gradflow.RowWise`): ``T`` tokens, row ``t`` attends with weights
``s_t = softmax(A[t, :])`` and outputs ``β_t = V s_t``; the loss is the mean over rows of the
logistic teacher loss. Note the layout: the engine stores ``V`` as ``(d, T)`` (column ``j`` is
token ``j``'s value), the transpose of the paper's ``V ∈ R^{T×d}``; ``u(0) = V(0)ᵀβ* ∈ R^T``.

Draws (trial ``k``): ``default_rng([seed, k])`` gives ``β* = g/‖g‖`` (``g ~ N(0, I_d)``) then
``V(0) = v_scale·randn(d, T)``; ``A(0) = c·randn(T, T)`` from ``default_rng([seed, k, 1])`` for
each scale ``c`` in ``a_scales`` (``c = 0`` is ``A(0) = 0``). ``T``, ``d``, ``t1`` are the sink
check's (:mod:`gradflow.theory.empirical`). Top rows: ``s(t)`` as a ``T×T`` map (rows = queries) at a few
flow times for trial 0 with ``A(0) = 0`` and with ``A(0) = example_scale·randn``; the column of
``argmax u(0)`` is marked. Bottom left: each row's weight on its final top column over time for both
examples (flow solid; GD at lr 0.1 as markers for ``A(0) = 0``). Bottom right, over ``trials``
draws per scale, by :func:`gradflow.theory.empirical.sink_verdict`: the fraction whose rows all end on one
common token, the fraction whose rows all end on ``argmax u(0)`` and the fraction where every
row holds a majority (> ½) on it at ``t1``. With ``A(0) = 0`` every row has the same dynamics
(the theorem: all rows → ``argmax u(0)``); for ``A(0) ≠ 0`` the fractions are empirical.
"""

from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D

import gradflow
from gradflow.theory.empirical import SINK_D, SINK_T, SINK_T1, sink_verdict

from gradflow.sims import style
from gradflow.sims.beyond._helpers import require_ok, sci
from gradflow.sims.grids import flow_times, gd_record
from gradflow.sims._common import phases, thin
from gradflow.sims.build import Figure


def config(quick: bool) -> dict:
    return {
        "seed": 0,
        "T": SINK_T,
        "d": SINK_D,
        "t1": SINK_T1,
        "v_scale": 0.3,
        "a_scales": [0.0, 0.03, 0.1, 0.3, 1.0, 3.0],
        "example_scale": 0.3,
        "trials": 8 if quick else 64,
        "flow_points": 200,
        "snapshots": [0.0, 1.0, 1e2, 1e4, 1e10],
        "lr": 0.1,
        "gd_steps": 10_000 if quick else 100_000,
        "gd_snapshots": 200,
    }


def draws(cfg: dict, k: int):
    """Trial ``k``'s ``(β*, V(0) (d, T), A(0) (T, T) for unit scale)`` (module docstring)."""
    rng = np.random.default_rng([cfg["seed"], k])
    g = rng.standard_normal(cfg["d"])
    V0 = cfg["v_scale"] * rng.standard_normal((cfg["d"], cfg["T"]))
    A_unit = np.random.default_rng([cfg["seed"], k, 1]).standard_normal((cfg["T"], cfg["T"]))
    return g / np.linalg.norm(g), V0, A_unit


def compute(cfg: dict, progress: bool = False) -> dict[str, np.ndarray]:
    trials, scales = cfg["trials"], list(cfg["a_scales"])
    if cfg["example_scale"] not in scales:
        raise RuntimeError("sinks-rowwise: example_scale must be one of a_scales")
    draw = [draws(cfg, k) for k in range(trials)]
    losses = [gradflow.LogisticTeacher(b) for b, _, _ in draw]
    V0s = np.stack([V for _, V, _ in draw] * len(scales))
    A0s = np.stack([c * A for c in scales for _, _, A in draw])
    ts = flow_times(cfg["t1"], cfg["flow_points"], extra=cfg["snapshots"], t_min=1e-2)
    with phases(["flow batch", "gd"], progress, "sinks-rowwise") as advance:
        traj = gradflow.simulate_batch(losses * len(scales), V0s, A0s, t1=cfg["t1"], ts=ts, model="rowwise")
        advance("flow batch")
        gd = gradflow.descend(losses[0], draw[0][1], np.zeros((cfg["T"], cfg["T"])), lr=cfg["lr"],
                              steps=cfg["gd_steps"], record=gd_record(cfg["gd_steps"], cfg["gd_snapshots"]),
                              model="rowwise")
        advance("gd")
    require_ok("sinks-rowwise", flow=traj, gd=gd)
    if not np.all(np.asarray(traj.valid)):
        raise RuntimeError("sinks-rowwise: a flow did not reach every save point")
    common, at_top, majority = [], [], []
    for i in range(len(scales)):
        v = sink_verdict(traj[slice(i * trials, (i + 1) * trials)])
        common.append(np.mean(v.details["common_token"]))
        at_top.append(np.mean(v.details["at_argmax_u0"]))
        majority.append(np.mean(np.asarray(v.margins) > 0))
    i_ex = scales.index(cfg["example_scale"])
    s = np.asarray(traj.s)  # (B, times, T, T)
    snap = np.searchsorted(ts, cfg["snapshots"])
    return {
        "t": ts,
        "a_scales": np.asarray(scales),
        "u0": np.asarray(traj.u[0, 0]),
        "s_zero": s[0],
        "s_example": s[i_ex * trials],
        "u0_example": np.asarray(traj.u[i_ex * trials, 0]),
        "snap_index": snap,
        "frac_common": np.asarray(common),
        "frac_at_argmax_u0": np.asarray(at_top),
        "frac_majority": np.asarray(majority),
        "final_argmax": np.argmax(s[:, -1], axis=-1).reshape(len(scales), trials, cfg["T"]),
        "argmax_u0": np.argmax(np.asarray(traj.u[:, 0]), axis=-1).reshape(len(scales), trials),
        "gd_t": np.asarray(gd.t)[np.asarray(gd.valid)],
        "gd_s": np.asarray(gd.s)[np.asarray(gd.valid)],
    }


def plot(data: dict, cfg: dict):
    import matplotlib.pyplot as plt

    snaps = data["snap_index"]
    fig = plt.figure(figsize=(style.WIDTH, 5.0), layout="constrained")
    outer = fig.add_gridspec(2, 1, height_ratios=[2, 1.35])
    maps = outer[0].subgridspec(2, len(snaps))
    bottom = outer[1].subgridspec(1, 2, width_ratios=[1.25, 1])
    T = cfg["T"]
    examples = (("$A(0) = 0$", data["s_zero"], data["u0"]),
                (f"$A(0) = {cfg['example_scale']:g}\\cdot$randn", data["s_example"], data["u0_example"]))
    im, map_axes = None, []
    for r, (name, s, u0) in enumerate(examples):
        top = int(np.argmax(u0))
        for c, idx in enumerate(snaps):
            ax = fig.add_subplot(maps[r, c])
            map_axes.append(ax)
            im = ax.imshow(s[idx], vmin=0, vmax=1, cmap="viridis")
            ax.plot([top], [-0.85], marker="v", color="tab:red", markersize=4, clip_on=False)
            ax.set_ylim(T - 0.5, -0.5)
            ax.set_xticks(range(T))
            ax.set_yticks(range(T))
            ax.tick_params(labelsize=style.NOTE, length=1.5)
            ax.grid(False)
            ax.set_title(f"$t = {sci(float(data['t'][idx]))}$", fontsize=7, pad=7)
            if c == 0:
                ax.set_ylabel(f"{name}\nquery row", fontsize=style.NOTE)
            if r == 1:
                ax.set_xlabel("key column", fontsize=style.NOTE)
    fig.colorbar(im, ax=map_axes, location="right", shrink=0.6, label="$s_{t,j}$ (red ▼: argmax $u(0)$)")

    ax_w = fig.add_subplot(bottom[0, 0])
    t, pos = data["t"], data["t"] > 0
    cols = style.colors(T)
    for r, (name, s, u0) in enumerate(examples):
        final = np.argmax(s[-1], axis=-1)
        for row in range(T):
            label = ("$A(0)=0$: all rows" if row == 0 else None) if r == 0 else f"random $A(0)$: row {row} → token {final[row]}"
            ax_w.plot(t[pos], s[pos, row, final[row]], color=cols[row] if r else "k",
                      linewidth=1.6 if r == 0 else 0.9, label=label)
    top0 = int(np.argmax(data["u0"]))
    m = thin(len(data["gd_t"]), 30)
    ax_w.plot(data["gd_t"][m], data["gd_s"][m, 0, top0], color="k", **style.GD)
    ax_w.set_xscale("log")
    ax_w.set_xlabel("flow time $t$  (GD: $t = \\eta k$)")
    ax_w.set_ylabel("row's weight on its final top column")
    ax_w.set_title("each row converges onto one column", fontsize=7.5)

    ax_f = fig.add_subplot(bottom[0, 1])
    x = np.arange(len(data["a_scales"]))
    w = 0.27
    ax_f.bar(x - w, data["frac_common"], w, label="rows share one final token", color="tab:blue")
    ax_f.bar(x, data["frac_at_argmax_u0"], w, label="... and it is argmax $u(0)$", color="tab:orange")
    ax_f.bar(x + w, data["frac_majority"], w, label="every row $> \\frac{1}{2}$ on it at $t_1$", color="tab:green")
    ax_f.set_xticks(x, [f"{c:g}" for c in data["a_scales"]])
    ax_f.set_xlabel("scale $c$ of $A(0) = c\\cdot$randn$(T, T)$")
    ax_f.set_ylabel(f"fraction of {cfg['trials']} draws")
    ax_f.set_ylim(0, 1.45)
    ax_f.legend(loc="upper right", ncol=1)
    ax_f.set_title(f"agreement at $t_1 = {sci(cfg['t1'])}$", fontsize=7.5)
    handles = [Line2D([], [], color="k", **style.FLOW), Line2D([], [], color="k", **style.GD)]
    rows, named = ax_w.get_legend_handles_labels()  # the bottom-left panel's rows (row r → its final token)
    fig.legend(rows + handles, named + ["gradient flow (diffrax)", f"GD, $\\eta={cfg['lr']}$, $A(0)=0$"],
               loc="outside lower center", ncol=4)
    fig.suptitle(f"Attention sinks in the row-wise model ($T={T}$ tokens, $d={cfg['d']}$, logistic teacher)", fontsize=9)
    return fig


def summary(data: dict, cfg: dict) -> dict:
    rows_same_zero = float(np.max(np.abs(data["s_zero"] - data["s_zero"][:, :1])))
    return {
        "trials_per_scale": cfg["trials"],
        "a_scales": [float(c) for c in data["a_scales"]],
        "fraction_common_token": [float(x) for x in data["frac_common"]],
        "fraction_at_argmax_u0": [float(x) for x in data["frac_at_argmax_u0"]],
        "fraction_majority_on_argmax_u0": [float(x) for x in data["frac_majority"]],
        "A0_zero_max_row_difference": rows_same_zero,
        "A0_zero_example_min_row_weight_on_sink_t1": float(np.min(data["s_zero"][-1, :, int(np.argmax(data["u0"]))])),
    }


FIGURE = Figure(
    title="Beyond the paper: row-wise model, every row's attention converges to one column (A(0) = 0 and random)",
    config=config,
    compute=compute,
    plot=plot,
    summary=summary,
)
