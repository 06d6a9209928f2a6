"""Result types shared by every check: :class:`Verdict` (a statement evaluated on given
trajectories) and :class:`CheckResult` (a check's default experiment plus its negative control).

Margin convention (all checks): every check reduces its statement to one or more signed,
dimensionless *sub-margins* per trial, positive when the statement holds with that much room.
A trial's margin is the minimum of its sub-margins, ``worst_margin`` is the minimum over trials,
and ``holds == (worst_margin > 0)`` (plus every run finishing with solver status ``ok``).
"""

from __future__ import annotations

import dataclasses
import math
import types
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["Verdict", "CheckResult", "jsonable", "combine"]


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


def combine(margins: Sequence[float], details: Mapping | None = None, ok: Sequence[bool] | None = None) -> Verdict:
    """Build a :class:`Verdict` from per-trial margins (and per-trial solver-ok flags).

    ``holds`` is ``min(margins) > 0`` and every ``ok``; NaN margins count as ``-inf``.
    """
    m = [(-math.inf if (mm is None or math.isnan(float(mm))) else float(mm)) for mm in margins]
    worst = min(m) if m else -math.inf
    all_ok = True if ok is None else bool(all(ok))
    det = dict(details or {})
    if ok is not None and not all_ok:
        det["solver_not_ok_trials"] = [i for i, flag in enumerate(ok) if not flag]
    return Verdict(holds=bool(worst > 0 and all_ok), worst_margin=worst, trials=len(m), margins=tuple(m), details=det)


def merge(verdicts: Sequence[Verdict], scalar_keys: Sequence[str] = ()) -> Verdict:
    """Pool several verdicts (e.g. one per sweep group) into one.

    Margins are concatenated; each detail key becomes the list of its values across the
    verdicts, except ``scalar_keys`` (settings shared by all, e.g. a tolerance), which keep the
    first value. A verdict with solver failures makes the pooled one fail.
    """
    margins = [m for v in verdicts for m in v.margins]
    details: dict = {}
    for v in verdicts:
        for key, val in v.details.items():
            details[key] = list(details.get(key, [])) + (list(val) if isinstance(val, (list, tuple)) else [val])
    details = {k: (v[0] if k in scalar_keys else v) for k, v in details.items()}
    oks = [not v.details.get("solver_not_ok_trials") for v in verdicts]
    return combine(margins, details, oks)


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
            **{k: v for k, v in control.details.items() if k in ("solver_not_ok_trials", "summary")},
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
