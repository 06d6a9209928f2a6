"""Training (optax AdamW, jitted steps, tqdm, resumable checkpoints) and the Sec. 4 measurements,
as the authors' code runs them (``tml-epfl/softmax``: ``exp_induction.py``, ``exp_classification.py``).

One *run* is one model: a :class:`RunConfig` names its task (``"induction"`` or ``"groups"``),
kernel, seed and every setting. :func:`induction_config` and :func:`group_config` give the
authors' main-panel defaults; each place where an earlier version of this code differed is a
switch (``early_stop``, ``shift_query``, ``query_last``, ``embed_std``, ``bias``,
``use_layernorm``, ``use_mlp``, ``sink_rows``, ``attack``, sizes and ``lr``).

Measurements (paper Sec. 4.1–4.2):

- **BOS share** of a head (:func:`bos_share`): per evaluation sequence, Σ (weights on BOS) /
  Σ (all weights) over the query rows ``sink_rows`` (default ``1 … 9``: the context tokens
  ``t_1 … t_9``; the rows of ``t_10`` and ``q`` are left out, the authors' ``attn[:, 1:-2]``),
  then the mean over sequences; raw weights, as the authors compute it. A **sink head** is a
  last-layer head with BOS share > 0.9. It is recorded at every evaluation during training too.
- **Flip rate** (:func:`flip_attack`): on ``n_pairs`` random evaluation pairs (A, B) with
  different labels, per head: the mixed sequence holds A's top-1 token (by that head's CLS
  attention) and B's other 9 tokens, shuffled; success = the model predicts A's label; both
  directions averaged; the flip rate is the maximum over heads.
- **Per-head sparsity**: a head's mean share ``|w_ij| / Σ_j |w_ij|`` on its max-weight key.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import time
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from gradflow.internal import bad_arg
from gradflow.internal import check_positive
from gradflow.io import atomic_write, load_npz

from gradflow.sims.sec4.kernels import check_kernel
from gradflow.sims.sec4.model import POSITIONS, init_transformer
from gradflow.sims.sec4.tasks import CLS, group_batch, induction_batch

__all__ = ["RunConfig", "induction_config", "group_config", "train", "measure", "run", "load_result",
           "run_name", "shares", "sparsity", "bos_share", "flip_attack", "ATTACKS", "HASHED_NAMES", "current_names"]

TASKS = ("induction", "groups")
ATTACKS = ("authors", "swap-top")
"""``authors``: the paper's attack (module docstring); ``swap-top``: an earlier version's (swap the
top-attended tokens, head-averaged last layer, of correctly classified pairs; success = the
prediction changes)."""


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Settings of one run. Use :func:`induction_config` / :func:`group_config` for the
    authors' defaults of each task (the field defaults here are the induction ones).

    Model: ``d_model``, ``n_layers``, ``n_heads``, ``use_mlp``, ``use_layernorm``, ``bias``
    (q/k/v/o biases), ``embed_std`` (std of the token and position embeddings; 1 = PyTorch's
    ``nn.Embedding``), ``positions`` (``"add"``, ``"concat"``, ``"none"``).
    Data: ``vocab`` ids including BOS/CLS, ``n_context`` tokens, ``shift_query`` and
    ``query_last`` (induction, see :func:`gradflow.sims.sec4.tasks.induction_batch`),
    ``n_groups`` (groups), ``n_train`` training sequences, ``n_test`` evaluation sequences
    (measurements and the attack use them).
    Training: ``epochs`` full epochs of batch ``batch``, AdamW ``lr`` / ``weight_decay``,
    ``aux_weight`` × the next-token loss of positions ``0 … T−2`` (induction), ``evals_per_epoch``;
    ``early_stop`` (off by default): stop once the test accuracy has stayed above ``stop_acc``
    at every evaluation for one epoch.
    Measurements: ``sink_rows`` ``(first, last)`` input rows of the BOS share (inclusive);
    ``n_pairs`` pairs and ``attack`` (one of :data:`ATTACKS`) for the flip rate.
    """

    task: str = "induction"
    kernel: str = "softmax"
    normalization: bool = True
    seed: int = 0
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    use_mlp: bool = True
    use_layernorm: bool = True
    bias: bool = True
    embed_std: float = 1.0
    positions: str = "add"
    vocab: int = 50
    n_context: int = 10
    shift_query: bool = True
    query_last: bool = True
    n_groups: int = 4
    n_train: int = 100_000
    n_test: int = 1000
    epochs: int = 10
    batch: int = 256
    lr: float = 1e-3
    weight_decay: float = 0.01
    aux_weight: float = 0.2
    evals_per_epoch: int = 1
    early_stop: bool = False
    stop_acc: float = 0.95
    sink_rows: tuple[int, int] | list[int] = (1, 9)  # stored as a tuple (__post_init__)
    n_pairs: int = 500
    attack: str = "authors"
    normalise: dataclasses.InitVar[bool | None] = None
    """Deprecated keyword for ``normalization`` (the spelling before it was renamed)."""

    def __post_init__(self, normalise):
        if normalise is not None:
            warnings.warn("RunConfig(normalise=...) is deprecated; use normalization=...", DeprecationWarning,
                          stacklevel=3)
            object.__setattr__(self, "normalization", normalise)
        if self.task not in TASKS:
            raise bad_arg("task", self.task, f"one of {list(TASKS)}")
        check_kernel(self.kernel, self.normalization)
        for name in ("seed", "d_model", "n_layers", "n_heads", "n_train", "epochs", "batch", "n_test",
                     "evals_per_epoch", "n_pairs", "vocab", "n_context", "n_groups"):
            val = getattr(self, name)
            if not (isinstance(val, int) and not isinstance(val, bool) and val >= (0 if name == "seed" else 1)):
                raise bad_arg(name, val, "a non-negative integer" if name == "seed" else "a positive integer")
        for name in ("use_mlp", "use_layernorm", "bias", "shift_query", "query_last", "early_stop"):
            if not isinstance(getattr(self, name), bool):
                raise bad_arg(name, getattr(self, name), "True or False")
        if self.n_train < self.batch:
            raise bad_arg("n_train", self.n_train, f"at least batch = {self.batch}")
        if self.d_model % self.n_heads:
            raise bad_arg("n_heads", self.n_heads, f"a divisor of d_model = {self.d_model}")
        if self.positions not in POSITIONS:
            raise bad_arg("positions", self.positions, f"one of {list(POSITIONS)}")
        if self.attack not in ATTACKS:
            raise bad_arg("attack", self.attack, f"one of {list(ATTACKS)}")
        rows = tuple(self.sink_rows) if isinstance(self.sink_rows, (tuple, list)) else None
        if not (rows and len(rows) == 2 and all(isinstance(r, int) and not isinstance(r, bool) for r in rows)
                and 1 <= rows[0] <= rows[1] <= self.n_context + 1):
            raise bad_arg("sink_rows", self.sink_rows,
                          f"(first, last) input rows with 1 <= first <= last <= {self.n_context + 1}")
        object.__setattr__(self, "sink_rows", rows)
        check_positive("lr", self.lr)
        check_positive("embed_std", self.embed_std)
        for name in ("weight_decay", "aux_weight"):
            val = getattr(self, name)
            if isinstance(val, (bool, str)) or not isinstance(val, (int, float)) or not math.isfinite(val) or val < 0:
                raise bad_arg(name, val, "a non-negative finite number")
        check_positive("stop_acc", self.stop_acc, upper=1.0)
        # the data generators check the vocabulary against the context size
        if self.task == "induction":
            induction_batch(0, 1, vocab=self.vocab, n_context=self.n_context)
        else:
            group_batch(0, 1, vocab=self.vocab, n_groups=self.n_groups, n_context=self.n_context)

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.n_train // self.batch)  # the last batch may be short (PyTorch's DataLoader)

    @property
    def n_out(self) -> int:
        """Output classes: the (shifted) vocabulary for induction, the groups for groups."""
        if self.task == "groups":
            return self.n_groups
        return self.vocab * (2 if self.shift_query else 1)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["sink_rows"] = list(self.sink_rows)
        return d

    def key(self) -> str:
        """Short hash of every setting: result files and checkpoints carry it in their names. It is
        taken over the settings under the names they had when the committed runs were trained
        (:data:`HASHED_NAMES`), so that a renamed field leaves every run's file name as it was."""
        d = {HASHED_NAMES.get(k, k): v for k, v in self.to_dict().items()}
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:10]


