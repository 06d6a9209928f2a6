"""Shared config and data of the five Sec. 4 figures (SPEC §7): one table of runs, many views.

Every figure id (``sinks-induction``, ``accuracy-induction``, ``flip-rate``, ``sparsity-heads``,
``attn-patterns``) gathers the same per-run results (``sims.transformer.sweep.collect``) into
arrays indexed ``[variant, seed, …]`` (NaN / ``available = False`` where a run is missing) and
plots its own view. Runs are cached one file per ``(kernel, normalise, seed)``, so the first
figure trains and the others load.

Scale and cost (2 CPU cores): ``--quick`` trains 3 variants (softmax, sigmoid and linear
without normalisation) of the paper-size model on 25.6k sequences for at most 800 steps of
batch 128, one seed: 425 s for the five figures in a fresh-clone CI run. Paper scale trains
the 11 variants on 100k sequences (a training step of batch 256 takes 0.18–0.22 s on idle
cores, 0.8–3.8 s on shared ones; ≈ 25 min per variant whose induction model does not stop
early, group model included); it trains only the runs that have no result file yet, and the
group model of a result written when group models still stopped early (their induction part is
kept), resuming from checkpoints. Set ``GRADFLOW_SEC4_TRAIN=0`` to plot from the finished runs only
(missing variants are labelled in the figures).
"""

from __future__ import annotations

import os

import numpy as np

from .transformer.sweep import QUICK_VARIANTS, VARIANTS, collect, find_result, run_config, variant_name
from .transformer.train import groups_stopped_early

__all__ = ["config", "compute", "VARIANT_LABELS", "variant_label"]

SEEDS = (0,)  # compute budget: one seed, while SPEC §7 asks for SPEC_SEEDS (stated on every figure)
SPEC_SEEDS = (0, 1, 2, 3, 4)


def seed_note(cfg: dict) -> dict:
    """``{"seeds": [...], "spec_seeds": [0, ..., 4]}``: the seeds run vs. those SPEC §7 asks for,
    merged into every Sec. 4 figure's summary so the deviation is on record."""
    return {"seeds": list(cfg["seeds"]), "spec_seeds": list(SPEC_SEEDS)}


def figure(id: str, title: str, plot, summary):
    """The registry entry of a Sec. 4 figure: the shared :func:`config` and :func:`compute`,
    hours-long at paper scale, and ``summary`` with :func:`seed_note` merged in."""
    from ._registry import Figure

    return Figure(id=id, title=title, config=config, compute=compute, plot=plot,
                  summary=lambda data, cfg: {**seed_note(cfg), **summary(data, cfg)}, long_paper_scale=True,
                  version=2)  # 2: group models train every epoch


def per_variant(row):
    """A figure summary ``(data, cfg) -> {variant: row(data, cfg, i)}`` over ``cfg["variants"]``
    (``data`` :func:`unpack`-ed first), ``None`` for a variant without any available run."""
    def summary(data: dict, cfg: dict) -> dict:
        data = unpack(data)
        return {name: row(data, cfg, i) if data["available"][i].any() else None
                for i, name in enumerate(cfg["variants"])}
    return summary


def _train_missing(quick: bool) -> bool:
    return quick or os.environ.get("GRADFLOW_SEC4_TRAIN", "1") != "0"


def config(quick: bool) -> dict:
    """Figure config: scale, variants, seeds, the run settings, and (paper scale) which runs
    are finished, so the cached figure data is recomputed when a new run lands."""
    variants = QUICK_VARIANTS if quick else VARIANTS
    run = run_config("softmax", True, 0, quick).to_dict()
    for key in ("kernel", "normalise", "seed"):
        run.pop(key)
    cfg = {"scale": "quick" if quick else "paper", "variants": [variant_name(*v) for v in variants],
           "seeds": list(SEEDS), "run": run, "train_missing": _train_missing(quick)}
    if not quick:
        hits = {variant_name(k, n) + f"-s{s}": find_result(run_config(k, n, s, quick), quick)
                for k, n in variants for s in SEEDS}
        cfg["finished"] = [name + (" (groups stopped early)" if groups_stopped_early(hit[1]) else "")
                           for name, hit in hits.items() if hit is not None]
    return cfg


