"""The negative control of the 7 pt rule: a 5 pt legend is caught by
:func:`gradflow.sims.style.too_small` (every committed figure is held to the rule in
test_figure_legends.py)."""

from __future__ import annotations

import matplotlib.pyplot as plt

from gradflow.sims import style


def test_too_small_sees_a_5pt_legend():
    fig, axes = style.figure(1, 1)
    axes[0][0].plot([0, 1], label="a line")
    axes[0][0].legend(fontsize=5)
    try:
        assert style.too_small(fig) == [("a line", 5.0)]
    finally:
        plt.close(fig)
