"""Argument validation shared by every public entry point (``integrate``, ``simulate``,
``descend``, the losses, maps, models and the CLI). Knows no loss or model (their own checks,
e.g. :func:`gradflow.attention.models.prepare`, build on these).

Each check raises :class:`gradflow.GradflowValueError` (a ``ValueError``) built by
:func:`gradflow._errors.bad_arg`: one line naming the argument, the value received and what is
accepted. Checks run once, on concrete (non-traced) values, before anything is compiled.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from ._errors import bad_arg

__all__ = [
    "as_float_array",
    "check_positive",
    "check_positive_int",
    "check_times",
    "check_time_resolution",
    "working_dtype",
]

LOGITS_HINT = (
    "finite logits (no NaN or inf; a weight of exactly 0 has no finite logit — "
    "pass a large negative finite logit, not log(0))"
)
"""What the logit arguments accept; names the usual mistake (``log`` of probabilities with zeros)."""


def working_dtype():
    """The float dtype gradflow computes in: ``float64``, or ``float32`` if the user switched
    JAX's x64 mode off after importing gradflow."""
    return jnp.result_type(float)


def as_float_array(name: str, x, ndim: int | None = None, dtype=jnp.float64, accepted: str | None = None,
                   host: bool = False) -> Array | np.ndarray:
    """Convert ``x`` to a finite floating JAX array (NumPy with ``host=True``), or raise a clear error.

    Integer, boolean and float32 inputs are cast to ``dtype`` (default float64), so their results
    are identical to passing the same values as float64. ``accepted`` overrides the
    "finite values" wording of the non-finite error (e.g. :data:`LOGITS_HINT`). ``host=True``
    returns a NumPy array instead (of the dtype JAX would use): arrays that go straight into a
    jitted call are transferred with it, which saves a separate transfer per argument.

    **Raises:** :class:`gradflow.GradflowValueError` if ``x`` is not a real numeric array, has
    the wrong number of dimensions, or holds NaN/inf.
    """
    if isinstance(x, jax.core.Tracer):
        arr = x
    else:
        if isinstance(x, (str, bytes)):
            raise bad_arg(name, x, "a real numeric array")
        try:
            arr = np.asarray(x)
        except Exception:  # ragged nested lists and other exotic inputs
            raise bad_arg(name, x, "a real numeric array (ragged or non-numeric input)") from None
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)):
            raise bad_arg(name, x, "a real numeric array")
        if np.iscomplexobj(arr):
            raise bad_arg(name, x, "a real (not complex) array")
        if arr.size == 0:
            raise bad_arg(name, x, "a non-empty array")
        if not np.all(np.isfinite(arr)):
            raise bad_arg(name, x, accepted or "finite values (no NaN or inf)")
    if ndim is not None and arr.ndim != ndim:
        raise bad_arg(f"{name}.shape", tuple(arr.shape), f"an array with {ndim} dimension(s)")
    if isinstance(arr, jax.core.Tracer):
        return jnp.asarray(arr, dtype=dtype)
    out = np.asarray(arr, dtype=jnp.dtype(jax.dtypes.canonicalize_dtype(dtype)))
    if out.dtype.itemsize < arr.dtype.itemsize and not np.all(np.isfinite(out)):  # e.g. 1e39 in float32 mode
        raise bad_arg(name, x, f"values representable in {out.dtype} (JAX's float64 mode is off; "
                               'enable it with jax.config.update("jax_enable_x64", True))')
    # jax.device_put rather than jnp.asarray: no compiled conversion per shape, which a fresh process
    # would compile (or load from the cache) before its first solve
    return out if host else jax.device_put(out)


def check_positive(name: str, x, upper: float | None = None) -> float:
    """``x`` as a Python float, ``0 < x < ∞`` (and ``x < upper`` if given); booleans refused."""
    accepted = "a positive finite number" if upper is None else f"a number in (0, {upper:g})"
    if isinstance(x, (bool, np.bool_, str, bytes)):
        raise bad_arg(name, x, accepted)
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise bad_arg(name, x, accepted) from None
    if not math.isfinite(v) or v <= 0 or (upper is not None and v >= upper):
        raise bad_arg(name, x, accepted)
    return v


def check_positive_int(name: str, x, what: str = "a positive integer") -> int:
    """``x`` as a Python int ``≥ 1``; integral floats (``1e4``) accepted, booleans refused."""
    if isinstance(x, (bool, np.bool_, str, bytes)):
        raise bad_arg(name, x, what)
    try:
        v = float(x)
    except (TypeError, ValueError, OverflowError):
        raise bad_arg(name, x, what) from None
    if not math.isfinite(v) or v < 1 or v != int(v):
        raise bad_arg(name, x, what)
    return int(v)


LOG_SPAN_ULPS = 1e6
"""The smallest accepted ``log1p(t1) − log1p(t0)`` of a flow started at ``t0 > 0``, in float64
spacings of ``log1p(t1)``: the span's flow time is then resolved to about ``1e-6`` relative (a
run from ``t0`` to a ``t1`` closer than that would take no step and return ``params0``)."""


