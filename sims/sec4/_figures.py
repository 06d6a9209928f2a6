"""Shared config and data of the five Sec. 4 figures: one table of runs, many views.

The figures (``sinks-induction``, ``accuracy-induction``, ``flip-rate``, ``sparsity-heads``,
``attn-patterns``) read the same per-run results (``gradflow.sims.sec4.grids.collect``), run as the
authors' code runs them (``tml-epfl/softmax``; paper Sec. 4): induction runs of the sink grid
(every variant at 4 heads; at paper scale also 1 head for softmax, sigmoid and linear w/o norm)
and group runs of the flip grid (1 layer × 1 head, vocab 41, MLP on/off × LayerNorm on/off, and
the 2 layers × 4 heads softmax control). Each figure gathers only the task it shows, so in a
fresh build ``sinks-induction`` trains the induction runs, ``flip-rate`` the group runs, and
the others load them (runs are cached one file per setting, named by a hash of the settings).

Scale: ``--quick`` (CI) trains 3 variants (softmax, sigmoid and linear w/o norm) at a smaller
but faithful configuration (``QUICK_INDUCTION`` / ``QUICK_GROUPS`` in
``sims/sec4/grids.py``: same tasks, model, initialisation, loss and measurements; d_model
64 and fewer sequences), stated in every figure. Paper scale trains the 11 variants (hours on 2
CPU cores: a 10-epoch induction run is 3,910 steps); it trains only the runs that have no
result file yet (committed ones in ``figures/transformer-runs/paper/`` first). Set
``GRADFLOW_SEC4_TRAIN=0`` to plot from the finished runs only (missing runs are labelled).
"""

from __future__ import annotations

import json
import os

import numpy as np

from gradflow.sims import style
from gradflow.sims.sec4.grids import (QUICK_VARIANTS, VARIANTS, applies, collect, find_result, group_runs, induction_runs,
                                make_config, variant_name)
from gradflow.sims.sec4.train import code_hash, run_name

__all__ = ["config", "compute", "VARIANT_LABELS", "variant_label", "figure"]

SEEDS = (0,)  # compute budget: one seed, while the paper's grids use seeds 0–4 (stated on every figure)
PAPER_SEEDS = (0, 1, 2, 3, 4)
GROUP_SEEDS = PAPER_SEEDS
"""Seeds of the paper-scale flip grid: the authors' seeds 0–4 (a group run trains in seconds to
minutes on 2 cores, an induction run in 12–140 min). The quick scale and the induction grid use :data:`SEEDS`."""
OLD_STOP_STEP = 1649
"""The step at which an earlier, unfaithful version of our softmax run stopped early (epoch 4.2)."""


def seed_note(cfg: dict) -> dict:
    """``{"seeds": [...], "paper_seeds": [0, ..., 4]}`` (and ``"group_seeds"`` for the group
    task): the seeds run vs. the authors' grid."""
    out = {"seeds": list(cfg["seeds"]), "paper_seeds": list(PAPER_SEEDS)}
    if "group_seeds" in cfg:
        out["group_seeds"] = list(cfg["group_seeds"])
    return out


def figure(id: str, title: str, plot, summary, tasks=("induction", "groups")):
    """The registry entry of a Sec. 4 figure showing ``tasks``: the shared :func:`config` and
    :func:`compute` (hours-long at paper scale), ``summary`` with :func:`seed_note` merged in."""
    from gradflow.sims.build import Figure

    return Figure(id=id, title=title, config=lambda quick: config(quick, tasks), compute=compute, plot=plot,
                  summary=lambda data, cfg: {**seed_note(cfg), **summary(data, cfg), "runs": runs(data)},
                  long_paper_scale=True)


def runs(data: dict) -> list[dict]:
    """Per run behind the figure: its name, whether this build trained it or loaded it, from which
    file, and the code hash it was trained at (``compute``'s ``runs_origin``)."""
    return json.loads(str(data["runs_origin"])) if "runs_origin" in data else []


def per_variant(row):
    """A figure summary ``(data, cfg) -> {variant: row(data, cfg, i)}`` over ``cfg["variants"]``
    (``data`` :func:`unpack`-ed first), ``None`` for a variant without any available run."""
    def summary(data: dict, cfg: dict) -> dict:
        data = unpack(data)
        have = np.zeros(len(cfg["variants"]), bool)
        for key in ("ind_available", "grp_available"):
            if key in data:
                have |= data[key].any(axis=1)
        return {name: row(data, cfg, i) if have[i] else None for i, name in enumerate(cfg["variants"])}
    return summary


