"""The kernel grid of Sec. 4: which variants, at which scale, and where their results live.

``python -m sims.transformer.sweep [--quick] [--variants NAME ...] [--seeds 0 1 …]`` trains the
missing runs one after another (resumable: kill it and start it again) into the git-ignored
cache ``.cache/transformer/MODE/``. Finished result files that are committed to the repository
(``figures/transformer-runs/MODE/``) are used first, so the gallery does not need the cache.
"""

from __future__ import annotations

import argparse
import os
import sys

from .train import RunConfig, groups_stopped_early, load_result, run, run_name

__all__ = ["VARIANTS", "QUICK_VARIANTS", "run_config", "find_result", "result_path", "collect", "CACHE",
           "COMMITTED"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.path.join(ROOT, ".cache", "transformer")
COMMITTED = os.path.join(ROOT, "figures", "transformer-runs")

VARIANTS: tuple[tuple[str, bool], ...] = (
    ("softmax", True), ("sigmoid", False), ("linear", False), ("sigmoid", True), ("linear", True),
    ("elu", False), ("elu", True), ("elu-elu", False), ("elu-elu", True), ("mlp", False), ("mlp", True),
)
"""The 11 Table 1 variants (softmax is only normalised), most informative first."""

QUICK_VARIANTS = VARIANTS[:3]
"""``--quick`` trains softmax, sigmoid without and linear without normalisation."""

PAPER = dict(d_model=128, n_layers=2, n_heads=4, n_train=100_000, epochs=10, batch=256, n_test=2000)
"""Paper scale (SPEC §7)."""

QUICK = dict(d_model=128, n_layers=2, n_heads=4, n_train=25_600, epochs=4, batch=128, n_test=1000,
             evals_per_epoch=2)
"""CI scale: the paper's model on about one paper epoch's worth of sequences (102k seen in 800
steps). That budget does not learn induction proper: the quick runs only learn that the target
is a context token (accuracy about 1/9, chance over the vocabulary 1/50); in our trials a
``d_model = 64`` model stayed there for 3000 steps too, and the paper-size run (batch 256) left
it after about 300 steps. Quick mode checks the pipeline end to end, not the paper's numbers."""


def variant_name(kernel: str, normalise: bool) -> str:
    return f"{kernel}-{'norm' if normalise else 'raw'}"


def run_config(kernel: str, normalise: bool, seed: int, quick: bool) -> RunConfig:
    return RunConfig(kernel=kernel, normalise=normalise, seed=seed, **(QUICK if quick else PAPER))


def _mode(quick: bool) -> str:
    return "quick" if quick else "paper"


def find_result(cfg: RunConfig, quick: bool) -> tuple[str, dict] | None:
    """``(path, result)`` of the finished result of ``cfg`` (committed first, then the cache), or
    ``None``; one whose group model was stopped early (an older version) only if there is no other."""
    found = []
    for base in (COMMITTED, CACHE):
        path = os.path.join(base, _mode(quick), run_name(cfg) + ".npz")
        if os.path.exists(path):
            res = load_result(path)
            if res["config"] == cfg.to_dict():
                if not groups_stopped_early(res):
                    return path, res
                found.append((path, res))
    return found[0] if found else None


def result_path(cfg: RunConfig, quick: bool) -> str | None:
    """The path of :func:`find_result`, or ``None``."""
    hit = find_result(cfg, quick)
    return hit[0] if hit else None


def collect(variants, seeds, quick: bool, *, train_missing: bool, progress: bool = True) -> dict:
    """Results per ``(variant name, seed)``. With ``train_missing``, missing runs are trained, and
    the group model of a result whose group model an older version stopped early is trained on
    (:func:`run`); without, missing runs are left out and such results are returned as they are."""
    out = {}
    for kernel, normalise in variants:
        for seed in seeds:
            cfg = run_config(kernel, normalise, seed, quick)
            hit = find_result(cfg, quick)
            res = hit[1] if hit else None
            if train_missing and (res is None or groups_stopped_early(res)):
                res = run(cfg, os.path.join(CACHE, _mode(quick)), progress=progress, previous=res)
            if res is not None:
                out[(variant_name(kernel, normalise), seed)] = res
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m sims.transformer.sweep", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="CI scale instead of paper scale")
    names = {variant_name(*v): v for v in VARIANTS}
    p.add_argument("--variants", nargs="*", default=None, choices=sorted(names), metavar="VARIANT",
                   help=f"variant names (default: all, in this order: {list(names)})")
    p.add_argument("--seeds", nargs="*", type=int, default=[0])
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    chosen = [names[n] for n in args.variants] if args.variants else list(VARIANTS)
    for v in chosen:
        for seed in args.seeds:
            res = collect([v], [seed], args.quick, train_missing=True, progress=not args.no_progress)
            r = res[(variant_name(*v), seed)]
            print(f"{r['name']}: induction acc {r['induction_acc']:.3f}, sink heads "
                  f"{int(r['sink_heads'].sum())}/{r['sink_heads'].size}, flip rate {r['flip_rate']:.3f}, "
                  f"stopped at step {r['history_induction']['stopped_step']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
