"""Result types shared by every check: :class:`Verdict` (a statement evaluated on given
trajectories) and :class:`CheckResult` (a check's default experiment plus its negative control).

Margin convention (all checks): every check reduces its statement to one or more signed,
dimensionless *sub-margins* per trial, positive when the statement holds with that much room.
A trial's margin is the minimum of its sub-margins, ``worst_margin`` is the minimum over trials,
and ``holds == (worst_margin > 0)`` (plus every run finishing with solver status ``ok``).

Statements about a whole trajectory are evaluated at every save point: a trial's margin is the
worst normalised gap over all saved times, and the flow time where it is worst is reported
(``details["margin_t"]`` per trial, ``details["worst_t"]`` for the worst trial; ``nan`` for a
margin that is a fit over a time window). ``details["last_violation_t"]`` (per trial) is the
latest saved time where the statement is violated (``nan`` if nowhere): a negative control
should be violated late as well as early.
"""

from __future__ import annotations

import dataclasses
import math
import types
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["Verdict", "CheckResult", "jsonable", "combine", "merge", "over_time", "any_of"]


def jsonable(x: Any) -> Any:
    """Convert NumPy/JAX scalars and arrays (and nested containers) to plain JSON types.

    Non-finite floats become the strings ``"inf"``, ``"-inf"``, ``"nan"`` so that the
    ``--json`` output is strict JSON.
    """
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if hasattr(x, "__array__") and not isinstance(x, (str, bytes)):
        arr = np.asarray(x)
        if arr.ndim == 0:
            return jsonable(arr.item())
        return [jsonable(v) for v in arr.tolist()]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        v = float(x)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return v
    return x


def _freeze(d: Mapping | None) -> Mapping:
    return types.MappingProxyType(jsonable(dict(d or {})))


