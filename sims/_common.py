"""Helpers shared by the figure modules: the paper's initial draws and progress reporting."""

from __future__ import annotations

import contextlib

import numpy as np
from tqdm.auto import tqdm


def fig2_init(seed: int = 123, n: int = 8):
    """Fig. 2's draws (the authors' notebook; docs: Figures), NumPy legacy ``RandomState(seed)`` in the authors' order:
    ``V = 0.1·randn(n, n)``, then ``a = 0·randn(n)`` (the draw is consumed), then
    ``β* = randn(n)`` normalised. Returns ``(V0, a0, beta_star)`` as float64 arrays."""
    rng = np.random.RandomState(seed)
    V0 = 0.1 * rng.randn(n, n)
    a0 = 0.0 * rng.randn(n)
    beta_star = rng.randn(n)
    return V0, a0, beta_star / np.linalg.norm(beta_star)


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
