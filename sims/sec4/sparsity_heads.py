"""Per-head sparsity, softmax vs sigmoid without normalisation (our analogue of the paper's Fig. 7).

Sparsity score of a head = mean over sequences and query rows of the largest share
``|w_ij| / Σ_j |w_ij|`` in a row (the share on the max-weight token). The paper compares two 7B
LLMs; we score every head of our own trained models: every layer and head of the induction
models (context and query rows), and the CLS row of the group models. Left: histogram
softmax vs sigmoid w/o norm. Right: every variant's heads.
"""

from __future__ import annotations

import numpy as np

from gradflow.sims import style

from gradflow.sims.sec4 import _figures as _sec4


def _scores(data: dict, i: int) -> np.ndarray:
    """Every measured head score of variant ``i`` (missing and diverged runs are NaN: left out)."""
    sc = np.concatenate([data["sparsity_induction"][i].ravel(), data["sparsity_groups"][i].ravel()])
    return sc[np.isfinite(sc)]


def plot(data: dict, cfg: dict):
    data = _sec4.unpack(data)
    fig, axes = style.figure(1, 2, height=2.8)
    ax, ax_all = axes[0]
    names = cfg["variants"]
    bins = np.linspace(0, 1, 21)
    for name, color in (("softmax-norm", "C0"), ("sigmoid-raw", "C3")):
        sc = _scores(data, names.index(name)) if name in names else np.zeros(0)
        if sc.size:
            ax.hist(sc, bins=bins, alpha=0.55, color=color,
                    label=f"{_sec4.variant_label(name)}: mean {sc.mean():.2f} ({sc.size} heads)")
        else:
            ax.plot([], [], color=color, label=f"{_sec4.variant_label(name)}: not run")
    ax.set_xlabel("sparsity score (share on the max-weight token)")
    ax.set_ylabel("heads")
    ax.set_title("softmax vs sigmoid w/o norm (cf. paper Fig. 7)", fontsize=7, pad=24)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=1, frameon=False,
              borderaxespad=0.2)
    for i, name in enumerate(names):
        ind, grp = data["sparsity_induction"][i].ravel(), data["sparsity_groups"][i].ravel()
        ind, grp = ind[np.isfinite(ind)], grp[np.isfinite(grp)]
        if ind.size or grp.size:
            ax_all.scatter(np.full(ind.size, i - 0.12), ind, s=8, color="C0", marker="o",
                           label="induction heads" if i == 0 else None)
            ax_all.scatter(np.full(grp.size, i + 0.12), grp, s=8, color="C2", marker="s",
                           label="group heads (CLS row)" if i == 0 else None)
        else:
            ax_all.text(i, 0.5, "not run", rotation=90, ha="center", va="center", fontsize=style.NOTE, color="0.35")
    ax_all.set_xticks(range(len(names)), [_sec4.variant_label(n) for n in names], rotation=35, ha="right",
                      fontsize=style.NOTE)
    ax_all.set_xlim(-0.6, len(names) - 0.4)
    ax_all.set_ylim(0, 1.03)
    ax_all.set_ylabel("sparsity score per head")
    ax_all.set_title("every head, every variant", fontsize=7, pad=24)
    ax_all.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False)
    expected = sum(len(s.get("only_variants", names)) for s in cfg["group_runs"])
    done = int(data["grp_available"].sum())
    _sec4.suptitle(fig, "Per-head sparsity — induction: " + _sec4.induction_note(cfg) + "\ngroups: "
                   + _sec4.group_note(cfg) + (f" ({done} of {expected} group runs finished)" if done < expected else ""))
    return fig


def _summary(data: dict, cfg: dict, i: int) -> dict:
    sc = _scores(data, i)
    return {"mean": float(sc.mean()) if sc.size else None, "median": float(np.median(sc)) if sc.size else None,
            "heads": int(sc.size),
            "induction_main_run_layers_heads": _sec4.nested(data["sparsity_induction"][i, 0]),
            "groups_main_run": _sec4.nested(data["sparsity_groups"][i, 0])}


FIGURE = _sec4.figure(
    "sparsity-heads",
    "Per-head sparsity scores: softmax vs sigmoid w/o norm histogram, every variant (Fig. 7 analogue)",
    plot,
    _sec4.per_variant(_summary),
)