def _train_missing(quick: bool) -> bool:
    return quick or os.environ.get("GRADFLOW_SEC4_TRAIN", "1") != "0"


def _public(settings: dict) -> dict:
    return {k: v for k, v in settings.items() if not k.startswith("_")}


def _recorded(task: str, settings: dict) -> dict:
    """The settings a figure records for one grid entry (the full config minus kernel/normalization)."""
    d = make_config(task, "softmax", True, settings).to_dict()
    for key in ("kernel", "normalization", "task"):
        d.pop(key)
    if "_only" in settings:
        d["only_variants"] = settings["_only"]
    return d


def config(quick: bool, tasks=("induction", "groups")) -> dict:
    """Figure config: scale, variants, seeds, the grid settings of each shown task (every
    :class:`~gradflow.sims.sec4.train.RunConfig` field: ``n_layers``, ``n_heads``, ``vocab``,
    ``shift_query``, ``early_stop``, ``lr``, ``sink_rows`` …) and whether missing runs are trained."""
    variants = QUICK_VARIANTS if quick else VARIANTS
    cfg = {"scale": "quick" if quick else "paper", "code_hash": code_hash(), "variants": [variant_name(*v) for v in variants],
           "seeds": list(SEEDS), "tasks": list(tasks), "train_missing": _train_missing(quick)}
    if "induction" in tasks:
        cfg["induction_runs"] = [_recorded("induction", s) for s in induction_runs(quick, SEEDS)]
    if "groups" in tasks:
        group_seeds = SEEDS if quick else GROUP_SEEDS
        cfg["group_seeds"] = list(group_seeds)
        cfg["group_runs"] = [_recorded("groups", s) for s in group_runs(quick, group_seeds)]
    if not quick:  # which runs are finished: the cached figure data is recomputed when one lands
        cfg["finished"] = sorted(
            run_name(make_config(task, k, n, s)) for task in tasks for k, n in variants
            for s in _settings(cfg, task) if applies(k, n, s)
            and find_result(make_config(task, k, n, s), quick) is not None)
    return cfg


def _settings(cfg: dict, task: str) -> list[dict]:
    """Back from the recorded settings to grid settings (``only_variants`` -> ``_only``)."""
    out = []
    for d in cfg["induction_runs" if task == "induction" else "group_runs"]:
        s = {k: v for k, v in d.items() if k != "only_variants"}
        s["sink_rows"] = tuple(s["sink_rows"])
        if "only_variants" in d:
            s["_only"] = d["only_variants"]
        out.append(s)
    return out


MISSING = -1e30
"""Stored for a missing value (the figure cache refuses NaN); :func:`unpack` turns it into NaN."""



def _each_run(res: dict, variants, n_settings: int, available: np.ndarray):
    """``(variant index, setting index, result, history)`` of every finished run in ``res``
    (as :func:`gradflow.sims.sec4.grids.collect` returns it), marking ``available[i, j]``."""
    for i, v in enumerate(variants):
        for j in range(n_settings):
            res_ = res.get((variant_name(*v), j))
            if res_ is not None:
                available[i, j] = True
                yield i, j, res_, res_["history"]

