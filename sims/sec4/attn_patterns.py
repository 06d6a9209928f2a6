"""Learned layer-2 attention maps for softmax, sigmoid and linear on one induction sequence.

Rows: softmax, sigmoid w/o norm, linear w/o norm (the variants present); columns: the layer-2
heads of the main run; cells: the share ``|w_ij| / Σ_j |w_ij|`` of query ``i`` (row) on key
``j`` (column) for the sequence ``[BOS, t_1 … t_10, q]`` (the query's id is shifted by the
vocabulary size at the paper's settings); one colour bar for all. A sink head is a bright first
column; an induction head's last row peaks on the token after the earlier ``q``.
"""

from __future__ import annotations

import numpy as np

from gradflow.sims import style

from gradflow.sims.sec4 import _figures as _sec4

SHOWN = ("softmax-norm", "sigmoid-raw", "linear-raw")


def plot(data: dict, cfg: dict):
    data = _sec4.unpack(data)
    names = cfg["variants"]
    H = cfg["induction_runs"][0]["n_heads"]
    vocab = cfg["induction_runs"][0]["vocab"]
    fig, axes = style.figure(len(SHOWN), H, height=1.9 * len(SHOWN))
    im = None
    for r, name in enumerate(SHOWN):
        i = names.index(name) if name in names else None
        have = i is not None and data["ind_available"][i, 0] and np.isfinite(data["example_maps"][i]).any()
        for h in range(H):
            ax = axes[r][h]
            ax.grid(False)
            if not have:
                ax.text(0.5, 0.5, f"{_sec4.variant_label(name)}: not run", ha="center", va="center",
                        transform=ax.transAxes, fontsize=7, color="0.35")
                ax.set_xticks([])
                ax.set_yticks([])
                continue
            m = data["example_maps"][i, -1, h]
            tok = data["example_tokens"][i]
            labels = ["BOS"] + [str(t) for t in tok[1:-1]] + [f"q={tok[-1] - vocab}" if tok[-1] >= vocab
                                                              else f"q={tok[-1]}"]
            im = ax.imshow(m, vmin=0, vmax=1, cmap="magma")
            ax.set_xticks(range(len(labels)), labels, fontsize=style.NOTE, rotation=90)
            ax.set_yticks(range(len(labels)), labels, fontsize=style.NOTE)
            bos = data["bos_share"][i, 0, -1, h]
            ax.set_title(f"{_sec4.variant_label(name)}, head {h}\nBOS share {bos:.2f}", fontsize=style.NOTE)
    if im is not None:
        fig.colorbar(im, ax=[a for row in axes for a in row], shrink=0.6, label=r"share $|w_{ij}| / \sum_j |w_{ij}|$")
    accs = ", ".join(f"{_sec4.variant_label(n)} {data['induction_acc'][names.index(n), 0]:.2f}"
                     for n in SHOWN if n in names and data["ind_available"][names.index(n), 0])
    _sec4.suptitle(fig, "Layer-2 attention shares on one induction sequence (rows: queries, columns: keys); "
                   "induction acc.: " + accs + "\n" + _sec4.induction_note(cfg))
    return fig


def _summary(data: dict, cfg: dict) -> dict:
    data = _sec4.unpack(data)
    names = cfg["variants"]
    vocab = cfg["induction_runs"][0]["vocab"]
    out = {}
    for name in SHOWN:
        i = names.index(name) if name in names else None
        if i is None or not data["ind_available"][i, 0] or not np.isfinite(data["example_maps"][i]).any():
            out[name] = None
            continue
        m = data["example_maps"][i, -1]
        tok = data["example_tokens"][i]
        q = tok[-1] - vocab if tok[-1] >= vocab else tok[-1]
        q_pos = int(np.flatnonzero(tok[1:-1] == q)[0]) + 1  # earlier copy of q
        top = np.argmax(m[:, -1], axis=-1)
        out[name] = {"earlier_q_position": q_pos,
                     "last_row_top_key_offset_from_earlier_q": (top - q_pos).tolist(),
                     "last_row_top_share": _sec4.nested(m[:, -1].max(-1)),
                     "bos_share_main_run": _sec4.nested(data["bos_share"][i, 0, -1])}
    return out


FIGURE = _sec4.figure(
    "attn-patterns",
    "Learned layer-2 attention maps (softmax, sigmoid, linear) on one induction sequence",
    plot,
    _summary,
    tasks=("induction",),
)
