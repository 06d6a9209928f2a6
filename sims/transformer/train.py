"""Training (optax AdamW, jitted steps, tqdm, resumable checkpoints) and the Sec. 4 measurements.

One *run* is one ``(kernel, normalise, seed)`` variant: an induction model and a group model
trained from the same seed, then measured (SPEC §7):

- induction accuracy, the BOS share of every head (query rows ``1 … T−3`` of the full
  ``T``-token sequence, i.e. the context tokens), sink heads (layer-2 heads with BOS share > 0.9),
  per-head sparsity, and the learned attention maps on one induction sequence;
- group accuracy and the flip rate of the one-token attack over ``n_pairs`` pairs.

Only the induction model stops early (SPEC: once induction accuracy has stayed above 0.95 for
an epoch); the group model trains every epoch, since it is at accuracy 1.0 within the first one
and an attack on a model stopped there measures a barely trained model.

Weights are compared as shares ``|w_ij| / Σ_j |w_ij|`` so that un-normalised and signed kernels
are measured on the same scale as softmax (for the normalised positive kernels this is ``w``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from gradflow._errors import bad_arg
from gradflow._validate import check_positive
from gradflow.trajectory import atomic_write

from .kernels import check_kernel
from .model import init_transformer
from .tasks import group_batch, induction_batch

__all__ = ["RunConfig", "train", "measure_induction", "measure_groups", "run", "load_result",
           "run_name", "shares", "groups_stopped_early", "INDUCTION_KEYS"]

TASKS = ("induction", "groups")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Settings of one run (defaults: the paper's, SPEC §7).

    ``n_train`` sequences per task, ``epochs`` at most, ``batch``, AdamW ``lr`` and
    ``weight_decay``; ``aux_weight`` × next-token loss added to the last-position loss
    (induction); evaluation on ``n_test`` fresh sequences ``evals_per_epoch`` times an epoch;
    early stop of the induction model once its test accuracy has stayed above ``stop_acc`` at
    every evaluation for one epoch (the group model trains every epoch: the flip attack needs
    the trained model, and the group task is solved within the first epoch); ``n_pairs`` pairs
    for the flip attack.
    """

    kernel: str = "softmax"
    normalise: bool = True
    seed: int = 0
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    n_train: int = 100_000
    epochs: int = 10
    batch: int = 256
    lr: float = 1e-3
    weight_decay: float = 0.01
    aux_weight: float = 0.2
    vocab: int = 50
    group_vocab: int = 48
    n_groups: int = 4
    n_context: int = 10
    n_test: int = 2000
    evals_per_epoch: int = 4
    stop_acc: float = 0.95
    n_pairs: int = 500

    def __post_init__(self):
        check_kernel(self.kernel, self.normalise)
        for name in ("seed", "d_model", "n_layers", "n_heads", "n_train", "epochs", "batch", "n_test",
                     "evals_per_epoch", "n_pairs"):
            val = getattr(self, name)
            if not (isinstance(val, int) and not isinstance(val, bool) and val >= (0 if name == "seed" else 1)):
                raise bad_arg(name, val, "a non-negative integer" if name == "seed" else "a positive integer")
        if self.n_train < self.batch:
            raise bad_arg("n_train", self.n_train, f"at least batch = {self.batch}")
        check_positive("lr", self.lr)
        for name in ("weight_decay", "aux_weight"):
            val = getattr(self, name)
            if isinstance(val, (bool, str)) or not isinstance(val, (int, float)) or not math.isfinite(val) or val < 0:
                raise bad_arg(name, val, "a non-negative finite number")
        check_positive("stop_acc", self.stop_acc, upper=1.0)

    @property
    def steps_per_epoch(self) -> int:
        return self.n_train // self.batch

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def run_name(cfg: RunConfig) -> str:
    """File stem of a run, e.g. ``sigmoid-raw-s0`` (``norm`` / ``raw`` = with / without normalisation)."""
    return f"{cfg.kernel}-{'norm' if cfg.normalise else 'raw'}-s{cfg.seed}"


# ----------------------------------------------------------------------------- data and losses

def _data(cfg: RunConfig, task: str, seed: int, n: int):
    """``(x, y)`` int32 arrays: model inputs and targets for ``task``."""
    if task == "induction":
        seq = induction_batch(seed, n, vocab=cfg.vocab, n_context=cfg.n_context)
        return seq[:, :-1], seq[:, 1:]  # targets: next tokens; the last one is c
    seq, labels = group_batch(seed, n, vocab=cfg.group_vocab, n_groups=cfg.n_groups, n_context=cfg.n_context)
    return seq, labels