def compute(cfg: dict, progress: bool = False) -> dict[str, np.ndarray]:
    """Arrays over variants × grid settings: ``ind_*`` ``[V, R, …]`` for the induction runs,
    ``grp_*`` ``[V, G, …]`` for the group runs (NaN / ``available = False`` where a run is missing)."""
    quick = cfg["scale"] == "quick"
    names = cfg["variants"]
    variants = sorted([v for v in VARIANTS if variant_name(*v) in names], key=lambda v: names.index(variant_name(*v)))
    V = len(variants)
    out: dict[str, np.ndarray] = {}
    origin_runs: list[dict] = []
    if "induction" in cfg["tasks"]:
        settings = _settings(cfg, "induction")
        res = collect("induction", variants, settings, quick, train_missing=cfg["train_missing"], progress=progress)
        origin_runs += list(res.values())
        R = len(settings)
        L = max(s["n_layers"] for s in cfg["induction_runs"])
        H = max(s["n_heads"] for s in cfg["induction_runs"])
        T = cfg["induction_runs"][0]["n_context"] + 2
        E = max(s["epochs"] * s["evals_per_epoch"] for s in cfg["induction_runs"])
        o = {
            "ind_available": np.zeros((V, R), bool), "induction_acc": np.full((V, R), np.nan),
            "bos_share": np.full((V, R, L, H), np.nan), "bos_share_rowwise": np.full((V, R, L, H), np.nan),
            "sparsity_induction": np.full((V, R, L, H), np.nan),
            "example_maps": np.full((V, L, H, T, T), np.nan), "example_tokens": np.zeros((V, T), int),
            "curve_step": np.full((V, R, E), np.nan), "curve_acc": np.full((V, R, E), np.nan),
            "curve_bos": np.full((V, R, E, H), np.nan), "steps_per_epoch": np.ones((V, R), int),
            "diverged_step": np.full((V, R), np.nan), "step_seconds": np.full((V, R), np.nan),
            "train_seconds": np.full((V, R), np.nan),
        }
        for i, r, res_, h in _each_run(res, variants, R, o["ind_available"]):
            nh = res_["bos_share"].shape[-1]
            if not h.get("diverged_step"):  # a diverged model's measurements are left missing
                o["induction_acc"][i, r] = res_["induction_acc"]
                o["bos_share"][i, r, :, :nh] = res_["bos_share"]
                o["bos_share_rowwise"][i, r, :, :nh] = res_["bos_share_rowwise"]
                o["sparsity_induction"][i, r, :, :nh] = res_["sparsity"]
                if r == 0:
                    o["example_maps"][i, :, :nh] = res_["example_maps"]
            if r == 0:
                o["example_tokens"][i] = res_["example_tokens"]
            n = len(h["step"])
            o["curve_step"][i, r, :n], o["curve_acc"][i, r, :n] = h["step"], h["acc"]
            o["curve_bos"][i, r, :n, :nh] = np.array([[np.nan if b is None else b for b in row]
                                                      for row in h["bos"]], float)
            o["steps_per_epoch"][i, r] = h["steps_per_epoch"]
            if h.get("diverged_step") is not None:
                o["diverged_step"][i, r] = h["diverged_step"]
            o["step_seconds"][i, r] = h["step_seconds"] or np.nan
            o["train_seconds"][i, r] = h["train_seconds"]
        out.update(o)
    if "groups" in cfg["tasks"]:
        settings = _settings(cfg, "groups")
        res = collect("groups", variants, settings, quick, train_missing=cfg["train_missing"], progress=progress)
        origin_runs += list(res.values())
        G = len(settings)
        L = max(s["n_layers"] for s in cfg["group_runs"])
        H = max(s["n_heads"] for s in cfg["group_runs"])
        o = {
            "grp_available": np.zeros((V, G), bool), "group_acc": np.full((V, G), np.nan),
            "flip_rate": np.full((V, G), np.nan), "flip_per_head": np.full((V, G, L, H), np.nan),
            "sparsity_groups": np.full((V, G, L, H), np.nan), "diverged_step_groups": np.full((V, G), np.nan),
            "train_seconds_groups": np.full((V, G), np.nan),
        }
        for i, g, res_, h in _each_run(res, variants, G, o["grp_available"]):
            nl, nh = res_["flip_per_head"].shape
            if h.get("diverged_step") is None:
                o["group_acc"][i, g] = res_["group_acc"]
                o["flip_rate"][i, g] = res_["flip_rate"]
                o["flip_per_head"][i, g, :nl, :nh] = res_["flip_per_head"]
                o["sparsity_groups"][i, g, :nl, :nh] = res_["sparsity"]
            else:
                o["diverged_step_groups"][i, g] = h["diverged_step"]
            o["train_seconds_groups"][i, g] = h["train_seconds"]
        out.update(o)
    out = {k: np.where(np.isnan(v), MISSING, v) if v.dtype.kind == "f" else v for k, v in out.items()}
    origins = [{"name": r.get("name"), **r["origin"]} for r in origin_runs if "origin" in r]
    out["runs_origin"] = np.array(json.dumps(origins))
    return out


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
    """Induction runs that count for the sink statistic: available and accuracy > ``stop_acc``
    (the authors' filter)."""
    return data["ind_available"] & (np.nan_to_num(data["induction_acc"]) > stop_acc)


