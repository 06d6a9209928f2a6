"""The save grids of the figures, one copy each: GD record indices and flow save times.

GD at step size ``lr`` recorded at iterations ``k`` sits at flow time ``t = lr·k``; passing those
times as ``extra`` to :func:`flow_times` saves the flow there too, so flow and GD are compared at
equal flow time.
"""

from __future__ import annotations

import numpy as np

from gradflow.internal import default_record

__all__ = ["gd_record", "flow_times"]


def gd_record(steps: int, snapshots: int) -> np.ndarray:
    """GD iteration indices: ``0`` and about ``snapshots`` log-spaced ones up to ``steps`` (int64,
    strictly increasing; :func:`gradflow.internal.default_record`)."""
    return default_record(steps, snapshots)


def flow_times(t1: float, points: int, extra=(), t_min: float = 1e-3) -> np.ndarray:
    """Flow save times: ``0``, ``points`` log-spaced times from ``t_min`` to ``t1`` (both included) and
    the ``extra`` times up to ``t1`` (e.g. GD's ``lr·k``); float64, sorted, unique."""
    extra = np.asarray(extra, dtype=np.float64)
    grid = np.geomspace(t_min, t1, points)
    return np.unique(np.concatenate([[0.0], grid, extra[extra <= t1]]))
