"""``softmax-temperature``: a five-word softmax and its temperature knob (docs: Figures, "Attention basics").

Left: the weights of "it" over (animal, the, street, because, tired) for the scores
(5.2, −1.3, 2.8, 0.4, 3.6) — ≈ (0.768, 0.001, 0.070, 0.006, 0.155). Middle: the same row of
``softmax(a / T)`` for ``T`` from 0.1 to 10 (``T < 1`` sharpens, ``T > 1`` flattens). Right:
its entropy against ``T``, from ≈ 0 to ``log 5``.
"""

from __future__ import annotations

import numpy as np

from gradflow.sims import style
from gradflow.sims.build import Figure
from gradflow.sims.basics.attention_basics import FIVE_SCORES, FIVE_WORDS, softmax_entropy, softmax_weights


def config(quick: bool) -> dict:
    return {
        "seed": 0,  # nothing random; kept for the common record
        "scores": list(FIVE_SCORES),
        "words": list(FIVE_WORDS),
        "t_min": 0.1,
        "t_max": 10.0,
        "n_temperatures": 61 if quick else 301,
    }


def compute(cfg: dict, progress: bool = False) -> dict[str, np.ndarray]:
    scores = np.asarray(cfg["scores"], dtype=np.float64)
    temps = np.geomspace(cfg["t_min"], cfg["t_max"], cfg["n_temperatures"])
    weights = np.stack([np.asarray(softmax_weights(scores, t)) for t in temps])
    entropy = np.asarray([float(softmax_entropy(scores, t)) for t in temps])
    return {
        "scores": scores,
        "weights_T1": np.asarray(softmax_weights(scores, 1.0)),
        "temperatures": temps,
        "weights": weights,
        "entropy": entropy,
    }


def plot(data: dict, cfg: dict):
    fig, axes = style.figure(1, 3, height=2.3)
    ax_w, ax_t, ax_h = axes[0]
    words = cfg["words"]
    cols = style.colors(len(words))
    w1 = data["weights_T1"]
    x = np.arange(len(words))
    ax_w.bar(x, w1, color=cols)
    for i, w in enumerate(w1):
        ax_w.text(i, w + 0.02, f"{w:.3f}", ha="center", va="bottom", fontsize=style.NOTE)
    ax_w.set_xticks(x, [f"{w} ({s:+.1f})" for w, s in zip(words, data["scores"])], fontsize=style.NOTE,
                    rotation=35, ha="right", rotation_mode="anchor")
    ax_w.set_ylim(0, 1.0)
    ax_w.set_ylabel("attention weight")
    ax_w.set_title('"it" over five words, $T = 1$')
    ax_w.grid(axis="x", visible=False)

    temps = data["temperatures"]
    for i, w in enumerate(words):
        ax_t.plot(temps, data["weights"][:, i], color=cols[i], label=w)
    ax_t.axvline(1.0, color="0.5", linewidth=0.6, linestyle=":")
    ax_t.set_xscale("log")
    ax_t.set_xlabel("temperature $T$")
    ax_t.set_ylabel("softmax$(a/T)_i$")
    ax_t.set_ylim(-0.02, 1.02)
    ax_t.set_title("$T<1$ sharpens, $T>1$ flattens")
    fig.legend(*ax_t.get_legend_handles_labels(), loc="outside lower center", ncol=len(words), title="token (panels 1–2)")

    n = len(words)
    ax_h.plot(temps, data["entropy"], color="k")
    ax_h.axhline(np.log(n), color="0.5", linewidth=0.8, linestyle="--")
    ax_h.text(temps[0], np.log(n) - 0.04, f"uniform: $\\log {n}$", fontsize=style.NOTE, va="top", color="0.3")
    ax_h.axvline(1.0, color="0.5", linewidth=0.6, linestyle=":")
    ax_h.set_xscale("log")
    ax_h.set_ylim(-0.05, np.log(n) + 0.12)
    ax_h.set_xlabel("temperature $T$")
    ax_h.set_ylabel("entropy (nats)")
    ax_h.set_title("entropy of the row")
    fig.suptitle("Softmax and temperature: scores $a = (5.2, -1.3, 2.8, 0.4, 3.6)$", fontsize=9)
    return fig


def summary(data: dict, cfg: dict) -> dict:
    temps = data["temperatures"]
    return {
        "weights_T1": {w: float(v) for w, v in zip(cfg["words"], data["weights_T1"])},
        "weights_T1_sum": float(np.sum(data["weights_T1"])),
        "top_weight_T_min": float(data["weights"][0].max()),
        "top_weight_T_max": float(data["weights"][-1].max()),
        "entropy_T_min": float(data["entropy"][0]),
        "entropy_T1": float(data["entropy"][np.argmin(np.abs(temps - 1.0))]),
        "entropy_T_max": float(data["entropy"][-1]),
        "log_n": float(np.log(len(cfg["words"]))),
        "entropy_increasing_in_T": bool(np.all(np.diff(data["entropy"]) > 0)),
    }


FIGURE = Figure(
    title="Five-word softmax (5.2, -1.3, 2.8, 0.4, 3.6) and the same row across temperatures 0.1..10",
    config=config,
    compute=compute,
    plot=plot,
    summary=summary,
)
