"""The figure registry: every figure id, written once, with the module that draws it.

``gradflow figures`` (:mod:`gradflow.app.cli`) lists and builds these ids; a module is imported only
when its figure is asked for. A module defines ``FIGURE = Figure(...)`` without an id (or, for two
figures sharing one module, another attribute named after ``:``); :func:`get_figure` returns it
with the registered id filled in.
"""

from __future__ import annotations

import dataclasses
import importlib

from gradflow.internal import bad_arg

__all__ = ["FIGURES", "SHARED_RUNS", "STOCK_FIGURES", "figure_groups", "figure_ids", "get_figure"]

FIGURES: dict[str, str] = {
    # the paper's figures (Fig. 2; Figs. 3, 12 and the appendix's)
    "fig2": "paper.fig2",
    # attention basics (softmax, scaling, masks, a trained toy)
    "softmax-temperature": "basics.softmax_temperature",
    "scaling": "basics.scaling",
    "causal-mask": "basics.causal_mask",
    "it-animal": "basics.it_animal",
    # beyond the paper
    "long-horizon": "beyond.long_horizon",
    "gamma": "beyond.gamma",
    "bound": "beyond.bound",
    "gd-vs-flow": "beyond.gd_vs_flow",
    "sinks-rowwise": "beyond.sinks_rowwise",
    "max-margin": "beyond.max_margin",
    "flow-sinks": "beyond.flow_sinks",
    "kq-classify": "beyond.kq_classify",
    # the paper's figures, continued
    "fig3": "paper.fig3",
    "fig12": "paper.fig12",
    "norm-square": "paper.normalizations:SQUARE",
    "norm-logistic": "paper.normalizations:LOGISTIC",
    "massive": "paper.massive",
    "kl": "paper.kl",
    # Sec. 4: the transformer experiments (sims/sec4/)
    "sinks-induction": "sec4.sinks_induction",
    "accuracy-induction": "sec4.accuracy_induction",
    "flip-rate": "sec4.flip_rate",
    "sparsity-heads": "sec4.sparsity_heads",
    "attn-patterns": "sec4.attn_patterns",
}
"""Figure id -> ``MODULE[:ATTRIBUTE]``, the module relative to ``gradflow.sims`` (a name with no dot
and no ``gradflow.sims`` module is imported as it is: tests register their own), the attribute
``FIGURE`` unless given."""


STOCK_FIGURES: dict[str, str] = dict(FIGURES)
""":data:`FIGURES` as shipped: a figure registered at run time (a test's own) is not known in a
worker process (a fresh interpreter), so ``gradflow figures`` then builds in its own process."""


def figure_ids() -> list[str]:
    """Every registered id, in the registry's order (the order ``gradflow figures`` builds them)."""
    return list(FIGURES)


SHARED_RUNS = "sec4."
"""Figures whose modules start with this share trained runs (the Sec. 4 run cache): one trains
what the next ones load, so they are built together, in registry order (:func:`figure_groups`)."""


def figure_groups(ids) -> list[list[str]]:
    """``ids`` split into pieces that can be built independently, side by side
    (``gradflow figures --jobs``): the ids sharing trained runs (:data:`SHARED_RUNS`) as one piece,
    first (the longest), in the given order, then every other id alone, in the given order."""
    shared = [fig_id for fig_id in ids if FIGURES[fig_id].startswith(SHARED_RUNS)]
    return ([shared] if shared else []) + [[fig_id] for fig_id in ids if fig_id not in shared]


def _locate(target: str) -> tuple[str, str]:
    module, _, attr = target.partition(":")
    if importlib.util.find_spec("gradflow.sims." + module.split(".")[0]) is not None:
        module = "gradflow.sims." + module
    return module, attr or "FIGURE"


def get_figure(fig_id: str):
    """The :class:`gradflow.sims.build.Figure` of ``fig_id``, its ``id`` set.

    Raises :class:`gradflow.GradflowValueError` for an id that is not registered, naming the valid ones.
    """
    if fig_id not in FIGURES:
        raise bad_arg("figure id", fig_id, f"one of {figure_ids()}")
    module, attr = _locate(FIGURES[fig_id])
    return dataclasses.replace(getattr(importlib.import_module(module), attr), id=fig_id)