HASHED_NAMES = {"normalization": "normalise"}
"""Field -> the name :meth:`RunConfig.key` hashes it under: the name it had when the committed runs
(``figures/transformer-runs/``) were trained. Their result files store their config under those
names too; :func:`current_names` reads such a config with today's field names."""


def current_names(config: dict) -> dict:
    """A stored run config (a result file's or a checkpoint's ``config``) with today's field names:
    a field stored under its name of :data:`HASHED_NAMES` is renamed (``normalise`` ->
    ``normalization``); other keys are kept as they are."""
    old = {v: k for k, v in HASHED_NAMES.items()}
    return {old.get(k, k): v for k, v in config.items()}


RunConfig.normalise = property(  # the deprecated attribute (the InitVar's class default would read None)
    lambda self: (warnings.warn("RunConfig.normalise is deprecated; use normalization", DeprecationWarning,
                                stacklevel=2), self.normalization)[1],
    doc="Deprecated: :attr:`normalization`.")


def induction_config(kernel: str, normalization: bool, seed: int = 0, **changes) -> RunConfig:
    """The induction run of the paper's main sink panel (paper Sec. 4.1; the authors'
    ``conf/induction_config.yaml`` with ``shift_query_token``, positions ``add``, aux 0.2):
    2 layers, d_model 128, 4 heads, vocab 50 (+50 shifted query ids), 100k sequences, 10 epochs
    of batch 256, lr 1e-3, 1,000 evaluation sequences. ``changes`` override any field."""
    return RunConfig(**{"task": "induction", "kernel": kernel, "normalization": normalization, "seed": seed, **changes})


GROUP_DEFAULTS = dict(task="groups", n_layers=1, n_heads=1, positions="none", vocab=41, n_train=10_000,
                      aux_weight=0.0)


def group_config(kernel: str, normalization: bool, seed: int = 0, **changes) -> RunConfig:
    """The group-classification run of the paper's flip panels (paper Sec. 4.2; the authors'
    ``conf/classification_config.yaml`` with the plotted 1 layer × 1 head): vocab 41 (CLS + 4
    groups of 10), non-causal, no positions, 10k sequences, 10 epochs of batch 256, lr 1e-3, MLP
    and LayerNorm on (switch with ``use_mlp`` / ``use_layernorm``), attack on 500 pairs."""
    return RunConfig(**{**GROUP_DEFAULTS, "kernel": kernel, "normalization": normalization, "seed": seed, **changes})


def run_name(cfg: RunConfig) -> str:
    """File stem of a run: task, variant, seed, and the settings' hash, e.g.
    ``induction-sigmoid-raw-s0-1a2b3c4d5e`` (``norm`` / ``raw`` = with / without normalisation)."""
    return f"{cfg.task}-{cfg.kernel}-{'norm' if cfg.normalization else 'raw'}-s{cfg.seed}-{cfg.key()}"


# ----------------------------------------------------------------------------- data and losses

def _data(cfg: RunConfig, seed: int, n: int):
    """``(x, y)`` int32 arrays: model inputs and targets (induction: next tokens; groups: labels)."""
    if cfg.task == "induction":
        seq = induction_batch(seed, n, vocab=cfg.vocab, n_context=cfg.n_context, shift_query=cfg.shift_query,
                              query_last=cfg.query_last)
        return seq[:, :-1], seq[:, 1:]
    return group_batch(seed, n, vocab=cfg.vocab, n_groups=cfg.n_groups, n_context=cfg.n_context)


def _seeds(cfg: RunConfig) -> tuple[int, int]:
    """(train, test) data seeds: distinct per task and run seed, test never equal to train."""
    base = 1000 * cfg.seed + (0 if cfg.task == "induction" else 500)
    return base + 1, base + 2


def _model(cfg: RunConfig):
    induction = cfg.task == "induction"
    return init_transformer(2 * cfg.seed + TASKS.index(cfg.task), cfg.n_out if induction else cfg.vocab,
                            cfg.n_out, cfg.n_context + 2, positions=cfg.positions, d_model=cfg.d_model,
                            n_layers=cfg.n_layers, n_heads=cfg.n_heads, kernel=cfg.kernel,
                            normalization=cfg.normalization, causal=induction, use_mlp=cfg.use_mlp,
                            use_layernorm=cfg.use_layernorm, bias=cfg.bias, embed_std=cfg.embed_std)


