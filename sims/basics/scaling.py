"""``scaling``: why attention divides by ``√d_k`` (docs: Figures, "Attention basics").

Left: for ``q, k`` with i.i.d. N(0, 1) entries, the sample variance of ``(QKᵀ)_ij = q·k``
against ``d_k ∈ {4, …, 1024}`` with the line ``Var = d_k``. Middle: the largest weight of a
16-token row, mean over many draws with a 10–90 % band, without the ``1/√d_k`` factor (tends
to 1: ≈ 0.96 at 1024) and with it (stays ≈ 0.24). Right: one row at ``d_k = 1024`` both ways.
Extra: ``scaling.gif``, one row's bars as ``d_k`` grows (the keys and query of frame ``d_k``
are the first ``d_k`` coordinates of one 1024-dimensional draw: of ``row_candidates`` draws,
the one whose unscaled largest weight at 1024 is the median). Draws: NumPy
``default_rng([seed, 0 | 1 | 2, d_k])`` for the variance, the max weights and the GIF row.
"""

from __future__ import annotations

import os

import matplotlib.pyplot as plt
import numpy as np

from gradflow.sims import style
from gradflow.sims._common import phases
from gradflow.sims._gif import save_gif
from gradflow.sims.build import Figure
from gradflow.sims.basics.attention_basics import attention_weights, dot_products, max_weights

RAW_COLOR = "tab:red"
SCALED_COLOR = "tab:blue"


def config(quick: bool) -> dict:
    return {
        "seed": 1,
        "d_ks": [4, 8, 16, 32, 64, 128, 256, 512, 1024],
        "var_samples": 10_000 if quick else 100_000,
        "n_tokens": 16,
        "draws": 1_000 if quick else 20_000,
        "gif_d_ks": [int(round(v)) for v in np.geomspace(4, 1024, 9 if quick else 17)],
        "row_candidates": 33 if quick else 65,
    }


