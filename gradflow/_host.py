"""Facts about the host machine that gradflow's command line and benchmarks share."""

from __future__ import annotations

import os

__all__ = ["usable_cores"]


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the OS has one, else
    ``os.cpu_count()``; at least 1)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