def _loss(model, x, y, task: str, aux_weight: float):
    logits, _ = jax.vmap(model)(x)
    if task == "induction":  # last position (predict c) + aux_weight × next-token loss of the others
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, y)
        return jnp.mean(ce[:, -1]) + aux_weight * jnp.mean(ce[:, :-1])
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits[:, -1], y))  # CLS read-out


@eqx.filter_jit
def _forward_batch(model, xb):
    logits, maps = jax.vmap(model)(xb)
    return jnp.argmax(logits[:, -1], axis=-1), maps


def _forward(model, x, batch: int = 500):
    """``(pred (N,), maps (N, L, H, T, T))``: the prediction at the last position (induction:
    ``c``; groups: CLS) and every attention map."""
    out = [_forward_batch(model, x[i:i + batch]) for i in range(0, len(x), batch)]
    return (np.concatenate([np.asarray(p) for p, _ in out]),
            np.concatenate([np.asarray(m, np.float64) for _, m in out]))


def _predict(model, x) -> np.ndarray:
    return _forward(model, x)[0]


def _maps(model, x) -> np.ndarray:
    return _forward(model, x)[1]


def _target(cfg: RunConfig, y):
    return y[:, -1] if cfg.task == "induction" else y


# ----------------------------------------------------------------------------- training

@functools.lru_cache(maxsize=None)
def _adamw(lr: float, weight_decay: float):
    """One optax AdamW per setting (PyTorch's defaults otherwise), so the jitted step is compiled once."""
    return optax.adamw(lr, weight_decay=weight_decay)


def _step(model, opt_state, x, y, task: str, aux_weight: float, opt):
    """One AdamW step on the batch ``(x, y)``: ``(model, opt_state, loss)``."""
    loss, grads = eqx.filter_value_and_grad(_loss)(model, x, y, task, aux_weight)
    updates, opt_state = opt.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, updates), opt_state, loss


@eqx.filter_jit
def _steps(model, opt_state, xs, ys, task: str, aux_weight: float, opt):
    """``len(xs)`` AdamW steps in one compiled ``lax.scan`` over the stacked batches ``xs (n, B, T)``
    (one call per stretch between evaluations: per-step dispatch cost dominated training time
    on CPU). Returns ``(model, opt_state, losses (n,))``."""
    params, static = eqx.partition(model, eqx.is_array)

    def body(carry, batch):
        p, o = carry
        m, o, loss = _step(eqx.combine(p, static), o, batch[0], batch[1], task, aux_weight, opt)
        return (eqx.filter(m, eqx.is_array), o), loss

    (params, opt_state), losses = jax.lax.scan(body, (params, opt_state), (xs, ys))
    return eqx.combine(params, static), opt_state, losses


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


def train(cfg: RunConfig, *, checkpoint: str | None = None, progress: bool = True, stop_after: int | None = None):
    """Train the model of run ``cfg`` with AdamW for ``cfg.epochs`` full epochs; resume from ``checkpoint``.

    **Arguments:** ``checkpoint`` a path stem (``STEM.json`` and ``STEM.STEP.eqx`` are written at
    every evaluation; one written for another ``cfg`` is deleted, not resumed) or ``None``;
    ``stop_after``: return after this many steps in this call (as if killed; the state of the
    last evaluation is in the checkpoint), ``None`` to run to the end.

    **Returns:** ``(model, history)``; ``history`` holds, per evaluation, ``step``, ``acc`` (test
    accuracy) and for induction ``bos`` (the last layer's per-head BOS share, :func:`bos_share`);
    ``steps_per_epoch``; ``above_step`` (first step of the final stretch above ``stop_acc``, or
    ``None``); ``stopped_step`` (step of the early stop; ``None`` unless ``cfg.early_stop``);
    ``diverged_step`` (first evaluation with a non-finite training loss, where training stopped;
    ``None`` otherwise); ``step_seconds`` (mean wall time of a step after compilation) and
    ``train_seconds``.
    """
    train_seed, test_seed = _seeds(cfg)
    x_tr, y_tr = _data(cfg, train_seed, cfg.n_train)
    x_te, y_te = _data(cfg, test_seed, cfg.n_test)
    model = _model(cfg)
    opt = _adamw(cfg.lr, cfg.weight_decay)
    opt_state = opt.init(eqx.filter(model, eqx.is_array))
    spe = cfg.steps_per_epoch
    eval_at = {min(spe, round(spe * (k + 1) / cfg.evals_per_epoch)) for k in range(cfg.evals_per_epoch)}
    total = spe * cfg.epochs
    hist = {"step": [], "acc": [], "bos": [], "steps_per_epoch": spe, "above_step": None, "stopped_step": None,
            "diverged_step": None, "step_seconds": None, "train_seconds": 0.0}
    step0 = 0
    meta = _read_json(checkpoint + ".json") if checkpoint else None
    if meta is not None and current_names(meta.get("config") or {}) != cfg.to_dict():
        _remove_checkpoint(checkpoint, meta)  # written for another run setting: never resume it
        meta = None
    if meta is not None:
        model, opt_state = eqx.tree_deserialise_leaves(
            os.path.join(os.path.dirname(checkpoint), meta["leaves"]), (model, opt_state))
        hist, step0 = meta["history"], meta["step"]
        if hist["stopped_step"] is not None or hist.get("diverged_step") is not None:
            return model, hist

    timed, t_timed, perm_epoch, perm, bad, shapes = 0, 0.0, -1, None, False, set()
    start = time.perf_counter()
    bar = tqdm(total=total, initial=step0, desc=f"{cfg.task} {cfg.kernel}-{'norm' if cfg.normalization else 'raw'}",
               disable=not progress, leave=False)
    end = total if stop_after is None else min(total, step0 + stop_after)
    s = step0
    while s < end:
        epoch, i = divmod(s, spe)
        if epoch != perm_epoch:  # a fixed shuffle per epoch, so a resumed run sees the same batches
            perm_epoch = epoch
            perm = np.random.default_rng((cfg.seed, TASKS.index(cfg.task), epoch)).permutation(cfg.n_train)
        stop = min(epoch * spe + min(e for e in eval_at if e > i), end)  # up to the next evaluation
        batches = [perm[j * cfg.batch:(j + 1) * cfg.batch] for j in range(i, stop - epoch * spe)]
        groups = [[b for b in batches if len(b) == cfg.batch], [b for b in batches if len(b) < cfg.batch]]
        t0 = time.perf_counter()
        for group in groups:  # full batches in one scan; the short last batch of an epoch on its own
            if group:
                idx = np.stack(group)
                model, opt_state, losses = _steps(model, opt_state, x_tr[idx], y_tr[idx], cfg.task, cfg.aux_weight,
                                                  opt)
                losses = np.asarray(losses)
                bad |= not np.all(np.isfinite(losses))
                loss = losses[-1]
        shape = tuple(len(g) for g in groups)
        if shape in shapes:  # the first call of each shape compiles: not timed
            timed, t_timed = timed + len(batches), t_timed + time.perf_counter() - t0
        shapes.add(shape)
        bar.update(stop - s)
        s = stop
        if (s - epoch * spe) in eval_at:
            pred, maps = _forward(model, x_te)
            acc = float(np.mean(pred == _target(cfg, y_te)))
            hist["step"].append(s)
            hist["acc"].append(acc)
            if cfg.task == "induction":
                hist["bos"].append(_round(bos_share(maps, cfg.sink_rows)[-1]))
            bar.set_postfix(loss=f"{float(loss):.3f}", acc=f"{acc:.3f}")
            if bad:  # diverged: stop, and say so (its accuracy means nothing)
                hist["diverged_step"] = s
            if acc <= cfg.stop_acc:
                hist["above_step"] = None
            elif hist["above_step"] is None:
                hist["above_step"] = s
            if cfg.early_stop and hist["above_step"] is not None and s - hist["above_step"] >= spe:
                hist["stopped_step"] = s
            hist["timed_steps"] = hist.get("timed_steps", 0) + timed
            hist["timed_seconds"] = hist.get("timed_seconds", 0.0) + t_timed
            if hist["timed_steps"]:
                hist["step_seconds"] = hist["timed_seconds"] / hist["timed_steps"]
            hist["train_seconds"] += time.perf_counter() - start
            start, timed, t_timed = time.perf_counter(), 0, 0.0
            if checkpoint:
                _save_checkpoint(checkpoint, model, opt_state, {"step": s, "history": hist, "config": cfg.to_dict()})
            if hist["stopped_step"] is not None or hist.get("diverged_step") is not None:
                break
    bar.close()
    return model, hist