def _reduce(obj):
    """``__reduce__`` of a frozen result: its fields, read-only mappings as dicts (a
    ``MappingProxyType`` cannot be pickled; ``__post_init__`` freezes them again). Results are
    pickled when ``gradflow reproduce`` runs its checks in a worker process."""
    values = [getattr(obj, f.name) for f in dataclasses.fields(obj)]
    return type(obj), tuple(dict(v) if isinstance(v, types.MappingProxyType) else v for v in values)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A statement evaluated on given trajectories.

    **Fields:** ``holds`` (``bool``), ``worst_margin`` (``float``, signed: min over trials of
    the min of the sub-margins; ``-inf`` when a trial could not be evaluated), ``trials``
    (``int``, number of trajectories evaluated), ``margins`` (per-trial margins, tuple of
    float), ``details`` (read-only mapping of JSON-ready values).
    """

    holds: bool
    worst_margin: float
    trials: int
    margins: tuple = ()
    details: Mapping = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "details", _freeze(self.details))
        object.__setattr__(self, "margins", tuple(float(m) for m in self.margins))

    __reduce__ = _reduce


def over_time(t, m_t) -> tuple[float, float, float]:
    """Reduce a margin time series ``m_t`` (shape ``(T,)`` or ``(T, ...)``, at flow times ``t``) to
    ``(worst margin, time where it is worst, latest time where it is negative or nan)``."""
    t = np.asarray(t, float)
    m = np.asarray(m_t, float).reshape(t.shape[0], -1) if np.size(m_t) else np.zeros((t.shape[0], 0))
    if m.size == 0:
        return -math.inf, math.nan, math.nan
    m = np.where(np.isnan(m), -np.inf, m)
    per_t = m.min(axis=1)
    k = int(np.argmin(per_t))
    bad = np.flatnonzero(per_t <= 0)
    return float(per_t[k]), float(t[k]), (float(t[bad[-1]]) if bad.size else math.nan)


def combine(
    margins: Sequence[float | None] | np.ndarray,
    details: Mapping | None = None,
    ok: Sequence[bool | np.bool_] | np.ndarray | None = None,
    times: Sequence[float | str] | np.ndarray | None = None,
    last_violation: Sequence[float | str] | np.ndarray | None = None,
) -> Verdict:
    """Build a :class:`Verdict` from per-trial margins (and per-trial solver-ok flags).

    ``holds`` is ``min(margins) > 0`` and every ``ok``; NaN (or ``None``) margins count as
    ``-inf``. Per-trial values come as sequences or 1-D NumPy arrays (flags may be NumPy bools).
    ``times`` (optional, per trial): the flow time where that trial's margin is worst; then
    ``details`` gets ``margin_t`` and ``worst_t``. ``last_violation`` (optional, per trial): the
    latest saved time where the statement fails; ``details`` gets it and its maximum. Times may be
    given as a :class:`Verdict`'s details hold them (:func:`jsonable`: ``"nan"``/``"inf"`` strings
    for non-finite values), as :func:`merge` passes them.
    """
    m = [(-math.inf if (mm is None or math.isnan(float(mm))) else float(mm)) for mm in margins]
    worst = min(m) if m else -math.inf
    all_ok = True if ok is None else bool(all(ok))
    det = dict(details or {})
    if times is not None:
        det["margin_t"] = [float(x) for x in times]
        det["worst_t"] = float(times[int(np.argmin(m))]) if m else math.nan
    if last_violation is not None:
        lv = [float(x) for x in last_violation]
        det["last_violation_t"] = lv
        finite = [x for x in lv if not math.isnan(x)]
        det["latest_violation_t"] = max(finite) if finite else math.nan
    if ok is not None and not all_ok:
        det["solver_not_ok_trials"] = [i for i, flag in enumerate(ok) if not flag]
    return Verdict(holds=bool(worst > 0 and all_ok), worst_margin=worst, trials=len(m), margins=tuple(m), details=det)


def merge(verdicts: Sequence[Verdict], scalar_keys: Sequence[str] = ()) -> Verdict:
    """Pool several verdicts (e.g. one per experiment group) into one.

    Margins are concatenated; each detail key becomes the list of its values across the
    verdicts, except ``scalar_keys`` (settings shared by all, e.g. a tolerance), which keep the
    first value. A verdict with solver failures makes the pooled one fail.
    """
    margins = [m for v in verdicts for m in v.margins]
    details: dict = {}
    derived = ("worst_t", "latest_violation_t", "margin_t", "last_violation_t", "solver_not_ok_trials")
    for v in verdicts:
        for key, val in v.details.items():
            if key in derived:
                continue
            details[key] = list(details.get(key, [])) + (list(val) if isinstance(val, (list, tuple)) else [val])
    details = {k: (v[0] if k in scalar_keys else v) for k, v in details.items()}
    oks = [ok for v in verdicts for ok in _trial_oks(v)]
    has_t = all("margin_t" in v.details for v in verdicts) and verdicts
    has_lv = all("last_violation_t" in v.details for v in verdicts) and verdicts
    times = [x for v in verdicts for x in v.details["margin_t"]] if has_t else None
    last = [x for v in verdicts for x in v.details["last_violation_t"]] if has_lv else None
    return combine(margins, details, oks, times, last)


def _trial_oks(v: Verdict) -> list:
    bad = set(v.details.get("solver_not_ok_trials", []))
    return [i not in bad for i in range(v.trials)]


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """The outcome of one registered check (immutable).

    **Fields:**

    - ``id`` (``str``): registry id, e.g. ``"thm3.3b"``.
    - ``statement`` (``str``): one line, citing the paper's number.
    - ``holds`` (``bool``): the statement held on every trial of the default experiment.
    - ``trials`` (``int``): number of random trials (runs) in the default experiment.
    - ``worst_margin`` (``float``): signed room of the worst trial (positive = holds).
    - ``control_holds`` (``bool``): whether the statement held on the negative control, a
      case where it must fail. ``True`` means the check cannot detect a violation (a defect).
    - ``details`` (read-only mapping): fitted numbers, time windows, per-trial margins,
      the control's margin and description.
    """

    id: str
    statement: str
    holds: bool
    trials: int
    worst_margin: float
    control_holds: bool
    details: Mapping = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "details", _freeze(self.details))

    __reduce__ = _reduce

    @property
    def passed(self) -> bool:
        """``holds and not control_holds`` — what ``gradflow check`` requires."""
        return bool(self.holds and not self.control_holds)

    def to_dict(self) -> dict:
        """JSON-ready dict with keys ``id, statement, holds, trials, worst_margin, control_holds, details``."""
        return {
            "id": self.id,
            "statement": self.statement,
            "holds": bool(self.holds),
            "trials": int(self.trials),
            "worst_margin": jsonable(float(self.worst_margin)),
            "control_holds": bool(self.control_holds),
            "details": jsonable(dict(self.details)),
        }

    @classmethod
    def from_verdicts(cls, id: str, statement: str, main: Verdict, control: Verdict, control_case: str, **extra):
        """Assemble a result from the default experiment's and the control's verdicts."""
        details = dict(main.details)
        details["trial_margins"] = list(main.margins)
        details["control"] = {
            "case": control_case,
            "holds": control.holds,
            "worst_margin": control.worst_margin,
            "trials": control.trials,
            **{
                k: v
                for k, v in control.details.items()
                if k in ("solver_not_ok_trials", "summary", "worst_t", "latest_violation_t", "parts")
            },
        }
        details.update(extra)
        # a control whose runs failed proves nothing: count it as not discriminating (the check fails)
        inconclusive = bool(control.details.get("solver_not_ok_trials"))
        details["control"]["inconclusive"] = inconclusive
        return cls(
            id=id,
            statement=statement,
            holds=main.holds,
            trials=main.trials,
            worst_margin=main.worst_margin,
            control_holds=control.holds or inconclusive,
            details=details,
        )


def any_of(parts: Mapping[str, Verdict]) -> Verdict:
    """Several negative controls as one: it holds if any part holds (then the check cannot
    detect that violation). ``worst_margin`` is the largest part's; ``details["parts"]`` gives
    each part's ``holds``, ``worst_margin``, ``worst_t`` and ``latest_violation_t``."""
    vs = list(parts.values())
    summary = {
        name: {
            "holds": v.holds,
            "worst_margin": v.worst_margin,
            "worst_t": v.details.get("worst_t", math.nan),
            "latest_violation_t": v.details.get("latest_violation_t", math.nan),
        }
        for name, v in parts.items()
    }
    bad = [i for i, v in enumerate(vs) if v.details.get("solver_not_ok_trials")]
    det = {"parts": summary}
    if bad:
        det["solver_not_ok_trials"] = bad
    lv = [v.details.get("latest_violation_t", math.nan) for v in vs]
    lv = [float(x) for x in lv if not (isinstance(x, float) and math.isnan(x)) and x != "nan"]
    det["latest_violation_t"] = max(lv) if lv else math.nan
    return Verdict(
        holds=any(v.holds for v in vs),
        worst_margin=max(v.worst_margin for v in vs),
        trials=sum(v.trials for v in vs),
        margins=tuple(m for v in vs for m in v.margins),
        details=det,
    )
