"""Helpers shared by the figure modules: progress reporting, marker thinning and generated blocks of
the docs pages (the initial draws are :mod:`gradflow.sims.draws`)."""

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


def write_block(path: str, opening: str, closing: str, body: str, check: bool = False) -> bool:
    """Replace the text between the markers ``opening`` and ``closing`` of the page at ``path`` with
    ``body`` (atomically; nothing is written with ``check`` or when it is already there). Returns
    whether the page already held ``body``. Raises ``ValueError`` when a marker is missing."""
    from gradflow.io import atomic_write

    with open(path) as f:
        text = f.read()
    if opening not in text or closing not in text or text.index(closing) < text.index(opening):
        raise ValueError(f"{path} lacks the generated block {opening} … {closing} (in this order)")
    head, rest = text.split(opening, 1)
    _, tail = rest.split(closing, 1)
    new = f"{head}{opening}\n{body}{closing}{tail}"
    if new != text and not check:
        atomic_write(path, lambda f: f.write(new.encode()))
    return new == text
