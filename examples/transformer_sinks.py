"""Attention sinks in a small transformer: the BOS share per layer and head

Paper Sec. 4.1: a 2-layer, 4-head softmax transformer trained on the induction task
(`[BOS, t_1 … t_10, q, c]`: predict the token `c` that followed `q`'s earlier occurrence) grows
*attention sinks*: heads of the last layer that put almost all their attention on the BOS token.
The measurement is the authors' (`gradflow.sims.sec4.bos_share`): for each sequence, the attention
mass that rows 1…9 give to BOS over their total mass, averaged over sequences; a head with a
share above 0.9 is a sink head. Here it is re-computed by hand from the attention maps as a check.

This script trains the Sec. 4 model (the quick figures' size, `d_model = 64`) for 400 AdamW steps
of batch 128 at lr 3e-3 (about 30 s on 2 cores; the figures' quick setting is 1,200 steps at
lr 1e-3, about 3 min: run `python examples/transformer_sinks.py --quick-setting`), measures the
BOS share of every layer and head before training (the control: no sinks) and after, and prints
it beside the paper-scale run committed in `figures/transformer-runs/paper/` (d_model 128,
100k sequences × 10 epochs: all four layer-2 heads are sinks). The full grid is
`gradflow figures sinks-induction` (docs: Sec. 4 transformer experiments).
"""

import glob
import os
import sys

import jax
import matplotlib.pyplot as plt
import numpy as np

from gradflow.sims.sec4 import bos_share, induction_batch, induction_config, load_result, train

if "--quick-setting" in sys.argv:  # the quick figures' run: 8 epochs of 19.2k sequences, lr 1e-3
    cfg = induction_config("softmax", True, d_model=64, n_train=19_200, epochs=8, batch=128, evals_per_epoch=2)
else:
    cfg = induction_config("softmax", True, d_model=64, n_train=400 * 128, epochs=1, batch=128, evals_per_epoch=8,
                           lr=3e-3, n_test=500)
untrained, _ = train(cfg, progress=False, stop_after=0)  # the initial model (no step taken)
model, hist = train(cfg, progress=False)
print(f"trained {hist['step'][-1]} steps in {hist['train_seconds']:.0f} s; induction accuracy by evaluation: "
      f"{hist['acc']}")

seq = induction_batch(2026, 1000, vocab=cfg.vocab, n_context=cfg.n_context)  # fresh evaluation sequences
x, y = seq[:, :-1], seq[:, 1:]
first, last = cfg.sink_rows                                   # input rows 1 … 9


def measure(m):
    logits, maps = jax.vmap(m)(x)                             # maps: (N, layers, heads, T, T)
    maps = np.asarray(maps, np.float64)
    share = bos_share(maps, cfg.sink_rows)                    # (layers, heads)
    rows = maps[..., first:last + 1, :]                       # by hand: BOS column mass / row mass, per sequence
    by_hand = np.mean(rows[..., 0].sum(-1) / (rows.sum((-2, -1)) + 1e-9), axis=0)
    assert np.allclose(share, by_hand, rtol=1e-12, atol=1e-15)
    acc = float(np.mean(np.argmax(np.asarray(logits[:, -1]), -1) == y[:, -1]))
    return share, acc, maps


def table(name, share, acc):
    print(f"\n{name} (induction accuracy {acc:.3f}): BOS share, rows 1-{last}")
    for layer, row in enumerate(share):
        sinks = "  <- sink heads: " + ", ".join(str(h) for h in np.flatnonzero(row > 0.9)) if np.any(row > 0.9) else ""
        print(f"  layer {layer + 1}: " + "  ".join(f"head {h}: {v:.3f}" for h, v in enumerate(row)) + sinks)


share0, acc0, _ = measure(untrained)
share1, acc1, maps1 = measure(model)
table("untrained (control)", share0, acc0)
table("trained here", share1, acc1)
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
committed = sorted(glob.glob(os.path.join(root, "figures/transformer-runs/paper/induction-softmax-norm-s0-*.npz")))
paper = [r for r in map(load_result, committed) if r["config"]["n_heads"] == 4]
if paper:
    table("paper scale, committed result (d_model 128, 10 epochs)", paper[0]["bos_share"], paper[0]["induction_acc"])

assert share0[-1].max() < 0.5, "the untrained model has no sink head"
assert share1[-1].max() > share0[-1].max() + 0.2, "training concentrates a last-layer head on BOS"

os.makedirs("out/examples", exist_ok=True)
panels = [("untrained", share0), ("trained here", share1)] + ([("paper scale", paper[0]["bos_share"])] if paper else [])
fig, axes = plt.subplots(1, len(panels) + 2, figsize=(3.1 * (len(panels) + 2), 3.0), layout="constrained")
for ax, (name, share) in zip(axes, panels):
    im = ax.imshow(share, vmin=0, vmax=1, cmap="viridis")
    for (i, j), v in np.ndenumerate(share):
        ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="w" if v < 0.6 else "k", fontsize=8)
    ax.set(title=f"BOS share: {name}", xlabel="head", ylabel="layer", xticks=range(share.shape[1]),
           yticks=range(share.shape[0]), yticklabels=[str(i + 1) for i in range(share.shape[0])])
fig.colorbar(im, ax=axes[len(panels) - 1], shrink=0.8)
ax = axes[len(panels)]
bos = np.array(hist["bos"], float)                           # (evaluations, heads): layer 2
for h in range(bos.shape[1]):
    ax.plot(hist["step"], bos[:, h], marker="o", ms=3, label=f"head {h}")
ax.axhline(0.9, color="k", ls=":", lw=1)
ax.set(title="layer 2 BOS share in training", xlabel="step", ylim=(0, 1))
ax.legend(fontsize=7)
ax = axes[-1]
head = int(np.argmax(share1[-1]))
ax.imshow(maps1[0, -1, head], cmap="magma", vmin=0, vmax=1)
ax.set(title=f"layer 2 head {head}, one sequence", xlabel="key (0 = BOS)", ylabel="query",
       xticks=range(0, x.shape[1], 2), yticks=range(0, x.shape[1], 2))
fig.savefig("out/examples/transformer_sinks.png", dpi=130)
print("\nplot: out/examples/transformer_sinks.png")
