"""Sec. 4.1: induction accuracy per attention kernel, and accuracy and layer-2 BOS share during training.

Left: final induction accuracy (evaluation set, last position) per variant, averaged over the
runs. Middle: accuracy at every evaluation of the main runs (the first induction setting) against
epochs. Right: the layer-2 BOS share (the sink measurement) at every evaluation, the largest
over the heads (solid) and their mean (dotted); at paper scale a grey line marks where an
earlier, early-stopping version of our softmax run stopped (epoch 4.2): does the share keep
rising after it? A curve that leaves [−1.5, 1.5] (a signed kernel, mlp or linear, whose row can
sum to about 0: the share is then not a fraction) is not drawn there; its range is written in the
panel.
"""

from __future__ import annotations

import numpy as np

from gradflow.sims import style

from gradflow.sims.sec4 import _figures as _sec4

OFF_SCALE = 1.5
"""|BOS share| beyond which a curve is not drawn in the share panel (its range is written instead)."""


def plot(data: dict, cfg: dict):
    data = _sec4.unpack(data)
    # room below the axes for the legend and the off-scale note; the bar panel wider: its
    # vertical value labels need a bar's width each
    fig, axes = style.figure(1, 3, height=3.8, width_ratios=(1.5, 1, 1))
    ax, ax_c, ax_b = axes[0]
    acc = np.where(data["ind_available"], data["induction_acc"], np.nan)
    acc = np.array([np.mean(a[np.isfinite(a)]) if np.isfinite(a).any() else np.nan for a in acc])
    _sec4.bars_by_kernel(ax, acc, cfg, ylabel="induction accuracy", fmt="{:.2f}", available=data["ind_available"],
                         diverged=data["diverged_step"], all_variants=cfg["scale"] == "paper")
    ax.axhline(0.95, color="0.4", linestyle="--", linewidth=0.7)
    ax.tick_params(axis="x", labelrotation=35)
    ax.set_ylim(0, 1.3)  # the vertical value labels of bars at 1 inside the axes
    several = len(cfg["induction_runs"]) > 1
    ax.set_title("final accuracy" + (", mean over runs" if several else "") + " (chance 1/49)", fontsize=7, pad=20)
    main = f"\n{cfg['induction_runs'][0]['n_heads']}-head runs" if several else ""  # the curves: run 0 only
    cols = style.colors(len(cfg["variants"]))
    off_scale = []
    for i, name in enumerate(cfg["variants"]):
        if not data["ind_available"][i, 0]:
            continue
        spe = data["steps_per_epoch"][i, 0]
        ep = data["curve_step"][i, 0] / spe
        style_ = "-" if name.endswith("norm") else "--"
        ax_c.plot(ep, data["curve_acc"][i, 0], color=cols[i], label=_sec4.variant_label(name), linestyle=style_,
                  marker=".", markersize=2.5)
        bos = data["curve_bos"][i, 0]
        curves = {"max": _sec4.nan_reduce(np.nanmax, bos, -1), "mean": _sec4.nan_reduce(np.nanmean, bos, -1)}
        for kind, curve in curves.items():
            if np.nanmax(np.abs(curve), initial=0.0) > OFF_SCALE:  # a signed kernel's share is not a fraction
                off_scale.append(f"{_sec4.variant_label(name)} ({kind}) {np.nanmin(curve):.3g}…{np.nanmax(curve):.3g}")
            elif kind == "max":
                ax_b.plot(ep, curve, color=cols[i], linestyle=style_, marker=".", markersize=2.5)
            else:
                ax_b.plot(ep, curve, color=cols[i], linestyle=":", linewidth=0.8)
        gone = data["diverged_step"][i, 0]
        if np.isfinite(gone):
            k = np.nanargmin(np.abs(data["curve_step"][i, 0] - gone))
            ax_c.plot(gone / spe, data["curve_acc"][i, 0, k], "x", color=cols[i], markersize=5)
    for a in (ax_c, ax_b):
        a.axhline(0.95 if a is ax_c else 0.9, color="0.4", linestyle="--", linewidth=0.7)
        a.set_xlabel("epoch")
    if cfg["scale"] == "paper":
        old = _sec4.OLD_STOP_STEP / 391
        ax_b.axvline(old, color="0.6", linewidth=0.8)
        ax_b.text(old, 0.02, " earlier early stop", fontsize=style.NOTE, color="0.4", rotation=90, va="bottom")
    ax_c.set_ylabel("test accuracy")
    ax_c.set_ylim(0, 1.02)
    ax_c.set_title(f"during training (x: diverged){main}", fontsize=7)
    if data["ind_available"][:, 0].any():
        # one legend for the curves of both panels, below the figure: over the curves it hid them
        fig.legend(*ax_c.get_legend_handles_labels(), loc="outside lower center", ncol=6,
                   frameon=False, handlelength=2.2, columnspacing=1.0)
    ax_b.set_ylabel("layer-2 BOS share")
    ax_b.set_ylim(-0.3, 1.05)  # signed kernels can have shares outside [0, 1]: clipped here
    ax_b.set_title(f"BOS share: max over heads (solid), mean (dotted){main}", fontsize=7)
    if off_scale:
        # its own text under the axis label (the layout makes room for it; inside the axes it
        # covered curves), the label itself left black and alone
        ax_b.annotate("not drawn, off scale (signed kernel: share not a fraction):\n" + "\n".join(off_scale),
                      xy=(0.5, 0.0), xycoords=ax_b.xaxis.label, xytext=(0, -4), textcoords="offset points",
                      ha="center", va="top", fontsize=style.NOTE, color="C3")
    missing = [n for i, n in enumerate(cfg["variants"]) if not data["ind_available"][i].any()]
    if missing:
        ax_c.text(0.98, 0.3, f"not run: {len(missing)} of {len(cfg['variants'])} variants",
                  transform=ax_c.transAxes, ha="right", va="bottom", fontsize=style.NOTE, color="0.35")
    _sec4.suptitle(fig, "Induction accuracy — " + _sec4.induction_note(cfg))
    return fig


def _summary(data: dict, cfg: dict, i: int) -> dict:
    spe = data["steps_per_epoch"][i]
    curve = data["curve_acc"][i, 0]
    above = np.flatnonzero(np.nan_to_num(curve) > 0.9)
    return {"induction_acc": _sec4.finite(data["induction_acc"][i]),
            "epoch_first_above_0.9": (round(float(data["curve_step"][i, 0, above[0]] / spe[0]), 3)
                                      if above.size else None),
            "curve_epoch": _sec4.finite(data["curve_step"][i, 0] / spe[0]),
            "curve_acc": _sec4.finite(curve),
            "curve_layer2_bos_share_max_head": _sec4.finite(_sec4.nan_reduce(np.nanmax, data["curve_bos"][i, 0], -1)),
            "diverged_epoch": _sec4.finite(data["diverged_step"][i] / spe),
            "step_seconds": _sec4.finite(data["step_seconds"][i]),
            "train_seconds": _sec4.finite(data["train_seconds"][i])}


FIGURE = _sec4.figure(
    "accuracy-induction",
    "Sec. 4.1: induction accuracy per kernel; accuracy and layer-2 BOS share per epoch",
    plot,
    _sec4.per_variant(_summary),
    tasks=("induction",),
)
