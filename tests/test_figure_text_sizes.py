"""No text under :data:`gradflow.sims.style.NOTE` (7 pt) in a figure: the committed data of three
figures whose legends, notes and value labels were once 5-6.5 pt, re-plotted (nothing computed),
and a negative control (a 5 pt legend is caught)."""

from __future__ import annotations

import os

import matplotlib.pyplot as plt
import pytest

from gradflow.sims import registry, style
from gradflow.sims.build import _load_cached

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("fig_id", ["gd-vs-flow", "accuracy-induction", "flip-rate"])
def test_committed_figure_has_no_text_under_7pt(fig_id, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)  # the Sec. 4 configs list the committed runs under ./figures/transformer-runs
    monkeypatch.setenv("GRADFLOW_SEC4_TRAIN", "0")
    monkeypatch.setenv("GRADFLOW_RUNS_CACHE", str(tmp_path / "no-runs"))
    fig = registry.get_figure(fig_id)
    cfg = fig.config(False)
    data = _load_cached(fig, cfg, os.path.join(ROOT, "figures"))
    assert data is not None
    f = fig.plot(data, cfg)
    try:
        assert style.too_small(f) == []
    finally:
        plt.close(f)


def test_too_small_sees_a_5pt_legend():
    fig, axes = style.figure(1, 1)
    axes[0][0].plot([0, 1], label="a line")
    axes[0][0].legend(fontsize=5)
    try:
        assert style.too_small(fig) == [("a line", 5.0)]
    finally:
        plt.close(fig)
