"""No legend hides data and no text is under 7 pt: every committed figure, re-plotted from its
committed data (nothing computed) and passed through the build's legend placement, has no data
line, marker or bar-top sample inside an in-axes legend box and no text under
:data:`gradflow.sims.style.NOTE`; negative controls: a legend drawn over a curve is caught, and
the placement moves it to empty space (the 5 pt control is in test_figure_text_sizes.py)."""

from __future__ import annotations

import os

import matplotlib.pyplot as plt
import numpy as np
import pytest

from gradflow.sims import registry, style
from gradflow.sims.build import _load_cached

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("fig_id", registry.figure_ids())
def test_committed_figure_layout(fig_id, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)  # the Sec. 4 configs list the committed runs under ./figures/transformer-runs
    monkeypatch.setenv("GRADFLOW_SEC4_TRAIN", "0")
    monkeypatch.setenv("GRADFLOW_RUNS_CACHE", str(tmp_path / "no-runs"))
    fig = registry.get_figure(fig_id)
    cfg = fig.config(False)
    data = _load_cached(fig, cfg, os.path.join(ROOT, "figures"))
    assert data is not None, f"{fig_id}: no committed data matching its config"
    f = fig.plot(data, cfg)
    try:
        style.place_legends(f)
        assert style.covered(f) == []
        assert style.too_small(f) == []
    finally:
        plt.close(f)


def _crowded(loc):
    """A diagonal line through the middle of the axes with its legend at ``loc``."""
    fig, axes = style.figure(1, 1)
    ax = axes[0][0]
    x = np.linspace(0.0, 1.0, 50)
    ax.plot(x, x, label="y = x")
    ax.legend(loc=loc)
    return fig


def test_covered_sees_a_legend_over_a_curve():
    fig = _crowded("center")  # the diagonal crosses the middle of the axes
    try:
        hits = style.covered(fig)
        assert len(hits) == 1 and hits[0][1] > 0
    finally:
        plt.close(fig)


def test_place_legends_moves_it_to_empty_space():
    fig = _crowded("center")
    try:
        moved = style.place_legends(fig)
        assert moved and style.covered(fig) == []
        assert fig.axes[0].get_legend()._loc != 10  # no longer "center"
    finally:
        plt.close(fig)


def test_a_reference_line_is_not_data():
    fig, axes = style.figure(1, 1)
    ax = axes[0][0]
    ax.plot([0, 1], [0, 0.1], label="data, low")
    ax.axhline(0.95, color="k", label="reference across the axes")
    ax.legend(loc="upper left")
    try:
        assert style.covered(fig) == []
    finally:
        plt.close(fig)