def _round(values) -> list:
    return [None if not np.isfinite(v) else round(float(v), 5) for v in np.ravel(values)]


# ----------------------------------------------------------------------------- measurements

def shares(w: np.ndarray) -> np.ndarray:
    """Row shares ``|w_ij| / Σ_j |w_ij|`` (rows summing to 0 stay 0)."""
    a = np.abs(np.asarray(w, np.float64))
    tot = a.sum(-1, keepdims=True)
    return np.divide(a, tot, out=np.zeros_like(a), where=tot > 0)


def sparsity(share: np.ndarray, rows) -> np.ndarray:
    """Per-head sparsity ``(L, H)``: mean over sequences and ``rows`` of the largest share in a row."""
    return share[..., rows, :].max(-1).mean(axis=(0, 3))


def bos_share(maps: np.ndarray, rows=(1, 9)) -> np.ndarray:
    """BOS share ``(L, H)`` of attention maps ``(N, L, H, T, T)`` (paper Sec. 4.1; the authors'
    ``rel_attn_bos_global``, averaged over sequences): for each sequence,
    ``Σ_{i in rows} w_i0 / Σ_{i in rows} Σ_j w_ij`` (``rows = (first, last)``, inclusive), then
    the mean over the ``N`` sequences. Raw weights, with the authors' ``+1e-9`` in the denominator.
    """
    first, last = rows
    block = np.asarray(maps, np.float64)[..., first:last + 1, :]
    per_seq = block[..., 0].sum(-1) / (block.sum(axis=(-2, -1)) + 1e-9)  # (N, L, H)
    return per_seq.mean(0)


def bos_share_rowwise(maps: np.ndarray, rows=(1, 10)) -> np.ndarray:
    """The earlier version's BOS share ``(L, H)``: the mean over sequences and ``rows`` of each
    row's share ``|w_i0| / Σ_j |w_ij|`` (kept for comparison; not the paper's measurement)."""
    first, last = rows
    return shares(maps)[..., first:last + 1, 0].mean(axis=(0, 3))


def measure_induction(model, cfg: RunConfig) -> dict:
    """Induction accuracy (last position), BOS shares, sink heads, sparsity and one example map,
    on the ``n_test`` evaluation sequences."""
    _, test_seed = _seeds(cfg)
    x, y = _data(cfg, test_seed, cfg.n_test)
    pred, maps = _forward(model, x)
    bos = bos_share(maps, cfg.sink_rows)
    share = shares(maps)
    return {
        "induction_acc": float(np.mean(pred == y[:, -1])),
        "bos_share": bos,
        "bos_share_rowwise": bos_share_rowwise(maps),
        "sink_heads": bos[-1] > 0.9,
        "sparsity": sparsity(share, slice(1, None)),  # row 0 sees only BOS
        "example_tokens": x[0],
        "example_maps": share[0],
    }


