"""Sec. 4.1: induction accuracy per attention kernel, and test accuracy during training.

Left: final induction accuracy (test set, last position) per variant. Right: accuracy at every
evaluation against epochs; the early stop (accuracy above 0.95 at every evaluation for one
epoch, SPEC §7) is marked with a dot.
"""

from __future__ import annotations

import numpy as np

from . import _sec4, style


def plot(data: dict, cfg: dict):
    data = _sec4.unpack(data)
    fig, axes = style.figure(1, 2, height=2.6)
    ax, ax_c = axes[0]
    acc = np.where(data["available"], data["induction_acc"], np.nan)
    acc = np.array([np.mean(a[np.isfinite(a)]) if np.isfinite(a).any() else np.nan for a in acc])
    _sec4.bars_by_kernel(ax, acc, cfg, ylabel="induction accuracy", fmt="{:.2f}", available=data["available"],
                         legend_loc="center right", diverged=data.get("diverged_step"))
    ax.axhline(0.95, color="0.4", linestyle="--", linewidth=0.7)
    ax.set_ylim(0, 1.12)
    ax.set_title("final test accuracy (chance 1/50; a context token ≈ 1/9)")
    cols = style.colors(len(cfg["variants"]))
    for i, name in enumerate(cfg["variants"]):
        for j in range(data["available"].shape[1]):
            if not data["available"][i, j]:
                continue
            spe = data["steps_per_epoch"][i, j]
            ep, acc_c = data["curve_step"][i, j] / spe, data["curve_acc"][i, j]
            ax_c.plot(ep, acc_c, color=cols[i], label=_sec4.variant_label(name) if j == 0 else None,
                      linestyle="-" if name.endswith("norm") else "--")
            stop = data["stopped_step"][i, j]
            if np.isfinite(stop):
                k = np.nanargmin(np.abs(data["curve_step"][i, j] - stop))
                ax_c.plot(stop / spe, acc_c[k], "o", color=cols[i], markersize=3.5)
            gone = data["diverged_step"][i, j] if "diverged_step" in data else np.nan
            if np.isfinite(gone):  # the evaluation at which the training loss was non-finite
                k = np.nanargmin(np.abs(data["curve_step"][i, j] - gone))
                ax_c.plot(gone / spe, acc_c[k], "x", color=cols[i], markersize=5)
    ax_c.axhline(0.95, color="0.4", linestyle="--", linewidth=0.7)
    ax_c.set_xlabel("epoch")
    ax_c.set_ylabel("test accuracy")
    ax_c.set_ylim(0, 1.02)
    ax_c.set_title("during training (•: early stop, x: diverged)")
    missing = [_sec4.variant_label(n) for i, n in enumerate(cfg["variants"]) if not data["available"][i].any()]
    if missing:
        ax_c.text(0.98, 0.02, f"not run: {len(missing)} of {len(cfg['variants'])} variants (left panel)",
                  transform=ax_c.transAxes, ha="right", va="bottom", fontsize=5.5, color="0.35")
    ax_c.legend(fontsize=5.5, loc="center right")
    fig.suptitle("Induction accuracy — " + _sec4.scale_note(cfg, data), fontsize=8)
    return fig


def _summary(data: dict, cfg: dict, i: int) -> dict:
    spe = data["steps_per_epoch"][i]
    diverged = "diverged_step" in data and np.isfinite(data["diverged_step"][i]).any()
    return {"induction_acc": _sec4.finite(data["induction_acc"][i]),
            "epochs_to_above_0.95": _sec4.finite(data["above_step"][i] / spe),
            "early_stop_epoch": _sec4.finite(data["stopped_step"][i] / spe),
            "diverged_epoch": _sec4.finite(data["diverged_step"][i] / spe) if "diverged_step" in data else None,
            "accuracy_before_divergence": _sec4.finite(np.nanmax(data["curve_acc"][i], axis=-1)) if diverged else None,
            "step_seconds": _sec4.finite(data["step_seconds"][i]),
            "train_seconds_both_tasks": _sec4.finite(data["train_seconds"][i])}


FIGURE = _sec4.figure(
    "accuracy-induction",
    "Sec. 4.1: induction accuracy per kernel (final and during training, early stop marked)",
    plot,
    _sec4.per_variant(_summary),
)
