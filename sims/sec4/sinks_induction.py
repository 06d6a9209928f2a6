"""Sec. 4.1: % of attention-sink heads per attention kernel, with and without normalisation.

A sink head is a last-layer (layer-2) head whose BOS share exceeds 0.9; the BOS share is, per
evaluation sequence, Σ (weights on BOS) / Σ (all weights) over the rows of the context tokens
``t_1 … t_9``, averaged over sequences (the authors' measurement). Only runs with induction
accuracy > 0.95 count, and the % pools the heads of every kept run (all head counts, lrs and
seeds run), as the paper's panel does. Left: % sink heads per variant. Right: every layer-2
head's BOS share of every run (also runs below 0.95), with the 0.9 threshold.

For the signed kernels (mlp, linear) a row's weights can sum to about 0, so the share is not a
fraction and can exceed 1 or be negative. The bars count as the authors do (share > 0.9); a bar
whose count includes shares > 1 is marked † and the count over shares in (0.9, 1] is given below
the panel (and in the summary as ``sink_heads_percent_kept_share_at_most_1``).
"""

from __future__ import annotations

import numpy as np

from gradflow.sims import style

from gradflow.sims.sec4 import _figures as _sec4

MARKERS = {1: "^", 2: "s", 4: "o", 8: "D"}


def plot(data: dict, cfg: dict):
    data = _sec4.unpack(data)
    fig, axes = style.figure(1, 2, height=3.3)
    ax, ax_h = axes[0]
    pct, pct_bounded = _sec4.sink_percent(data), _sec4.sink_percent_bounded(data)
    _sec4.bars_by_kernel(ax, pct, cfg, ylabel="% sink heads (layer 2)",
                         available=data["ind_available"], top=100.0, diverged=data["diverged_step"])
    unbounded = [i for i in range(len(pct)) if np.isfinite(pct[i]) and pct[i] != pct_bounded[i]]
    ax.set_ylim(0, 118)  # room for the labels and † marks above the bars (they end at 100)
    for i in unbounded:  # the authors' count includes heads whose share is not a fraction
        x = _sec4.bar_position(cfg["variants"][i])
        ax.text(x, pct[i] + 9, "†", ha="center", va="bottom", fontsize=7, color="C3")
    if unbounded:
        ax.set_yticks(range(0, 101, 20))
        fig.supxlabel("† (left) counts heads with BOS share > 1 (a signed kernel's row can sum to ≈ 0); "
                      "shares in (0.9, 1] only: "
                      + ", ".join(f"{_sec4.variant_label(cfg['variants'][i])} {pct_bounded[i]:.0f} %" for i in unbounded),
                      fontsize=style.NOTE, color="C3")
    ax.set_title("sink heads in runs with induction acc. > 0.95", fontsize=7, pad=14)
    names = cfg["variants"]
    runs = cfg["induction_runs"]
    for i in range(len(names)):
        for r, s in enumerate(runs):
            if not data["ind_available"][i, r]:
                continue
            b = data["bos_share"][i, r, -1, :s["n_heads"]]
            ok = data["induction_acc"][i, r] > 0.95
            xs = i + (r - (len(runs) - 1) / 2) * 0.25 + np.linspace(-0.08, 0.08, b.size)
            ax_h.scatter(xs, b, s=10, marker=MARKERS.get(s["n_heads"], "o"),
                         color="C0" if ok else "C3", alpha=0.85)
    ax_h.axhline(0.9, color="0.4", linestyle="--", linewidth=0.7)
    ax_h.set_xticks(range(len(names)), [_sec4.variant_label(n) for n in names], rotation=35, ha="right",
                    fontsize=style.NOTE)
    ax_h.set_xlim(-0.6, len(names) - 0.4)
    ax_h.set_ylabel("BOS share of a layer-2 head")
    heads = sorted({s["n_heads"] for s in runs})
    ax_h.set_title("each layer-2 head\n(blue: acc > 0.95, red: below; "
                   + ", ".join(f"{MARKERS.get(h, 'o')} {h} head{'s' if h > 1 else ''}" for h in heads) + ")",
                   fontsize=style.NOTE)
    b2 = data["bos_share"][:, :, -1]
    lo, hi = (np.nanmin(b2), np.nanmax(b2)) if np.isfinite(b2).any() else (0.0, 1.0)
    if hi > 5 or lo < -2:  # signed kernels: shares far outside [0, 1]; linear in [-1, 1], log beyond
        ax_h.set_yscale("symlog", linthresh=1.0, linscale=3.0)
        top = hi * 1.3
        ax_h.set_ylim(min(-0.03, lo * 1.3), top)
        note = "share > 1: signed kernel, not a fraction\n(axis: log beyond ±1)"
    else:  # signed kernels: shares outside [0, 1], a little
        top = max(1.03, hi + 0.05) if hi <= 1.03 else hi + 0.35
        ax_h.set_ylim(min(-0.03, lo - 0.05), top)
        note = "share > 1: signed kernel, not a fraction"
    if hi > 1.03:
        ax_h.axhspan(1.0, top, color="C3", alpha=0.06, linewidth=0)
        ax_h.text(0.01, 0.99, note, transform=ax_h.transAxes, fontsize=style.NOTE, color="C3", va="top")
    for i in range(len(names)):
        if not data["ind_available"][i].any():
            ax_h.text(i, 0.5, "not run", rotation=90, ha="center", va="center", fontsize=style.NOTE, color="0.35")
    _sec4.suptitle(fig, "Attention sinks in induction models — " + _sec4.induction_note(cfg))
    return fig


def _summary(data: dict, cfg: dict, i: int) -> dict:
    pct, pct_all = _sec4.sink_percent(data)[i], _sec4.sink_percent_all(data)[i]
    pct_bounded = _sec4.sink_percent_bounded(data)[i]
    return {"sink_heads_percent_kept": None if np.isnan(pct) else float(pct),
            "sink_heads_percent_kept_share_at_most_1": None if np.isnan(pct_bounded) else float(pct_bounded),
            "sink_heads_percent_all_runs": None if np.isnan(pct_all) else float(pct_all),
            "layer2_bos_share": [_sec4.finite(data["bos_share"][i, r, -1, :s["n_heads"]])
                                 for r, s in enumerate(cfg["induction_runs"])],
            "layer2_bos_share_rowwise_abs_rows_1_10": [_sec4.finite(data["bos_share_rowwise"][i, r, -1, :s["n_heads"]])
                                                       for r, s in enumerate(cfg["induction_runs"])],
            "induction_acc": _sec4.finite(data["induction_acc"][i]),
            "runs_kept": int(_sec4.kept(data)[i].sum()), "runs": int(data["ind_available"][i].sum()),
            "bos_share_rows": cfg["induction_runs"][0]["sink_rows"]}


FIGURE = _sec4.figure(
    "sinks-induction",
    "Sec. 4.1: % attention-sink heads (BOS share > 0.9, layer 2) per kernel, with/without normalisation",
    plot,
    _sec4.per_variant(_summary),
    tasks=("induction",),
)
