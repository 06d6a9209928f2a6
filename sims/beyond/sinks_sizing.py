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

**A second task, where attention is of no use** (``task="zipf"``; Gu et al., "When Attention
Sink Emerges in Language Models", 2024, and Guo et al., "Active-Dormant Attention Heads", 2024,
report sinks in small models on data of this kind): sequences ``[BOS, u_1 … u_12]`` with the
``u_i`` drawn independently from a Zipf law over the content ids (``P(k) ∝ 1/k``, ``k = 1 …
vocab − 1``; :func:`zipf_batch`), the same model (input ``[BOS, u_1 … u_11]``, no shifted query
ids), trained on the mean next-token cross-entropy of all 12 positions. The Bayes-optimal
prediction is the unigram law, whatever the context, so attention can only help a model memorise
its training set. The criteria, fixed before the runs: a sink head as above; the model **learns
the task** when its held-out cross-entropy is within :data:`LEARNED_EXCESS` nats of the Zipf law's
entropy (:func:`zipf_entropy`: 3.183 nats at ``vocab = 50``) — it predicts the law rather than
memorising.

**A third task, where a head is needed only sometimes** (``task="backcopy"``; after the
Bigram-Backcopy task of Guo et al., "Active-Dormant Attention Heads: Mechanistically Demystifying
Extreme-Token Phenomena in LLMs", 2024, who report sinks on it in small models; the transition law,
the trigger set and the sizes here are this project's choices, not theirs): ``[BOS, x_1 … x_12]``
with ``x_1`` from the Zipf law above and each next token from a fixed bigram law (row ``a``: the
Zipf law over a permutation of the content ids drawn for ``a``, :data:`BACKCOPY_LAW_SEED`), except
after a trigger token (ids ``1 … BACKCOPY_TRIGGERS``), where it copies the token *before* the
trigger (:func:`backcopy_batch`). A head must copy at the trigger positions and has nothing to do
elsewhere. Same model and loss as the Zipf task; the model **learns the task** when its held-out
accuracy on the copied tokens is at least :data:`LEARNED_ACC` (fixed before the runs, as the
induction task's).

Command line:

- ``python -m gradflow.sims.beyond.sinks_sizing OUT.json N:D:H:STEPS[:TASK[:KERNEL[:SEED]]] [...]``
  runs AdamW on each size (``n_train``, ``d_model``, ``n_heads``, steps; a task of :data:`TASKS`,
  default ``induction``; ``softmax`` or ``linear`` attention; the run seed, default 0) and appends
  every run, with its rows and provenance, to ``OUT.json`` (atomically, after each run; the runs
  already there are kept);
- ``--flow OUT.json N:D:H:BUDGET_S:TASK[:KERNEL[:SEED]] [GD_LR ...]`` runs :func:`flow_run` and
  appends it to ``OUT.json``'s ``flows``;
- ``--docs`` writes the flow-against-AdamW table of docs/flow-sinks.md and its figure from the
  committed JSON (:func:`write_docs`, :func:`write_figure`); ``--check`` exits 1 if the table is stale.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from gradflow.io import atomic_write
from gradflow.sims.beyond import flow_sinks
from gradflow.sims.build import provenance
from gradflow.internal import bad_arg
from gradflow.sims.sec4.tasks import BOS
from gradflow.sims.sec4.train import _model, _seeds, bos_share, measure

__all__ = ["SINK_SHARE", "LEARNED_ACC", "LEARNED_EXCESS", "TASKS", "zipf_batch", "backcopy_batch", "zipf_entropy",
           "zipf_setup", "adamw_run", "flow_run", "control_tables", "control_figure", "write_docs", "write_figure",
           "main"]

TASKS = ("induction", "zipf", "backcopy")
"""The sizing tasks: the Sec. 4 induction task, BOS + Zipf unigrams (attention of no use) and
Bigram-Backcopy (a head needed only after trigger tokens)."""

BACKCOPY_TRIGGERS = 5
"""Backcopy task: the trigger tokens are the content ids ``1 … 5``."""

BACKCOPY_LAW_SEED = 12345
"""Backcopy task: the seed of the bigram law's row permutations (one law for all data seeds)."""

SINK_SHARE = 0.9
"""A head whose layer-2 BOS share exceeds this is a sink head (the authors' measure)."""

LEARNED_ACC = 0.5
"""Held-out accuracy (induction: at the query; backcopy: on the copied tokens) from which the model
counts as having learnt the task (chance ≈ 1/49), judged at the last step."""

LEARNED_EXCESS = 0.05
"""Zipf task: held-out cross-entropy at most this many nats above the Zipf law's entropy, at the last
step, counts as having learnt the task (at the initialisation it is 0.8–1.0 nats above)."""

ZIPF_LENGTH = 13
"""Zipf task: tokens per drawn sequence (BOS and 12 draws): the model reads the first 12, as the
induction task's, and predicts the next token at each of them."""


def _zipf_law(vocab: int) -> tuple[np.ndarray, np.ndarray]:
    k = np.arange(1, vocab)
    p = 1.0 / k
    return k, p / p.sum()


def _check_sizes(n_seq, vocab, length) -> None:
    for name, val, low in (("n_seq", n_seq, 1), ("vocab", vocab, 2), ("length", length, 2)):
        if not (isinstance(val, (int, np.integer)) and not isinstance(val, bool) and val >= low):
            raise bad_arg(name, val, f"an integer >= {low}")


def zipf_batch(seed: int, n_seq: int, *, vocab: int = 50, length: int = ZIPF_LENGTH) -> np.ndarray:
    """``(n_seq, length)`` int32 sequences ``[BOS, u_1 … u_{length−1}]``, the ``u_i`` independent
    with ``P(u = k) ∝ 1/k`` over the content ids ``k = 1 … vocab − 1`` (``BOS = 0``), from a NumPy
    generator seeded with ``seed``. Raises :class:`GradflowValueError` for ``n_seq < 1``,
    ``vocab < 2`` or ``length < 2``."""
    _check_sizes(n_seq, vocab, length)
    k, p = _zipf_law(vocab)
    seq = np.empty((n_seq, length), np.int32)
    seq[:, 0] = BOS
    seq[:, 1:] = np.random.default_rng(seed).choice(k, size=(n_seq, length - 1), p=p)
    return seq


def backcopy_batch(seed: int, n_seq: int, *, vocab: int = 50, length: int = ZIPF_LENGTH,
                   triggers: int = BACKCOPY_TRIGGERS) -> tuple[np.ndarray, np.ndarray]:
    """Bigram-Backcopy sequences (module docstring): ``(seq, copied)``, ``seq (n_seq, length)``
    int32 ``[BOS, x_1 … x_{length−1}]`` and ``copied (n_seq, length)`` bool, true where the token
    is a copy (it follows a trigger ``x_{i−1} ≤ triggers`` at ``i ≥ 3`` and equals ``x_{i−2}``).
    ``x_1`` follows the Zipf law; each other token the bigram law of its predecessor
    (:data:`BACKCOPY_LAW_SEED`) unless it is a copy. Raises :class:`GradflowValueError` as
    :func:`zipf_batch`, and for ``triggers`` outside ``[1, vocab − 2]``."""
    _check_sizes(n_seq, vocab, length)
    if not (isinstance(triggers, (int, np.integer)) and 1 <= triggers <= vocab - 2):
        raise bad_arg("triggers", triggers, f"an integer in [1, {vocab - 2}]")
    k, p = _zipf_law(vocab)
    law = np.random.default_rng(BACKCOPY_LAW_SEED)
    rows = np.stack([k[law.permutation(len(k))] for _ in range(vocab)])  # rows[a]: ids by rank after a
    cdf = np.cumsum(p)
    rng = np.random.default_rng(seed)
    seq = np.zeros((n_seq, length), np.int32)
    copied = np.zeros((n_seq, length), bool)
    seq[:, 1] = rng.choice(k, size=n_seq, p=p)
    for i in range(2, length):
        rank = np.minimum(np.searchsorted(cdf, rng.random(n_seq), side="right"), len(k) - 1)
        nxt = rows[seq[:, i - 1], rank]
        copy = (seq[:, i - 1] <= triggers) & (i >= 3)
        seq[:, i] = np.where(copy, seq[:, i - 2], nxt)
        copied[:, i] = copy
    return seq, copied


def zipf_entropy(vocab: int = 50) -> float:
    """The entropy (nats) of :func:`zipf_batch`'s law: the least expected next-token cross-entropy."""
    _, p = _zipf_law(vocab)
    return float(-(p * np.log(p)).sum())


def _zipf_loss(static):
    def loss(p, args):
        logits, _ = jax.vmap(eqx.combine(p, static))(args[0])
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, args[1]))
    return loss