def compute(cfg: dict, progress: bool = False) -> dict[str, np.ndarray]:
    """Arrays ``[V, S, …]`` over variants × seeds (see the module docstring)."""
    quick = cfg["scale"] == "quick"
    names = cfg["variants"]
    variants = [v for v in VARIANTS if variant_name(*v) in names]
    variants.sort(key=lambda v: names.index(variant_name(*v)))
    res = collect(variants, cfg["seeds"], quick, train_missing=cfg["train_missing"], progress=progress)
    V, S = len(variants), len(cfg["seeds"])
    L, H, T = cfg["run"]["n_layers"], cfg["run"]["n_heads"], cfg["run"]["n_context"] + 2
    n_evals = cfg["run"]["epochs"] * cfg["run"]["evals_per_epoch"] + 1
    out = {
        "available": np.zeros((V, S), bool),
        "induction_acc": np.full((V, S), np.nan), "group_acc": np.full((V, S), np.nan),
        "flip_rate": np.full((V, S), np.nan), "n_pairs": np.zeros((V, S), int),
        "bos_share": np.full((V, S, L, H), np.nan),
        "sparsity_induction": np.full((V, S, L, H), np.nan), "sparsity_groups": np.full((V, S, L, H), np.nan),
        "example_maps": np.full((V, S, L, H, T, T), np.nan), "example_tokens": np.zeros((V, S, T), int),
        "curve_step": np.full((V, S, n_evals), np.nan), "curve_acc": np.full((V, S, n_evals), np.nan),
        "steps_per_epoch": np.zeros((V, S), int),
        "above_step": np.full((V, S), np.nan), "stopped_step": np.full((V, S), np.nan),
        "stopped_step_groups": np.full((V, S), np.nan),
        "diverged_step": np.full((V, S), np.nan), "diverged_step_groups": np.full((V, S), np.nan),
        "step_seconds": np.full((V, S), np.nan), "train_seconds": np.full((V, S), np.nan),
    }
    for i, v in enumerate(variants):
        for j, seed in enumerate(cfg["seeds"]):
            r = res.get((variant_name(*v), seed))
            if r is None:
                continue
            hi, hg = r["history_induction"], r["history_groups"]
            out["available"][i, j] = True
            keys = ["example_tokens"]  # a diverged model's measurements are left missing (NaN)
            if not hi.get("diverged_step"):
                keys += ["induction_acc", "bos_share", "sparsity_induction", "example_maps"]
            if not hg.get("diverged_step"):
                keys += ["group_acc", "flip_rate", "n_pairs", "sparsity_groups"]
            for key in keys:
                out[key][i, j] = r[key]
            n = len(hi["step"])
            out["curve_step"][i, j, :n], out["curve_acc"][i, j, :n] = hi["step"], hi["acc"]
            out["steps_per_epoch"][i, j] = hi["steps_per_epoch"]
            for key, h, src in (("above_step", hi, "above_step"), ("stopped_step", hi, "stopped_step"),
                                ("stopped_step_groups", hg, "stopped_step"), ("diverged_step", hi, "diverged_step"),
                                ("diverged_step_groups", hg, "diverged_step")):
                if h.get(src) is not None:
                    out[key][i, j] = h[src]
            out["step_seconds"][i, j] = hi["step_seconds"] or np.nan
            out["train_seconds"][i, j] = hi["train_seconds"] + hg["train_seconds"]
    # the figure cache refuses non-finite data: "missing" is stored as -1 (every measured
    # quantity here is >= 0) and turned back into NaN by unpack() before plotting
    return {k: np.where(np.isnan(v), MISSING, v) if v.dtype.kind == "f" else v for k, v in out.items()}


MISSING = -1.0


def finite(values) -> list:
    """A JSON-safe list: NaN (missing) becomes ``None``, numbers are rounded to 4 digits."""
    return [None if not np.isfinite(v) else round(float(v), 4) for v in np.ravel(values)]


def nested(values, digits: int = 3) -> list:
    """A JSON-safe nested list of the array ``values``: NaN becomes ``None``, numbers rounded."""
    a = np.asarray(values, float)
    return np.where(np.isfinite(a), np.round(a, digits), None).tolist()


def unpack(data: dict) -> dict:
    """Figure data with the ``MISSING`` sentinel of float arrays replaced by NaN."""
    return {k: np.where(v == MISSING, np.nan, v) if np.asarray(v).dtype.kind == "f" else v
            for k, v in data.items()}


VARIANT_LABELS = {"softmax": "softmax", "sigmoid": "sigmoid", "elu": "elu+1", "elu-elu": "elu·elu",
                  "mlp": "mlp", "linear": "linear"}


def variant_label(name: str) -> str:
    """``sigmoid-raw`` -> ``sigmoid w/o norm`` (softmax is always normalised)."""
    kernel, norm = name.rsplit("-", 1)
    if kernel == "softmax":
        return "softmax"
    return f"{VARIANT_LABELS[kernel]} {'norm' if norm == 'norm' else 'w/o norm'}"


def kept(data: dict, stop_acc: float = 0.95) -> np.ndarray:
    """Runs that count for the sink statistic: available and induction accuracy > ``stop_acc``."""
    return data["available"] & (np.nan_to_num(data["induction_acc"]) > stop_acc)


def sink_percent(data: dict) -> np.ndarray:
    """% of layer-2 heads with BOS share > 0.9 per variant, over kept runs (NaN if none kept)."""
    keep = kept(data)
    sinks = data["bos_share"][:, :, -1, :] > 0.9  # (V, S, H)
    out = np.full(keep.shape[0], np.nan)
    for i in range(keep.shape[0]):
        if keep[i].any():
            out[i] = 100 * sinks[i][keep[i]].mean()
    return out


