"""Sec. 4.2: the one-token flip attack on the group-classification task, per kernel.

The authors' attack (paper Sec. 4.2): for random evaluation pairs (A, B) with different labels
and each head, the mixed sequence holds A's top-1 token (by that head's CLS attention) and B's
other 9 tokens, shuffled; a success is a prediction of A's label; both directions are averaged
and the flip rate is the maximum over heads. A model that reads the label off its most-attended
token flips; one that pools the 10 tokens follows the 9 tokens of B and does not. Panels: the
1 layer × 1 head models with MLP on/off × LayerNorm on/off (the paper's panels, vocab 41); the
2 layers × 4 heads softmax control (where the paper says the effect fades) is in the title.
"""

from __future__ import annotations

import numpy as np

from gradflow.sims import style

from gradflow.sims.sec4 import _figures as _sec4


def _panels(cfg: dict) -> list[int]:
    """Indices of the 1 × 1 group settings, one per (MLP, LN) combination (first seed)."""
    seen, out = set(), []
    for g, s in enumerate(cfg["group_runs"]):
        key = (s["use_mlp"], s["use_layernorm"])
        if "only_variants" not in s and key not in seen:
            seen.add(key)
            out.append(g)
    return out


def _same(cfg: dict, g: int) -> list[int]:
    """Every group setting (all seeds) with the setting ``g`` apart from the seed."""
    ref = {k: v for k, v in cfg["group_runs"][g].items() if k != "seed"}
    return [j for j, s in enumerate(cfg["group_runs"]) if {k: v for k, v in s.items() if k != "seed"} == ref]


def _seed_stats(data: dict, cols: list[int]):
    """Per variant, over the settings ``cols`` (one per seed): the mean flip rate of the finished
    runs (NaN if none), their single rates, and how many runs finished and diverged."""
    avail = data["grp_available"][:, cols]
    div = avail & np.isfinite(data["diverged_step_groups"][:, cols])
    runs = np.where(avail & ~div, data["flip_rate"][:, cols], np.nan)
    points = [r[np.isfinite(r)] for r in runs]
    return (np.array([p.mean() if len(p) else np.nan for p in points]), points,
            np.array([len(p) for p in points]), div.sum(axis=1))


def _note(k: int, n_div: int, n: int) -> str:
    """A bar's seed note: ``" (2/3)"`` when only 2 of 3 seeds finished, plus the diverged ones."""
    if k == n or k == 0:
        return ""
    return f" ({k}/{n}" + (f", {n_div} diverged)" if n_div else ")")


def _mean_over(data: dict, key: str, cols: list[int]) -> np.ndarray:
    vals = np.where(data["grp_available"][:, cols], data[key][:, cols], np.nan)
    return _sec4.nan_reduce(np.nanmean, vals, 1)


def plot(data: dict, cfg: dict):
    data = _sec4.unpack(data)
    panels = _panels(cfg)
    ncols = 2 if len(panels) == 4 else len(panels)
    nrows = -(-len(panels) // ncols)
    fig, axes = style.figure(nrows, ncols, height=2.4 * nrows)
    for p, g in enumerate(panels):
        ax = axes[p // ncols][p % ncols]
        s = cfg["group_runs"][g]
        cols = _same(cfg, g)
        rate, points, k, n_div = _seed_stats(data, cols)
        notes = [_note(int(a), int(b), len(cols)) for a, b in zip(k, n_div)]
        _sec4.bars_by_kernel(ax, rate, cfg, ylabel="flip rate" if p % ncols == 0 else "", fmt="{:.2f}",
                             available=data["grp_available"][:, cols], top=1.0, ran_label="diverged",
                             diverged=data["diverged_step_groups"][:, cols], legend=p == 0,
                             all_variants=cfg["scale"] == "paper", points=points, notes=notes)
        ax.set_ylim(0, 1.6 if any(notes) else 1.3)  # room for the vertical labels of bars at 1
        ax.set_yticks(np.linspace(0, 1, 6))
        acc = _mean_over(data, "group_acc", cols)
        acc = acc[np.isfinite(acc)]
        lo, hi = (f"{acc.min():.2f}", f"{acc.max():.2f}") if len(acc) else ("", "")
        accs = ("none finished" if not len(acc) else f"{lo} ({len(acc)} variant{'s' * (len(acc) > 1)})" if lo == hi
                else f"{lo}–{hi} over {len(acc)} variants")
        ax.set_title(f"{'MLP' if s['use_mlp'] else 'no MLP'}, {'LN' if s['use_layernorm'] else 'no LN'}\n"
                     f"group acc.: {accs}", fontsize=style.NOTE, pad=18 if p == 0 else 4)
        ax.tick_params(axis="x", labelrotation=25)
    ctrl = [g for g, s in enumerate(cfg["group_runs"]) if "only_variants" in s]
    note = ""
    if ctrl:
        s = cfg["group_runs"][ctrl[0]]
        i = cfg["variants"].index("softmax-norm")
        val = data["flip_rate"][i, ctrl[0]] if data["grp_available"][i, ctrl[0]] else np.nan
        note = (f"\ncontrol, softmax at {s['n_layers']} layers × {s['n_heads']} heads (MLP, LN): flip rate "
                + (f"{val:.2f}" if np.isfinite(val) else "not run"))
    seeds = cfg.get("group_seeds", cfg["seeds"])
    if len(seeds) > 1:
        note += (f"\nbars: mean over the seeds finished (dots: each seed; (k/{len(seeds)}): only k of the "
                 f"{len(seeds)} seeds finished, diverged runs not counted)")
    _sec4.suptitle(fig, "One-token flip attack (group task, 4 labels) — " + _sec4.group_note(cfg) + note)
    return fig


def _summary(data: dict, cfg: dict, i: int) -> dict:
    out = {}
    for g in _panels(cfg):  # what a bar shows: the mean over the seeds finished
        s, cols = cfg["group_runs"][g], _same(cfg, g)
        mean, points, k, n_div = _seed_stats(data, cols)
        key = (f"mean over seeds {s['n_layers']}x{s['n_heads']} {'mlp' if s['use_mlp'] else 'no-mlp'} "
               f"{'ln' if s['use_layernorm'] else 'no-ln'}")
        out[key] = {"flip_rate": _sec4.finite([mean[i]])[0], "seeds_finished": int(k[i]),
                    "seeds_diverged": int(n_div[i]), "seeds": len(cols)}
    for g, s in enumerate(cfg["group_runs"]):
        if not data["grp_available"][i, g]:
            continue
        key = (f"{s['n_layers']}x{s['n_heads']} {'mlp' if s['use_mlp'] else 'no-mlp'} "
               f"{'ln' if s['use_layernorm'] else 'no-ln'} seed {s['seed']}")
        out[key] = {"flip_rate": _sec4.finite([data["flip_rate"][i, g]])[0],
                    "flip_per_head": _sec4.nested(data["flip_per_head"][i, g, :s["n_layers"], :s["n_heads"]]),
                    "group_acc": _sec4.finite([data["group_acc"][i, g]])[0],
                    "diverged_step": _sec4.finite([data["diverged_step_groups"][i, g]])[0]}
    return out


FIGURE = _sec4.figure(
    "flip-rate",
    "Sec. 4.2: flip rate of the one-token attack on the group task, per kernel, MLP × LayerNorm",
    plot,
    _sec4.per_variant(_summary),
    tasks=("groups",),
)
