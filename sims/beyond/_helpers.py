"""Helpers shared by the beyond-the-paper figures (``long-horizon``, ``gamma``, ``bound``,
``gd-vs-flow``, ``sinks-rowwise``): valid-point selection, stable ``1 − s_top``."""

from __future__ import annotations

import numpy as np

import gradflow


def valid_arrays(traj: gradflow.Trajectory, *names: str) -> list[np.ndarray]:
    """``traj.<name>`` as NumPy arrays restricted to the reached save points (``traj.valid``)."""
    keep = np.asarray(traj.valid, bool)
    return [np.asarray(getattr(traj, name))[keep] for name in names]


def one_minus_top(a: np.ndarray, top: int) -> np.ndarray:
    """``1 − s_top = Σ_{j≠top} softmax(a)_j`` from the logits ``a (T, n)``, without cancellation."""
    lse = np.logaddexp.reduce(a, axis=-1)
    rest = np.logaddexp.reduce(np.delete(a, top, axis=-1), axis=-1)
    return np.exp(rest - lse)


def require_ok(fig_id: str, **runs: gradflow.Trajectory) -> None:
    """Raise ``RuntimeError`` naming the runs whose status is not ``ok``."""
    bad = {name: tr.status for name, tr in runs.items() if not tr.ok}
    if bad:
        raise RuntimeError(f"{fig_id}: runs not ok: {bad}")


def sci(x: float) -> str:
    """``x`` as mathtext: ``0``, ``10^{4}``, ``2\\cdot10^{4}`` or a plain ``%g`` for ``1e-2 < |x| < 1e3``."""
    if x == 0:
        return "0"
    if 1e-2 < abs(x) < 1e3:
        return f"{x:g}"
    exp = int(np.floor(np.log10(abs(x))))
    mant = x / 10.0**exp
    return f"10^{{{exp}}}" if np.isclose(mant, 1.0) else f"{mant:g}\\cdot10^{{{exp}}}"