def _seeds(cfg: RunConfig, task: str) -> tuple[int, int]:
    """(train, test) data seeds: distinct per task and run seed, test never equal to train."""
    base = 1000 * cfg.seed + (0 if task == "induction" else 500)
    return base + 1, base + 2


def _model(cfg: RunConfig, task: str) -> Transformer:
    seed = 2 * cfg.seed + TASKS.index(task)
    if task == "induction":
        return init_transformer(seed, cfg.vocab + 1, cfg.vocab, cfg.n_context + 2, d_model=cfg.d_model,
                                n_layers=cfg.n_layers, n_heads=cfg.n_heads, kernel=cfg.kernel,
                                normalise=cfg.normalise, causal=True)
    return init_transformer(seed, cfg.group_vocab + 1, cfg.n_groups, None, d_model=cfg.d_model,
                            n_layers=cfg.n_layers, n_heads=cfg.n_heads, kernel=cfg.kernel,
                            normalise=cfg.normalise, causal=False)


def _loss(model, x, y, task: str, aux_weight: float):
    logits, _ = jax.vmap(model)(x)
    if task == "induction":  # last position (predict c) + aux_weight × next-token loss over all positions
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, y)
        return jnp.mean(ce[:, -1]) + aux_weight * jnp.mean(ce)
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits[:, 0], y))  # CLS read-out


@eqx.filter_jit
def _predict_batch(model, xb, pos: int):
    return jnp.argmax(jax.vmap(model)(xb)[0][:, pos], axis=-1)


@eqx.filter_jit
def _maps_batch(model, xb):
    return jax.vmap(model)(xb)[1]


def _predict(model, x, task: str, batch: int = 500) -> np.ndarray:
    """Predicted class per sequence (induction: at the last position; groups: at CLS)."""
    pos = -1 if task == "induction" else 0
    return np.concatenate([np.asarray(_predict_batch(model, x[i:i + batch], pos))
                           for i in range(0, len(x), batch)])


def _accuracy(model, x, y, task: str) -> float:
    target = y[:, -1] if task == "induction" else y
    return float(np.mean(_predict(model, x, task) == target))


# ----------------------------------------------------------------------------- training

@functools.lru_cache(maxsize=None)
def _adamw(lr: float, weight_decay: float):
    """One optax AdamW per setting, so the jitted step below is compiled once per model shape."""
    return optax.adamw(lr, weight_decay=weight_decay)


@eqx.filter_jit
def _step(model, opt_state, x, y, task: str, aux_weight: float, opt):
    loss, grads = eqx.filter_value_and_grad(_loss)(model, x, y, task, aux_weight)
    updates, opt_state = opt.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, updates), opt_state, loss


def _save_checkpoint(path: str, model, opt_state, meta: dict) -> None:
    """Atomic, consistent checkpoint: leaves to ``path.STEP.eqx``, then ``path.json`` naming it."""
    leaves = f"{path}.{meta['step']}.eqx"
    atomic_write(leaves, lambda f: eqx.tree_serialise_leaves(f, (model, opt_state)))
    old = _read_json(path + ".json")
    text = json.dumps({**meta, "leaves": os.path.basename(leaves)})
    atomic_write(path + ".json", lambda f: f.write(text.encode()))
    if old and old.get("leaves") and old["leaves"] != os.path.basename(leaves):
        try:
            os.remove(os.path.join(os.path.dirname(path), old["leaves"]))
        except OSError:
            pass


def _remove_checkpoint(path: str, meta: dict) -> None:
    """Delete checkpoint ``path`` (its ``.json`` and the leaves file it names)."""
    for name in (os.path.join(os.path.dirname(path), str(meta.get("leaves", ""))), path + ".json"):
        try:
            os.remove(name)
        except OSError:
            pass


def _read_json(path: str) -> dict | None:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return None


