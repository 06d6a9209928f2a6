"""Helpers shared by the figure modules: progress reporting and marker thinning (the initial draws are
:mod:`gradflow.sims.draws`)."""

from __future__ import annotations

import contextlib

import numpy as np
from tqdm.auto import tqdm


@contextlib.contextmanager
def phases(names: list[str], enabled: bool, desc: str):
    """A tqdm bar over named phases of a figure computation; yields ``advance(name)``."""
    bar = tqdm(total=len(names), desc=desc, disable=not enabled, leave=False)

    def advance(name: str):
        bar.set_postfix_str(name)
        bar.update(1)

    try:
        yield advance
    finally:
        bar.close()


def thin(n_points: int, k: int) -> np.ndarray:
    """About ``k`` indices spread log-uniformly over ``range(1, n_points)`` (for marker overlays)."""
    idx = np.unique(np.round(np.geomspace(1, n_points - 1, k)).astype(int))
    return idx