def flip_attack(model, x, y, n_pairs: int, rng: np.random.Generator, *, n_groups: int) -> np.ndarray:
    """The authors' one-token attack (paper Sec. 4.2; ``run_label_mixing_experiment``), per head.

    ``x (N, n+1)`` evaluation sequences ``[x_1 … x_n, CLS]`` and ``y (N,)`` labels. ``n_pairs``
    times: two different labels, then one sequence A of the first and B of the second, uniformly.
    For each head, its CLS-row weights on the ``n`` content tokens rank the tokens; the mixed
    sequence ``A→B`` holds A's top-1 token and B's other ``n − 1`` tokens, shuffled, then CLS;
    ``B→A`` likewise. Success: the model predicts the label of the sequence the top-1 token came
    from. The same pairs and shuffles serve every head.

    **Returns:** ``(L, H)`` success rates ``(mean_A + mean_B) / 2`` (the flip rate is their maximum).
    """
    y = np.asarray(y)
    labels = np.unique(y)
    by_label = {int(lab): np.flatnonzero(y == lab) for lab in labels}
    la = np.empty(n_pairs, int)
    lb = np.empty(n_pairs, int)
    for p in range(n_pairs):
        la[p], lb[p] = rng.choice(labels, 2, replace=False)
    a = np.array([rng.choice(by_label[int(lab)]) for lab in la])
    b = np.array([rng.choice(by_label[int(lab)]) for lab in lb])
    n = x.shape[1] - 1
    shuffle = np.argsort(rng.random((2, n_pairs, n)), axis=-1)
    maps = _maps(model, x)  # (N, L, H, T, T)
    L, H = maps.shape[1:3]
    out = np.zeros((L, H))
    rows = np.arange(n_pairs)[:, None]
    for li in range(L):
        for h in range(H):
            order = np.argsort(-maps[:, li, h, -1, :n], axis=-1, kind="stable")  # content tokens, by weight

            def mixed(top_of, rest_of, sh):
                toks = np.concatenate([x[top_of, order[top_of, 0]][:, None],
                                       x[rest_of[:, None], order[rest_of, 1:]]], axis=1)
                return np.concatenate([toks[rows, sh], np.full((n_pairs, 1), CLS, x.dtype)], axis=1)

            pred_a = _predict(model, mixed(a, b, shuffle[0]))
            pred_b = _predict(model, mixed(b, a, shuffle[1]))
            out[li, h] = (np.mean(pred_a == y[a]) + np.mean(pred_b == y[b])) / 2
    return out


def attack_pairs(pred: np.ndarray, y: np.ndarray, n_pairs: int, rng: np.random.Generator):
    """(``attack="swap-top"`` only.) Up to ``n_pairs`` ordered pairs ``(a, b)`` of correctly
    classified sequences with ``y[a] != y[b]``, drawn without replacement; empty if none exists."""
    ok = np.flatnonzero(np.asarray(pred) == np.asarray(y))
    a, b = np.meshgrid(ok, ok, indexing="ij")
    diff = y[a] != y[b]
    a, b = a[diff], b[diff]
    pick = rng.choice(len(a), min(n_pairs, len(a)), replace=False) if len(a) else np.zeros(0, int)
    return a[pick].astype(int), b[pick].astype(int)


def _swap_top_attack(model, x, y, pred, maps, n_pairs, rng) -> float:
    """The earlier version's attack: in A, the token the CLS row of the last layer attends to most
    (share averaged over heads) is replaced by B's; success = the prediction changes."""
    top = np.argmax(shares(maps)[:, -1, :, -1, :-1].mean(1), axis=-1)
    a_idx, b_idx = attack_pairs(pred, y, n_pairs, rng)
    x_att = x[a_idx].copy()
    x_att[np.arange(len(a_idx)), top[a_idx]] = x[b_idx, top[b_idx]]
    flipped = _predict(model, x_att) != pred[a_idx]
    return float(np.mean(flipped)) if len(flipped) else float("nan")


def measure_groups(model, cfg: RunConfig) -> dict:
    """Group accuracy, per-head sparsity (CLS row) and the flip attack on the ``n_test``
    evaluation sequences: ``flip_per_head (L, H)`` and ``flip_rate`` (their maximum) for
    ``attack="authors"`` (:func:`flip_attack`); for ``"swap-top"`` one rate, also in ``flip_rate``."""
    _, test_seed = _seeds(cfg)
    x, y = _data(cfg, test_seed, cfg.n_test)
    pred, maps = _forward(model, x)
    rng = np.random.default_rng(cfg.seed + 7)
    if cfg.attack == "authors":
        per_head = flip_attack(model, x, y, cfg.n_pairs, rng, n_groups=cfg.n_groups)
        rate = float(per_head.max())
    else:
        rate = _swap_top_attack(model, x, y, pred, maps, cfg.n_pairs, rng)
        per_head = np.full(maps.shape[1:3], rate)
    return {"group_acc": float(np.mean(pred == y)), "flip_rate": rate, "flip_per_head": per_head,
            "n_pairs": cfg.n_pairs, "sparsity": sparsity(shares(maps), slice(-1, None))}