def train(cfg: RunConfig, task: str, *, checkpoint: str | None = None, progress: bool = True,
          stop_after: int | None = None):
    """Train the ``task`` model of run ``cfg`` with AdamW; resume from ``checkpoint`` if present.

    **Arguments:** ``task`` ``"induction"`` or ``"groups"``; ``checkpoint`` a path stem (files
    ``STEM.json`` and ``STEM.STEP.eqx`` are written at every evaluation; a checkpoint written
    for another ``cfg`` or ``task`` is deleted, not resumed) or ``None``;
    ``stop_after``: return after this many steps in this call (as if killed; the state of the
    last evaluation is in the checkpoint), ``None`` to run to the end.

    **Returns:** ``(model, history)``; ``history`` holds ``step``/``acc`` lists (test accuracy at
    each evaluation), ``steps_per_epoch``, ``above_step`` (first step of the final stretch above
    ``stop_acc``, or ``None``), ``stopped_step`` (step of the early stop, or ``None`` if the run
    used every epoch; always ``None`` for ``"groups"``, which trains every epoch — a groups
    checkpoint that an older version stopped early is trained on), ``diverged_step`` (first
    evaluation at which the training loss was NaN or infinite, where training stopped; ``None``
    otherwise), ``step_seconds`` (mean wall time of a
    training step after compilation) and ``train_seconds``.
    """
    if task not in TASKS:
        raise bad_arg("task", task, f"one of {list(TASKS)}")
    train_seed, test_seed = _seeds(cfg, task)
    x_tr, y_tr = _data(cfg, task, train_seed, cfg.n_train)
    x_te, y_te = _data(cfg, task, test_seed, cfg.n_test)
    model = _model(cfg, task)
    opt = _adamw(cfg.lr, cfg.weight_decay)
    opt_state = opt.init(eqx.filter(model, eqx.is_array))
    spe = cfg.steps_per_epoch
    eval_every = max(spe // cfg.evals_per_epoch, 1)
    total = spe * cfg.epochs
    hist = {"step": [], "acc": [], "steps_per_epoch": spe, "above_step": None, "stopped_step": None,
            "diverged_step": None, "step_seconds": None, "train_seconds": 0.0}
    step0 = 0
    meta = _read_json(checkpoint + ".json") if checkpoint else None
    if meta is not None and (meta.get("config") != cfg.to_dict() or meta.get("task") != task):
        _remove_checkpoint(checkpoint, meta)  # written for another run setting: never resume it
        meta = None
    if meta is not None:
        model, opt_state = eqx.tree_deserialise_leaves(
            os.path.join(os.path.dirname(checkpoint), meta["leaves"]), (model, opt_state))
        hist, step0 = meta["history"], meta["step"]
        if task != "induction":
            hist["stopped_step"] = None  # an older version stopped group models early: train on
        if hist["stopped_step"] is not None or hist.get("diverged_step") is not None:
            return model, hist

    timed, t_timed, perm_epoch, perm = 0, 0.0, -1, None
    start = time.perf_counter()
    bar = tqdm(total=total, initial=step0, desc=f"{run_name(cfg)} {task}", disable=not progress, leave=False)
    end = total if stop_after is None else min(total, step0 + stop_after)
    for s in range(step0, end):
        epoch, i = divmod(s, spe)
        if epoch != perm_epoch:  # a fixed shuffle per epoch, so a resumed run sees the same batches
            perm_epoch = epoch
            perm = np.random.default_rng((cfg.seed, TASKS.index(task), epoch)).permutation(cfg.n_train)
        idx = perm[i * cfg.batch:(i + 1) * cfg.batch]
        t0 = time.perf_counter()
        model, opt_state, loss = _step(model, opt_state, x_tr[idx], y_tr[idx], task, cfg.aux_weight, opt)
        if s > step0:  # the first step compiles
            loss.block_until_ready()
            timed, t_timed = timed + 1, t_timed + time.perf_counter() - t0
        bar.update(1)
        if (s + 1) % eval_every == 0 or s + 1 == total:
            acc = _accuracy(model, x_te, y_te, task)
            hist["step"].append(s + 1)
            hist["acc"].append(acc)
            bar.set_postfix(loss=f"{float(loss):.3f}", acc=f"{acc:.3f}")
            if not np.isfinite(float(loss)):  # diverged: stop, and say so (its accuracy means nothing)
                hist["diverged_step"] = s + 1
            if acc <= cfg.stop_acc:
                hist["above_step"] = None
            elif hist["above_step"] is None:
                hist["above_step"] = s + 1
            if task == "induction" and hist["above_step"] is not None and s + 1 - hist["above_step"] >= spe:
                hist["stopped_step"] = s + 1
            hist["timed_steps"] = hist.get("timed_steps", 0) + timed
            hist["timed_seconds"] = hist.get("timed_seconds", 0.0) + t_timed
            if hist["timed_steps"]:
                hist["step_seconds"] = hist["timed_seconds"] / hist["timed_steps"]
            hist["train_seconds"] += time.perf_counter() - start
            start, timed, t_timed = time.perf_counter(), 0, 0.0
            if checkpoint:
                _save_checkpoint(checkpoint, model, opt_state, {"step": s + 1, "history": hist,
                                                                "config": cfg.to_dict(), "task": task})
            if hist["stopped_step"] is not None or hist.get("diverged_step") is not None:
                break
    bar.close()
    return model, hist


# ----------------------------------------------------------------------------- measurements

def shares(w: np.ndarray) -> np.ndarray:
    """Row shares ``|w_ij| / Σ_j |w_ij|`` (rows summing to 0 stay 0)."""
    a = np.abs(np.asarray(w, np.float64))
    tot = a.sum(-1, keepdims=True)
    return np.divide(a, tot, out=np.zeros_like(a), where=tot > 0)


def _maps(model, x, batch: int = 500) -> np.ndarray:
    """Attention maps ``(N, L, H, T, T)`` of every sequence."""
    return np.concatenate([np.asarray(_maps_batch(model, x[i:i + batch])) for i in range(0, len(x), batch)])


def sparsity(share: np.ndarray, rows: slice) -> np.ndarray:
    """Per-head sparsity ``(L, H)``: mean over sequences and ``rows`` of the largest share in a row
    (the share on the max-score token; for the logit kernels that is the max-logit token)."""
    return share[..., rows, :].max(-1).mean(axis=(0, 3))


def measure_induction(model, cfg: RunConfig, n_seq: int = 1000) -> dict:
    """Induction measurements on ``n_seq`` test sequences (SPEC §7); see the module docstring."""
    _, test_seed = _seeds(cfg, "induction")
    x, y = _data(cfg, "induction", test_seed, cfg.n_test)
    acc = _accuracy(model, x, y, "induction")
    share = shares(_maps(model, x[:n_seq]))  # (N, L, H, T, T), T = n_context + 2 inputs
    ctx = slice(1, cfg.n_context + 1)  # rows 1 … T_full − 3: the context tokens
    bos = share[..., ctx, 0].mean(axis=(0, 3))  # (L, H)
    return {
        "induction_acc": acc,
        "bos_share": bos,
        "sink_heads": bos[-1] > 0.9,
        "sparsity_induction": sparsity(share, slice(1, None)),  # row 0 sees only BOS
        "example_tokens": x[0],
        "example_maps": share[0],
    }


def attack_pairs(pred: np.ndarray, y: np.ndarray, n_pairs: int, rng: np.random.Generator):
    """Up to ``n_pairs`` ordered pairs ``(a, b)`` of correctly classified sequences (``pred == y``)
    with ``y[a] != y[b]``, drawn without replacement from all such pairs.

    **Returns:** two int arrays ``(a_idx, b_idx)`` of equal length ``≤ n_pairs``; both empty when no
    such pair exists (e.g. every correct prediction has one label, as for a diverged model).
    """
    ok = np.flatnonzero(np.asarray(pred) == np.asarray(y))
    a, b = np.meshgrid(ok, ok, indexing="ij")
    diff = y[a] != y[b]
    a, b = a[diff], b[diff]
    pick = rng.choice(len(a), min(n_pairs, len(a)), replace=False) if len(a) else np.zeros(0, int)
    return a[pick].astype(int), b[pick].astype(int)


def measure_groups(model, cfg: RunConfig) -> dict:
    """Group accuracy, per-head sparsity and the one-token flip attack (SPEC §7).

    Attack on ``n_pairs`` pairs ``(A, B)`` of correctly classified test sequences with different
    labels: in ``A`` replace the token that the CLS row of the last layer attends to most (share
    averaged over heads) by ``B``'s most-attended token; success = the prediction changes.
    """
    _, test_seed = _seeds(cfg, "groups")
    x, y = _data(cfg, "groups", test_seed, cfg.n_test)
    pred = _predict(model, x, "groups")
    share = shares(_maps(model, x))
    top = 1 + np.argmax(share[:, -1, :, 0, 1:].mean(1), axis=-1)  # position of the top-attended token
    a_idx, b_idx = attack_pairs(pred, y, cfg.n_pairs, np.random.default_rng(cfg.seed + 7))
    x_att = x[a_idx].copy()
    x_att[np.arange(len(a_idx)), top[a_idx]] = x[b_idx, top[b_idx]]
    flipped = _predict(model, x_att, "groups") != pred[a_idx]
    return {
        "group_acc": float(np.mean(pred == y)),
        "flip_rate": float(np.mean(flipped)) if len(flipped) else float("nan"),
        "n_pairs": len(flipped),
        "sparsity_groups": sparsity(share, slice(None)),
    }


INDUCTION_KEYS = ("induction_acc", "bos_share", "sink_heads", "sparsity_induction", "example_tokens",
                  "example_maps")
"""The measurements of the induction model in a result (see :func:`measure_induction`)."""


def groups_stopped_early(res: dict) -> bool:
    """Whether result ``res`` holds a group model that an older version stopped early (before
    its last epoch); :func:`run` trains such a group model on and keeps the induction part."""
    return res["history_groups"].get("stopped_step") is not None


def run(cfg: RunConfig, cache_dir: str, *, progress: bool = True, previous: dict | None = None) -> dict:
    """Train and measure one run, or load it: ``cache_dir/NAME.npz`` (NAME = :func:`run_name`).

    Checkpoints live in ``cache_dir/ckpt/`` so a killed run resumes where it stopped; the result
    file is written atomically once both models are measured.

    **Arguments:** ``cfg`` the run; ``cache_dir`` the folder of result files (created if
    missing); ``progress`` show tqdm bars; ``previous`` a finished result of ``cfg`` found
    elsewhere (e.g. a committed one, as :func:`load_result` gives it) or ``None``: one whose
    config differs from ``cfg`` is ignored; a complete one is returned as it is (not copied into
    ``cache_dir``).

    **Returns:** :func:`load_result`'s dict. A complete result (the cache's first, then
    ``previous``) is returned; else a result of ``cfg`` whose group model an older version stopped
    early (:func:`groups_stopped_early`; ``previous`` first, as :func:`sims.transformer.sweep.result_path`
    prefers the committed file) keeps its induction measurements while the group model trains on
    (from its checkpoint in ``cache_dir/ckpt/`` if there is one); else both models are trained.
    """
    path = os.path.join(cache_dir, run_name(cfg) + ".npz")
    found = ([load_result(path)] if os.path.exists(path) else []) + ([previous] if previous else [])
    found = [res for res in found if res["config"] == cfg.to_dict()]
    for res in found:
        if not groups_stopped_early(res):
            return res
    old = found[-1] if found else None  # previous (committed) before the cache, as result_path
    ckpt = os.path.join(cache_dir, "ckpt")
    os.makedirs(ckpt, exist_ok=True)
    start = time.perf_counter()
    if old is None:
        m_ind, h_ind = train(cfg, "induction", checkpoint=os.path.join(ckpt, run_name(cfg) + "-induction"),
                             progress=progress)
        induction = measure_induction(m_ind, cfg)
    else:
        h_ind, induction = old["history_induction"], {k: old[k] for k in INDUCTION_KEYS}
    m_grp, h_grp = train(cfg, "groups", checkpoint=os.path.join(ckpt, run_name(cfg) + "-groups"),
                         progress=progress)
    arrays = {**induction, **measure_groups(m_grp, cfg)}
    scalars = {k: arrays.pop(k) for k in ("induction_acc", "group_acc", "flip_rate", "n_pairs")}
    diverged = {f"diverged_{t}": h.get("diverged_step") is not None
                for t, h in (("induction", h_ind), ("groups", h_grp))}
    meta = {"config": cfg.to_dict(), "name": run_name(cfg), **scalars, **diverged,
            "history_induction": h_ind, "history_groups": h_grp,
            "measure_seconds": time.perf_counter() - start}
    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    atomic_write(path, lambda f: np.savez(f, meta=np.array(json.dumps(meta)), **arrays))
    return load_result(path)


def load_result(path: str) -> dict:
    """A run's result file as a dict: the JSON scalars (``config``, accuracies, ``flip_rate``,
    histories) merged with the arrays (``bos_share``, ``sink_heads``, sparsities, example maps)."""
    with np.load(path, allow_pickle=False) as z:
        out = json.loads(str(z["meta"]))
        out.update({k: z[k] for k in z.files if k != "meta"})
    return out
