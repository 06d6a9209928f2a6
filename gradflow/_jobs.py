"""Independent pieces of a command (figures, the theorem checks) run side by side in worker processes.

XLA compiles a program on one core, and most of a cold ``gradflow reproduce`` is compiling
(measured 2026-12-04, empty caches, 2 idle cores: 480 of 662 s tracing, lowering and XLA
compiles), so on a machine with several cores the command's pieces run in parallel, one process
per core (``--jobs``; on those 2 cores: 497 s instead of 662 s, ``benchmarks/REPRODUCE_LOGS.md``). Each worker is a fresh ``spawn``-ed interpreter (no JAX state is
forked) that shares the persistent compilation cache with the others, so a program one worker
compiled is loaded, not compiled again, by another that needs it later. Every figure is still
written atomically by the worker that builds it; the pieces that share trained runs (the Sec. 4
figures) stay together in one piece, in order.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import signal
import sys
from collections.abc import Callable, Iterator, Sequence

__all__ = ["run_pieces", "default_jobs"]


PR_SET_PDEATHSIG = 1
"""Linux ``prctl`` option: a signal the kernel sends this process when its parent exits."""


def _init(use_cache: bool) -> None:
    """A worker: Ctrl-C is the parent's to handle (it terminates the pool); on Linux the worker is
    killed when the parent dies, however it dies (a parent killed by ``SIGKILL`` cannot terminate
    its pool itself: its workers would otherwise compute on, orphaned); the persistent
    compilation cache on unless the command said ``--no-cache``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):  # no prctl: only an orderly exit terminates the workers
            pass
    if use_cache:
        from ._cache import enable_compilation_cache

        try:
            enable_compilation_cache()
        except OSError:  # the parent has already warned once
            pass


def _call(piece):
    index, fn, args = piece
    return index, fn(*args)


def run_pieces(pieces: Sequence[tuple[Callable, tuple]], jobs: int, use_cache: bool) -> Iterator[tuple[int, object]]:
    """Run ``fn(*args)`` for each ``(fn, args)`` of ``pieces`` in ``jobs`` worker processes, the
    pieces handed out in the given order as workers become free; yields ``(index, result)`` as
    each finishes. ``fn`` must be a module-level function and ``args`` and its result picklable;
    what a piece prints goes straight to this process's stdout and stderr.

    An exception in a piece is raised here (the other workers are terminated); so is Ctrl-C,
    after terminating the workers (what they finished and wrote is kept).

    **Raises:** whatever a piece raises; ``ValueError`` for ``jobs < 1``."""
    if jobs < 1:
        raise ValueError(f"jobs: got {jobs}; expected an integer ≥ 1")
    ctx = multiprocessing.get_context("spawn")
    pool = ctx.Pool(min(jobs, len(pieces)) or 1, initializer=_init, initargs=(use_cache,))
    try:
        for index, result in pool.imap_unordered(_call, [(i, fn, args) for i, (fn, args) in enumerate(pieces)]):
            yield index, result
        pool.close()
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()


def default_jobs() -> int:
    """Worker processes when ``--jobs`` is not given: the usable cores, at most 8 (each worker
    holds its own JAX runtime and compiled programs: up to about 3 GiB in ``gradflow reproduce``,
    measured 2026-12-04)."""
    from ._host import usable_cores

    return max(1, min(usable_cores(), 8))

