"""The result of the value-softmax family's flow or descent (:class:`Trajectory`: the saved
states and the paper's metrics), and :func:`winners`."""

from __future__ import annotations

import json
import os
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from .._status import STATUS, Status
from .._errors import bad_arg
from ..io import atomic_write, load_npz
from ..solution import _Run
from .losses import AbstractLoss
from .models import AbstractModel

__all__ = ["Trajectory", "STATUS", "compute_metrics", "winners"]


class Trajectory(_Run):
    """Saved states of one run (or a batch of runs: every array gains a leading axis ``B``).

    **Fields** (``T`` saved points; float64 unless stated):

    - ``t (T,)``: flow time of each saved point. For GD, ``t = lr·k``.
    - ``k (T,)`` int: GD iteration index (``None`` for the flow).
    - ``V (T, d, n)``: value block (``U`` for the tied model).
    - ``a (T, n)``: logits (``(T, T_tok, T_tok)`` for the row-wise model).
    - ``s``: attention weights ``map(a)``, shape as ``a``.
    - ``loss (T,)``: ``L(V, a)``.
    - ``Gamma (T,)``: polarisation coefficient ``Γ(t) = ∫₀ᵗ γ dt`` (GD: ``Σ lr·γ_k``).
    - ``entropy (T,)``: entropy of ``s`` in nats (from logits for softmax; mean over rows).
    - ``u (T, n)``: ``Vᵀβ*`` when the loss has a teacher, else ``None``.
    - ``valid (T,)`` bool: whether the run reached that point. Unreached points hold the
      last saved state (never NaN/inf); a run stopped between save points got to ``t_end``,
      past its last valid point: ``V_end``, ``a_end`` are the state there.
    - ``num_steps ()`` int: solver steps taken (accepted and rejected) or GD iterations done.
    - ``status_code ()`` int: see :data:`STATUS`; ``status`` gives the name.
    - ``t_end ()``: the flow time the run reached (``t1`` when ``ok``).
    - ``t_steady ()``: for losses with a finite minimiser, the flow time at which the flow was
      at rest within tolerance and the solve stopped (later points hold that state);
      ``inf`` if it never was (always ``inf`` for the logistic teacher; ``None`` for GD).
    - ``V_end (d, n)``, ``a_end`` (shape of one ``a``), ``Gamma_end ()``: the state the flow
      ended in, at ``t_end`` (no time axis), and ``Γ`` there: where a run stopped by
      ``max_steps`` between save points got to, the state to resume from. ``simulate(loss,
      traj.V_end, traj.a_end, ...)`` continues the flow, its ``t`` counting from 0 again (add
      ``t_end``) and its ``Gamma`` from 0 (add ``Gamma_end``). A run that reached ``t1`` ends
      at ``t1`` (the last saved point when ``ts`` ends at ``t1``, as by default); one that
      rests, in its rest state; one that failed, in its last accepted (finite) state. ``None``
      for GD and for a trajectory loaded from a file written before they existed.
    - ``meta``: static description (model, normalisation, solver, tolerances …).
    """

    t: Float[Array, "*B T"]
    V: Float[Array, "*B T d n"]
    a: Float[Array, "*B T ..."]
    s: Float[Array, "*B T ..."]
    loss: Float[Array, "*B T"]
    Gamma: Float[Array, "*B T"]
    entropy: Float[Array, "*B T"]
    valid: Bool[Array, "*B T"]
    num_steps: Int[Array, "*B"]
    status_code: Int[Array, "*B"]
    t_end: Float[Array, "*B"]
    t_steady: Float[Array, "*B"] | None = None
    u: Float[Array, "*B T n"] | None = None
    k: Int[Array, "*B T"] | None = None
    V_end: Float[Array, "*B d n"] | None = None
    a_end: Float[Array, "*B ..."] | None = None
    Gamma_end: Float[Array, "*B"] | None = None
    meta: tuple = eqx.field(static=True, default=())


    def to_xarray(self):
        """This run (or batch) as an ``xarray.Dataset``: dims ``t`` (coordinate: flow time; ``k`` for GD), ``token``, ``dim`` (rows of ``V``), ``row`` (row-wise logits) and ``run`` (a batch's lanes); ``attrs`` hold ``meta`` (``meta_*``, ``meta_json``) and package versions. See :mod:`gradflow._xarray`."""
        from .._xarray import trajectory_to_xarray

        return trajectory_to_xarray(self)

    # ------------------------------------------------------------------ save/load
    _ARRAYS = ("t", "V", "a", "s", "loss", "Gamma", "entropy", "valid", "num_steps", "status_code", "t_end", "t_steady", "u",
               "k", "V_end", "a_end", "Gamma_end")

    def save(self, path: str | os.PathLike) -> None:
        """Write to ``path`` (``.npz``: arrays plus a JSON string of ``meta``), atomically."""
        arrays = {name: np.asarray(getattr(self, name)) for name in self._ARRAYS if getattr(self, name) is not None}
        arrays["_meta_json"] = np.asarray(json.dumps(self.metadata, default=str))
        atomic_write(path, lambda f: np.savez(f, **arrays))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Trajectory":
        """Read a file written by :meth:`save`.

        Raises :class:`gradflow.GradflowValueError` naming the file when it is missing, truncated
        or not a saved trajectory (no ``t``/``V``/``a``/``_meta_json`` arrays)."""
        z = load_npz(path, required=("t", "V", "a", "_meta_json"), what="a Trajectory saved by Trajectory.save")
        fields = {name: jnp.asarray(z[name]) for name in cls._ARRAYS if name in z}
        meta = json.loads(str(z["_meta_json"]))
        return cls(meta=tuple(sorted(meta.items())), **fields)


def winners(weights, rtol: float = 1e-12) -> np.ndarray:
    """The set of maximisers of ``weights`` over the last axis, as a boolean mask.

    Entry ``i`` is a winner when ``weights_i ≥ max − rtol·|max|``: exactly tied tokens (e.g.
    equal logits with identical value columns, which the flow keeps tied) are all reported,
    instead of the first index an ``argmax`` would pick.

    **Arguments:** ``weights`` any real array ``(..., n)`` (weights ``s``, logits or ``u``),
    finite; ``rtol ≥ 0`` (default ``1e-12``).
    **Returns:** a NumPy ``bool`` array of the same shape; every row has at least one winner.
    **Raises:** :class:`gradflow.GradflowValueError` for non-finite or empty input or ``rtol < 0``.

    >>> winners([0.4, 0.2, 0.4]).tolist()
    [True, False, True]
    """
    from .._validate import as_float_array

    w = np.asarray(as_float_array("weights", weights))
    if w.ndim == 0:
        raise bad_arg("weights", weights, "an array with a last axis of tokens")
    if isinstance(rtol, bool) or not (isinstance(rtol, (int, float, np.floating)) and np.isfinite(rtol) and rtol >= 0):
        raise bad_arg("rtol", rtol, "a finite number ≥ 0")
    top = w.max(axis=-1, keepdims=True)
    return w >= top - rtol * np.abs(top)


def compute_metrics(model: AbstractModel, loss: AbstractLoss, V: Array, a: Array) -> dict[str, Array]:
    """Metrics of one state: ``s``, ``loss``, ``entropy`` and ``u`` (if the loss has a teacher)."""
    out = {
        "s": model.weights(V, a),
        "loss": model.loss(loss, V, a),
        "entropy": model.entropy(V, a),
    }
    if loss.teacher is not None:
        out["u"] = model.u(V, loss.teacher)
    return out