def _task_batch(task: str, seed: int, n: int, vocab: int):
    """``(seq, copied)`` of ``task`` (``zipf``: no copies)."""
    if task == "backcopy":
        return backcopy_batch(seed, n, vocab=vocab)
    seq = zipf_batch(seed, n, vocab=vocab)
    return seq, np.zeros(seq.shape, bool)


def zipf_setup(run_cfg, task: str = "zipf"):
    """The Zipf task's ``(loss, params0, args, static)`` as :func:`flow_sinks.setup` returns the
    induction task's: the model of ``run_cfg`` (an induction ``RunConfig`` with
    ``shift_query=False``) at its initialisation, ``args = (x, y)`` the ``n_train`` training
    sequences' inputs and next tokens (train seed of ``run_cfg``), ``loss`` the mean next-token
    cross-entropy over all positions. ``task="backcopy"``: the same on :func:`backcopy_batch`'s sequences."""
    train_seed, _ = _seeds(run_cfg)
    seq, _ = _task_batch(task, train_seed, run_cfg.n_train, run_cfg.vocab)
    params, static = eqx.partition(_model(run_cfg), eqx.is_inexact_array)
    params = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), params)
    return _zipf_loss(static), params, (jnp.asarray(seq[:, :-1]), jnp.asarray(seq[:, 1:])), static


