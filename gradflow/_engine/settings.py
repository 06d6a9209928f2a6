"""What a solve is asked for, checked once and handed down by name: :class:`Settings` (the whole
run) and :class:`Round` (one round of some lanes). Both are keyword-only pytrees: their array
fields are traced (changing ``t1``, the save times' values or the tolerances does not recompile)
and the rest is static (part of the compiled program's key)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from .._validate import check_positive, check_positive_int, check_times
from .solvers import resolve_solver

__all__ = ["Settings", "Round", "check_settings", "default_ts", "log_taus"]

_static = dict(metadata=dict(static=True))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """The settings of one engine run (every field by keyword).

    Traced: ``taus`` ``(T,)`` float64 log save times ``log1p(ts)``, the last always ``log1p(t1)``
    (:func:`log_taus`); ``t1`` the exact end time (a 0-d array: ``expm1(log1p(t1))`` is not
    always ``t1``); ``rtol``, ``atol`` the step controller's tolerances (0-d arrays).

    Static: ``solver`` ``"auto"`` or a concrete name of
    :data:`gradflow._engine.solvers.SOLVER_TABLE`; ``max_steps`` each lane's step budget, all
    phases together; ``keep`` the number of save points returned (``taus`` may carry one more, the
    end point); ``args_batched`` whether the flow's arguments carry a leading lane axis; ``lane``
    return this lane only (``None``: every lane); ``fixed_width`` run every program of a batch of
    ``B`` lanes on all ``B`` rows, the pending lanes padded (default ``False``: later rounds may
    run buckets of the pending lanes; :func:`gradflow._engine.batch.run`)."""

    taus: Any
    t1: Any
    rtol: Any
    atol: Any
    solver: str = dataclasses.field(**_static)
    max_steps: int = dataclasses.field(**_static)
    keep: int = dataclasses.field(**_static)
    args_batched: bool = dataclasses.field(default=False, **_static)
    lane: int | None = dataclasses.field(default=None, **_static)
    fixed_width: bool = dataclasses.field(default=False, **_static)

    def describe(self) -> dict:
        """The settings a result's metadata records: ``solver`` (the name asked for), ``rtol``,
        ``atol``, ``t1`` (Python floats) and ``max_steps``."""
        return {"solver": self.solver, "rtol": float(self.rtol), "atol": float(self.atol), "t1": float(self.t1),
                "max_steps": self.max_steps}

    def replace(self, **changes) -> Settings:
        """A copy with ``changes`` (keyword arguments, as the fields)."""
        return dataclasses.replace(self, **changes)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True, kw_only=True)
class Round:
    """One round of solves: ``solver`` (static) the integer code of the solver every lane of the
    round runs (:data:`gradflow._engine.solvers.SOLVER_TABLE`); ``steps`` (traced, an integer
    array) the most steps each may take in it, at most ``cap`` (static: the solve loop's ``max_steps``,
    :data:`gradflow._engine.batch.ROUND_STEPS`). Rounds of any length up to ``cap`` run the same
    compiled program of their solver."""

    solver: int = dataclasses.field(**_static)
    steps: Any
    cap: int = dataclasses.field(**_static)

    @classmethod
    def of(cls, solver, steps, cap: int) -> Round:
        """The round of solver code ``solver`` and ``steps ≤ cap`` steps (Python or NumPy integers)."""
        if not 0 < steps <= cap:
            raise ValueError(f"a round of {steps} steps, with at most {cap} allowed")
        return cls(solver=int(solver), steps=np.asarray(steps, np.int64), cap=int(cap))


def default_ts(t1: float, num: int = 400) -> np.ndarray:
    """``t = 0`` followed by ``num`` log-spaced flow times from ``1e-3`` to ``t1``
    (``num`` linearly spaced points if ``t1 ≤ 1e-3``)."""
    if t1 <= 1e-3:
        return np.linspace(0.0, t1, num + 1)
    grid = np.geomspace(1e-3, t1, num)
    grid[-1] = t1
    return np.concatenate([[0.0], grid])


def log_taus(ts: np.ndarray, t1: float) -> np.ndarray:
    """Save points in log time; the last one is always ``log1p(t1)`` (the end of the solve)."""
    taus = np.log1p(ts)
    if ts[-1] != t1:
        taus = np.concatenate([taus, [np.log1p(t1)]])
    return taus


def check_settings(*, t1, ts, rtol, atol, max_steps, solver) -> tuple[Settings, np.ndarray]:
    """Validate the solve settings shared by every front end.

    Returns ``(settings, ts)``: ``ts`` the save times (default :func:`default_ts`), ``settings``
    a :class:`Settings` with ``keep = len(ts)`` (``args_batched`` and ``lane`` at their defaults:
    set them with :meth:`Settings.replace`).

    **Raises:** :class:`gradflow.GradflowValueError` for ``t1`` not in ``(0, ∞)``, ``ts`` not a
    strictly increasing 1-D array in ``[0, t1]``, ``rtol`` not in ``(0, 1)``, ``atol ≤ 0``,
    ``max_steps`` not a positive integer, an unknown ``solver``."""
    t1, ts = check_times(t1, ts)
    if ts is None:
        ts = default_ts(t1)
    rtol = check_positive("rtol", rtol, upper=1.0)
    atol = check_positive("atol", atol)
    max_steps = check_positive_int("max_steps", max_steps)
    settings = Settings(taus=log_taus(ts, t1), t1=np.asarray(t1), rtol=np.asarray(rtol), atol=np.asarray(atol),
                        solver=resolve_solver(solver), max_steps=max_steps, keep=len(ts))
    return settings, ts
