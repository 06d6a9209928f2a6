"""What a solve is asked for, checked once and handed down by name: :class:`Settings` (the whole
run) and :class:`Round` (one round of some lanes). Both are keyword-only pytrees: their array
fields are traced (changing ``t1``, the save times' values or the tolerances does not recompile)
and the rest is static (part of the compiled program's key)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

from .._errors import bad_arg
from .._validate import check_positive, check_positive_int, check_times
from .policy import DEFAULT_POLICY, AutoPolicy
from .solvers import resolve_solver

__all__ = ["Settings", "SolveOptions", "DEFAULTS", "Round", "check_settings", "default_ts", "log_taus"]

_static = dict(metadata=dict(static=True))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """The settings of one engine run (every field by keyword).

    Traced: ``taus`` ``(T,)`` float64 log save times ``log1p(ts)``, the last always ``log1p(t1)``
    (:func:`log_taus`); ``t1`` the exact end time (a 0-d array: ``expm1(log1p(t1))`` is not
    always ``t1``); ``rtol``, ``atol`` the step controller's tolerances (0-d arrays); ``tau0``
    the log start time ``log1p(t0)`` (a 0-d array, default ``0``: the flow starts at ``t = 0``),
    computed as ``taus`` are, so a save point at ``t0`` is the start itself bit for bit.

    Static: ``solver`` ``"auto"`` or a concrete name of
    :data:`gradflow._engine.solvers.SOLVER_TABLE`; ``max_steps`` each lane's step budget, all
    phases together; ``keep`` the number of save points returned (``taus`` may carry one more, the
    end point); ``args_batched`` whether the flow's arguments carry a leading lane axis; ``lane``
    return this lane only (``None``: every lane); ``fixed_width`` run every program of a batch of
    ``B`` lanes on all ``B`` rows, the pending lanes padded (default ``False``: later rounds may
    run buckets of the pending lanes; :func:`gradflow._engine.batch.run`); ``policy`` the phase
    policy of ``auto`` (:class:`gradflow._engine.policy.AutoPolicy`, default
    :data:`~gradflow._engine.policy.DEFAULT_POLICY`): static, so every compiled program of a run
    is keyed by it."""

    taus: Any
    t1: Any
    rtol: Any
    atol: Any
    tau0: Any = dataclasses.field(default_factory=lambda: np.zeros(()))
    solver: str = dataclasses.field(**_static)
    max_steps: int = dataclasses.field(**_static)
    keep: int = dataclasses.field(**_static)
    args_batched: bool = dataclasses.field(default=False, **_static)
    lane: int | None = dataclasses.field(default=None, **_static)
    fixed_width: bool = dataclasses.field(default=False, **_static)
    policy: AutoPolicy = dataclasses.field(default=DEFAULT_POLICY, **_static)

    def describe(self) -> dict:
        """The settings a result's metadata records: ``solver`` (the name asked for), ``rtol``,
        ``atol``, ``t1`` (Python floats) and ``max_steps``; ``policy`` too when ``auto`` ran under
        a policy other than the default: a string, ``AutoPolicy(...)`` with the fields that differ
        from the default (hashable and JSON-friendly, as every metadata value)."""
        out = {"solver": self.solver, "rtol": float(self.rtol), "atol": float(self.atol), "t1": float(self.t1),
               "max_steps": self.max_steps}
        if self.solver == "auto" and self.policy != DEFAULT_POLICY:
            changed = [f"{f.name}={getattr(self.policy, f.name)!r}" for f in dataclasses.fields(self.policy)
                       if getattr(self.policy, f.name) != getattr(DEFAULT_POLICY, f.name)]
            out["policy"] = f"AutoPolicy({', '.join(changed)})"
        return out

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


def default_ts(t1: float, num: int = 400, t0: float = 0.0) -> np.ndarray:
    """``t = 0`` followed by ``num`` log-spaced flow times from ``1e-3`` to ``t1``
    (``num`` linearly spaced points if ``t1 ≤ 1e-3``). With a start time ``t0 > 0``: the grid of a
    run of length ``t1 − t0``, shifted by ``t0`` (points that round to the same float, or to the
    same log time ``log1p(t)``, dropped; the first is ``t0``, the last ``t1``)."""
    if t0:
        ts = t0 + default_ts(t1 - t0, num)
        ts[0], ts[-1] = t0, t1
        # the points log time tells apart: both ends, and each point past its predecessor and short of t1
        taus = np.log1p(ts)
        keep = np.concatenate([[True], (taus[1:] > taus[:-1]) & (taus[1:] < taus[-1])])
        keep[-1] = True
        return ts[keep]
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class SolveOptions:
    """The settings every front end shares (:func:`gradflow.integrate`,
    :func:`gradflow.integrate_batch`, :func:`gradflow.simulate`, :func:`gradflow.simulate_batch`,
    ``gradflow sweep``), each default written once, here: the front ends' signatures take their
    defaults from :data:`DEFAULTS`. Keyword-only and immutable; not checked until
    :meth:`settings`.

    - ``ts`` (``None``): flow times to save at, strictly increasing in ``[t0, t1]`` (``t0 = 0``
      unless a front end takes a start time); ``None``: ``t0`` and 400 log-spaced points from
      ``t0 + 1e-3`` to ``t1`` (:func:`default_ts`).
    - ``rtol`` (``1e-8``), ``atol`` (``None``: ``rtol/100``): the step controller's tolerances
      on the state in log time.
    - ``max_steps`` (``16384``): each lane's step budget, all phases together.
    - ``solver`` (``"auto"``): a name of :data:`gradflow.SOLVERS`.
    - ``rest_stop`` (``True``): stop once the flow is at rest (docs: Solvers, "The rest stop").
    - ``policy`` (``None``: :data:`gradflow._engine.policy.DEFAULT_POLICY`): the phase policy of
      ``solver="auto"``, a :class:`gradflow.AutoPolicy`."""

    ts: Any = None
    rtol: float = 1e-8
    atol: float | None = None
    max_steps: int = 16384
    solver: str = "auto"
    rest_stop: bool = True
    policy: AutoPolicy | None = None

    def settings(self, t1, t0=0.0) -> tuple[Settings, np.ndarray]:
        """``(settings, ts)`` for a solve from ``t0`` to ``t1``: :func:`check_settings` of these
        options (``atol`` resolved to ``rtol/100`` when ``None``).

        **Raises:** :class:`gradflow.GradflowValueError` as :func:`check_settings`, and for a
        ``rest_stop`` that is not a bool."""
        if not isinstance(self.rest_stop, (bool, np.bool_)):
            raise bad_arg("rest_stop", self.rest_stop, "True (stop once the flow is at rest) or False (integrate to t1)")
        rtol = check_positive("rtol", self.rtol, upper=1.0)
        atol = rtol / 100 if self.atol is None else self.atol
        return check_settings(t1=t1, ts=self.ts, rtol=rtol, atol=atol, max_steps=self.max_steps, solver=self.solver,
                              policy=self.policy, t0=t0)


DEFAULTS = SolveOptions()
"""The front ends' defaults (:class:`SolveOptions`)."""


