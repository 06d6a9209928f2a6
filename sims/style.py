"""One paper style for every figure: serif, ICML two-column width, headless (Agg)."""

from __future__ import annotations

import matplotlib
import matplotlib.patches
import numpy as np

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from gradflow.attention.plot import STYLE, WIDTH  # noqa: E402  (one style for the figures and gradflow.attention.plot)

FLOW = dict(linestyle="-", linewidth=1.4)
"""Flow curves: solid."""

GD = dict(linestyle="none", marker="o", markersize=2.2, markerfacecolor="none", markeredgewidth=0.6)
"""GD iterates: open markers over the flow."""

NOTE = 7.0
"""Smallest font size (pt) of any text in a figure: legends (``legend.fontsize`` of :data:`RC`),
notes, value labels, crowded tick labels. Smaller text is unreadable at the paper's width."""

RC = {**STYLE, "figure.dpi": 100, "text.usetex": False}
"""matplotlib rcParams of every figure: :data:`gradflow.attention.plot.STYLE` plus screen dpi and no TeX."""


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
    titles, labels, tick labels, legends and notes (empty for a figure that keeps to :data:`NOTE`).
    Draws ``fig`` first unless it is drawn as it stands (``fig.stale`` false)."""
    if fig.stale:
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



LEGEND_LOCATIONS = ("upper right", "upper left", "lower left", "lower right", "center right", "center left",
                    "lower center", "upper center", "center")
"""The in-axes places :func:`place_legends` tries, in order, after the one a figure asked for."""


def covered(fig, *, samples: int = 8) -> list[tuple[str, int]]:
    """``(what, n)`` for every in-axes legend of ``fig`` that hides data: ``n`` sample points of the
    axes' data lines (not ``axhline``/``axvline`` reference lines across the axes), markers and
    bar tops (each line segment sampled at ``samples`` points in display space, so a curve
    crossing the box between two vertices counts too) fall inside the legend's box. Empty for
    a figure whose legends sit on empty space; figure-level legends (outside the axes) are not
    checked."""
    fig.canvas.draw()
    fig.canvas.draw()  # as in place_legends: the layout settles over two draws
    renderer = fig.canvas.get_renderer()
    out = []
    for ax in fig.axes:
        n = _covered_points(ax, renderer, samples)
        if n:
            out.append((ax.get_title() or "untitled axes", n))
    return out


def place_legends(fig, *, samples: int = 8, headroom: float = 2.5) -> list[tuple[str, str]]:
    """Move every in-axes legend of ``fig`` that hides data (see :func:`covered`), in this order of
    preference: to the first of :data:`LEGEND_LOCATIONS` where it hides nothing; else keep the place
    the figure chose and widen the y range on that side (in the axis' own scale, log or linear)
    until the legend sits on empty space, the data keeping at least ``1/headroom`` of the height.
    A legend that fits nowhere is left in place (:func:`covered` still reports it: such a figure
    needs its legend moved by hand, e.g. to a figure-level legend under the panels). Returns
    ``(axes title, what was done)`` per moved legend. The figure build calls it before saving,
    so no figure draws a legend over its curves."""
    moved = []
    fig.canvas.draw()  # the constrained layout settles over two draws (figure-level legends)
    for _ in range(3):  # moving one legend re-flows the constrained layout: look again
        fig.canvas.draw()
        more = _place_once(fig, samples, headroom)
        if not more:
            break
        moved += more
    return moved


def _place_once(fig, samples: int, headroom: float) -> list[tuple[str, str]]:
    """One pass of :func:`place_legends` over the axes of ``fig``."""
    renderer = fig.canvas.get_renderer()
    moved = []
    for ax in fig.axes:
        leg = ax.get_legend()
        if leg is None or not _covered_points(ax, renderer, samples):
            continue
        what = (ax.get_title() or "untitled axes").split("\n")[0]
        asked = leg._loc  # matplotlib's code for the place the figure asked for (1-10)
        for loc in LEGEND_LOCATIONS:
            leg.set_loc(loc)
            if not _covered_points(ax, renderer, samples):
                moved.append((what, loc))
                break
        else:
            leg.set_loc(asked)
            if _widen(ax, leg, renderer, samples, headroom):
                moved.append((what, "y range widened"))
            # else: left where it is; covered() reports it and the gallery test fails
    return moved


def _widen(ax, leg, renderer, samples: int, headroom: float) -> bool:
    """Widen ``ax``'s y range on the legend's side (below for a lower legend, above for an upper
    one) in steps of 10 % until the legend hides nothing or the range is ``headroom`` times the
    original; restore the range and return ``False`` when that is not enough."""
    lo, hi = ax.get_ylim()
    code = leg._loc
    side = {1: "up", 2: "up", 9: "up", 3: "down", 4: "down", 8: "down"}.get(code)
    if side is None or not lo < hi:
        return False
    scale = ax.yaxis.get_transform()
    tlo, thi = scale.transform([[lo], [hi]])[:, 0]
    span = thi - tlo
    k = 1
    while k * 0.1 <= headroom - 1 + 1e-9:
        grow = k * 0.1 * span
        new = (tlo - grow, thi) if side == "down" else (tlo, thi + grow)
        ax.set_ylim(*scale.inverted().transform([[new[0]], [new[1]]])[:, 0])
        if not _covered_points(ax, renderer, samples):
            return True
        k += 1
    ax.set_ylim(lo, hi)
    return False


def _covered_points(ax, renderer, samples: int) -> int:
    """Sample points of the lines (``ax``'s and those of its twin axes), markers and bar tops of
    ``ax`` inside its legend's box (0 without a legend)."""
    leg = ax.get_legend()
    if leg is None or not leg.get_visible():
        return 0
    box = leg.get_window_extent(renderer)
    n = 0
    twins = [a for a in ax.figure.axes if a is not ax and a.bbox.bounds == ax.bbox.bounds]  # twinx/twiny
    for line in [line for a in (ax, *twins) for line in a.lines]:
        if not line.get_visible() or not all(line.get_transform().contains_branch_seperately(line.axes.transData)):
            continue  # hidden, or a reference line across the axes (axhline, axvline): not data
        xy = np.asarray(line.get_xydata(), dtype=float)
        xy = xy[np.all(np.isfinite(xy), axis=1)]
        if len(xy) == 0:
            continue
        pts = line.get_transform().transform(xy)
        if len(pts) > 1 and line.get_linestyle() not in ("None", "none", "", " "):
            w = np.linspace(0.0, 1.0, samples, endpoint=False)[None, :, None]
            pts = np.concatenate([(pts[:-1, None] * (1 - w) + pts[1:, None] * w).reshape(-1, 2), pts[-1:]])
        n += _inside(box, pts)
    for patch in ax.patches:  # bars: the top edge carries the value
        if isinstance(patch, matplotlib.patches.Rectangle) and patch.get_visible() and patch.get_height() != 0:
            x0, y0 = patch.get_x(), patch.get_y()
            top = y0 + patch.get_height()
            xs = x0 + patch.get_width() * np.linspace(0.0, 1.0, samples)
            n += _inside(box, patch.get_data_transform().transform(np.column_stack([xs, np.full(samples, top)])))
    for coll in ax.collections:
        offs = np.asarray(coll.get_offsets(), dtype=float)
        if not coll.get_visible() or offs.ndim != 2 or len(offs) == 0:
            continue
        n += _inside(box, coll.get_offset_transform().transform(offs[np.all(np.isfinite(offs), axis=1)]))
    return n


def _inside(box, pts) -> int:
    """How many display points ``pts`` (shape ``(n, 2)``) lie strictly inside ``box``."""
    x, y = pts[:, 0], pts[:, 1]
    return int(((x > box.x0) & (x < box.x1) & (y > box.y0) & (y < box.y1)).sum())
