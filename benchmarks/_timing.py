"""Timing helper shared by the benchmark modules."""

from __future__ import annotations

import time

import numpy as np


def timed(fn, repeats):
    """``(median seconds, result of the last call)`` over ``repeats`` calls of ``fn()``."""
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)), out