@eqx.filter_jit
def _evaluate(model, x, y):
    """``(mean next-token cross-entropy, argmax predictions, attention maps)`` of ``model`` on ``x``, ``y`` (jitted)."""
    logits, maps = jax.vmap(model)(x)
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, y)), jnp.argmax(logits, -1), maps


def _zipf_measure(model, run_cfg, task: str = "zipf") -> dict:
    """Held-out cross-entropy, accuracy on the copied tokens (``nan`` without copies) and the BOS
    shares ``(L, H)`` on ``n_test`` fresh sequences of ``task`` (test seed)."""
    _, test_seed = _seeds(run_cfg)
    seq, copied = _task_batch(task, test_seed, run_cfg.n_test, run_cfg.vocab)
    x, y, copy = seq[:, :-1], seq[:, 1:], copied[:, 1:]
    test_loss, pred, maps = _evaluate(model, jnp.asarray(x), jnp.asarray(y))
    hit = np.asarray(pred) == y
    acc = float(hit[copy].mean()) if copy.any() else float("nan")
    return {"test_loss": float(test_loss), "copy_acc": acc, "bos_share": bos_share(np.asarray(maps), run_cfg.sink_rows)}


def adamw_run(n_train: int, d_model: int, n_heads: int, steps: int, *, n_test: int = 500, points: int = 8,
              lr: float | None = None, weight_decay: float | None = None, task: str = "induction",
              kernel: str = "softmax", normalization: bool = True, seed: int = 0) -> dict:
    """AdamW on the full batch of ``n_train`` fixed sequences of ``task`` (:data:`TASKS`) from the
    flow's initialisation (:func:`gradflow.sims.beyond.flow_sinks.setup`, ``kernel`` attention, the
    run seed ``seed``, 0 the figure's; for ``zipf`` and ``backcopy``, :func:`zipf_setup`); ``lr`` and ``weight_decay`` default to the
    figure's AdamW (``adam_lr``, ``adam_wd`` of :func:`gradflow.sims.beyond.flow_sinks.config`).

    **Returns:** a JSON-able dict: the sizes, ``task``, ``kernel``, ``seed``, ``wall_s`` (the AdamW
    run, its compilation included), ``n_params`` and ``rows``: per recorded step ``k`` (0 and about
    ``points`` log-spaced steps up to ``steps``) the training ``loss``, the last layer's ``bos``
    shares per head, ``bos_layers`` (every layer's) and, for ``induction``, the held-out ``acc``;
    for ``zipf``, the held-out ``test_loss`` and its ``excess`` over :func:`zipf_entropy`; for
    ``backcopy``, the held-out ``test_loss`` and ``acc`` on the copied tokens. ``sink_heads`` and ``learned`` at the last step
    (criteria :data:`SINK_SHARE` and :data:`LEARNED_ACC` / :data:`LEARNED_EXCESS`).

    **Raises:** :class:`GradflowValueError` for a ``task`` not in :data:`TASKS`."""
    run_cfg, loss, params0, args, static = _setting(task, n_train, d_model, n_heads, n_test, kernel, normalization, seed)
    cfg = flow_sinks.config(True)
    lr = cfg["adam_lr"] if lr is None else lr
    weight_decay = cfg["adam_wd"] if weight_decay is None else weight_decay
    record = flow_sinks._int_grid(steps, points)
    start = time.perf_counter()
    run = flow_sinks.descent(loss, params0, args, steps=steps, record=record, lr=lr,
                             optimizer=optax.adamw(lr, weight_decay=weight_decay))
    wall = time.perf_counter() - start
    rows = [_row(task, _at(run, i, static), run_cfg, k=int(k), loss=float(np.asarray(run.loss)[i]))
            for i, k in enumerate(record)]
    last = rows[-1]
    learned = last["excess"] <= LEARNED_EXCESS if task == "zipf" else last["acc"] >= LEARNED_ACC
    return {"task": task, "kernel": kernel, "normalization": normalization, "n_train": n_train, "d_model": d_model,
            "n_heads": n_heads, "steps": steps, "n_test": n_test, "seed": run_cfg.seed,
            "lr": lr, "weight_decay": weight_decay, "n_params": int(sum(x.size for x in jax.tree.leaves(params0))),
            "wall_s": round(wall, 1), "rows": rows,
            "sink_heads": int(sum(b > SINK_SHARE for b in last["bos"])), "learned": bool(learned)}


