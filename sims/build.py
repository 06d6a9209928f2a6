"""The builder shared by every figure id: the data cache, the files and their provenance.

A figure module defines ``FIGURE = Figure(...)`` (no id: the id is written once, in
:mod:`gradflow.sims.registry`): a config (paper scale or quick), a ``compute`` that returns the
plotted data as NumPy arrays, a ``plot`` that draws them, and optionally a ``summary`` of measured
numbers and ``extras`` (e.g. animated GIFs). :func:`build` caches the data (``ID.npz``) keyed by
the config, so a re-run with an unchanged config only re-plots; all files are written atomically
(:mod:`gradflow.io`); each ``ID.json`` records the config, the summary and the provenance
(package versions, Python, platform, git revision).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import sys
import time
import zipfile
from collections.abc import Callable
from typing import Any

import numpy as np

from gradflow.io import atomic_write, remove_stale_temporaries

__all__ = ["Figure", "build", "provenance", "config_hash", "HASH_KEY"]

@dataclasses.dataclass(frozen=True)
class Figure:
    """One figure id.

    - ``config(quick) -> dict``: JSON-serialisable settings (seed, sizes, horizons).
    - ``compute(config, progress) -> dict[str, np.ndarray]``: the plotted data.
    - ``plot(data, config) -> matplotlib Figure``.
    - ``summary(data, config) -> dict``: measured numbers for the JSON / gallery (optional).
    - ``extras(data, config, out_dir) -> list[str]``: extra files written (optional).
    - ``long_paper_scale``: the paper-scale compute takes hours (trains models) or, for
      ``flow-sinks``, ~20 min of 2 cores, so ``gradflow reproduce`` builds this id in quick mode
      unless ``--paper-scale`` is given.
    """

    title: str
    config: Callable[[bool], dict]
    compute: Callable[..., dict[str, np.ndarray]]
    plot: Callable[[dict, dict], Any]
    summary: Callable[[dict, dict], dict] | None = None
    extras: Callable[[dict, dict, str], list[str]] | None = None
    version: int = 1
    long_paper_scale: bool = False
    id: str = ""
    """Set by :func:`gradflow.sims.registry.get_figure` from the registry (left empty in the module)."""


def provenance() -> dict[str, Any]:
    """Package versions, Python, platform and git revision (:mod:`gradflow._provenance`)."""
    from gradflow.internal import git_revision, versions

    return {
        "packages": versions(("jax", "jaxlib", "diffrax", "optax", "equinox", "numpy", "matplotlib"), missing=None),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "git_revision": git_revision(),
    }


def config_hash(fig: Figure, config: dict) -> str:
    blob = json.dumps({"id": fig.id, "version": fig.version, "config": config}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


HASH_KEY = "_config_hash"
"""Key of the config hash stored inside ``ID.npz``: the data file alone says which config made it,
so a build killed after its data was written resumes by re-plotting (no recomputation)."""


def _save_npz(path: str, data: dict[str, np.ndarray], digest: str) -> None:
    for key, val in data.items():
        arr = np.asarray(val)
        if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
            raise RuntimeError(f"figure data {key!r} has non-finite values; refusing to write {path}")
    arrays = {k: np.asarray(v) for k, v in data.items()}
    arrays[HASH_KEY] = np.asarray(digest)
    atomic_write(path, lambda f: np.savez(f, **arrays))


def _load_cached(fig: Figure, config: dict, out_dir: str) -> dict | None:
    """The cached data if ``ID.npz`` was made from ``config`` (its own stored hash, or for older
    files the hash in ``ID.json``), else ``None`` (missing, stale or unreadable files)."""
    npz, meta = (os.path.join(out_dir, f"{fig.id}.{ext}") for ext in ("npz", "json"))
    if not os.path.exists(npz):
        return None
    try:
        with np.load(npz, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
        stored = data.pop(HASH_KEY, None)
        if stored is None:
            with open(meta) as f:
                stored = json.load(f).get("config_hash")
        return data if str(stored) == config_hash(fig, config) else None
    except (OSError, ValueError, EOFError, json.JSONDecodeError, zipfile.BadZipFile):
        return None


def build(fig_id: str, out_dir: str, *, quick: bool = False, force: bool = False, progress: bool = True) -> dict:
    """Build one figure into ``out_dir``: ``ID.png``, ``ID.pdf``, ``ID.npz``, ``ID.json`` (+ extras).

    Returns the JSON record written (config, summary, provenance, timings, cached flag).
    """
    import matplotlib.pyplot as plt

    from gradflow.sims.registry import get_figure
    from gradflow.sims import style

    fig = get_figure(fig_id)
    config = fig.config(quick)
    os.makedirs(out_dir, exist_ok=True)
    remove_stale_temporaries(out_dir, f"{fig.id}.")  # left by a build killed mid-write
    start = time.perf_counter()
    data = None if force else _load_cached(fig, config, out_dir)
    cached = data is not None
    if data is None:
        data = {k: np.asarray(v) for k, v in fig.compute(config, progress=progress).items()}
        _save_npz(os.path.join(out_dir, f"{fig.id}.npz"), data, config_hash(fig, config))
    compute_s = time.perf_counter() - start
    mpl_fig = fig.plot(data, config)
    style.place_legends(mpl_fig)  # no legend drawn over the curves
    for ext in ("png", "pdf"):
        path = os.path.join(out_dir, f"{fig.id}.{ext}")
        atomic_write(path, lambda f, ext=ext: mpl_fig.savefig(f, format=ext))
    plt.close(mpl_fig)
    files = [f"{fig.id}.{ext}" for ext in ("png", "pdf", "npz", "json")]
    if fig.extras is not None:
        files += fig.extras(data, config, out_dir)
    record = {
        "id": fig.id,
        "title": fig.title,
        "quick": quick,
        "config": config,
        "config_hash": config_hash(fig, config),
        "seed": config.get("seed"),
        "summary": fig.summary(data, config) if fig.summary else {},
        "cached": cached,
        "compute_seconds": round(compute_s, 3),
        "wall_seconds": round(time.perf_counter() - start, 3),
        "files": files,
        **provenance(),
    }
    if cached:  # keep the wall time of the run that computed the data
        try:
            with open(os.path.join(out_dir, f"{fig.id}.json")) as f:
                record["compute_seconds"] = json.load(f).get("compute_seconds", record["compute_seconds"])
        except (OSError, json.JSONDecodeError):
            pass
    text = json.dumps(record, indent=2, default=_json_default)
    atomic_write(os.path.join(out_dir, f"{fig.id}.json"), lambda f: f.write(text.encode()))
    return record


def _json_default(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)
