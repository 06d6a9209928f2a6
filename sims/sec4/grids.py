"""The run grids of Sec. 4: which runs, at which scale, and where their results live.

``python -m gradflow.sims.sec4.grids GRID [--quick] [--variants NAME ...] [--seeds 0 1 …]`` trains
the missing runs of a grid one after another (resumable: kill it and start it again) into the
run cache ``MODE/`` under :func:`cache_root` (``$GRADFLOW_RUNS_CACHE``, default
``~/.cache/gradflow/transformer``), then copies each finished result file into ``MODE/`` under
:func:`committed_root` (``$GRADFLOW_COMMITTED_RUNS``, default ``figures/transformer-runs`` of the
current folder, i.e. the repository's committed runs when run from its root; ``--commit-dir``)
for the gallery. Grids (paper Sec. 4,
the authors' ``sweeps/*.yaml`` as the paper's panels filter them):

- ``sinks``: induction runs, every variant at 4 heads, plus 1 head for softmax, sigmoid w/o
  norm and linear w/o norm (lr 1e-3; ``--lrs`` adds more, ``--heads`` changes the head counts);
- ``flips``: group runs at 1 layer × 1 head, vocab 41, MLP on/off × LayerNorm on/off;
- ``control``: the group run of softmax at 2 layers × 4 heads, MLP and LayerNorm on.
"""

from __future__ import annotations

import os
import shutil
import sys

from gradflow import GradflowValueError
from gradflow.internal import ArgumentParser
from gradflow.sims.sec4.train import (RunConfig, group_config, induction_config, load_result, run, run_name,
                                      with_origin)

__all__ = ["VARIANTS", "QUICK_VARIANTS", "variant_name", "induction_runs", "group_runs", "find_result",
           "collect", "cache_root", "committed_root", "RUNS_CACHE_ENV", "COMMITTED_RUNS_ENV", "QUICK_INDUCTION",
           "QUICK_GROUPS", "MLP_LN"]

RUNS_CACHE_ENV = "GRADFLOW_RUNS_CACHE"
"""Environment variable naming the folder of trained runs (checkpoints and results)."""
COMMITTED_RUNS_ENV = "GRADFLOW_COMMITTED_RUNS"
"""Environment variable naming the folder of committed (finished, read-first) results."""