def _setting(task: str, n_train: int, d_model: int, n_heads: int, n_test: int, kernel: str = "softmax",
             normalization: bool = True, seed: int = 0):
    """``(run_cfg, loss, params0, args, static)`` of one sizing setting (as :func:`adamw_run` builds
    it); ``seed`` the run seed (the initialisation and the training and test sequences)."""
    if task not in TASKS:
        raise bad_arg("task", task, f"one of {list(TASKS)}")
    cfg = {**flow_sinks.config(True), "d_model": d_model, "n_heads": n_heads, "n_train": n_train, "n_test": n_test,
           "seed": seed}
    run_cfg = flow_sinks.run_config(cfg, kernel, normalization)
    if task != "induction":
        run_cfg = dataclasses.replace(run_cfg, shift_query=False)
        return (run_cfg, *zipf_setup(run_cfg, task))
    return (run_cfg, *flow_sinks.setup(run_cfg))


def _row(task: str, model, run_cfg, **head) -> dict:
    """One recorded point: ``head`` (e.g. ``t``, ``loss``) and the held-out measures of :func:`adamw_run`'s rows."""
    row = dict(head)
    if task == "induction":
        m = measure(model, run_cfg)
        row["acc"] = float(m["induction_acc"])
    else:
        m = _zipf_measure(model, run_cfg, task)
        row["test_loss"] = m["test_loss"]
        row |= {"acc": m["copy_acc"]} if task == "backcopy" else {"excess": m["test_loss"] - zipf_entropy(run_cfg.vocab)}
    return row | {"bos": [round(float(b), 4) for b in m["bos_share"][-1]],
                  "bos_layers": [[round(float(b), 4) for b in layer] for layer in m["bos_share"]]}


FLOW_FRACTIONS = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
"""Save points of each call of :func:`flow_run`'s chain, as fractions of the call's span."""