def _sink_percent(data: dict, keep: np.ndarray, bounded: bool = False) -> np.ndarray:
    sinks = data["bos_share"][:, :, -1, :]  # (V, R, H), NaN beyond a run's heads
    out = np.full(keep.shape[0], np.nan)
    for i in range(keep.shape[0]):
        heads = sinks[i][keep[i]]
        heads = heads[np.isfinite(heads)]
        if heads.size:
            sink = heads > 0.9
            if bounded:
                sink &= heads <= SHARE_MAX
            out[i] = 100 * np.mean(sink)
    return out


SHARE_MAX = 1.0 + 1e-6
"""A share above this is possible only for a signed kernel (mlp, linear), where a row's weights can
sum to about 0, so that Σ BOS / Σ all is unbounded: it is not a fraction of the attention."""


def sink_percent_bounded(data: dict) -> np.ndarray:
    """As :func:`sink_percent`, counting only heads whose BOS share is a fraction: 0.9 < share ≤ 1.
    Differs from the authors' count only for the signed kernels (mlp, linear), whose share can
    exceed 1 (or be negative) when a row's weights sum to about 0."""
    return _sink_percent(data, kept(data), bounded=True)


def sink_percent(data: dict) -> np.ndarray:
    """% of last-layer heads with BOS share > 0.9 per variant, pooled over the heads of every kept
    run (NaN if none kept)."""
    return _sink_percent(data, kept(data))


def sink_percent_all(data: dict) -> np.ndarray:
    """As :func:`sink_percent` over every measured run, whatever its accuracy."""
    return _sink_percent(data, data["ind_available"])


KERNEL_ORDER = ("softmax", "sigmoid", "elu", "elu-elu", "mlp", "linear")


BAR_WIDTH = 0.38


def _slots(all_variants: bool, names) -> tuple[list[str], list[str]]:
    """The variants given a bar slot (every Table 1 variant, or only ``names``) and their kernels, in order."""
    grid = [variant_name(k, n) for k in KERNEL_ORDER for n in (True, False) if not (k == "softmax" and not n)]
    if not all_variants:
        grid = [g for g in grid if g in names]
    return grid, [k for k in KERNEL_ORDER if any(g.rsplit("-", 1)[0] == k for g in grid)]


def bar_position(name: str, all_variants: bool = True, names=None) -> float:
    """x of variant ``name``'s bar in :func:`bars_by_kernel` (with every Table 1 variant slotted)."""
    _, kernels = _slots(all_variants, names)
    kernel, norm = name.rsplit("-", 1)
    xi = kernels.index(kernel)
    return xi if kernel == "softmax" else xi + (-BAR_WIDTH / 2 if norm == "norm" else BAR_WIDTH / 2)


