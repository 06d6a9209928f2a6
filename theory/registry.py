"""The one registry of check ids (docs: Theorem checks). Each id maps to a function
``run(trials: int = 16, seed: int = 0) -> CheckResult`` running its default experiment and
negative control."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence

from gradflow import GradflowValueError

from . import empirical, invariants, kq_limits, maxmargin, ordering, polarisation, replicator, square
from ._result import CheckResult

__all__ = ["CHECKS", "EXPLORATORY", "DEPRECATED_IDS", "canonical_id", "check_ids", "get_check", "run_check", "run_checks",
           "DEFAULT_TRIALS"]

DEFAULT_TRIALS = 16

CHECKS: dict[str, Callable[..., CheckResult]] = {
    "thm3.2a": ordering.run_thm3_2a,
    "thm3.2b": ordering.run_thm3_2b,
    "thm3.3a": polarisation.run_thm3_3a,
    "thm3.3b": polarisation.run_thm3_3b,
    "thm3.3c": polarisation.run_thm3_3c,
    "lem3.5a": square.run_lem3_5a,
    "lem3.5b": square.run_lem3_5b,
    "lemD.2": invariants.run_lemD2,
    "inv.sum_a": invariants.run_inv_sum_a,
    "inv.v_perp": invariants.run_inv_v_perp,
    "replicator": replicator.run_replicator,
    "conditioning": square.run_conditioning,
    "normalizations": empirical.run_normalizations,
    "sinks": empirical.run_sinks,
    "mm.direction": maxmargin.run_mm_direction,
    "mm.regpath": maxmargin.run_mm_regpath,
    "mm.value-softmax": maxmargin.run_mm_value_softmax,
    "mm.kq-nuclear": maxmargin.run_mm_kq_nuclear,
    "mm.kq-kkt": kq_limits.run_mm_kq_kkt,
    "mm.kq-kkt-rate": kq_limits.run_mm_kq_kkt_rate,
    "mm.kq-aligned": kq_limits.run_mm_kq_aligned,
}
"""Check id → default-experiment runner, in report order."""

EXPLORATORY = frozenset({"mm.kq-nuclear", "mm.kq-kkt", "mm.kq-kkt-rate", "mm.kq-aligned"})
"""Checks of a statement beyond the reproduced paper whose answer is open (docs: Max-margin token
selection, the factorised key–query flow): run and reported like the others, with their numbers,
but a failing one does not make ``gradflow reproduce`` or ``gradflow check`` (all checks) exit 1.
Named explicitly (``gradflow check mm.kq-nuclear``) it decides the exit status as any check.
``mm.kq-kkt`` and ``mm.kq-aligned`` (:mod:`gradflow.theory.kq_limits`) were written to be counted,
with thresholds argued before their first run; they missed those thresholds (docs: factorised
attention) and stay here, reported, rather than loosened. ``mm.kq-kkt-rate`` was written to be
counted too, with thresholds calibrated on the draws of ``seed`` and fixed before its run on the
fresh draws of ``seed + 1``: it missed its fall threshold on 3 of those 16 draws and is here for
the same reason."""


def check_ids() -> list[str]:
    """All registered ids, in report order."""
    return list(CHECKS)


DEPRECATED_IDS: dict[str, str] = {"normalisations": "normalizations"}
"""Old id -> id: still accepted on input (with a :class:`DeprecationWarning`); results and reports
carry the new id."""


def canonical_id(check_id: str) -> str:
    """``check_id`` itself, or the id a deprecated spelling stands for (with a
    :class:`DeprecationWarning`). Does not check that the id exists (:func:`get_check` does)."""
    new = DEPRECATED_IDS.get(check_id) if isinstance(check_id, str) else None
    if new is None:
        return check_id
    warnings.warn(f"check id {check_id!r} is deprecated; use {new!r}", DeprecationWarning, stacklevel=3)
    return new


def get_check(check_id: str) -> Callable[..., CheckResult]:
    """The runner for ``check_id`` (a deprecated id of :data:`DEPRECATED_IDS` is accepted, with a
    :class:`DeprecationWarning`).

    **Raises:** :class:`gradflow.GradflowValueError` for an unknown id.
    """
    try:
        return CHECKS[canonical_id(check_id)]
    except (KeyError, TypeError):
        raise GradflowValueError(f"check id: got {check_id!r}; expected one of {check_ids()}") from None


def _validate(trials, seed):
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        raise GradflowValueError(f"trials: got {trials!r}; expected a positive integer")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise GradflowValueError(f"seed: got {seed!r}; expected a non-negative integer")


def run_check(check_id: str, trials: int = DEFAULT_TRIALS, seed: int = 0) -> CheckResult:
    """Run one check's default experiment (``trials`` random trials from ``seed``) and control.

    **Raises:** :class:`gradflow.GradflowValueError` for an unknown id, ``trials < 1`` or ``seed < 0``.
    """
    fn = get_check(check_id)
    _validate(trials, seed)
    return fn(trials, seed)


def run_checks(ids: Sequence[str] | None = None, trials: int = DEFAULT_TRIALS, seed: int = 0,
               on_result: Callable[[CheckResult, float], None] | None = None) -> list[CheckResult]:
    """Run several checks (default: all, in registry order); all ids are validated first.
    Checks share cached experiments, so running them together is much cheaper than one by one.

    ``on_result(result, seconds)``, if given, is called as each check finishes, with its wall time
    in seconds (the command line prints one progress line per check from it)."""
    runners = [CHECKS[cid] for cid in check_ids()] if not ids else [get_check(cid) for cid in ids]
    _validate(trials, seed)
    results = []
    for run in runners:
        start = time.perf_counter()
        results.append(run(trials, seed))
        if on_result is not None:
            on_result(results[-1], time.perf_counter() - start)
    return results