def _at(sol, i, static):
    """The model of save point ``i`` of ``sol`` (a :class:`gradflow.Solution` of the parameters)."""
    return eqx.combine(jax.tree.map(lambda a: a[i], sol.params), static)


def flow_run(task: str, n_train: int, d_model: int, n_heads: int, budget_s: float, *, solver: str = "rkc",
             rtol: float = 1e-4, t1: float = 1e12, n_test: int = 500, delta0: float = 1.0,
             gd_lrs: tuple[float, ...] = (), gd_points: int = 12, kernel: str = "softmax", normalization: bool = True,
             seed: int = 0) -> dict:
    """The gradient flow (:func:`gradflow.integrate`, ``solver`` at ``rtol``, ``atol = rtol/100``,
    no rest stop) of one sizing setting from the same initialisation and training set as
    :func:`adamw_run`, as a chain of calls, then plain GD (``optax.sgd``) at each step size in
    ``gd_lrs`` to the flow time the flow reached. GD at ``η`` and ``η/2`` approaching the flow is
    the evidence that GD tracks the flow there.

    **The chain.** Each call resumes at the flow time where the last ended (``t0``; the solver's
    own state, e.g. ``rkc``'s spectral estimate and step size, starts afresh each call); the first
    spans ``delta0``, each next one twice the last, up to ``t1``. After each call the next one's
    wall clock is predicted as the last call's times the growth from the call before
    (``call² / previous call``); the chain stops once that exceeds what is left of ``budget_s``
    seconds of the calls' wall clock (compilation included, the held-out measures at the save
    points not), or at ``t1``, or when a call ends with a status other than ``ok`` (then ``t_end``
    is its last valid save point, and GD runs to there).

    **Returns:** a JSON-able dict: the setting, ``solver``, ``rtol``, ``wall_s`` (the calls),
    ``wall_with_measures_s``, ``steps``, ``calls`` and ``call_log`` (per call ``t0``, ``t1``
    reached, ``steps``, ``wall_s``), ``phases`` (the solvers the calls ran), ``status`` (of the
    last call), ``t_end`` and ``rows`` (per save point: flow time ``t``, training ``loss`` and the
    held-out measures of :func:`adamw_run`'s rows); ``gd``: per step size, ``lr``, ``steps``,
    ``wall_s`` and its rows (``t = lr·k``).

    **Raises:** :class:`GradflowValueError` for a ``task`` not in :data:`TASKS`; ``RuntimeError`` if
    a call saves no valid point."""
    import gradflow

    run_cfg, loss, params0, args, static = _setting(task, n_train, d_model, n_heads, n_test, kernel, normalization, seed)
    start = time.perf_counter()
    theta, t, delta, steps, rows, phases, status = params0, 0.0, float(delta0), 0, [], [], "running"
    log: list[dict] = []
    flow_s = 0.0  # the integrate calls' wall clock: the budget (the held-out measures are not counted)
    while True:
        c0 = time.perf_counter()
        last = delta >= t1 - t
        end = t1 if last else t + delta
        sol = gradflow.integrate(loss, theta, t0=t, t1=end, ts=t + (end - t) * FLOW_FRACTIONS, args=args,
                                 solver=solver, rtol=rtol, atol=rtol / 100, rest_stop=False)
        jax.block_until_ready(sol.params)
        call_s = time.perf_counter() - c0
        flow_s += call_s
        steps += int(sol.num_steps)
        phases += [ph for ph in sol.metadata.get("phases", solver).split(",") if ph not in phases]
        valid = np.flatnonzero(np.asarray(sol.valid))
        if not valid.size:
            raise RuntimeError(f"flow_run: the call from t = {t:g} saved no valid point (status {sol.status})")
        for i in valid[1:] if rows else valid:
            rows.append(_row(task, _at(sol, i, static), run_cfg, t=float(sol.t[i]), loss=float(sol.loss[i])))
        status = str(sol.status)
        theta = jax.tree.map(lambda a: np.asarray(a[valid[-1]]), sol.params)
        t = end if status == "ok" else float(sol.t[valid[-1]])
        log.append({"t0": float(log[-1]["t1"]) if log else 0.0, "t1": t, "steps": int(sol.num_steps),
                    "wall_s": round(call_s, 1)})
        print(json.dumps({"t": t, "loss": rows[-1]["loss"], "bos": rows[-1]["bos"], "call_s": round(call_s, 1),
                          "status": status}), flush=True)
        growth = call_s / log[-2]["wall_s"] if len(log) > 2 else 2.0  # the first call's wall is mostly compiling
        if status != "ok" or last or call_s * max(growth, 1.0) > budget_s - flow_s:
            break
        delta *= 2.0
    out = {"task": task, "kernel": kernel, "normalization": normalization, "n_train": n_train, "d_model": d_model,
           "n_heads": n_heads, "n_test": n_test, "seed": run_cfg.seed, "solver": solver, "rtol": rtol, "budget_s": budget_s,
           "wall_s": round(flow_s, 1), "wall_with_measures_s": round(time.perf_counter() - start, 1), "steps": steps,
           "calls": len(log), "call_log": log, "phases": phases, "status": status, "t_end": t, "rows": rows, "gd": []}
    for lr in gd_lrs:
        k = max(1, int(np.ceil(t / lr)))
        record = flow_sinks._int_grid(k, gd_points)
        g0 = time.perf_counter()
        gd = flow_sinks.descent(loss, params0, args, steps=k, record=record, lr=lr)
        jax.block_until_ready(gd.params)
        gd_s = time.perf_counter() - g0
        gd_rows = [_row(task, _at(gd, i, static), run_cfg, k=int(kk), t=float(lr * kk),
                        loss=float(np.asarray(gd.loss)[i])) for i, kk in enumerate(record)]
        out["gd"].append({"lr": lr, "steps": k, "status": str(gd.status), "wall_s": round(gd_s, 1), "rows": gd_rows})
    return out