def measure(model, cfg: RunConfig) -> dict:
    """:func:`measure_induction` or :func:`measure_groups`, by ``cfg.task``."""
    return measure_induction(model, cfg) if cfg.task == "induction" else measure_groups(model, cfg)


SCALARS = ("induction_acc", "group_acc", "flip_rate", "n_pairs")
CODE_MODULES = ("gradflow.sims.sec4.train", "gradflow.sims.sec4.model", "gradflow.sims.sec4.tasks",
                "gradflow.sims.sec4.kernels")
"""The modules whose source produces a run: training, the model, the data and the attention kernels."""


def code_hash() -> str:
    """Hash of the source of :data:`CODE_MODULES` (:func:`gradflow._provenance.source_hash`): a new
    run's result file records it, and the Sec. 4 figures key their cached data by it (instead of a
    hand-bumped version), so an edit to the training code recomputes them."""
    from gradflow._provenance import source_hash

    return source_hash(*CODE_MODULES)


def with_origin(res: dict, how: str, path: str) -> dict:
    """``res`` with ``res["origin"] = {"how": "trained" | "loaded", "path", "code_hash"}``: whether
    this call trained the run or loaded a finished result file, from where, and the code hash it
    was trained at (``None`` for runs trained before result files recorded it)."""
    rel = os.path.relpath(path)  # a committed run reads as figures/transformer-runs/…, not a machine's path
    return {**res, "origin": {"how": how, "path": path if rel.startswith("..") else rel, "code_hash": res.get("code_hash")}}


def run(cfg: RunConfig, cache_dir: str, *, progress: bool = True, search: tuple[str, ...] = ()) -> dict:
    """Train and measure run ``cfg``, or load it: ``DIR/NAME.npz`` (NAME = :func:`run_name`, which
    holds the hash of every setting, so a file of other settings is never taken for this one).

    **Arguments:** ``cfg``; ``cache_dir`` the folder results are written to (created if missing;
    checkpoints in ``cache_dir/ckpt/``, so a killed run resumes where it stopped); ``search``
    further folders holding finished results (e.g. the committed ones), looked in first.

    **Returns:** :func:`load_result`'s dict (config, history, measurements). The result file is
    written atomically once the model is measured.
    """
    name = run_name(cfg) + ".npz"
    for base in (*search, cache_dir):
        path = os.path.join(base, name)
        if os.path.exists(path):
            res = load_result(path)
            if res["config"] == cfg.to_dict():
                return with_origin(res, "loaded", path)
    ckpt = os.path.join(cache_dir, "ckpt")
    os.makedirs(ckpt, exist_ok=True)
    start = time.perf_counter()
    model, hist = train(cfg, checkpoint=os.path.join(ckpt, run_name(cfg)), progress=progress)
    arrays = measure(model, cfg)
    scalars = {k: arrays.pop(k) for k in SCALARS if k in arrays}
    meta = {"config": cfg.to_dict(), "name": run_name(cfg), "code_hash": code_hash(), **scalars, "history": hist,
            "diverged": hist.get("diverged_step") is not None, "measure_seconds": time.perf_counter() - start}
    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    path = os.path.join(cache_dir, name)
    atomic_write(path, lambda f: np.savez(f, meta=np.array(json.dumps(meta)), **arrays))
    return with_origin(load_result(path), "trained", path)


def load_result(path: str) -> dict:
    """A run's result file as a dict: the JSON part (``config``, ``history``, scalars) merged with
    the arrays (``bos_share``, ``sink_heads``, ``flip_per_head``, ``sparsity``, example maps).
    Times, in wall seconds: ``history["train_seconds"]`` the training over all resumes;
    ``measure_seconds`` the call that finished the run (its training since the last resume plus
    the measurement, so not to be added to ``train_seconds``).
    A missing, truncated or foreign file raises :class:`gradflow.GradflowValueError` naming it."""
    z = load_npz(path, required=("meta",), what="a transformer run's result file")
    out = json.loads(str(z.pop("meta")))
    if isinstance(out.get("config"), dict):
        out["config"] = current_names(out["config"])  # runs stored before a field's rename
    out.update(z)
    return out
