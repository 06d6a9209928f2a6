"""Gradient descent (or any optax optimiser) on the value-softmax family: :func:`descend`, the
discrete twin of :func:`gradflow.simulate` (the loop is ``gradflow._descend._descend_jit``,
the one :func:`gradflow.descend_params` runs)."""

from __future__ import annotations

import jax.numpy as jnp
import optax
from jaxtyping import ArrayLike, Real

from .._descend import _check_gd, _descend_jit
from .._status import Status
from ._simulate import value_softmax_flow
from .losses import AbstractLoss
from .models import AbstractModel, prepare
from .trajectory import Trajectory

__all__ = ["descend"]


def descend(
    loss: AbstractLoss,
    V0: Real[ArrayLike, "d n"],
    a0: Real[ArrayLike, "..."],
    *,
    lr: float,
    steps: int,
    record=None,
    optimizer: optax.GradientTransformation | None = None,
    normalization: str = "softmax",
    temperature: float = 1.0,
    model: str | AbstractModel = "value-softmax",
) -> Trajectory:
    """Run ``steps`` iterations of gradient descent on ``L(V, a)`` (the explicit Euler scheme of the flow).

    **Arguments:**

    - ``loss``, ``V0``, ``a0``, ``normalization``, ``temperature``, ``model``: as :func:`gradflow.simulate`.
    - ``lr``: step size ``> 0``; iteration ``k`` sits at flow time ``t = lr·k``.
    - ``steps``: number of iterations ``≥ 1``.
    - ``record``: iteration indices to save (strictly increasing, in ``[0, steps]``; ``0`` is
      the initial state). Default ``gradflow.internal.default_record`` (``0`` and ~400 log-spaced indices).
    - ``optimizer``: any ``optax.GradientTransformation``; default ``optax.sgd(lr)``, i.e.
      ``θ ← θ − lr·∇L`` exactly. A custom optimiser is a static argument of the jitted loop
      (a new instance recompiles); the default does not recompile for a new ``lr``.

    **Returns:** a :class:`Trajectory` with ``k = record`` and ``t = lr·k``; ``Gamma`` is the
    left Riemann sum ``Σ_{j<k} lr·γ(β_j)``. If an iterate turns non-finite (divergence), the
    run stops there with status ``nonfinite``; later points hold the last finite iterate and
    have ``valid = False``; ``t_end = lr·k`` of that iterate.

    **Raises:** :class:`gradflow.GradflowValueError` for bad arrays or names, ``lr ≤ 0``,
    ``steps < 1`` or a bad ``record``.
    """
    mdl, V0, a0 = prepare(loss, V0, a0, model, normalization, temperature, batch=False)
    lr, steps, rec, increments = _check_gd(lr, steps, optimizer, record)
    out = _descend_jit(value_softmax_flow(loss, False), (mdl, loss), (V0, a0), jnp.asarray(lr), increments, optimizer)
    (V, a), Gamma = out.pop("params"), out.pop("quadratures")["Gamma"]
    out.update(V=V, a=a, Gamma=Gamma, **out.pop("observed"))
    k = jnp.asarray(rec)
    valid = out.pop("k_reached") == k
    k_end = out.pop("k_end")
    failed = out.pop("failed")
    meta = {
        "method": "gd" if optimizer is None else "optax",
        "model": mdl.name,
        "normalization": mdl.normalization,
        "temperature": float(mdl.temperature),
        "loss": type(loss).__name__,
        "lr": lr,
        "steps": steps,
    }
    return Trajectory(
        t=lr * k.astype(jnp.float64),
        k=k,
        valid=valid,
        num_steps=k_end,
        status_code=jnp.where(failed, Status.nonfinite, Status.ok),
        t_end=lr * k_end.astype(jnp.float64),
        meta=tuple(sorted(meta.items())),
        **out,
    )