# --------------------------------------------------------------------------------------------
# the flow against AdamW on one setting: figure and the table on docs/flow-sinks.md
# --------------------------------------------------------------------------------------------

DOCS_PAGE = "docs/flow-sinks.md"
TABLE_OPEN, TABLE_CLOSE = "<!-- generated:sinks-flow-vs-adamw -->", "<!-- /generated:sinks-flow-vs-adamw -->"
SIZING_JSON = "figures/flow-sinks-sizing.json"
FLOW_JSON = "figures/flow-sinks-backcopy-flow.json"
FIGURE_PNG = "figures/flow-sinks-backcopy.png"


def _adamw_of(flow: dict, runs: list[dict]) -> dict:
    """The AdamW sizing run of the flow run's setting (task, sizes, kernel, seed), the last one if several."""
    key = ("task", "n_train", "d_model", "n_heads", "kernel", "normalization", "seed")
    default = {"task": "induction", "kernel": "softmax", "normalization": True}
    same = [r for r in runs if all(r.get(k, default.get(k)) == flow.get(k, default.get(k)) for k in key)]
    if not same:
        raise ValueError(f"no AdamW sizing run of the flow's setting {flow['task']} "
                         f"{flow['n_train']}:{flow['d_model']}:{flow['n_heads']}")
    return same[-1]


def _curves(flow: dict, adamw: dict) -> list[tuple[str, str, list[dict]]]:
    """``(label, x name, rows)`` per run: AdamW (steps), the flow and each GD (flow time)."""
    out = [(f"AdamW (lr {adamw['lr']:g}, wd {adamw['weight_decay']:g})", "k", adamw["rows"]),
           (f"flow ({flow['solver']}, rtol {flow['rtol']:g})", "t", flow["rows"])]
    out += [(f"GD η = {g['lr']:g}", "t", g["rows"]) for g in flow["gd"]]
    return out