def check_times(t1, ts, t0=0.0) -> tuple[float, np.ndarray | None, float]:
    """Validate the horizon ``t1``, the start time ``t0`` and the save times ``ts`` (``None``
    stays ``None``); returns ``(t1, ts, t0)``.

    Accepted: ``0 < t1 < ∞``; ``0 ≤ t0 < t1`` (default ``0``), a real number, with ``[t0, t1]``
    resolved in log time (:data:`LOG_SPAN_ULPS`); ``ts`` a non-empty 1-D array of finite, strictly
    increasing flow times in ``[t0, t1]``. Also refuses a horizon the working precision cannot
    resolve (:func:`check_time_resolution`).
    """
    t1 = check_positive("t1", t1)
    check_time_resolution("t1", t1)
    accepted = f"a real number in [0, t1 = {t1:g}): the flow time of params0"
    real = (isinstance(t0, (int, float, np.integer, np.floating)) and not isinstance(t0, (bool, np.bool_))) or (
        isinstance(t0, (np.ndarray, jax.Array)) and np.ndim(t0) == 0 and np.asarray(t0).dtype.kind in "iuf")
    if not real:
        raise bad_arg("t0", t0, accepted)
    t0 = float(t0)
    if not (0.0 <= t0 < t1):
        raise bad_arg("t0", t0, accepted)
    if t0 > 0 and np.log1p(t1) - np.log1p(t0) < LOG_SPAN_ULPS * np.spacing(np.log1p(t1)):
        raise bad_arg("t1", t1, f"a horizon further from t0 = {t0:g}: the flow runs in log time log(1 + t), which "
                      f"resolves [t0, t1] only if t1 - t0 is at least about {LOG_SPAN_ULPS:g} float64 spacings of "
                      f"log(1 + t1) times (1 + t1), {LOG_SPAN_ULPS * np.spacing(np.log1p(t1)) * (1 + t1):.3g} here")
    span = "[0, t1]" if t0 == 0 else f"[t0, t1] = [{t0:g}, {t1:g}]"
    if ts is None:
        return t1, None, t0
    if isinstance(ts, (str, bytes)):
        raise bad_arg("ts", ts, f"a non-empty 1-D array of flow times in {span}")
    try:
        ts_arr = np.asarray(ts, dtype=np.float64) if np.ndim(ts) == 1 else None
    except (TypeError, ValueError):
        raise bad_arg("ts", ts, f"a non-empty 1-D array of flow times in {span}") from None
    if ts_arr is None or ts_arr.size == 0:
        raise bad_arg("ts", ts, f"a non-empty 1-D array of flow times in {span}")
    if ts_arr[0] >= t0 and ts_arr[-1] <= t1 and (ts_arr.size == 1 or bool((ts_arr[1:] > ts_arr[:-1]).all())):
        return t1, ts_arr, t0  # valid (one pass; any NaN/inf fails a comparison and gets its message below)
    if not np.all(np.isfinite(ts_arr)):
        raise bad_arg("ts", ts, "finite flow times")
    if np.any(ts_arr < t0) or np.any(ts_arr > t1):
        raise bad_arg("ts", ts, f"flow times in [0, t1 = {t1:g}]" if t0 == 0 else f"flow times in {span}")
    if np.any(np.diff(ts_arr) <= 0):
        raise bad_arg("ts", ts, "strictly increasing flow times")
    return t1, ts_arr, t0


FLOAT32_MAX_HORIZON = 2.0**23
"""Largest flow time (or GD iteration count) accepted when gradflow computes in float32: beyond
``2²³ ≈ 8.4e6`` float32 cannot resolve a unit step (``t + 1 == t`` for ``t ≥ 2²⁴``) and loses
the iteration count (float32 has a 24-bit significand)."""


def check_time_resolution(name: str, horizon: float, dtype=None) -> None:
    """Refuse a horizon (flow time ``t1`` or GD ``steps``) the float ``dtype`` cannot resolve.

    ``dtype`` defaults to :func:`working_dtype`. In float64 every finite horizon is accepted
    (the flow runs in log time ``τ = log(1 + t)``; ``t1 = 1e30`` is fine). In float32 the limit is
    :data:`FLOAT32_MAX_HORIZON`, and the message says how to switch float64 back on.
    """
    if dtype is None and jax.config.jax_enable_x64:
        return  # float64: every finite horizon (the common case, without a dtype look-up per call)
    dtype = working_dtype() if dtype is None else jnp.dtype(dtype)
    if jnp.finfo(dtype).bits < 64 and horizon > FLOAT32_MAX_HORIZON:
        raise bad_arg(
            name,
            horizon,
            f"at most {FLOAT32_MAX_HORIZON:.3g} in {jnp.dtype(dtype).name}, whose time cannot resolve a unit "
            'step beyond it; enable float64 with jax.config.update("jax_enable_x64", True)',
        )
