"""``causal-mask``: the causal attention matrix (docs: Figures, "Attention basics").

Random queries and keys (i.i.d. N(0, 1), ``d_k = 16``) for the first ``seq_len`` tokens of
the sentence "the animal did not cross the street because it was too tired". Left: bidirectional attention ``softmax(QKᵀ/√d_k)``. Middle: the same
scores with the causal mask (key ``j > i`` set to ``finfo.min``): lower-triangular, the upper
triangle exactly 0 and row 0 exactly one-hot (token 0 has nothing before it). Right: row 0
both ways. The summary also records the largest difference between the rows computed while
generating (attention over the first ``k`` tokens only) and the full causal matrix (round-off:
a token's attention does not change once later tokens arrive). Extra: ``causal-mask.gif``, the matrix filling row by row as
tokens are generated (grey: not generated yet; light grey: masked).
"""

from __future__ import annotations

import os

import matplotlib.pyplot as plt
import numpy as np

from gradflow.sims import style
from gradflow.sims._gif import save_gif
from gradflow.sims.build import Figure
from gradflow.sims.basics.attention_basics import SENTENCE, attention_weights, causal_mask

CMAP = "viridis"


def config(quick: bool) -> dict:
    return {"seed": 2, "seq_len": 10, "d_k": 16, "tokens": list(SENTENCE[:10])}


def compute(cfg: dict, progress: bool = False) -> dict[str, np.ndarray]:
    n, d_k = cfg["seq_len"], cfg["d_k"]
    rng = np.random.default_rng(cfg["seed"])
    q = rng.standard_normal((n, d_k))
    k = rng.standard_normal((n, d_k))
    full = np.asarray(attention_weights(q, k, causal=False))
    causal = np.asarray(attention_weights(q, k, causal=True))
    # generation: after k tokens, attention is computed over the prefix only
    frames = np.zeros((n, n, n))
    for m in range(1, n + 1):
        frames[m - 1, :m, :m] = np.asarray(attention_weights(q[:m], k[:m], causal=True))
    prefix_diff = np.asarray([np.max(np.abs(frames[m - 1, :m, :m] - causal[:m, :m])) for m in range(1, n + 1)])
    return {
        "attention_full": full,
        "attention_causal": causal,
        "mask": np.asarray(causal_mask(n), dtype=np.float64),
        "frames": frames,
        "prefix_max_abs_diff": prefix_diff,
    }


def _heatmap(ax, A, allowed, tokens, title, hidden_rows_from=None):
    """Draw ``A`` with masked cells light grey and rows ``>= hidden_rows_from`` dark grey."""
    n = A.shape[0]
    shown = np.ma.masked_where(~allowed, A)
    cmap = plt.get_cmap(CMAP).with_extremes(bad="0.88")
    im = ax.imshow(shown, cmap=cmap, vmin=0, vmax=1, interpolation="nearest")
    if hidden_rows_from is not None and hidden_rows_from < n:
        ax.axhspan(hidden_rows_from - 0.5, n - 0.5, color="0.55", zorder=3)
        ax.text((n - 1) / 2, (hidden_rows_from + n - 1) / 2, "not generated yet", ha="center", va="center",
                color="white", fontsize=7, zorder=4)
    ax.set_xticks(range(n), tokens, rotation=60, ha="right", rotation_mode="anchor", fontsize=style.NOTE)
    ax.set_yticks(range(n), tokens, fontsize=style.NOTE)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.set_title(title)
    ax.grid(False)
    return im


def plot(data: dict, cfg: dict):
    fig, axes = style.figure(1, 3, height=2.6)
    ax_f, ax_c, ax_p = axes[0]
    tokens = cfg["tokens"]
    n = len(tokens)
    everything = np.ones((n, n), dtype=bool)
    _heatmap(ax_f, data["attention_full"], everything, tokens, "bidirectional (no mask)")
    im = _heatmap(ax_c, data["attention_causal"], data["mask"] > 0, tokens, "causal: row 0 one-hot, upper 0")
    ax_c.text(0, 0, "1", ha="center", va="center", color="k", fontsize=style.NOTE)
    fig.colorbar(im, ax=[ax_f, ax_c], shrink=0.8, label="attention weight")

    x = np.arange(n)
    ax_p.bar(x - 0.2, data["attention_full"][0], width=0.4, color="0.6", label="bidirectional")
    ax_p.bar(x + 0.2, data["attention_causal"][0], width=0.4, color="tab:purple", label="causal")
    ax_p.set_xticks(x, tokens, rotation=60, ha="right", rotation_mode="anchor", fontsize=style.NOTE)
    ax_p.set_ylim(0, 1.05)
    ax_p.set_ylabel("weight")
    ax_p.set_title(f'row 0 ("{tokens[0]}"): 100 % on itself')
    ax_p.grid(axis="x", visible=False)
    ax_p.legend(loc="upper right")
    up = data["attention_causal"][~(data["mask"] > 0)]
    fig.suptitle(f"Causal mask: {n} tokens, random $Q, K$ with $d_k = {cfg['d_k']}$; "
                 f"upper triangle max = {up.max():g}", fontsize=9)
    return fig


def summary(data: dict, cfg: dict) -> dict:
    causal, mask = data["attention_causal"], data["mask"] > 0
    row0 = causal[0]
    return {
        "row0": [float(v) for v in row0],
        "row0_exactly_one_hot": bool(row0[0] == 1.0 and np.all(row0[1:] == 0.0)),
        "upper_triangle_max": float(causal[~mask].max()),
        "upper_triangle_exactly_zero": bool(np.all(causal[~mask] == 0.0)),
        "row_sums_max_abs_error": float(np.max(np.abs(causal.sum(axis=1) - 1))),
        "bidirectional_row0_max": float(data["attention_full"][0].max()),
        "prefix_vs_full_max_abs_diff": float(np.max(data["prefix_max_abs_diff"])),
        "gif_frames": int(data["frames"].shape[0]),
    }


def extras(data: dict, cfg: dict, out_dir: str) -> list[str]:
    tokens = cfg["tokens"]
    n = len(tokens)
    fig, axes = style.figure(1, 1, height=3.2)
    ax = axes[0][0]
    fig.set_size_inches(3.6, 3.4)
    allowed = data["mask"] > 0
    first = _heatmap(ax, data["frames"][0], allowed, tokens, "")
    fig.colorbar(first, ax=ax, shrink=0.8, label="attention weight")

    def draw(i):
        for artist in list(ax.images) + list(ax.patches) + list(ax.texts):
            artist.remove()
        _heatmap(ax, data["frames"][i], allowed, tokens, f"{i + 1} of {n} tokens generated", hidden_rows_from=i + 1)

    name = "causal-mask.gif"
    save_gif(fig, draw, range(n), os.path.join(out_dir, name))
    plt.close(fig)
    return [name]


FIGURE = Figure(
    title="Causal attention: lower-triangular, row 0 one-hot, upper triangle exactly 0; GIF of generation",
    config=config,
    compute=compute,
    plot=plot,
    summary=summary,
    extras=extras,
)