def control_table(flow: dict, adamw: dict) -> str:
    """Markdown rows of one flow run and its AdamW run: per run, how far it went, its training loss
    and held-out measure, and every head's BOS share (layer 1; layer 2) at its end and the largest
    on the way."""

    if any("bos_layers" not in r for r in adamw["rows"] + flow["rows"]):
        raise ValueError("control_table: the runs must record every layer's BOS shares (bos_layers); "
                         "sizing runs before that field was added do not")

    def heads(rs, layer):
        end = rs[-1]["bos_layers"][layer]
        top = [max(r["bos_layers"][layer][h] for r in rs) for h in range(len(end))]
        return ", ".join(f"{e:.2f} ({m:.2f})" for e, m in zip(end, top))

    rows = []
    walls = [adamw["wall_s"], flow["wall_s"]] + [g["wall_s"] for g in flow["gd"]]
    fars = [f"{adamw['steps']:,} steps", f"t = {flow['t_end']:.4g} ({flow['steps']:,} steps, {flow['calls']} calls, "
            f"status `{flow['status']}`)"] + [f"t = {g['lr'] * g['steps']:.4g} ({g['steps']:,} steps)" for g in flow["gd"]]
    for (label, _, rs), far, wall in zip(_curves(flow, adamw), fars, walls):
        acc = rs[-1].get("acc", rs[-1].get("excess"))
        rows.append(f"| {flow['seed']} | {label} | {far} | {rs[0]['loss']:.3f} → {rs[-1]['loss']:.3f} | {acc:.3f} | "
                    f"{heads(rs, 0)} | {heads(rs, -1)} | {wall:.0f} |")
    return "\n".join(rows) + "\n"


def control_tables(flows: list[dict], runs: list[dict]) -> str:
    """The page's table: a header and :func:`control_table` for every flow run, in order."""
    held = "held-out copy acc." if flows and flows[0]["task"] == "backcopy" else "held-out"
    head = [f"| seed | run | how far | training loss (start → end) | {held} | layer-1 BOS shares: end (largest) | "
            "layer-2 BOS shares: end (largest) | wall (s) |", "|---|---|---|---|---|---|---|---|"]
    return "\n".join(head) + "\n" + "".join(control_table(f, _adamw_of(f, runs)) for f in flows)


def control_figure(flows: list[dict], runs: list[dict]):
    """BOS share of every head (columns: layers; rows: flow runs; one colour per optimiser, one line
    style per head) against the training loss, the axis all runs share (AdamW in steps, the flow
    and GD in flow time), falling to the right."""
    from gradflow.sims import style

    n_layers = len(flows[0]["rows"][0]["bos_layers"])
    fig, axes = style.figure(len(flows), n_layers, height=1.9 * len(flows) + 1.0, sharey=True)
    marks = ["-", "--", ":", "-."]
    for r, flow in enumerate(flows):
        adamw = _adamw_of(flow, runs)
        for layer in range(n_layers):
            ax = axes[r, layer]
            for c, (label, _, rs) in enumerate(_curves(flow, adamw)):
                loss = np.array([row["loss"] for row in rs])
                for h in range(len(rs[0]["bos_layers"][layer])):
                    share = np.array([row["bos_layers"][layer][h] for row in rs])
                    ax.plot(loss, share, marks[h % len(marks)], color=f"C{c}", lw=1.1,
                            label=f"{label}, head {h + 1}" if (r, layer) == (0, 0) else None)
            ax.axhline(SINK_SHARE, color="0.5", lw=0.6)
            ax.invert_xaxis()
            ax.set_title(f"seed {flow['seed']}, layer {layer + 1}", fontsize=style.NOTE + 1)
            if r == len(flows) - 1:
                ax.set_xlabel("training loss (falls →)")
        axes[r, 0].set_ylabel("BOS share")
    fig.legend(loc="outside lower center", ncol=2, fontsize=style.NOTE)
    f0 = flows[0]
    fig.suptitle(f"{f0['task']}: {f0['n_train']:,} fixed sequences, d_model {f0['d_model']}, {f0['n_heads']} heads, "
                 f"full batch; grey line: sink (share 0.9)", fontsize=style.NOTE + 1)
    return fig


def _committed(root: str) -> tuple[list[dict], list[dict]]:
    """The flow runs of :data:`FLOW_JSON` and the AdamW runs of :data:`SIZING_JSON` under ``root``."""
    with open(os.path.join(root, FLOW_JSON)) as f:
        flows = json.load(f)["flows"]
    with open(os.path.join(root, SIZING_JSON)) as f:
        runs = json.load(f)["runs"]
    return flows, runs