def bars_by_kernel(ax, values: np.ndarray, cfg: dict, *, ylabel: str, fmt: str = "{:.0f}",
                   available: np.ndarray | None = None, all_variants: bool = True, top: float = 1.0,
                   ran_label: str = "no run > 0.95", diverged: np.ndarray | None = None,
                   legend: bool = True, points: list | None = None, notes: list | None = None) -> None:
    """Grouped bars: x = kernel, filled = normalised, hatched = without normalisation.

    ``values[i]`` belongs to ``cfg["variants"][i]``; NaN or unavailable variants are written
    "not run" (or ``ran_label`` when the run exists, "diverged" where ``diverged[i]`` is finite
    for every available run), and with ``all_variants`` every Table 1 variant gets a slot so
    missing ones are visible. The legend goes above the axes, clear of the bars. ``points[i]``:
    the single runs behind a bar (e.g. one per seed of a mean), drawn as dots on it; ``notes[i]``:
    text appended to the bar's value label.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    names = list(cfg["variants"])
    grid, kernels = _slots(all_variants, names)
    width = BAR_WIDTH
    cmap = plt.get_cmap("tab10")
    top = max(float(np.nanmax(values)) if np.any(np.isfinite(values)) else 0.0, top)
    for xi, kernel in enumerate(kernels):
        for norm in (True, False):
            name = variant_name(kernel, norm)
            if name not in grid:
                continue
            x = bar_position(name, all_variants, names)
            i = names.index(name) if name in names else None
            val = values[i] if i is not None else np.nan
            if np.isfinite(val):
                ax.bar(x, val, width=width, color=cmap(xi), alpha=0.9 if norm else 0.45,
                       hatch=None if norm else "///", edgecolor="k", linewidth=0.5)
                if points is not None and len(points[i]) > 1:
                    ax.scatter(np.full(len(points[i]), x), points[i], s=5, color="k", zorder=3, linewidths=0)
                text = fmt.format(val) + (notes[i] if notes is not None else "")
                # upright if short; labels like "0.00" of adjacent bars would touch
                above = max(val, float(np.max(points[i]))) if points is not None and len(points[i]) else val
                ax.text(x, above + 0.02 * top, text, ha="center", va="bottom", fontsize=style.NOTE,
                        rotation=90 if len(text) > 3 else 0)
            else:
                ran = i is not None and available is not None and bool(np.asarray(available[i]).any())
                gone = (i is not None and diverged is not None and ran
                        and bool(np.all(np.isfinite(np.asarray(diverged[i])[np.asarray(available[i])]))))
                label = "diverged" if gone else ran_label if ran else "not run"
                ax.text(x, 0.02 * top, label, ha="center", va="bottom", fontsize=style.NOTE, color="0.35", rotation=90)
    ax.set_xticks(range(len(kernels)), [VARIANT_LABELS[k] for k in kernels], fontsize=style.NOTE, rotation=25, ha="right")
    ax.set_xlim(-0.7, len(kernels) - 0.3)
    ax.set_ylabel(ylabel)
    if legend:
        ax.legend([Patch(facecolor="0.5", edgecolor="k"), Patch(facecolor="0.8", hatch="///", edgecolor="k")],
                  ["normalised", "w/o normalisation"], loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False,
                  handlelength=1.5, columnspacing=1.0, borderaxespad=0.2)


def induction_note(cfg: dict) -> str:
    """The induction settings of the main runs, for a figure title."""
    r = cfg["induction_runs"][0]
    heads, seen = f"{r['n_heads']} heads", {r["n_heads"]}
    for s in cfg["induction_runs"][1:]:  # the extra head counts, run for some variants only
        if s["n_heads"] in seen:  # another lr or seed of a head count already named
            continue
        seen.add(s["n_heads"])
        only = s.get("only_variants")
        heads += (f" (+ {s['n_heads']} head{'s' * (s['n_heads'] > 1)}"
                  + (f": {', '.join(variant_label(v) for v in only)}" if only else "") + ")")
    return (f"{cfg['scale']} scale: {r['n_layers']} layers, d={r['d_model']}, {heads}, "
            f"{r['n_train'] // 1000}k seq. × {r['epochs']} epochs (batch {r['batch']}), lr {r['lr']:g}, "
            f"vocab {r['vocab']}{' + shifted q' if r['shift_query'] else ''}, "
            f"BOS share rows {r['sink_rows'][0]}…{r['sink_rows'][1]}, "
            f"{'early stop' if r['early_stop'] else 'no early stop'}; {seed_text(cfg['seeds'])}")


def group_note(cfg: dict) -> str:
    """The group settings of the flip runs, for a figure title."""
    r = cfg["group_runs"][0]
    return (f"{cfg['scale']} scale: {r['n_layers']} layer × {r['n_heads']} head, d={r['d_model']}, "
            f"vocab {r['vocab']}, "
            f"{r['n_train'] // 1000}k seq. × {r['epochs']} epochs (batch {r['batch']}), lr {r['lr']:g}, "
            f"{r['n_pairs']} pairs; {seed_text(cfg.get('group_seeds', cfg['seeds']))}")


def seed_text(seeds) -> str:
    """``seeds`` for a figure title, against the authors' seeds 0–4."""
    seeds = list(seeds)
    if seeds == list(PAPER_SEEDS):
        return f"seeds {PAPER_SEEDS[0]}–{PAPER_SEEDS[-1]}"
    run = (f"seed {seeds[0]} only" if len(seeds) == 1 else f"seeds {seeds[0]}–{seeds[-1]}"
           if seeds == list(range(seeds[0], seeds[-1] + 1)) else f"seeds {seeds}")
    return run + \
        f" (authors: {PAPER_SEEDS[0]}–{PAPER_SEEDS[-1]})"


def nan_reduce(fn, a, axis=None):
    """``fn`` (``np.nanmax``, ``np.nanmean`` …) without the warning on all-NaN slices (they give NaN)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(a, axis=axis)


def suptitle(fig, text: str, width: int = 130, fontsize: float = style.NOTE) -> None:
    """A figure title wrapped to ``width`` characters per line (long settings lines would widen
    the saved figure)."""
    import textwrap

    fig.suptitle("\n".join(textwrap.fill(part, width) for part in text.split("\n")), fontsize=fontsize)
