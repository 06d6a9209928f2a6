"""Sec. 4.1: % of attention-sink heads per attention kernel, with and without normalisation.

A sink head is a layer-2 head whose BOS share over the context rows exceeds 0.9; only runs
with induction accuracy > 0.95 count (SPEC §7). Left: % sink heads per variant. Right: every
layer-2 head's BOS share of every run (also runs below 0.95), with the 0.9 threshold.
"""

from __future__ import annotations

import numpy as np

from . import _sec4, style


def plot(data: dict, cfg: dict):
    data = _sec4.unpack(data)
    fig, axes = style.figure(1, 2, height=2.6)
    ax, ax_h = axes[0]
    _sec4.bars_by_kernel(ax, _sec4.sink_percent(data), cfg, ylabel="% sink heads (layer 2)",
                         available=data["available"], top=100.0, diverged=data.get("diverged_step"))
    ax.set_ylim(0, 112)
    ax.set_title("sink heads in runs with induction acc. > 0.95")
    names = cfg["variants"]
    for i, name in enumerate(names):
        for j in range(data["available"].shape[1]):
            if data["available"][i, j]:
                b = data["bos_share"][i, j, -1]
                ok = data["induction_acc"][i, j] > 0.95
                ax_h.scatter(np.full(b.shape, i) + np.linspace(-0.2, 0.2, b.size), b, s=10,
                             marker="o" if ok else "x", color="C0" if ok else "C3")
    ax_h.axhline(0.9, color="0.4", linestyle="--", linewidth=0.7)
    ax_h.set_xticks(range(len(names)), [_sec4.variant_label(n) for n in names], rotation=40, ha="right",
                    fontsize=6)
    ax_h.set_ylim(-0.03, 1.03)
    ax_h.set_ylabel("BOS share of a layer-2 head")
    ax_h.set_title("each layer-2 head (o: acc > 0.95, x: below)")
    for i, name in enumerate(names):
        if not data["available"][i].any():
            ax_h.text(i, 0.5, "not run", rotation=90, ha="center", va="center", fontsize=6, color="0.35")
    fig.suptitle("Attention sinks in induction heads — " + _sec4.scale_note(cfg, data), fontsize=8)
    return fig


def _summary(data: dict, cfg: dict, i: int) -> dict:
    pct, pct_all = _sec4.sink_percent(data)[i], _sec4.sink_percent_all(data)[i]
    return {"sink_heads_percent_kept": None if np.isnan(pct) else float(pct),
            "sink_heads_percent_all_runs": None if np.isnan(pct_all) else float(pct_all),
            "layer2_bos_share": _sec4.finite(data["bos_share"][i, :, -1]),
            "runs_kept": int(_sec4.kept(data)[i].sum()), "runs": int(data["available"][i].sum())}


FIGURE = _sec4.figure(
    "sinks-induction",
    "Sec. 4.1: % attention-sink heads (BOS share > 0.9, layer 2) per kernel, with/without normalisation",
    plot,
    _sec4.per_variant(_summary),
)
