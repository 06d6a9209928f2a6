"""Independent pieces of a command (figures, the theorem checks) run side by side in worker processes.

XLA compiles a program on one core, and most of a cold ``gradflow reproduce`` is compiling
(measured 2026-12-04, empty caches, 2 idle cores: 480 of 662 s tracing, lowering and XLA
compiles), so on a machine with several cores the command's pieces run in parallel, one process
per core (``--jobs``; on those 2 cores: 436–497 s instead of 662 s, ``benchmarks/REPRODUCE_LOGS.md``).
Each worker is a fresh ``spawn``-ed interpreter (no JAX state is forked) that shares the
persistent compilation cache with the others, so a program one worker compiled is loaded, not
compiled again, by another that needs it later. Every figure is still written atomically by the
worker that builds it; the pieces that share trained runs (the Sec. 4 figures) stay together in
one piece, in order.

The pool is this module's own (:func:`run_pieces`, a few dozen lines over
:mod:`multiprocessing`) rather than :class:`multiprocessing.pool.Pool` or
:class:`concurrent.futures.ProcessPoolExecutor`: a worker that dies (killed for memory, a crash
in XLA) must fail its piece at once rather than hang the command (``Pool`` waits forever for the
lost result), and Ctrl-C must stop the workers at once rather than wait for their pieces to end
(the executor joins its workers at exit).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import multiprocessing.connection
import signal
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence

__all__ = ["PieceFailed", "run_pieces", "default_jobs"]

PR_SET_PDEATHSIG = 1
"""Linux ``prctl`` option: a signal the kernel sends this process when its parent exits."""

WORKER_MEMORY = 3 * 2**30
"""Bytes a worker may hold: the most one ``gradflow reproduce`` worker held (about 3 GiB,
measured 2026-12-04); :func:`default_jobs` starts no more workers than the available memory holds."""


class PieceFailed(RuntimeError):
    """Pieces of a parallel run failed: ``failures`` maps each failed piece's index to a one-line
    reason (the exception's type and message, or how its worker died); the other pieces ran to
    their end (those not yet started when the first failure came were not started)."""

    def __init__(self, failures: dict[int, str]):
        self.failures = dict(failures)
        super().__init__("; ".join(f"piece {i}: {why}" for i, why in sorted(self.failures.items())))


def _die_with_parent() -> None:
    """On Linux, have the kernel kill this process when its parent dies, however it dies (a parent
    killed by ``SIGKILL`` cannot stop its workers itself; they would compute on, orphaned)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):  # no prctl: only an orderly exit stops the workers
            pass


def _worker(conn, use_cache: bool) -> None:
    """A worker's loop: receive ``(index, fn, args)``, send back ``(index, True, result)`` or
    ``(index, False, reason)``; ``None`` ends it. Ctrl-C is the parent's to handle (it stops the
    workers); the persistent compilation cache is on unless the command said ``--no-cache``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    if use_cache:
        from gradflow import enable_compilation_cache

        try:
            enable_compilation_cache()
        except OSError:  # the parent has already warned once
            pass
    while True:
        piece = conn.recv()
        if piece is None:
            return
        index, fn, args = piece
        try:
            reply = (index, True, fn(*args))
        except Exception as err:  # noqa: BLE001 - reported to the parent, which decides
            tb = traceback.format_exc(limit=-3)
            reply = (index, False, f"{type(err).__name__}: {err}\n{tb}")
        try:
            conn.send(reply)
        except Exception as err:  # noqa: BLE001 - e.g. a result that cannot be pickled
            conn.send((index, False, f"its result could not be sent back ({type(err).__name__}: {err})"))


def run_pieces(pieces: Sequence[tuple[Callable, tuple]], jobs: int, use_cache: bool) -> Iterator[tuple[int, object]]:
    """Run ``fn(*args)`` for each ``(fn, args)`` of ``pieces`` in ``jobs`` worker processes (at most
    one per piece), handed out in the given order as workers become free; yields ``(index,
    result)`` as each piece finishes. ``fn`` must be a module-level function and ``args`` and its
    result picklable; what a piece prints goes straight to this process's stdout and stderr.

    A piece that raises, or whose worker dies, fails alone: no new piece is started after it, the
    running ones run to their end, then :class:`PieceFailed` is raised naming every failed piece.
    Ctrl-C (``KeyboardInterrupt``) stops every worker at once and is raised again; what the
    pieces finished and wrote is kept.

    **Raises:** :class:`PieceFailed`; ``KeyboardInterrupt``; ``ValueError`` for ``jobs < 1``."""
    if jobs < 1:
        raise ValueError(f"jobs: got {jobs}; expected an integer ≥ 1")
    ctx = multiprocessing.get_context("spawn")
    todo = list(enumerate(pieces))[::-1]  # popped from the end: in the given order
    workers: list = []  # (process, connection, index of its piece or None)
    failures: dict[int, str] = {}
    try:
        for _ in range(min(jobs, len(pieces))):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, use_cache), daemon=True)
            proc.start()
            child.close()
            workers.append([proc, parent, None])
        while True:
            for w in workers:  # hand out pieces while none has failed
                if w[2] is None and todo and not failures and w[0].is_alive():
                    index, (fn, args) = todo.pop()
                    w[1].send((index, fn, args))
                    w[2] = index
            busy = [w for w in workers if w[2] is not None]
            if not busy:
                if todo and not failures:  # every worker died while idle: nothing can run them
                    failures.update({index: "not run: no worker left alive" for index, _ in todo})
                break
            ready = multiprocessing.connection.wait([w[1] for w in busy] + [w[0].sentinel for w in busy])
            for w in busy:
                if w[1] in ready or w[1].poll():
                    try:
                        index, ok, value = w[1].recv()
                    except EOFError:  # it died while sending
                        index, ok, value = w[2], False, f"its worker died (exit code {w[0].exitcode})"
                    w[2] = None
                    if ok:
                        yield index, value
                    else:
                        failures[index] = value
                elif w[0].sentinel in ready:  # died without an answer: killed, or a crash in native code
                    w[0].join()
                    failures[w[2]] = f"its worker died (exit code {w[0].exitcode}, e.g. killed for memory)"
                    w[2] = None
        for w in workers:
            if w[0].is_alive():
                w[1].send(None)
        for w in workers:
            w[0].join(timeout=30)
    finally:
        for w in workers:  # Ctrl-C, an error in the caller, or a worker that did not end: stop them
            if w[0].is_alive():
                w[0].kill()
                w[0].join()
            w[1].close()
    if failures:
        raise PieceFailed(failures)


def default_jobs() -> int:
    """Worker processes when ``--jobs`` is not given: the usable cores, at most 8 and at most as
    many as the available memory holds at :data:`WORKER_MEMORY` each (at least 1)."""
    from gradflow.internal import usable_cores

    jobs = min(usable_cores(), 8)
    try:
        with open("/proc/meminfo") as f:
            available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
        jobs = min(jobs, available // WORKER_MEMORY)
    except (OSError, StopIteration, ValueError, IndexError):  # not Linux: the cores alone
        pass
    return max(1, jobs)
