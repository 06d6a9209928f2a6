"""Labelled arrays (xarray) for gradflow results: :meth:`gradflow.Trajectory.to_xarray`.

Dimension names, shared with the sweep store of :mod:`gradflow.attention.sweep`:

- ``run``: lanes of a batch (only for a batched trajectory);
- ``t``: saved points (the coordinate ``t`` holds the flow time; ``k`` the GD iteration, for
  :func:`gradflow.descend`);
- ``dim``: rows of ``V`` (the output dimension ``d``);
- ``token``: columns of ``V`` and entries of ``a``, ``s``, ``u`` (the ``n`` tokens);
- ``row``: query rows of the row-wise model's logits ``A`` (then ``a``, ``s`` are
  ``(t, row, token)``).
"""

from __future__ import annotations

import json

import numpy as np

from ._status import STATUS

__all__ = ["trajectory_to_xarray", "provenance"]

LONG_NAMES = {
    "V": "value matrix V (d × n); U for the tied model",
    "a": "attention logits a",
    "s": "attention weights s = map(a)",
    "u": "u = Vᵀβ* (the reduced coordinates, paper Sec. 3)",
    "loss": "loss L(V, a) = ℓ(β)",
    "Gamma": "polarisation coefficient Γ(t) = ∫₀ᵗ γ dτ (paper Thm 3.3)",
    "entropy": "entropy of s (nats)",
    "valid": "whether the run reached this saved point",
    "num_steps": "solver steps taken (accepted and rejected), or GD iterations",
    "status": "run status (see gradflow.STATUS)",
    "t_end": "flow time the run reached",
    "t_steady": "flow time at which the flow was at rest (inf: never)",
    "V_end": "value matrix V at t_end, the state the flow ended in",
    "a_end": "attention logits a at t_end, the state the flow ended in",
    "Gamma_end": "polarisation coefficient Γ at t_end",
}


def provenance() -> dict:
    """Versions of gradflow and the packages that computed a result (for ``attrs``)."""
    from ._provenance import versions

    return {f"version_{pkg}": v for pkg, v in versions().items()}


def _param_dims(name: str, ndim: int) -> tuple[str, ...]:
    """Dims of a per-point parameter array of ``ndim`` axes after ``t``."""
    if name == "V":
        return ("dim", "token")
    if ndim == 1:
        return ("token",)
    if ndim == 2:
        return ("row", "token")
    return tuple(f"{name}_axis{i}" for i in range(ndim))


def trajectory_to_xarray(traj):
    """An ``xarray.Dataset`` of ``traj`` (see :meth:`gradflow.Trajectory.to_xarray`)."""
    import xarray as xr

    lead = ("run",) if traj.batched else ()
    nb = len(lead)
    data_vars = {}
    for name in ("V", "a", "s", "u"):
        value = getattr(traj, name)
        if value is None:
            continue
        arr = np.asarray(value)
        dims = lead + ("t",) + _param_dims(name, arr.ndim - nb - 1)
        data_vars[name] = (dims, arr, {"long_name": LONG_NAMES[name]})
    for name in ("loss", "Gamma", "entropy", "valid"):
        data_vars[name] = (lead + ("t",), np.asarray(getattr(traj, name)), {"long_name": LONG_NAMES[name]})
    codes = np.asarray(traj.status_code)
    data_vars["status"] = (lead, np.vectorize(lambda c: STATUS[int(c)], otypes=[str])(codes) if codes.ndim else
                           np.asarray(STATUS[int(codes)]), {"long_name": LONG_NAMES["status"]})
    for name in ("num_steps", "t_end", "t_steady", "Gamma_end"):
        value = getattr(traj, name)
        if value is not None:
            data_vars[name] = (lead, np.asarray(value), {"long_name": LONG_NAMES[name]})
    for name in ("V_end", "a_end"):  # the state at t_end: no t axis
        value = getattr(traj, name)
        if value is not None:
            arr = np.asarray(value)
            data_vars[name] = (lead + _param_dims(name[0], arr.ndim - nb), arr, {"long_name": LONG_NAMES[name]})
    t = np.asarray(traj.t)
    coords = {}
    if traj.batched:
        if np.all(t == t[:1]):  # one time grid for every lane (simulate_batch): a 1-d coordinate
            coords["t"] = ("t", t[0], {"long_name": "flow time t", "units": "flow time"})
        else:
            coords["time"] = (lead + ("t",), t, {"long_name": "flow time t"})
        coords["run"] = ("run", np.arange(codes.shape[0]))
    else:
        coords["t"] = ("t", t, {"long_name": "flow time t (GD: t = lr·k)"})
    if traj.k is not None:
        k = np.asarray(traj.k)
        coords["k"] = (lead + ("t",), k, {"long_name": "GD iteration k"}) if k.ndim > 1 else ("t", k, {"long_name": "GD iteration k"})
    attrs = {f"meta_{key}": (value if isinstance(value, (str, int, float, bool)) else json.dumps(value, default=str))
             for key, value in traj.metadata.items()}
    attrs["meta_json"] = json.dumps(traj.metadata, default=str)
    attrs.update(provenance())
    attrs["source"] = "gradflow Trajectory.to_xarray"
    return xr.Dataset(data_vars, coords=coords, attrs=attrs)
