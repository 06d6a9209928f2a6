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


def interleaved_times(fns: dict, repeats: int) -> dict:
    """``{name: (list of seconds, last result)}``: one warm-up call each, then ``repeats`` rounds
    with the calls interleaved (a change of machine load hits all of them alike)."""
    out = {name: fn() for name, fn in fns.items()}
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            out[name] = fn()
            times[name].append(time.perf_counter() - start)
    return {name: (times[name], out[name]) for name in fns}


def interleaved_medians(fns: dict, repeats: int) -> dict:
    """``{name: (median seconds, last result)}`` of :func:`interleaved_times`."""
    return {name: (float(np.median(t)), out) for name, (t, out) in interleaved_times(fns, repeats).items()}
