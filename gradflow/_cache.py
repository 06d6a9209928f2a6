"""JAX's persistent compilation cache for gradflow (on by default in the ``gradflow`` CLI).

A fresh process pays import and XLA compilation every time; with the cache, the second
process that runs the same solve (same shapes, solver and static settings) loads the compiled
executable from disk instead of compiling it (see ``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import os

import jax

__all__ = ["cache_dir", "enable_compilation_cache", "CACHE_ENV", "NO_CACHE_ENV"]

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
