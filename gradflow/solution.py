"""The result of a flow or a descent of any loss over a parameter pytree (:class:`Solution`), and
what every result shares (status, metadata, lane indexing)."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from ._status import STATUS, Status

__all__ = ["Solution", "STATUS"]


class _Run(eqx.Module):
    """What a :class:`Trajectory` and a :class:`Solution` share: per-run status, metadata and
    lane indexing (subclasses hold ``status_code`` and ``meta``)."""

    @property
    def status(self):
        """Status name (``str``), or a list of names for a batch (:data:`STATUS`)."""
        code = np.asarray(self.status_code)
        if code.ndim == 0:
            return STATUS[int(code)]
        return [STATUS[int(c)] for c in code.ravel()]

    @property
    def ok(self) -> bool:
        """True when every run finished with status ``ok``."""
        return bool(np.all(np.asarray(self.status_code) == Status.ok))

    @property
    def metadata(self) -> dict[str, Any]:
        """``meta`` as a dict (solver, tolerances, model, ...)."""
        return dict(self.meta)

    @property
    def batched(self) -> bool:
        """Whether every array has a leading batch axis ``B``."""
        return np.ndim(self.status_code) > 0

    def __getitem__(self, i):
        """Lane ``i`` of a batch (``IndexError`` for a single run)."""
        if not self.batched:
            raise IndexError(f"a single (unbatched) {type(self).__name__} cannot be indexed; index a batch")
        return jax.tree.map(lambda x: x[i], self)


class Solution(_Run):
    """The flow (or descent) of any loss over a parameter pytree: :func:`gradflow.integrate`,
    :func:`gradflow.integrate_batch`, :func:`gradflow.descend_params`. Immutable; a batch gives
    every array a leading axis ``B``.

    **Fields** (``T`` saved points; float64 unless stated):

    - ``t (T,)``: flow time of each saved point (GD: ``t = lr·k``).
    - ``params``: the parameter pytree, every leaf with a leading ``T`` axis.
    - ``loss (T,)``: ``L(params)``.
    - ``grad_norm (T,)``: ``‖d params/dt‖₂`` over all leaves (``= ‖∇L‖₂`` unless an explicit
      ``field`` was given).
    - ``observed``: ``{name: (T, ...)}``, each ``observe`` function at the saved points.
    - ``quadratures``: ``{name: (T,)}``, ``∫_{t0}^t g(params(t')) dt'`` of each ``quadratures``
      integrand (``t0`` the start time, default 0), integrated with the flow (GD: the left
      Riemann sum ``Σ lr·g``).
    - ``valid (T,)`` bool: whether the run reached that point; unreached points hold the last
      saved state (never NaN/inf; the state at ``t_end`` is ``params_end``).
    - ``num_steps ()`` int: solver steps taken (accepted and rejected), or GD iterations done.
    - ``status_code ()`` int: see :data:`STATUS`; ``status`` gives the name.
    - ``t_end ()``: the flow time the run reached (``t1`` when ``ok``).
    - ``t_steady ()``: flow time at which the flow was at rest within tolerance and the solve
      stopped (later points hold that state); ``inf`` if never (``None`` for GD).
    - ``k (T,)`` int: GD iteration index (``None`` for the flow).
    - ``params_end``: the parameter pytree of the state the flow ended in, at ``t_end`` (no time
      axis); ``quadratures_end``: ``{name: ()}``, each quadrature there. A run that
      ``max_steps`` stopped between save points got past its last valid point: this is where
      it got, the state to resume from. ``integrate(loss, sol.params_end, t0=float(sol.t_end),
      t1=...)`` continues the flow at its flow time (the log time keeps its origin), its
      quadratures counting from ``t0`` (add ``quadratures_end``). A run that reached ``t1`` ends at ``t1``
      (the last saved point when ``ts`` ends at ``t1``, as by default); one that rests, in its
      rest state; one that failed (``nonfinite``, ``stalled``), in its last accepted state,
      which is finite (resuming from it fails again). ``None`` for
      :func:`gradflow.descend_params`.
    - ``meta``: static description (solver, tolerances, ...); ``metadata`` as a dict.
    """

    t: Float[Array, "*B T"]
    params: Any
    loss: Float[Array, "*B T"]
    grad_norm: Float[Array, "*B T"]
    observed: dict
    quadratures: dict
    valid: Bool[Array, "*B T"]
    num_steps: Int[Array, "*B"]
    status_code: Int[Array, "*B"]
    t_end: Float[Array, "*B"]
    t_steady: Float[Array, "*B"] | None = None
    k: Int[Array, "*B T"] | None = None
    params_end: Any = None
    quadratures_end: dict | None = None
    meta: tuple = eqx.field(static=True, default=())