def sink_percent_all(data: dict) -> np.ndarray:
    """As :func:`sink_percent` but over every available run, whatever its accuracy (diverged runs,
    whose ``bos_share`` is NaN, are left out)."""
    sinks = data["bos_share"][:, :, -1, :] > 0.9
    measured = data["available"] & np.isfinite(data["bos_share"][:, :, -1, 0])  # not diverged
    out = np.full(sinks.shape[0], np.nan)
    for i in range(sinks.shape[0]):
        if measured[i].any():
            out[i] = 100 * sinks[i][measured[i]].mean()
    return out


KERNEL_ORDER = ("softmax", "sigmoid", "elu", "elu-elu", "mlp", "linear")


def bars_by_kernel(ax, values: np.ndarray, cfg: dict, *, ylabel: str, fmt: str = "{:.0f}",
                   available: np.ndarray | None = None, all_variants: bool = True, top: float = 1.0,
                   legend_loc: str = "upper right", ran_label: str = "no run > 0.95",
                   diverged: np.ndarray | None = None) -> None:
    """Grouped bars: x = kernel, filled = normalised, hatched = without normalisation.

    ``values[i]`` belongs to ``cfg["variants"][i]``; NaN or unavailable variants are written
    "not run" (or "no run > 0.95" when the run exists), and with ``all_variants`` every Table 1
    variant gets a slot so missing ones are visible; ``ran_label`` is the text for a NaN value
    of a variant whose run exists, "diverged" where ``diverged[i]`` (the step at which the
    training loss turned non-finite, NaN otherwise) is finite for every seed.
    """
    import matplotlib.pyplot as plt

    names = list(cfg["variants"])
    grid = [variant_name(k, n) for k in KERNEL_ORDER for n in (True, False) if not (k == "softmax" and not n)]
    if not all_variants:
        grid = [g for g in grid if g in names]
    kernels = [k for k in KERNEL_ORDER if any(g.rsplit("-", 1)[0] == k for g in grid)]
    width = 0.38
    cmap = plt.get_cmap("tab10")
    top = max(float(np.nanmax(values)) if np.any(np.isfinite(values)) else 0.0, top)
    for xi, kernel in enumerate(kernels):
        for norm in (True, False):
            name = variant_name(kernel, norm)
            if name not in grid:
                continue
            x = xi if kernel == "softmax" else xi + (-width / 2 if norm else width / 2)
            i = names.index(name) if name in names else None
            val = values[i] if i is not None else np.nan
            if np.isfinite(val):
                ax.bar(x, val, width=width, color=cmap(xi), alpha=0.9 if norm else 0.45,
                       hatch=None if norm else "///", edgecolor="k", linewidth=0.5)
                ax.text(x, val + 0.02 * top, fmt.format(val), ha="center", va="bottom", fontsize=5.5)
            else:
                ran = i is not None and available is not None and bool(np.asarray(available[i]).any())
                gone = (i is not None and diverged is not None and ran
                        and bool(np.all(np.isfinite(np.asarray(diverged[i])[np.asarray(available[i])]))))
                label = "diverged" if gone else ran_label if ran else "not run"
                ax.text(x, 0.02 * top, label, ha="center", va="bottom",
                        fontsize=5, color="0.35", rotation=90)
    ax.set_xticks(range(len(kernels)), [VARIANT_LABELS[k] for k in kernels])
    ax.set_ylabel(ylabel)
    from matplotlib.patches import Patch

    ax.legend([Patch(facecolor="0.5", edgecolor="k"), Patch(facecolor="0.8", hatch="///", edgecolor="k")],
              ["normalised", "w/o normalisation"], loc=legend_loc, fontsize=6)


def scale_note(cfg: dict, data: dict) -> str:
    """One line for a figure's title: scale, model size, runs present / planned."""
    r = cfg["run"]
    have = int(data["available"].sum())
    want = len(cfg["variants"]) * len(cfg["seeds"])
    return (f"{cfg['scale']} scale: {r['n_layers']} layers, $d$={r['d_model']}, {r['n_heads']} heads, "
            f"{r['n_train']} seq., ≤{r['epochs']} epochs; {have}/{want} runs; {_seed_text(cfg)}")


def _seed_text(cfg: dict) -> str:
    seeds = list(cfg["seeds"])
    if seeds == list(SPEC_SEEDS):
        return f"seeds {SPEC_SEEDS[0]}–{SPEC_SEEDS[-1]}"
    return (f"seed {seeds[0]} only" if len(seeds) == 1 else f"seeds {seeds}") + \
        f" (SPEC: {SPEC_SEEDS[0]}–{SPEC_SEEDS[-1]})"
