"""``it-animal``: does "it" attend to "animal" without learning? (docs: Figures, "Attention basics")

The attention row of "it" in "the animal did not cross the street because it was too tired",
``softmax(q_it Kᵀ/√d_k)``, three ways:

(a) raw word embeddings, ``Q = K = X`` (no projection), as attention primers do with GloVe-50. No
    pretrained embeddings are available here (no network, no run-time download), so ``X`` is
    **deterministic random**: i.i.d. ``N(0, embed_std²)`` entries, ``d = 50``, drawn from
    ``jax.random.PRNGKey(seed)`` over a fixed vocabulary;
(b) random (untrained) projections ``W_Q, W_K ~ N(0, 1/d)`` of shape ``(d, d_k)``;
(c) the projections of (b) trained with optax Adam on a synthetic co-reference toy task
    (:func:`gradflow.sims.basics.attention_basics.coreference_dataset`: "the X did not V the Y because it was
    too ADJ", one of X, Y an animal noun, "it" → the animal noun), embeddings fixed. The test
    sentence itself is held out of training, and so is a random 20 % of the other sentences
    (their accuracy is reported). The query sees only the embedding of "it", so the trained
    projection learns "it → the animate noun", not a full Winograd resolution.

The spread over draws (other embedding seeds for (a), other projection seeds for (b), other
initial projections for (c)) is in the summary and the panel titles.
"""

from __future__ import annotations

import jax
import numpy as np

import gradflow

from gradflow.sims import style
from gradflow.sims._common import phases
from gradflow.sims.build import Figure
from gradflow.sims.basics.attention_basics import (
    ANIMAL_INDEX,
    SENTENCE,
    coreference_dataset,
    embeddings,
    encode,
    it_row,
    random_projection,
    train_projection,
)

METHODS = ("raw", "random", "trained")


def config(quick: bool) -> dict:
    return {
        "seed": 3,
        "d": 50,
        "embed_std": 0.6,
        "d_k": 16,
        "train_sentences": 512,
        "holdout_fraction": 0.2,
        "steps": 100 if quick else 300,
        "learning_rate": 0.01,
        "draws": 100 if quick else 1000,
        "train_seeds": 2 if quick else 5,
    }


def _rank(row: np.ndarray, i: int) -> int:
    """1-based rank of position ``i`` in ``row`` (1 = largest weight)."""
    return int(1 + np.sum(row > row[i]))


def compute(cfg: dict, progress: bool = False) -> dict[str, np.ndarray]:
    seed, d, d_k = cfg["seed"], cfg["d"], cfg["d_k"]
    emb = embeddings(seed, d, cfg["embed_std"])
    x = encode([SENTENCE], emb)[0]
    sentences, targets = coreference_dataset()
    rng = np.random.default_rng(seed)
    others = np.asarray([i for i, s in enumerate(sentences) if s != SENTENCE])
    rng.shuffle(others)
    n_hold = int(round(cfg["holdout_fraction"] * len(others)))
    hold, train = others[:n_hold], others[n_hold:][: cfg["train_sentences"]]
    x_train = encode([sentences[i] for i in train], emb)
    x_hold = encode([sentences[i] for i in hold], emb)
    key = jax.random.PRNGKey(seed)
    k_proj = jax.random.fold_in(key, 1)
    with phases(["raw", "random", "trained", "spread"], progress, "it-animal") as advance:
        rows = {"raw": np.asarray(it_row({}, x))}
        advance("raw")
        p0 = random_projection(jax.random.fold_in(k_proj, 0), d, d_k)
        rows["random"] = np.asarray(it_row(p0, x))
        advance("random")
        trained = []
        for s in range(cfg["train_seeds"]):
            p_init = random_projection(jax.random.fold_in(k_proj, s), d, d_k)
            p, losses = train_projection(p_init, x_train, targets[train], steps=cfg["steps"],
                                         learning_rate=cfg["learning_rate"])
            trained.append((p, losses))
        p_c, loss_curve = trained[0]
        rows["trained"] = np.asarray(it_row(p_c, x))
        hold_rows = np.asarray(jax.vmap(lambda xi: it_row(p_c, xi))(x_hold))
        advance("trained")
        w_raw = np.asarray([it_row({}, encode([SENTENCE], embeddings(seed + 1 + i, d, cfg["embed_std"]))[0])
                            for i in range(cfg["draws"])])
        w_rand = np.asarray([it_row(random_projection(jax.random.fold_in(k_proj, i), d, d_k), x)
                             for i in range(cfg["draws"])])
        w_trained = np.asarray([it_row(p, x) for p, _ in trained])
        advance("spread")
    return {
        "row_raw": rows["raw"],
        "row_random": rows["random"],
        "row_trained": rows["trained"],
        "draws_raw": w_raw,  # (draws, 12): other embedding seeds
        "draws_random": w_rand,  # (draws, 12): other projection seeds
        "draws_trained": w_trained,  # (train_seeds, 12): other initial projections
        "loss": loss_curve,
        "holdout_accuracy": np.asarray(np.mean(hold_rows.argmax(axis=1) == targets[hold])),
        "holdout_target_weight": np.asarray(np.mean(hold_rows[np.arange(len(hold)), targets[hold]])),
    }


