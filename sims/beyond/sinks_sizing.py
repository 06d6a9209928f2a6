"""Sizing runs for ``flow-sinks``: on which fixed training set does AdamW make attention sinks?

The question of :mod:`gradflow.sims.beyond.flow_sinks` (does the exact gradient flow make sinks?)
needs a control first: a **fixed** training set (a flow needs a fixed loss) on which the
authors' optimiser does make sinks. On 32 or 256 fixed sequences it does not (the model memorises
and learns no induction). This module trains the same Sec. 4 induction transformer
(:func:`gradflow.sims.beyond.flow_sinks.setup`: the authors' architecture, initialisation of run
seed 0, loss) with AdamW (``optax.adamw(1e-3, weight_decay=0.01)``, as the authors) on the full
batch of ``n_train`` fixed sequences, in float64, and records at log-spaced steps:

- the training loss;
- the induction accuracy on ``n_test`` fresh evaluation sequences (chance is about 1/49);
- the layer-2 BOS share of every head (:func:`gradflow.sims.sec4.train.bos_share`).

The criteria, fixed before the runs: a **sink head** has layer-2 BOS share > 0.9 (the authors'
measure); the model **learns the task** when the held-out induction accuracy is ≥ 0.5 (the quick
Sec. 4 runs, which make sinks on fresh data, reach 0.995).

``python -m gradflow.sims.beyond.sinks_sizing OUT.json N:D:H:STEPS [...]`` runs each size
(``n_train``, ``d_model``, ``n_heads``, AdamW steps) and writes every run's rows to ``OUT.json``
(atomically, after each run).
"""

from __future__ import annotations

import json
import sys
import time

import equinox as eqx
import jax
import numpy as np
import optax

from gradflow.io import atomic_write
from gradflow.sims.beyond import flow_sinks
from gradflow.sims.build import provenance
from gradflow.sims.sec4.train import measure

__all__ = ["SINK_SHARE", "LEARNED_ACC", "adamw_run", "main"]

SINK_SHARE = 0.9
"""A head whose layer-2 BOS share exceeds this is a sink head (the authors' measure)."""

LEARNED_ACC = 0.5
"""Held-out induction accuracy from which the model counts as having learnt the task (chance ≈ 1/49)."""


def adamw_run(n_train: int, d_model: int, n_heads: int, steps: int, *, n_test: int = 500, points: int = 8,
              lr: float | None = None, weight_decay: float | None = None) -> dict:
    """AdamW on the full batch of ``n_train`` fixed induction sequences from the flow's
    initialisation (:func:`gradflow.sims.beyond.flow_sinks.setup`, softmax attention, the figure's
    run seed); ``lr`` and ``weight_decay`` default to the figure's AdamW (``adam_lr``, ``adam_wd`` of
    :func:`gradflow.sims.beyond.flow_sinks.config`).

    **Returns:** a JSON-able dict: the sizes, ``seed``, ``wall_s`` (the AdamW run, its compilation included),
    ``n_params`` and ``rows``: per recorded step ``k`` (0 and about ``points`` log-spaced steps up
    to ``steps``) the training ``loss``, held-out ``acc`` and layer-2 ``bos`` shares per head;
    ``sink_heads`` and ``learned`` at the last step (criteria :data:`SINK_SHARE`, :data:`LEARNED_ACC`)."""
    cfg = {**flow_sinks.config(True), "d_model": d_model, "n_heads": n_heads, "n_train": n_train, "n_test": n_test}
    lr = cfg["adam_lr"] if lr is None else lr
    weight_decay = cfg["adam_wd"] if weight_decay is None else weight_decay
    run_cfg = flow_sinks.run_config(cfg, "softmax", True)
    loss, params0, args, static = flow_sinks.setup(run_cfg)
    record = flow_sinks._int_grid(steps, points)
    start = time.perf_counter()
    run = flow_sinks.descent(loss, params0, args, steps=steps, record=record, lr=lr,
                             optimizer=optax.adamw(lr, weight_decay=weight_decay))
    wall = time.perf_counter() - start
    rows = []
    for i, k in enumerate(record):
        m = measure(eqx.combine(jax.tree.map(lambda a: a[i], run.params), static), run_cfg)
        rows.append({"k": int(k), "loss": float(np.asarray(run.loss)[i]), "acc": float(m["induction_acc"]),
                     "bos": [round(float(b), 4) for b in m["bos_share"][-1]]})
    last = rows[-1]
    return {"n_train": n_train, "d_model": d_model, "n_heads": n_heads, "steps": steps, "n_test": n_test, "seed": cfg["seed"],
            "lr": lr, "weight_decay": weight_decay, "n_params": int(sum(x.size for x in jax.tree.leaves(params0))),
            "wall_s": round(wall, 1), "rows": rows,
            "sink_heads": int(sum(b > SINK_SHARE for b in last["bos"])), "learned": last["acc"] >= LEARNED_ACC}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        print("usage: python -m gradflow.sims.beyond.sinks_sizing OUT.json N_TRAIN:D_MODEL:N_HEADS:STEPS [...]",
              file=sys.stderr)
        return 2
    out, runs = argv[0], []
    for item in argv[1:]:
        n, d, h, steps = (int(v) for v in item.split(":"))
        runs.append(adamw_run(n, d, h, steps))
        print(json.dumps({k: v for k, v in runs[-1].items() if k != "rows"}), flush=True)
        text = json.dumps({"runs": runs, "provenance": provenance()}, indent=1)
        atomic_write(out, lambda f: f.write(text.encode()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
