"""JAX's persistent compilation cache for gradflow (on by default in the ``gradflow`` CLI).

A fresh process pays import and XLA compilation every time; with the cache, the second
process that runs the same solve (same shapes, solver and static settings) loads the compiled
executable from disk instead of compiling it (see ``benchmarks/RESULTS.md``). gradflow also
stores each solve's traced program and executable in the folder's ``gradflow-exported/``
subfolder, so that a new process does not trace the solve again either
(:mod:`gradflow._engine._export`); deleting the folder clears both.
"""

from __future__ import annotations

import os

import jax

__all__ = ["cache_dir", "enable_compilation_cache", "release_executables", "CACHE_ENV", "NO_CACHE_ENV", "MAPPINGS_SOFT_LIMIT"]

CACHE_ENV = "GRADFLOW_CACHE_DIR"
"""Environment variable naming the cache folder (default ``$XDG_CACHE_HOME/gradflow/jax``,
i.e. ``~/.cache/gradflow/jax``)."""
NO_CACHE_ENV = "GRADFLOW_NO_CACHE"
"""Set to ``1`` to turn the cache off (as the CLI's ``--no-cache``)."""


def cache_dir() -> str:
    """The cache folder: ``$GRADFLOW_CACHE_DIR``, else ``$XDG_CACHE_HOME/gradflow/jax``
    (``~/.cache/gradflow/jax`` when ``XDG_CACHE_HOME`` is unset)."""
    if os.environ.get(CACHE_ENV):
        return os.path.abspath(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gradflow", "jax")


def enable_compilation_cache(path: str | os.PathLike | None = None) -> str | None:
    """Turn on JAX's persistent compilation cache in ``path`` (default :func:`cache_dir`).

    Does nothing and returns ``None`` when ``$GRADFLOW_NO_CACHE`` is ``1``; otherwise returns
    the folder used. Every compilation is stored, however short (JAX's default threshold is 1 s,
    which would skip the smaller solves; a threshold near a compilation's own time made a second
    process miss whichever compilations the first happened to finish just under it). Call it before the first compilation; it affects the
    whole process.
    """
    if os.environ.get(NO_CACHE_ENV, "") not in ("", "0"):
        return None
    folder = os.path.abspath(os.fspath(path)) if path is not None else cache_dir()
    os.makedirs(folder, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder


MAPPINGS_SOFT_LIMIT = 30_000
"""Memory mappings of this process above which :func:`release_executables` drops JAX's
compiled executables (Linux's default ``vm.max_map_count`` is 65,530)."""


def _mappings() -> int | None:
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:  # not Linux
        return None


def release_executables(limit: int = MAPPINGS_SOFT_LIMIT) -> bool:
    """Drop JAX's in-memory compiled executables when this process holds more than ``limit``
    memory mappings; returns whether it did.

    Every XLA:CPU executable keeps its machine code in memory mappings (a few per executable;
    one test module of gradflow's suite leaves about 5,000). A long process that compiles many
    distinct solves (``gradflow reproduce``, a whole test run) would pass Linux's default limit of
    65,530 mappings per process, and XLA's next compilation then aborts or segfaults. Called
    between independent jobs; what is needed again is recompiled (or loaded from the persistent
    cache)."""
    n = _mappings()
    if n is None or n <= limit:
        return False
    import gc

    from ._engine import _export

    jax.clear_caches()
    _export.clear()  # the solves loaded from serialised executables
    gc.collect()
    return True