_TITLES = {
    "raw": "(a) raw embeddings, $Q = K = X$",
    "random": "(b) random $W_Q, W_K$",
    "trained": "(c) $W_Q, W_K$ trained (toy task)",
}


def plot(data: dict, cfg: dict):
    fig, axes = style.figure(1, 3, height=2.9, sharey=True)
    n = len(SENTENCE)
    y = np.arange(n)
    for ax, m in zip(axes[0], METHODS):
        row = data[f"row_{m}"]
        cols = ["tab:orange" if i == ANIMAL_INDEX else ("0.35" if SENTENCE[i] == "it" else "0.7") for i in range(n)]
        ax.barh(y, row, color=cols)
        ax.set_xlim(0, 1.18)
        ax.set_xticks([0, 0.5, 1.0])
        spread = data[f"draws_{m}"][:, ANIMAL_INDEX]
        ax.set_title(_TITLES[m], fontsize=7.5)
        ax.text(1.16, -2.0,
                f'"animal": {row[ANIMAL_INDEX]:.3f}, rank {_rank(row, ANIMAL_INDEX)}/{n}\n'
                f"over {len(spread)} draws: {spread.mean():.3f} ± {spread.std():.3f}",
                fontsize=style.NOTE, ha="right", va="top")
        if m == "raw":
            ax.text(1 / n + 0.02, n - 0.6, f"uniform 1/{n}", fontsize=style.NOTE, color="0.4", va="bottom")
        ax.axvline(1 / n, color="0.5", linestyle=":", linewidth=0.8)
        ax.set_xlabel('attention of "it"')
        ax.grid(axis="y", visible=False)
    axes[0][0].set_yticks(y, SENTENCE, fontsize=7)
    axes[0][0].invert_yaxis()
    axes[0][0].set_ylim(n - 0.5, -2.2)
    fig.suptitle('"it" → "animal"? No pretrained embeddings: seeded random '
                 f"$N(0, {cfg['embed_std']}^2)$ embeddings, $d = {cfg['d']}$, $d_k = {cfg['d_k']}$",
                 fontsize=8)
    return fig


def summary(data: dict, cfg: dict) -> dict:
    out = {
        "embeddings": (f"deterministic random, i.i.d. N(0, {cfg['embed_std']}^2), d={cfg['d']}, "
                       f"jax.random.PRNGKey({cfg['seed']}); no pretrained embeddings (none downloadable here)"),
        "projections": f"random W_Q, W_K ~ N(0, 1/d), d_k={cfg['d_k']}",
        "training": (f"optax adam lr={cfg['learning_rate']}, {cfg['steps']} full-batch steps on "
                     f"{cfg['train_sentences']} toy co-reference sentences; test sentence held out"),
        "uniform_weight": 1 / len(SENTENCE),
        "final_training_loss": float(data["loss"][-1]),
        "holdout_accuracy": float(data["holdout_accuracy"]),
        "holdout_target_weight": float(data["holdout_target_weight"]),
    }
    for m in METHODS:
        row, draws = data[f"row_{m}"], data[f"draws_{m}"]
        w = draws[:, ANIMAL_INDEX]
        ranks = [_rank(r, ANIMAL_INDEX) for r in draws]
        out[m] = {
            "animal_weight": float(row[ANIMAL_INDEX]),
            "animal_rank": _rank(row, ANIMAL_INDEX),
            "top_word": " / ".join(SENTENCE[i] for i in np.flatnonzero(gradflow.winners(row))),
            "it_self_weight": float(row[SENTENCE.index("it")]),
            "draws": int(len(w)),
            "animal_weight_mean": float(w.mean()),
            "animal_weight_std": float(w.std()),
            "animal_rank_mean": float(np.mean(ranks)),
            "animal_top_fraction": float(np.mean(np.asarray(ranks) == 1)),
        }
    return out


FIGURE = Figure(
    title='Attention of "it" on "animal": (a) raw random embeddings, (b) random Q/K, (c) trained on a toy task',
    config=config,
    compute=compute,
    plot=plot,
    summary=summary,
)
