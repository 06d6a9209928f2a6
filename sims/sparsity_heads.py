"""Per-head sparsity, softmax vs sigmoid without normalisation (our analogue of the paper's Fig. 7).

Sparsity score of a head = mean over sequences and query rows of the largest share
``|w_ij| / Σ_j |w_ij|`` in a row (the share on the max-logit token). The paper compares two 7B
LLMs; we score every head of our own trained models (induction and group models, all layers).
Left: histogram softmax vs sigmoid w/o norm. Right: every variant's heads.
"""

from __future__ import annotations

import numpy as np

from . import _sec4, style


def _scores(data: dict, i: int) -> np.ndarray:
    """Every measured head score of variant ``i`` (a diverged model's heads are not measured)."""
    ok = data["available"][i]
    sc = np.concatenate([data["sparsity_induction"][i][ok].ravel(), data["sparsity_groups"][i][ok].ravel()])
    return sc[np.isfinite(sc)]


def plot(data: dict, cfg: dict):
    data = _sec4.unpack(data)
    fig, axes = style.figure(1, 2, height=2.6)
    ax, ax_all = axes[0]
    names = cfg["variants"]
    bins = np.linspace(0, 1, 21)
    for name, color in (("softmax-norm", "C0"), ("sigmoid-raw", "C3")):
        if name in names and data["available"][names.index(name)].any():
            sc = _scores(data, names.index(name))
            ax.hist(sc, bins=bins, alpha=0.55, color=color,
                    label=f"{_sec4.variant_label(name)}: mean {sc.mean():.2f} ({sc.size} heads)")
        else:
            ax.plot([], [], color=color, label=f"{_sec4.variant_label(name)}: not run")
    ax.set_xlabel("sparsity score (share on the max-logit token)")
    ax.set_ylabel("heads")
    ax.set_title("softmax vs sigmoid w/o norm (cf. paper Fig. 7)")
    ax.legend(fontsize=6, loc="upper left")
    for i, name in enumerate(names):
        if data["available"][i].any():
            ind, grp = data["sparsity_induction"][i].ravel(), data["sparsity_groups"][i].ravel()
            ind, grp = ind[np.isfinite(ind)], grp[np.isfinite(grp)]
            ax_all.scatter(np.full(ind.size, i - 0.12), ind, s=8, color="C0", marker="o",
                           label="induction model" if i == 0 else None)
            ax_all.scatter(np.full(grp.size, i + 0.12), grp, s=8, color="C2", marker="s",
                           label="group model" if i == 0 else None)
        else:
            ax_all.text(i, 0.5, "not run", rotation=90, ha="center", va="center", fontsize=6, color="0.35")
    ax_all.set_xticks(range(len(names)), [_sec4.variant_label(n) for n in names], rotation=40, ha="right",
                      fontsize=6)
    ax_all.set_ylim(0, 1.03)
    ax_all.set_ylabel("sparsity score per head")
    ax_all.set_title("every head, every variant")
    ax_all.legend(fontsize=6, loc="lower left")
    fig.suptitle("Per-head sparsity — " + _sec4.scale_note(cfg, data), fontsize=8)
    return fig


def _summary(data: dict, cfg: dict, i: int) -> dict:
    sc = _scores(data, i)
    return {"mean": float(sc.mean()), "median": float(np.median(sc)),
            "induction_layers_heads": _sec4.nested(data["sparsity_induction"][i, 0]),
            "groups_layers_heads": _sec4.nested(data["sparsity_groups"][i, 0])}


FIGURE = _sec4.figure(
    "sparsity-heads",
    "Per-head sparsity scores: softmax vs sigmoid w/o norm histogram, every variant (Fig. 7 analogue)",
    plot,
    _sec4.per_variant(_summary),
)
