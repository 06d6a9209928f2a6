"""The discrete twin of the flow: gradient descent (or any optax optimiser), jitted with ``lax.scan``."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import ArrayLike, Float

from ._errors import bad_arg
from .flow import gradient_field
from .losses import AbstractLoss
from .models import AbstractModel
from ._validate import check_positive, check_positive_int, check_time_resolution, prepare
from .trajectory import Trajectory, compute_metrics

__all__ = ["descend", "default_record"]


def default_record(steps: int, num: int = 400) -> np.ndarray:
    """Iteration indices ``0`` plus about ``num`` log-spaced indices up to ``steps`` (unique, sorted)."""
    grid = np.unique(np.round(np.geomspace(1, steps, num)).astype(np.int64))
    return np.concatenate([[0], grid])


def _check_record(record, steps: int) -> np.ndarray:
    if record is None:
        return default_record(steps)
    rec = np.asarray(record)
    if rec.ndim != 1 or rec.size == 0 or not np.issubdtype(rec.dtype, np.integer):
        if rec.ndim == 1 and rec.size and np.issubdtype(rec.dtype, np.floating) and np.all(rec == np.round(rec)):
            rec = rec.astype(np.int64)
        else:
            raise bad_arg("record", record, "a non-empty 1-D array of integer iteration indices")
    if np.any(rec < 0) or np.any(rec > steps):
        raise bad_arg("record", record, f"iteration indices in [0, steps = {steps}]")
    if np.any(np.diff(rec) <= 0):
        raise bad_arg("record", record, "strictly increasing iteration indices")
    return rec.astype(np.int64)


@eqx.filter_jit
def _descend_jit(model, loss, V0, a0, lr, increments, optimizer):
    opt = optax.sgd(lr) if optimizer is None else optimizer
    params = (V0, a0)
    opt_state = opt.init(params)
    def one_step(carry):
        params, opt_state, Gamma, k, failed = carry
        grads = jax.tree.map(jnp.negative, gradient_field(model, loss, *params))  # ∇L, as the flow's field
        updates, new_state = opt.update(grads, opt_state, params)
        new_params = optax.apply_updates(params, updates)
        new_Gamma = Gamma + lr * model.gamma(loss, *params)
        finite = jnp.all(jnp.asarray([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves((new_params, new_Gamma))]))
        keep = lambda new, old: jax.tree.map(lambda n_, o_: jnp.where(finite, n_, o_), new, old)
        return (
            keep(new_params, params),
            keep(new_state, opt_state),
            jnp.where(finite, new_Gamma, Gamma),
            jnp.where(finite, k + 1, k),
            ~finite,
        )

    def segment(carry, inc):
        start = carry[3]
        carry = jax.lax.while_loop(lambda c: (c[3] < start + inc) & ~c[4], one_step, carry)
        params, _, Gamma, k, failed = carry
        return carry, (params[0], params[1], Gamma, k)

    init = (params, opt_state, jnp.zeros((), V0.dtype), jnp.zeros((), jnp.int64), jnp.zeros((), bool))
    final, (V, a, Gamma, k_reached) = jax.lax.scan(segment, init, increments)
    metrics = jax.vmap(lambda V_, a_: compute_metrics(model, loss, V_, a_))(V, a)
    return dict(V=V, a=a, Gamma=Gamma, k_reached=k_reached, k_end=final[3], failed=final[4], **metrics)


def descend(
    loss: AbstractLoss,
    V0: Float[ArrayLike, "d n"],
    a0: Float[ArrayLike, "..."],
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
      the initial state). Default :func:`default_record` (``0`` and ~400 log-spaced indices).
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
    lr = check_positive("lr", lr)
    steps = check_positive_int("steps", steps, "an integer ≥ 1")
    check_time_resolution("steps", steps)
    if optimizer is not None and not isinstance(optimizer, optax.GradientTransformation):
        raise bad_arg("optimizer", optimizer, "an optax.GradientTransformation or None")
    rec = _check_record(record, steps)
    increments = jnp.asarray(np.diff(np.concatenate([[0], rec])))
    out = _descend_jit(mdl, loss, V0, a0, jnp.asarray(lr), increments, optimizer)
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
        status_code=jnp.where(failed, 3, 0),
        t_end=lr * k_end.astype(jnp.float64),
        meta=tuple(sorted(meta.items())),
        **out,
    )
