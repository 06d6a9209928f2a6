"""Sec. 4.2: the one-token flip attack on the group-classification task, per kernel.

Each pair (A, B) of correctly classified test sequences with different groups: the token of A
that the CLS row of the last layer attends to most (share averaged over heads) is replaced by
the most-attended token of B; the flip rate is the share of pairs whose prediction changes.
A model that reads the group off one token flips; one that pools the 10 tokens does not.
"""

from __future__ import annotations

import textwrap

import numpy as np

from . import _sec4, style


def plot(data: dict, cfg: dict):
    data = _sec4.unpack(data)
    fig, axes = style.figure(1, 1, height=2.5)
    ax = axes[0][0]
    rate = np.where(data["available"], data["flip_rate"], np.nan)
    rate = np.array([np.mean(r[np.isfinite(r)]) if np.isfinite(r).any() else np.nan for r in rate])
    _sec4.bars_by_kernel(ax, rate, cfg, ylabel=f"flip rate ({cfg['run']['n_pairs']} pairs)", fmt="{:.3f}",
                         available=data["available"], top=0.05, ran_label="no valid pairs",
                         diverged=data.get("diverged_step_groups"))
    ax.set_ylim(0, max(0.05, float(np.nanmax(rate)) * 1.25) if np.any(np.isfinite(rate)) else 1)
    acc = ", ".join(f"{_sec4.variant_label(n)} {data['group_acc'][i, 0]:.3f}"
                    for i, n in enumerate(cfg["variants"]) if data["available"][i, 0])
    early = [i for i, n in enumerate(cfg["variants"])
             if data["available"][i, 0] and np.isfinite(data["stopped_step_groups"][i, 0])]
    note = ""
    if early:  # results of an older version, whose group models stopped early: say which
        steps = "/".join(str(v) for v in sorted({int(data["stopped_step_groups"][i, 0]) for i in early}))
        who = ("every run" if len(early) == int(data["available"][:, 0].sum()) else
               ", ".join(_sec4.variant_label(cfg["variants"][i]) for i in early))
        note = "\n" + textwrap.fill(f"group model stopped early after {steps} steps (older runs): {who}", 160)
    ax.set_title(textwrap.fill("one-token flip attack (group task, K = 4); group accuracy: " + acc, 160) + note,
                 fontsize=6.5)
    fig.suptitle("Flip rate — " + _sec4.scale_note(cfg, data), fontsize=8)
    return fig


def _summary(data: dict, cfg: dict, i: int) -> dict:
    return {"flip_rate": _sec4.finite(data["flip_rate"][i]), "n_pairs": data["n_pairs"][i].tolist(),
            "group_acc": _sec4.finite(data["group_acc"][i]),
            "group_stopped_early_step": _sec4.finite(data["stopped_step_groups"][i])}


FIGURE = _sec4.figure(
    "flip-rate",
    "Sec. 4.2: flip rate of the one-token attack on the group task, per kernel",
    plot,
    _sec4.per_variant(_summary),
)