def check_settings(*, t1, ts, rtol, atol, max_steps, solver, policy=None, t0=0.0) -> tuple[Settings, np.ndarray]:
    """Validate the solve settings shared by every front end.

    Returns ``(settings, ts)``: ``ts`` the save times (default :func:`default_ts`), ``settings``
    a :class:`Settings` with ``keep = len(ts)`` (``args_batched`` and ``lane`` at their defaults:
    set them with :meth:`Settings.replace`).

    **Raises:** :class:`gradflow.GradflowValueError` for ``t1`` not in ``(0, ∞)``, a start time
    ``t0`` not in ``[0, t1)``, ``ts`` not a strictly increasing 1-D array in ``[t0, t1]``, ``rtol`` not in ``(0, 1)``, ``atol ≤ 0``,
    ``max_steps`` not a positive integer, an unknown ``solver``, a ``policy`` that is not an
    :class:`~gradflow._engine.policy.AutoPolicy` (``None``: the default)."""
    t1, ts, t0 = check_times(t1, ts, t0)
    if ts is None:
        ts = default_ts(t1, t0=t0)
    rtol = check_positive("rtol", rtol, upper=1.0)
    atol = check_positive("atol", atol)
    max_steps = check_positive_int("max_steps", max_steps)
    if policy is None:
        policy = DEFAULT_POLICY
    elif not isinstance(policy, AutoPolicy):
        raise bad_arg("policy", policy, "a gradflow.AutoPolicy (or None: the default)")
    taus = log_taus(ts, t1)
    tau0 = taus[0] if ts[0] == t0 else np.log1p(np.float64(t0))  # a save point at t0 is the start, bit for bit
    settings = Settings(taus=taus, t1=np.asarray(t1), rtol=np.asarray(rtol), atol=np.asarray(atol),
                        tau0=np.asarray(tau0, np.float64), solver=resolve_solver(solver), max_steps=max_steps, keep=len(ts), policy=policy)
    return settings, ts