def cache_root() -> str:
    """Folder of trained runs: ``$GRADFLOW_RUNS_CACHE``, else ``$XDG_CACHE_HOME/gradflow/transformer``
    (``~/.cache/gradflow/transformer``). Never inside the installed package."""
    if os.environ.get(RUNS_CACHE_ENV):
        return os.path.abspath(os.environ[RUNS_CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gradflow", "transformer")


def committed_root() -> str:
    """Folder of committed results: ``$GRADFLOW_COMMITTED_RUNS``, else ``figures/transformer-runs``
    of the current folder (the repository's gallery when run from its root, as the CLI's default
    ``--out`` is relative to it)."""
    return os.path.abspath(os.environ.get(COMMITTED_RUNS_ENV) or os.path.join("figures", "transformer-runs"))

VARIANTS: tuple[tuple[str, bool], ...] = (
    ("softmax", True), ("sigmoid", False), ("linear", False), ("sigmoid", True), ("linear", True),
    ("elu", False), ("elu", True), ("elu-elu", False), ("elu-elu", True), ("mlp", False), ("mlp", True),
)
"""The 11 Table 1 variants (softmax is only normalised), most informative first."""

QUICK_VARIANTS = VARIANTS[:3]
"""``--quick`` trains softmax, sigmoid without and linear without normalisation."""

ONE_HEAD_VARIANTS = VARIANTS[:3]
"""Variants that the sink grid also trains with 1 head."""

MLP_LN = ((True, True), (True, False), (False, True), (False, False))
"""``(use_mlp, use_layernorm)`` of the four flip panels (paper Sec. 4.2)."""

QUICK_INDUCTION = dict(d_model=64, n_train=19_200, epochs=8, batch=128, evals_per_epoch=2)
"""CI scale of the induction runs (the task, kernel, initialisation and loss as at paper scale):
d_model 64 and 19.2k sequences of batch 128 for 8 epochs (1,200 steps); 1,000 evaluation sequences."""

QUICK_GROUPS = dict(d_model=64)
"""CI scale of the group runs: the paper's (1 layer × 1 head, vocab 41, 10k sequences × 10
epochs of batch 256 = 400 steps, 500 attack pairs) at d_model 64, for two of the four
MLP × LayerNorm panels (:data:`QUICK_MLP_LN`) and without the 2 × 4 control."""

QUICK_MLP_LN = ((True, True), (False, False))


def variant_name(kernel: str, normalization: bool) -> str:
    return f"{kernel}-{'norm' if normalization else 'raw'}"


def induction_runs(quick: bool, seeds=(0,), lrs=(1e-3,), heads=(4,), one_head: bool = True) -> list[dict]:
    """Induction settings of the sink grid, as dicts of :class:`RunConfig` overrides (without
    kernel and normalisation): ``heads × lrs × seeds`` (quick: 4 heads, lr 1e-3, at
    :data:`QUICK_INDUCTION`), plus 1 head (for :data:`ONE_HEAD_VARIANTS` only) if ``one_head``."""
    base = QUICK_INDUCTION if quick else {}
    out = [{**base, "n_heads": h, "lr": lr, "seed": s} for h in heads for lr in lrs for s in seeds]
    if one_head and not quick:
        only = [variant_name(*v) for v in ONE_HEAD_VARIANTS]
        out += [{**base, "n_heads": 1, "lr": lr, "seed": s, "_only": only} for lr in lrs for s in seeds
                if 1 not in heads]
    return out


def group_runs(quick: bool, seeds=(0,), combos=MLP_LN, control: bool = True) -> list[dict]:
    """Group settings of the flip grid (overrides of :func:`group_config`): ``combos`` of
    ``(use_mlp, use_layernorm)`` × ``seeds`` at 1 layer × 1 head, plus (``control``) the
    2 layers × 4 heads softmax control with MLP and LayerNorm (softmax only). Quick:
    :data:`QUICK_GROUPS` for :data:`QUICK_MLP_LN`, no control."""
    base = QUICK_GROUPS if quick else {}
    combos = QUICK_MLP_LN if quick else combos
    out = [{**base, "use_mlp": m, "use_layernorm": ln, "seed": s} for m, ln in combos for s in seeds]
    if control and not quick:
        out += [{**base, "n_layers": 2, "n_heads": 4, "seed": s, "_only": ["softmax-norm"]} for s in seeds[:1]]
    return out


def applies(kernel: str, normalization: bool, settings: dict) -> bool:
    """Whether the grid runs ``settings`` for this variant: an ``"_only"`` key lists the variant
    names a setting is run for (the 1-head induction runs, the 2 × 4 group control)."""
    only = settings.get("_only")
    return only is None or variant_name(kernel, normalization) in only


def make_config(task: str, kernel: str, normalization: bool, settings: dict) -> RunConfig:
    """The :class:`RunConfig` of ``task`` for a variant and one grid setting (``_``-keys dropped)."""
    make = induction_config if task == "induction" else group_config
    return make(kernel, normalization, **{k: v for k, v in settings.items() if not k.startswith("_")})


def _mode(quick: bool) -> str:
    return "quick" if quick else "paper"


def find_result(cfg: RunConfig, quick: bool) -> tuple[str, dict] | None:
    """``(path, result)`` of the finished result of ``cfg`` (committed first, then the cache), or ``None``."""
    for base in (committed_root(), cache_root()):
        path = os.path.join(base, _mode(quick), run_name(cfg) + ".npz")
        if os.path.exists(path):
            res = load_result(path)
            if res["config"] == cfg.to_dict():
                return path, with_origin(res, "loaded", path)
    return None


def collect(task: str, variants, settings: list[dict], quick: bool, *, train_missing: bool,
            progress: bool = True) -> dict:
    """Results per ``(variant name, index into settings)``; with ``train_missing`` missing runs are
    trained (into the cache), without they are left out."""
    out = {}
    for kernel, normalization in variants:
        for j, s in enumerate(settings):
            if not applies(kernel, normalization, s):
                continue
            cfg = make_config(task, kernel, normalization, s)
            hit = find_result(cfg, quick)
            res = hit[1] if hit else None
            if res is None and train_missing:
                res = run(cfg, os.path.join(cache_root(), _mode(quick)), progress=progress)
            if res is not None:
                out[(variant_name(kernel, normalization), j)] = res
    return out


def main(argv=None) -> int:
    p = ArgumentParser(prog="python -m gradflow.sims.sec4.grids", description=__doc__.splitlines()[0])
    p.add_argument("grid", choices=["sinks", "flips", "control"])
    p.add_argument("--quick", action="store_true", help="CI scale instead of paper scale")
    names = {variant_name(*v): v for v in VARIANTS}
    p.add_argument("--variants", nargs="*", default=None, choices=sorted(names), metavar="VARIANT",
                   help=f"variant names (default: all, in this order: {list(names)})")
    p.add_argument("--seeds", nargs="*", type=int, default=[0])
    p.add_argument("--lrs", nargs="*", type=float, default=[1e-3])
    p.add_argument("--heads", nargs="*", type=int, default=[4])
    p.add_argument("--commit-dir", action="store_true",
                   help=f"copy each finished result into MODE/ under ${COMMITTED_RUNS_ENV} (default figures/transformer-runs)")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    chosen = [names[n] for n in args.variants] if args.variants else list(VARIANTS)
    if args.grid == "sinks":
        task, settings = "induction", induction_runs(args.quick, args.seeds, args.lrs, args.heads)
    elif args.grid == "flips":
        task, settings = "groups", group_runs(args.quick, args.seeds, control=False)
    else:
        task, settings = "groups", [s for s in group_runs(args.quick, args.seeds) if "_only" in s]
    try:  # every run's config built before the first run trains: a bad seed or lr is a usage error
        jobs = [(v, s, make_config(task, *v, s)) for s in settings for v in chosen if applies(*v, s)]
    except GradflowValueError as err:
        p.error(str(err))
    for v, s, cfg in jobs:
        res = collect(task, [v], [s], args.quick, train_missing=True, progress=not args.no_progress)
        r = res[(variant_name(*v), 0)]
        if args.commit_dir:
            dest = os.path.join(committed_root(), _mode(args.quick), run_name(cfg) + ".npz")
            if not os.path.exists(dest):
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                src = os.path.join(cache_root(), _mode(args.quick), run_name(cfg) + ".npz")
                shutil.copyfile(src, dest + ".tmp")
                os.replace(dest + ".tmp", dest)
        if task == "induction":
            line = (f"induction acc {r['induction_acc']:.3f}, layer-2 BOS shares "
                    f"{[round(float(b), 3) for b in r['bos_share'][-1]]}")
        else:
            line = f"group acc {r['group_acc']:.3f}, flip rate {r['flip_rate']:.3f}"
        print(f"{r['name']} {s}: {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