def compute(cfg: dict, progress: bool = False) -> dict[str, np.ndarray]:
    d_ks = np.asarray(cfg["d_ks"])
    var, mw = [], []
    with phases([f"d_k={d}" for d in d_ks] + ["row"], progress, "scaling") as advance:
        for d in d_ks:
            s = dot_products([cfg["seed"], 0, int(d)], int(d), cfg["var_samples"])
            var.append(np.var(s, ddof=1))
            mw.append(max_weights([cfg["seed"], 1, int(d)], int(d), cfg["n_tokens"], cfg["draws"]))
            advance(f"d_k={d}")
        mw = np.stack(mw)  # (n_dk, draws, 2)
        d_max = max(cfg["gif_d_ks"])
        # the GIF's row: of `row_candidates` draws at d_max, the one whose unscaled largest
        # weight at d_max is the median (a typical row, not a hand-picked one)
        rng = np.random.default_rng([cfg["seed"], 2])
        qs = rng.standard_normal((cfg["row_candidates"], 1, d_max))
        ks = rng.standard_normal((cfg["row_candidates"], cfg["n_tokens"], d_max))
        tops = np.asarray([np.asarray(attention_weights(qi, ki, scale=False)).max() for qi, ki in zip(qs, ks)])
        pick = int(np.argsort(tops)[len(tops) // 2])
        q, keys = qs[pick], ks[pick]
        rows_raw = np.stack([np.asarray(attention_weights(q[:, :d], keys[:, :d], scale=False))[0]
                             for d in cfg["gif_d_ks"]])
        rows_scaled = np.stack([np.asarray(attention_weights(q[:, :d], keys[:, :d], scale=True))[0]
                                for d in cfg["gif_d_ks"]])
        advance("row")
    return {
        "d_ks": d_ks.astype(np.float64),
        "variance": np.asarray(var),
        "max_raw": mw[:, :, 0],
        "max_scaled": mw[:, :, 1],
        "gif_d_ks": np.asarray(cfg["gif_d_ks"], dtype=np.float64),
        "rows_raw": rows_raw,
        "rows_scaled": rows_scaled,
    }


def _bars(ax, weights, color, title):
    ax.clear()
    ax.bar(np.arange(len(weights)), weights, color=color)
    ax.set_ylim(0, 1.05)
    ax.set_xticks(np.arange(0, len(weights), 3))
    ax.set_xlabel("key token $j$")
    ax.set_title(title)
    ax.grid(axis="x", visible=False)


def plot(data: dict, cfg: dict):
    fig, axes = style.figure(1, 3, height=2.4)
    ax_v, ax_m, ax_r = axes[0]
    d_ks = data["d_ks"]
    ax_v.plot(d_ks, d_ks, color="0.4", linestyle="--", linewidth=0.9, label="$y = d_k$")
    ax_v.plot(d_ks, data["variance"], "o", color="k", markersize=3.5,
              label=f"sample Var, $n = {cfg['var_samples']:.0e}$".replace("e+0", "e"))
    ax_v.set_xscale("log", base=2)
    ax_v.set_yscale("log", base=2)
    ax_v.set_xlabel("$d_k$")
    ax_v.set_ylabel("Var$((QK^\\top)_{ij})$")
    ratios = data["variance"] / d_ks
    ax_v.set_title(f"$\\mathrm{{Var}} = d_k$ (ratio {ratios.min():.3f}–{ratios.max():.3f})")
    ax_v.legend(loc="upper left")

    for name, color, label in (("max_raw", RAW_COLOR, "no scaling: softmax$(QK^\\top)$"),
                               ("max_scaled", SCALED_COLOR, "scaled: softmax$(QK^\\top/\\sqrt{d_k})$")):
        m = data[name]
        lo, hi = np.percentile(m, [10, 90], axis=1)
        ax_m.plot(d_ks, m.mean(axis=1), "o-", color=color, markersize=3, label=label)
        ax_m.fill_between(d_ks, lo, hi, color=color, alpha=0.15, linewidth=0)
    n_tok = cfg["n_tokens"]
    ax_m.axhline(1 / n_tok, color="0.5", linestyle=":", linewidth=0.8)
    ax_m.text(d_ks[-1], 1 / n_tok + 0.01, f"uniform $1/{n_tok}$", fontsize=style.NOTE, ha="right", va="bottom", color="0.35")
    ax_m.set_xscale("log", base=2)
    ax_m.set_ylim(0, 1.38)
    ax_m.set_yticks(np.linspace(0, 1, 6))
    ax_m.set_xlabel("$d_k$")
    ax_m.set_ylabel(f"largest weight ({n_tok} tokens)")
    ax_m.set_title(f"mean of {cfg['draws']} draws, 10–90 % band")
    ax_m.legend(loc="upper left")

    i = len(data["gif_d_ks"]) - 1
    d = int(data["gif_d_ks"][i])
    x = np.arange(n_tok)
    ax_r.bar(x - 0.2, data["rows_raw"][i], width=0.4, color=RAW_COLOR, label="no scaling")
    ax_r.bar(x + 0.2, data["rows_scaled"][i], width=0.4, color=SCALED_COLOR, label="scaled")
    ax_r.set_ylim(0, 1.05)
    ax_r.set_xticks(np.arange(0, n_tok, 3))
    ax_r.set_xlabel("key token $j$")
    ax_r.set_ylabel("weight")
    ax_r.set_title(f"a median row at $d_k = {d}$")
    ax_r.grid(axis="x", visible=False)
    ax_r.legend(loc="upper left")
    fig.suptitle("Scaling by $1/\\sqrt{d_k}$: $Q, K$ i.i.d. $N(0, 1)$", fontsize=9)
    return fig


def _stats(m: np.ndarray) -> dict:
    return {"mean": float(m.mean()), "std": float(m.std(ddof=1)),
            "p10": float(np.percentile(m, 10)), "p90": float(np.percentile(m, 90))}


def summary(data: dict, cfg: dict) -> dict:
    d_ks = [int(d) for d in data["d_ks"]]
    ratios = data["variance"] / data["d_ks"]
    return {
        "variance": {str(d): float(v) for d, v in zip(d_ks, data["variance"])},
        "variance_over_d_k": {str(d): float(r) for d, r in zip(d_ks, ratios)},
        "max_abs_relative_variance_error": float(np.max(np.abs(ratios - 1))),
        "max_weight_unscaled": {str(d): _stats(m) for d, m in zip(d_ks, data["max_raw"])},
        "max_weight_scaled": {str(d): _stats(m) for d, m in zip(d_ks, data["max_scaled"])},
        "gif_frames": len(data["gif_d_ks"]),
    }


def extras(data: dict, cfg: dict, out_dir: str) -> list[str]:
    fig, axes = style.figure(1, 2, height=2.4)
    ax_l, ax_r = axes[0]
    n_tok = cfg["n_tokens"]

    def draw(i):
        d = int(data["gif_d_ks"][i])
        _bars(ax_l, data["rows_raw"][i], RAW_COLOR, f"no scaling: max {data['rows_raw'][i].max():.2f}")
        _bars(ax_r, data["rows_scaled"][i], SCALED_COLOR, f"scaled by $1/\\sqrt{{d_k}}$: max {data['rows_scaled'][i].max():.2f}")
        ax_l.set_ylabel("attention weight")
        for ax in (ax_l, ax_r):
            ax.axhline(1 / n_tok, color="0.5", linestyle=":", linewidth=0.8)
        fig.suptitle(f"one query over {n_tok} keys, $d_k = {d}$", fontsize=9)

    name = "scaling.gif"
    save_gif(fig, draw, range(len(data["gif_d_ks"])), os.path.join(out_dir, name))
    plt.close(fig)
    return [name]


FIGURE = Figure(
    title="Var(QK^T)=d_k and the largest weight of a 16-token row with/without 1/sqrt(d_k); GIF of one row",
    config=config,
    compute=compute,
    plot=plot,
    summary=summary,
    extras=extras,
)
