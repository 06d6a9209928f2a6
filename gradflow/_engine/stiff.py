"""The phase policy of ``solver="auto"``: which solver each unfinished lane runs in the next round.

Today's policy for flows with a finite minimiser (``auto-stiff``): Dopri8 for up to
:data:`EXPLICIT_BUDGET` steps, then Kvaerno5 from where it stopped. Everything the rounds of
:mod:`gradflow._engine.batch` need to know about phases goes through :func:`phase_of_lanes`, so
a stiffness-detecting policy replaces this one function (and may add per-lane fields to
:class:`gradflow._engine.solve.SolveState`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["AUTO_STIFF", "EXPLICIT_BUDGET", "phase_of_lanes"]

AUTO_STIFF = "auto-stiff"
"""Concrete name of ``auto`` on a flow with a finite minimiser (recorded in the metadata)."""

EXPLICIT_BUDGET = 4096
"""``auto`` on a flow with a finite minimiser: Dopri8 for up to this many steps, then Kvaerno5."""


def phase_of_lanes(solver_name: str, num_steps: np.ndarray, max_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """The solver each lane runs next and how many steps it may take in that phase.

    **Arguments:** ``solver_name`` the resolved name (a name of
    :data:`gradflow._engine.solve.SOLVERS` or :data:`AUTO_STIFF`); ``num_steps`` ``(k,)`` int,
    the steps each unfinished lane has taken so far (all phases); ``max_steps`` the run's budget.

    **Returns:** ``(solvers, left)``: ``(k,)`` arrays of concrete solver names and of steps left
    in the lane's current phase (``0``: the lane's budget is spent, it ends as ``max_steps``).
    The caller caps ``left`` at its round length and groups lanes by ``(solver, steps)``.
    """
    num_steps = np.asarray(num_steps, dtype=np.int64)
    if solver_name != AUTO_STIFF:
        return np.full(num_steps.shape, solver_name, dtype=object), np.maximum(max_steps - num_steps, 0)
    explicit = min(EXPLICIT_BUDGET, max_steps)
    in_explicit = num_steps < explicit
    solvers = np.where(in_explicit, "dopri8", "kvaerno5").astype(object)
    left = np.where(in_explicit, explicit - num_steps, max_steps - num_steps)
    return solvers, np.maximum(left, 0)
