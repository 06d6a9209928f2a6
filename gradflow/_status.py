"""How a run ended: one enumeration whose members carry their code, name and message."""

from __future__ import annotations

import enum

__all__ = ["Status", "STATUS"]


class Status(enum.IntEnum):
    """How a run ended. The integer is what result files store (``status_code``); the name is the
    public status string (``traj.status``); :attr:`message` explains it. In every case ``t_end``
    is where the run stopped, the state there is finite, and later save points hold it with
    ``valid = False`` (after a rest stop they hold the rest state with ``valid = True``).

    - ``ok`` (0): reached ``t1``, or came to rest and holds that state (docs, "Solvers and
      statuses", the rest stop);
    - ``max_steps`` (1): the step budget ran out before ``t1``;
    - ``stalled`` (2): the log-time step collapsed below ``STALL_ULPS·eps·max(1, τ1)``
      (≈ 6e-12 at ``t1 = 1e12``) with a finite field around — a blow-up, kink or singularity ahead;
    - ``nonfinite`` (3): the field at the reached state, or within a few minimal steps ahead of a
      stall, is NaN/inf (the solve stops at once; for GD: the iterate diverged);
    - ``solver_failed`` (4): another solver failure (e.g. the implicit solver's Newton iteration, or the spectral estimate of ``rkc`` not finite).
    """

    def __new__(cls, code: int, message: str):
        member = int.__new__(cls, code)
        member._value_ = code
        member._message = message
        return member

    @property
    def message(self) -> str:
        """What this status means (one sentence)."""
        return self._message

    ok = 0, "reached t1, or came to rest (t_steady: the movement left was below the tolerance) and holds that state"
    max_steps = 1, "the step budget (max_steps) ran out before t1"
    stalled = 2, ("the log-time step collapsed below STALL_ULPS·eps·max(1, τ1) with a finite field around: "
                  "a blow-up, kink or singularity ahead")
    nonfinite = 3, ("the field at the reached state, or within a few minimal steps ahead of a stall, is NaN/inf "
                    "(for GD: the iterate diverged)")
    solver_failed = 4, "another solver failure (e.g. the implicit solver's Newton iteration, or the spectral estimate of rkc not finite)"


STATUS = tuple(status.name for status in Status)
"""Status names by code (``STATUS[traj.status_code] == traj.status``); :class:`Status` explains each."""