def write_docs(root: str = ".", check: bool = False) -> bool:
    """Rewrite the block between :data:`TABLE_OPEN` and :data:`TABLE_CLOSE` on :data:`DOCS_PAGE` from
    :data:`FLOW_JSON` and :data:`SIZING_JSON`; with ``check`` write nothing. Returns whether the page
    was current."""
    from gradflow.sims._common import write_block

    flows, runs = _committed(root)
    return write_block(os.path.join(root, DOCS_PAGE), TABLE_OPEN, TABLE_CLOSE, control_tables(flows, runs), check)


def write_figure(root: str = ".") -> str:
    """Draw :func:`control_figure` from the committed JSON to :data:`FIGURE_PNG` (atomically); returns its path."""
    fig = control_figure(*_committed(root))
    path = os.path.join(root, FIGURE_PNG)
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=150))
    atomic_write(path[:-4] + ".pdf", lambda f: fig.savefig(f, format="pdf"))
    return path


def _kernel_seed(fields: list[str]) -> dict:
    """The optional ``KERNEL[:SEED]`` fields of a command-line item: ``softmax`` (default) or
    ``linear`` (linear attention without normalisation, the paper's no-sink kernel), and the run seed."""
    kernel = fields[0] if fields else "softmax"
    if kernel not in ("softmax", "linear"):
        raise bad_arg("KERNEL", kernel, "softmax or linear (linear attention without normalisation)")
    return {"kernel": kernel, "normalization": kernel == "softmax", "seed": int(fields[1]) if len(fields) > 1 else 0}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 1 or (len(argv) < 2 and argv[0] not in ("--docs", "--check")):
        print("usage: python -m gradflow.sims.beyond.sinks_sizing OUT.json N_TRAIN:D_MODEL:N_HEADS:STEPS[:TASK[:KERNEL[:SEED]]] "
              "[...]\n"
              "       python -m gradflow.sims.beyond.sinks_sizing --flow OUT.json "
              "N_TRAIN:D_MODEL:N_HEADS:BUDGET_S:TASK[:KERNEL[:SEED]] [GD_LR ...]\n"
              "       python -m gradflow.sims.beyond.sinks_sizing --docs | --check", file=sys.stderr)
        return 2
    if argv[0] in ("--docs", "--check"):  # the page's table and the figure from the committed JSON
        current = write_docs(check=argv[0] == "--check")
        if argv[0] == "--docs":
            print(write_figure())
        return 0 if current or argv[0] == "--docs" else 1
    if argv[0] == "--flow":
        out, item, lrs = argv[1], argv[2], tuple(float(v) for v in argv[3:])
        n, d, h, budget, task, *rest = item.split(":")
        flows = json.load(open(out))["flows"] if os.path.exists(out) else []
        flows.append({**flow_run(task, int(n), int(d), int(h), float(budget), gd_lrs=lrs, **_kernel_seed(rest)),
                      "command": " ".join(["python -m gradflow.sims.beyond.sinks_sizing", *argv]),
                      "provenance": provenance()})
        text = json.dumps({"flows": flows, "provenance": provenance()}, indent=1)
        atomic_write(out, lambda f: f.write(text.encode()))
        return 0
    out = argv[0]
    runs = json.load(open(out))["runs"] if os.path.exists(out) else []
    for item in argv[1:]:
        parts = item.split(":")
        n, d, h, steps = (int(v) for v in parts[:4])
        runs.append({**adamw_run(n, d, h, steps, task=parts[4] if len(parts) > 4 else "induction",
                                 **_kernel_seed(parts[5:])),
                     "command": f"python -m gradflow.sims.beyond.sinks_sizing {out} {item}", "provenance": provenance()})
        print(json.dumps({k: v for k, v in runs[-1].items() if k != "rows"}), flush=True)
        text = json.dumps({"runs": runs, "provenance": provenance()}, indent=1)
        atomic_write(out, lambda f: f.write(text.encode()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
