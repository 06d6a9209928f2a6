"""Timing and memory helpers shared by the benchmark modules."""

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


def peak_rss_mib() -> float:
    """This process's peak resident set size in MiB: ``VmHWM`` of ``/proc/self/status`` (Linux),
    the high-water mark of the process's own memory map, which starts anew at ``exec``.
    ``getrusage``'s ``ru_maxrss`` does not: a child started from a large benchmark process
    reports the parent's size at the fork as its own peak (seen: 1996 MiB "after import" in a
    child whose own peak was about 1.1 GiB). Elsewhere ``ru_maxrss`` is the fallback."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0  # kB
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB
