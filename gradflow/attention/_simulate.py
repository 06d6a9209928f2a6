"""``simulate`` / ``simulate_batch``: the value-softmax family's front ends on the engine.

The flow of ``L(V, a) = ℓ(β(V, a))`` (paper Eqs. 2–4) is integrated by :mod:`gradflow._engine`
with the parameters ``(V, a)``, the exact field :func:`gradflow.gradient_field` (the centred
softmax derivative), the polarisation coefficient ``Γ = ∫ γ dt`` (paper Thm. 3.3) as a quadrature
and :func:`gradflow.attention.trajectory.compute_metrics` as the observables.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import ArrayLike, Real

from .._engine import batch as _batch
from .._engine.policy import AutoPolicy
from .._engine.settings import DEFAULTS, SolveOptions, default_ts  # noqa: F401  (re-exported name: default_ts)
from .._engine.solve import Flow
from .._engine.solvers import SOLVERS  # noqa: F401  (re-exported name)
from .._errors import bad_arg
from .flow import gradient_field
from .losses import AbstractLoss, LogisticTeacher
from .models import AbstractModel, ValueSoftmax, prepare
from .trajectory import Trajectory, compute_metrics

__all__ = ["simulate", "simulate_batch", "value_softmax_flow", "REDUCE_MIN_SIZE"]

REDUCE_MIN_SIZE = 2**16
""":func:`simulate` integrates the logistic-teacher flow of the value-softmax model in its exact
rank-one reduction (:func:`_teacher_reduction`) when ``V`` has at least this many entries
(n = d ≥ 256): the same trajectory (within the tolerances) at ``O(n)`` instead of ``O(d·n)``
per field evaluation. Smaller problems, e.g. Fig. 2's ``n = d = 8``, are solved on the full
state ``(V, a)``, as before."""


def _field(params, args):
    """``(dV/dt, da/dt)`` of the value-softmax family (``args = (model, loss)``)."""
    model, loss = args
    return gradient_field(model, loss, *params)


def _rates(params, args):
    """The polarisation rate ``γ`` whose integral is ``Γ``."""
    model, loss = args
    return {"Gamma": model.gamma(loss, *params)}


def _metrics(params, args):
    model, loss = args
    return compute_metrics(model, loss, *params)


def value_softmax_flow(loss: AbstractLoss, detect_stiffness: bool = True) -> Flow:
    """The engine's :class:`gradflow._engine.solve.Flow` of the value-softmax family for ``loss``
    (parameters ``(V, a)``, arguments ``(model, loss)``; ``loss`` is a lane's loss, not read here):
    the rest stop is on (it fires only where the flow has no more than the tolerance left to move,
    so never on a loss without a finite minimiser); ``detect_stiffness`` for ``solver="auto"``."""
    return Flow(field=_field, rates=_rates, observe=_metrics, rest_stop=True, detect_stiffness=detect_stiffness)


def _stack_losses(losses: Sequence[AbstractLoss]) -> AbstractLoss:
    """One loss whose array leaves carry a leading lane axis, from ``B`` losses of one type.

    Stacked on the host (one ``np.stack`` per leaf): ``jnp.stack`` of a thousand small device
    arrays costs tens of milliseconds, as much as solving them.

    **Raises:** :class:`gradflow.GradflowValueError` if the losses differ in structure or shapes."""
    flat = [jax.tree.flatten(x) for x in losses]
    treedef = flat[0][1]
    leaves = [[np.asarray(leaf) for leaf in f[0]] for f in flat]
    shapes = {tuple(leaf.shape for leaf in lv) for lv in leaves}
    if len(shapes) != 1 or any(f[1] != treedef for f in flat):
        raise bad_arg("loss", f"{len(losses)} losses of differing shapes", "losses of one type with equal array shapes")
    return jax.tree.unflatten(treedef, [jnp.asarray(np.stack(col)) for col in zip(*leaves)])


def _reducible(model: AbstractModel, loss: AbstractLoss, V0: np.ndarray) -> bool:
    """Whether :func:`simulate` uses the rank-one reduction (:func:`_teacher_reduction`)."""
    return (type(model) is ValueSoftmax and type(loss) is LogisticTeacher and V0.shape[0] > 1
            and V0.size >= REDUCE_MIN_SIZE)


def _teacher_reduction(loss: LogisticTeacher, V0: np.ndarray):
    """The logistic-teacher flow of ``β = V s(a)`` as the same flow with ``d = 1``.

    With ``ℓ(β) = log(1 + exp(−⟨β*, β⟩))`` the value field is ``dV/dt = γ β* sᵀ`` (paper Eq. 3,
    ``γ = σ(−⟨β*, V s⟩)``): ``V`` moves only along ``β*``, and with ``β̂ = β*/‖β*‖`` and
    ``v = β̂ᵀV`` (a row of ``n`` values)

        V(t) = V0 + β̂ (v(t) − v(0))ᵀ,   dv/dt = γ ‖β*‖ s,   da/dt and γ as functions of ‖β*‖ v,

    i.e. ``(v, a)`` follow the value-softmax flow with ``d = 1``, ``V = v`` (shape ``(1, n)``)
    and teacher ``(‖β*‖,)``: the margin ``⟨β*, V s⟩ = ‖β*‖ ⟨v, s⟩``, Γ, the loss, ``s``, the
    entropy and ``u = Vᵀβ* = ‖β*‖ v`` are the same functions of the state.

    Returns ``(reduced loss, v0 (1, n), expand)`` where ``expand(v)`` maps the saved ``v``
    (``(T, 1, n)``) back to ``V`` (``(T, d, n)``)."""
    beta = np.asarray(loss.beta_star, np.float64)
    norm = float(np.linalg.norm(beta))
    bhat = beta / norm
    v0 = (bhat @ V0)[None, :]

    def expand(v):
        return jnp.asarray(V0)[None] + jnp.asarray(bhat)[None, :, None] * (v - jnp.asarray(v0)[None])

    return LogisticTeacher(np.array([norm])), v0, expand


_TIMES: dict = {}
"""Device copies of recent save-time grids ``ts`` of single runs (JAX arrays are immutable, so a
repeated ``simulate`` with the same grid reuses one; a host→device copy costs ~40 µs per call)."""


def _device_times(ts: np.ndarray, batch_shape: tuple):
    """``ts`` broadcast to ``batch_shape + ts.shape`` as a JAX array (``jax.device_put``: no
    compiled conversion, which a fresh process would have to compile or load first)."""
    if batch_shape:
        return jax.device_put(np.broadcast_to(ts, batch_shape + ts.shape).copy())
    key = (ts.tobytes(), bool(jax.config.jax_enable_x64))
    t = _TIMES.get(key)
    if t is None:
        if len(_TIMES) >= 64:
            _TIMES.clear()
        t = _TIMES[key] = jax.device_put(ts)
    return t


_TRAJECTORY_DEFS: dict = {}
"""Pytree structures of :class:`Trajectory` by ``(meta, fields present)``: a repeated call
builds its result with ``jax.tree.unflatten`` (~10 µs) instead of equinox's checked constructor
(~0.1 ms); the first call of each structure goes through the constructor."""


def _new_trajectory(meta: tuple, fields: dict) -> Trajectory:
    """``Trajectory(meta=meta, **fields)`` (every field a JAX array or ``None``)."""
    names = tuple(name for name, value in fields.items() if value is not None)
    key = (meta, names)
    treedef = _TRAJECTORY_DEFS.get(key)
    if treedef is not None:
        return jax.tree.unflatten(treedef, [fields[name] for name in names])
    traj = Trajectory(meta=meta, **fields)
    leaves, treedef = jax.tree.flatten(traj)
    if len(leaves) == len(names) and all(x is fields[name] for x, name in zip(leaves, names)):  # one leaf per field, in order
        if len(_TRAJECTORY_DEFS) >= 256:
            _TRAJECTORY_DEFS.clear()
        _TRAJECTORY_DEFS[key] = treedef
    return traj


def _trajectory(out, ts: np.ndarray, meta: dict, batch_shape=(), expand=None) -> Trajectory:
    """Wrap the engine's result (already cut to ``len(ts)`` save points); ``expand`` maps the
    saved value block of a reduced solve back to ``V``."""
    (V, a), Gamma = out.params, out.quadratures["Gamma"]
    V_end, a_end = out.params_end
    if expand is not None:
        V, V_end = expand(V), expand(V_end[None])[0]
    fields = dict(t=_device_times(ts, batch_shape), V=V, a=a, Gamma=Gamma, valid=out.valid,
                  num_steps=out.num_steps, status_code=out.status_code, t_end=out.t_end, t_steady=out.t_steady,
                  V_end=V_end, a_end=a_end, Gamma_end=out.quadratures_end["Gamma"])
    fields.update(out.observed)
    order = {name: fields.get(name) for name in _FIELDS}
    return _new_trajectory(tuple(sorted(meta.items())), order)


_FIELDS = tuple(f.name for f in dataclasses.fields(Trajectory) if f.name != "meta")


def _meta(model, loss, settings):
    return {
        "method": "flow",
        "model": model.name,
        "normalization": model.normalization,
        "temperature": float(model.temperature),
        "loss": type(loss).__name__,
        **settings.describe(),
        "time": "log1p",
    }


def simulate(
    loss: AbstractLoss,
    V0: Real[ArrayLike, "d n"],
    a0: Real[ArrayLike, "..."],
    *,
    t1: float,
    ts: Real[ArrayLike, " T"] | Sequence[float] | None = DEFAULTS.ts,
    rtol: float = DEFAULTS.rtol,
    atol: float | None = DEFAULTS.atol,
    normalization: str = "softmax",
    temperature: float = 1.0,
    solver: str = DEFAULTS.solver,
    model: str | AbstractModel = "value-softmax",
    max_steps: int = DEFAULTS.max_steps,
    policy: AutoPolicy | None = DEFAULTS.policy,
) -> Trajectory:
    """Integrate the gradient flow of ``L(V, a) = ℓ(β(V, a))`` from ``(V0, a0)`` to flow time ``t1``.

    The flow (paper Eqs. 2–4) is integrated in float64 in the log time
    ``τ = log(1 + t)`` with an adaptive diffrax solver, together with the polarisation
    coefficient ``Γ(t) = ∫₀ᵗ γ dt`` as a quadrature state (the polarisation coefficient of paper Thm. 3.3).

    **Arguments:**

    - ``loss``: a :class:`LogisticTeacher`, :class:`SquareLoss` or :class:`SoftTargetCrossEntropy`.
    - ``V0``: initial value block, shape ``(d, n)`` (``(D, D)`` for ``model="tied"``,
      ``(d, T)`` for ``"rowwise"``). Cast to float64.
    - ``a0``: initial logits, shape ``(n,)`` (``(T, T)`` for ``"rowwise"``).
    - ``t1``: final flow time, ``0 < t1 < ∞`` (``1e30`` is fine).
    - ``ts``: flow times to save at, strictly increasing in ``[0, t1]``; default
      :func:`default_ts` (``0`` and 400 log-spaced points from ``1e-3`` to ``t1``).
    - ``rtol``, ``atol``: tolerances of the PID step-size controller (default ``1e-8`` and
      ``rtol/100``, as in :func:`gradflow.integrate`), on the state ``(V, a, Γ)`` in log time.
      Passed as arrays: changing them does not recompile.
    - ``normalization``, ``temperature``: the map ``a ↦ s`` (:data:`gradflow.attention.maps.MAPS`).
    - ``solver``: one of :data:`SOLVERS` (default ``"auto"``).
    - ``model``: ``"value-softmax"`` (default), ``"tied"``, ``"rowwise"`` or a model instance.
    - ``max_steps``: solver step budget, all phases together (default 16384); reaching it
      gives status ``max_steps``.
    - ``policy``: the phase policy of ``solver="auto"``, a :class:`gradflow.AutoPolicy` (default
      ``None``: ``AutoPolicy()``; docs' solver guide, "The auto policy"); ignored by the other
      solvers.

    **Returns:** a :class:`Trajectory` with ``t = ts``. Solver failures do not raise: see
    ``traj.status`` / ``traj.t_end``; points after a failure have ``valid = False``.

    **Large logistic-teacher problems:** with a :class:`LogisticTeacher` and the value-softmax
    model, ``V`` moves only along ``β*`` (``dV/dt = γ β* sᵀ``, paper Eq. 3). When ``V`` has at
    least :data:`REDUCE_MIN_SIZE` entries the solve integrates that exact reduction (the row
    ``β̂ᵀV`` and ``a``, ``O(n)`` per step instead of ``O(d·n)``) and returns the full ``V``;
    ``traj.metadata["state"]`` says so. The step-size control then acts on ``β̂ᵀV`` instead of
    every entry of ``V``: results agree with the full solve within the tolerances.

    **Raises:** :class:`gradflow.GradflowValueError` for non-finite or mis-shaped arrays, a
    non-positive or non-finite ``t1``/``rtol``/``atol``, bad ``ts``, unknown names.

    >>> import gradflow, numpy as np
    >>> rng = np.random.RandomState(0)
    >>> loss = gradflow.LogisticTeacher(rng.randn(4))
    >>> traj = gradflow.simulate(loss, 0.1 * rng.randn(4, 4), np.zeros(4), t1=1e6)
    >>> traj.status, bool(traj.s[-1].max() > 0.5)
    ('ok', True)
    """
    mdl, V0, a0 = prepare(loss, V0, a0, model, normalization, temperature, batch=False)
    settings, ts = SolveOptions(ts=ts, rtol=rtol, atol=atol, max_steps=max_steps, solver=solver, policy=policy).settings(t1)
    meta, expand, solved = _meta(mdl, loss, settings), None, loss
    if _reducible(mdl, loss, V0):
        solved, V0, expand = _teacher_reduction(loss, V0)
        meta["state"] = "rank-one reduction (v, a): V = V0 + β̂ (v − v0)ᵀ"
    out = _batch.run(value_softmax_flow(solved, settings.solver == "auto"), (mdl, solved), (V0[None], a0[None]),
                     settings.replace(lane=0), devices=jax.local_devices()[:1])
    return _trajectory(out, ts, meta, expand=expand)


def simulate_batch(
    loss: AbstractLoss | Sequence[AbstractLoss],
    V0s: Real[ArrayLike, "B d n"],
    a0s: Real[ArrayLike, "B ..."],
    *,
    t1: float,
    ts: Real[ArrayLike, " T"] | Sequence[float] | None = DEFAULTS.ts,
    rtol: float = DEFAULTS.rtol,
    atol: float | None = DEFAULTS.atol,
    normalization: str = "softmax",
    temperature: float = 1.0,
    solver: str = DEFAULTS.solver,
    model: str | AbstractModel = "value-softmax",
    max_steps: int = DEFAULTS.max_steps,
    devices: Sequence[jax.Device] | None = None,
    fixed_width: bool = False,
    policy: AutoPolicy | None = DEFAULTS.policy,
) -> Trajectory:
    """:func:`simulate` for ``B`` initial conditions at once (``jax.vmap`` over lanes).

    ``V0s`` has shape ``(B, d, n)`` and ``a0s`` ``(B, n)``. ``loss`` is one loss shared by all
    lanes, or a sequence of ``B`` losses of the same type and shapes (one teacher per seed).
    Every array of the returned :class:`Trajectory` gains a leading axis ``B``; ``status``
    is per lane (a stiff or failing lane does not raise).

    Lanes are sharded over ``devices`` (default: all of ``jax.local_devices()``, e.g. every GPU of
    this host; under ``jax.distributed`` each process solves on its own devices) with
    ``jax.sharding``; results on another number of devices, or of a lane in another batch, agree
    within the tolerances, not bit for bit (the compiled programs differ in shape). On a CPU, JAX has one
    device unless told otherwise, and a batch then runs on one core: set the environment variable
    ``JAX_NUM_CPU_DEVICES`` to the number of cores (or call
    ``jax.config.update("jax_num_cpu_devices", n)`` before the first JAX computation) to get one
    device per core, over which the lanes are then spread (measured in ``benchmarks/COSTS.md``).
    Solves run in rounds of :data:`ROUND_STEPS` steps, and only the lanes still running take part in the next round,
    so one slow lane does not hold the whole batch. Shapes (``B``, ``d``, ``n``, ``len(ts)``)
    and solver settings other than the tolerances are compiled once per process: ``t1``,
    ``ts`` values, ``rtol``, ``atol`` and the initial states can change without recompiling.

    ``fixed_width`` (default ``False``): every round, not only the first, runs all ``B`` lanes
    (the finished ones as padding), so each lane's result is bit for bit the same whichever
    other lanes share its batch, for the same ``B`` (at most :data:`gradflow._engine.batch.LANES_PER_SOLVE` per device) and
    ``devices`` (one device: any one); ``gradflow sweep`` runs its groups of seeds so. It costs
    the padding's work in rounds after the first.

    **Raises:** as :func:`simulate`, plus a mismatch of batch sizes or an empty ``devices``.
    """
    loss_batched = isinstance(loss, (list, tuple))
    if loss_batched:
        if len(loss) == 0 or not all(isinstance(x, type(loss[0])) for x in loss):
            raise bad_arg("loss", loss, "one loss or a non-empty sequence of losses of one type")
        first = loss[0]
    else:
        first = loss
    mdl, V0s, a0s = prepare(first, V0s, a0s, model, normalization, temperature, batch=True)
    if loss_batched:
        if len(loss) != V0s.shape[0]:
            raise bad_arg("loss", f"{len(loss)} losses", f"one loss per lane (B = {V0s.shape[0]})")
        stacked = _stack_losses(loss)
        B = V0s.shape[0]  # the model's arrays (its temperature) are given the lane axis too
        fargs = (jax.tree.map(lambda x: jnp.broadcast_to(x, (B,) + x.shape), mdl), stacked)
    else:
        fargs = (mdl, loss)
    settings, ts = SolveOptions(ts=ts, rtol=rtol, atol=atol, max_steps=max_steps, solver=solver, policy=policy).settings(t1)
    devices = _batch.check_devices(devices)
    out = _batch.run(value_softmax_flow(first, settings.solver == "auto"), fargs, (V0s, a0s),
                     settings.replace(args_batched=loss_batched, fixed_width=bool(fixed_width)), devices=devices)
    return _trajectory(out, ts, _meta(mdl, first, settings), batch_shape=(V0s.shape[0],))
