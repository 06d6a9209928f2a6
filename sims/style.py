"""One paper style for every figure: serif, ICML two-column width, headless (Agg)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from gradflow.plot import STYLE, WIDTH  # noqa: E402  (one style for the figures and gradflow.plot)

FLOW = dict(linestyle="-", linewidth=1.4)
"""Flow curves: solid."""

GD = dict(linestyle="none", marker="o", markersize=2.2, markerfacecolor="none", markeredgewidth=0.6)
"""GD iterates: open markers over the flow."""

NOTE = 7.0
"""Smallest font size (pt) of any text in a figure: legends (``legend.fontsize`` of :data:`RC`),
notes, value labels, crowded tick labels. Smaller text is unreadable at the paper's width."""

RC = {**STYLE, "figure.dpi": 100, "text.usetex": False}
"""matplotlib rcParams of every figure: :data:`gradflow.plot.STYLE` plus screen dpi and no TeX."""


def apply() -> None:
    """Install the paper style in matplotlib's rcParams (done on import of this module)."""
    plt.rcParams.update(RC)


apply()


def figure(nrows: int = 1, ncols: int = 2, height: float = 2.4, **kwargs):
    """A ``(fig, axes)`` pair at the paper's width with the shared style."""
    fig, axes = plt.subplots(nrows, ncols, figsize=(WIDTH, height), layout="constrained", squeeze=False, **kwargs)
    return fig, axes


def too_small(fig, minimum: float = NOTE) -> list[tuple[str, float]]:
    """``(text, size)`` of every visible, non-empty text of ``fig`` below ``minimum`` points:
    titles, labels, tick labels, legends and notes (empty for a figure that keeps to :data:`NOTE`)."""
    fig.canvas.draw()  # tick labels exist only once drawn
    out = []
    for t in fig.findobj(matplotlib.text.Text):
        if t.get_visible() and t.get_text().strip() and t.get_fontsize() < minimum:
            out.append((t.get_text(), float(t.get_fontsize())))
    return out


def colors(n: int):
    """``n`` distinguishable colours (tab10, then viridis beyond ten)."""
    if n <= 10:
        return [plt.get_cmap("tab10")(i) for i in range(n)]
    return [plt.get_cmap("viridis")(i / max(n - 1, 1)) for i in range(n)]
