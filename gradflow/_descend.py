"""The discrete twin of the flow: gradient descent (or any optax optimiser), jitted with ``lax.scan``.

:func:`descend_params` for any loss over any parameter pytree (as :func:`gradflow.integrate`);
:func:`gradflow.attention.descend` runs the same loop (``_descend_jit``) on the value-softmax
family's :class:`gradflow._engine.solve.Flow`."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ._status import Status
from ._errors import bad_arg
from ._validate import check_positive, check_positive_int, check_time_resolution
from ._integrate import prepare_user
from .solution import Solution

__all__ = ["descend_params", "default_record"]


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
def _descend_jit(flow, fargs, params0, lr, increments, optimizer):
    """GD (or ``optimizer``) on the flow's field: ``θ ← θ + lr·field(θ)`` for ``optax.sgd``; the
    quadratures as left Riemann sums ``Σ lr·rate(θ_k)``; stop at the first non-finite iterate."""
    opt = optax.sgd(lr) if optimizer is None else optimizer
    opt_state = opt.init(params0)
    rates = (lambda p: {}) if flow.rates is None else (lambda p: flow.rates(p, fargs))
    dtype = jax.tree.leaves(params0)[0].dtype
    quads0 = jax.tree.map(lambda s: jnp.zeros(s.shape, dtype), jax.eval_shape(rates, params0))

    def one_step(carry):
        params, opt_state, quads, k, failed = carry
        grads = jax.tree.map(jnp.negative, flow.field(params, fargs))  # ∇L, as the flow's field
        updates, new_state = opt.update(grads, opt_state, params)
        new_params = optax.apply_updates(params, updates)
        new_quads = jax.tree.map(lambda q, r: q + lr * r, quads, rates(params))
        finite = jnp.all(jnp.asarray([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves((new_params, new_quads))]))
        keep = lambda new, old: jax.tree.map(lambda n_, o_: jnp.where(finite, n_, o_), new, old)
        return (
            keep(new_params, params),
            keep(new_state, opt_state),
            keep(new_quads, quads),
            jnp.where(finite, k + 1, k),
            ~finite,
        )

    def segment(carry, inc):
        start = carry[3]
        carry = jax.lax.while_loop(lambda c: (c[3] < start + inc) & ~c[4], one_step, carry)
        params, _, quads, k, failed = carry
        return carry, (params, quads, k)

    init = (params0, opt_state, quads0, jnp.zeros((), jnp.int64), jnp.zeros((), bool))
    final, (params, quads, k_reached) = jax.lax.scan(segment, init, increments)
    observed = {} if flow.observe is None else jax.vmap(lambda p: flow.observe(p, fargs))(params)
    return dict(params=params, quadratures=quads, observed=observed, k_reached=k_reached, k_end=final[3],
                failed=final[4])


def _check_gd(lr, steps, optimizer, record):
    lr = check_positive("lr", lr)
    steps = check_positive_int("steps", steps, "an integer ≥ 1")
    check_time_resolution("steps", steps)
    if optimizer is not None and not isinstance(optimizer, optax.GradientTransformation):
        raise bad_arg("optimizer", optimizer, "an optax.GradientTransformation or None")
    rec = _check_record(record, steps)
    return lr, steps, rec, jnp.asarray(np.diff(np.concatenate([[0], rec])))


def descend_params(
    loss,
    params0,
    *,
    lr: float,
    steps: int,
    record=None,
    optimizer: optax.GradientTransformation | None = None,
    args=None,
    observe=None,
    quadratures=None,
) -> Solution:
    """Gradient descent (or any optax optimiser) on any JAX loss over a parameter pytree: the
    discrete twin of :func:`gradflow.integrate`.

    **Arguments:**

    - ``loss``, ``params0``, ``args``, ``observe``, ``quadratures``: as :func:`gradflow.integrate`
      (``loss(params)`` or ``loss(params, args)``, a real float scalar; ``params0`` a pytree of
      float arrays, cast to float64).
    - ``lr``: step size ``> 0``; iteration ``k`` sits at flow time ``t = lr·k``.
    - ``steps``: number of iterations ``≥ 1``.
    - ``record``: iteration indices to save (strictly increasing, in ``[0, steps]``); default
      ``0`` and ~400 log-spaced indices.
    - ``optimizer``: any ``optax.GradientTransformation``; default ``optax.sgd(lr)``, i.e.
      ``θ ← θ − lr·∇L`` exactly.

    **Returns:** a :class:`gradflow.Solution` with ``k = record``, ``t = lr·k``, ``params``,
    ``loss``, ``grad_norm``, ``observed``; ``quadratures`` are left Riemann sums
    ``Σ_{j<k} lr·g(θ_j)``. An iterate that turns non-finite stops the run (status
    ``nonfinite``; later points hold the last finite iterate with ``valid = False``).

    **Raises:** :class:`gradflow.GradflowValueError` as :func:`gradflow.integrate` for the loss,
    parameters and functions, and for ``lr ≤ 0``, ``steps < 1`` or a bad ``record``.

    >>> import gradflow
    >>> gd = gradflow.descend_params(lambda p: 0.5 * (2.0 - p["w2"] * p["w1"]) ** 2,
    ...                              {"w1": 0.1, "w2": 0.1}, lr=0.01, steps=10_000)
    >>> w1 = gd.params["w1"]
    >>> round(float(w1[-1] ** 2), 6)
    2.0
    """
    user, params0, args = prepare_user(loss, params0, args, None, observe, quadratures, batch=False)
    lr, steps, rec, increments = _check_gd(lr, steps, optimizer, record)
    out = _descend_jit(user.flow(rest_stop=False, detect_stiffness=False), args, params0, jnp.asarray(lr), increments, optimizer)
    k = jnp.asarray(rec)
    obs = out["observed"]
    meta = {"method": "gd" if optimizer is None else "optax", "lr": lr, "steps": steps}
    return Solution(
        t=lr * k.astype(jnp.float64), k=k, params=out["params"], loss=obs["loss"], grad_norm=obs["grad_norm"],
        observed=obs["observed"], quadratures=out["quadratures"], valid=out["k_reached"] == k,
        num_steps=out["k_end"], status_code=jnp.where(out["failed"], Status.nonfinite, Status.ok), t_end=lr * out["k_end"].astype(jnp.float64),
        meta=tuple(sorted(meta.items())),
    )
