"""Integrate the gradient flow with diffrax (one run, or a batch of runs under ``vmap``)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence

import diffrax
import equinox as eqx
import equinox._errors as _eqx_errors
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, ArrayLike, Float

from ._errors import bad_arg
from ._validate import check_positive, check_positive_int, check_times, prepare
from .flow import flow_field, log_time_field, tau_of_t
from .losses import AbstractLoss, LogisticTeacher
from .models import AbstractModel
from .trajectory import Trajectory, compute_metrics, forward_fill

__all__ = ["simulate", "simulate_batch", "SOLVERS", "default_ts", "resolve_solver"]

SOLVERS = ("auto", "tsit5", "dopri5", "dopri8", "kvaerno5")
"""Accepted ``solver`` names. ``auto``: ``dopri8`` (explicit, 8th order) for the logistic
teacher, whose flow has no finite minimiser and stays non-stiff in log time. For losses with
a finite minimiser (square, soft-target cross-entropy) the flow becomes stiff once the fast
modes have converged (explicit steps are then stability-limited, their number ∝ t1): ``auto``
runs ``dopri8`` for up to :data:`EXPLICIT_BUDGET` steps and, if that budget runs out, switches
to ``kvaerno5`` (implicit, L-stable, Newton root finder) from where it stopped. The metadata's
``solver`` field records ``auto-stiff`` for such runs."""


def resolve_solver(solver: str, loss: AbstractLoss) -> str:
    """The concrete solver name for ``solver`` (``"auto"`` decided by the loss)."""
    if solver not in SOLVERS:
        raise bad_arg("solver", solver, f"one of {list(SOLVERS)}")
    if solver != "auto":
        return solver
    return "dopri8" if isinstance(loss, LogisticTeacher) else AUTO_STIFF


AUTO_STIFF = "auto-stiff"
EXPLICIT_BUDGET = 4096
"""``auto`` on a loss with a finite minimiser: Dopri8 for up to this many steps, then Kvaerno5."""


def _make_solver(name: str, rtol=None, atol=None):
    if name == "tsit5":
        return diffrax.Tsit5()
    if name == "dopri5":
        return diffrax.Dopri5()
    if name == "dopri8":
        return diffrax.Dopri8()
    if name == "kvaerno5":
        # Newton (a fresh Jacobian per iteration) at the step controller's tolerances, stopped by
        # its convergence rate (Hairer–Wanner, κ = 1e-2) rather than by the size of the last
        # update: once h·‖∂f/∂y‖ is large, round-off in the update exceeds any tight tolerance,
        # so an update-size test fails, steps are rejected and the solve stalls.
        return diffrax.Kvaerno5(root_finder=optx.Newton(rtol=rtol, atol=atol, cauchy_termination=False))
    raise AssertionError(name)  # resolve_solver validated the name


def default_ts(t1: float, num: int = 400) -> np.ndarray:
    """``t = 0`` followed by ``num`` log-spaced flow times from ``1e-3`` to ``t1``
    (``num`` linearly spaced points if ``t1 ≤ 1e-3``)."""
    if t1 <= 1e-3:
        return np.linspace(0.0, t1, num + 1)
    grid = np.geomspace(1e-3, t1, num)
    grid[-1] = t1
    return np.concatenate([[0.0], grid])


def _where_leading(mask, new, old):
    """``jnp.where`` with ``mask`` over the leading axes of ``old``, broadcast over the rest."""
    return jnp.where(mask.reshape(mask.shape + (1,) * (old.ndim - mask.ndim)), new, old)


def _result_code(result):
    return jnp.where(
        result == diffrax.RESULTS.successful,
        0,
        jnp.where(
            result == diffrax.RESULTS.max_steps_reached,
            1,
            jnp.where(result == diffrax.RESULTS.dt_min_reached, 2, 4),
        ),
    )


STEADY_FRACTION = 1e-3
"""Steady-state stop for losses with a finite minimiser: the solve ends once every component
moves by less than ``STEADY_FRACTION × (atol + rtol·|y|)`` per unit of log time ``τ``, or
once the flow-time field is at round-off level (:data:`ROUNDOFF_FIELD`)."""

ROUNDOFF_FIELD = 1024
"""At a minimiser the computed field is round-off, about ``ε·|y|`` (``ε`` the float64
machine epsilon), and ``(1 + t)·ε·|y|`` exceeds any tolerance once ``t`` is large: the
relative test alone would then never fire and the solver would integrate noise to ``t1``.
So a field below ``ROUNDOFF_FIELD·ε·(1 + max|y|)`` per unit of flow time also counts as rest."""


def _steady(tau, y, args, **kwargs):
    """Event: the flow is at rest within tolerance (see :data:`STEADY_FRACTION`), or its field is
    non-finite (see :func:`_nonfinite`)."""
    model, loss, rtol, atol = args
    f = flow_field(model, loss, y)
    scale = jnp.exp(tau)
    ratio = jax.tree.map(lambda fi, yi: jnp.max(scale * jnp.abs(fi) / (atol + rtol * jnp.abs(yi))), f, y)
    relative = jax.tree.reduce(jnp.maximum, ratio) < STEADY_FRACTION
    (V, a, _), (fV, fa, _) = y, f  # the Γ quadrature grows linearly at rest: not part of the round-off test
    size = jnp.maximum(jnp.max(jnp.abs(V)), jnp.max(jnp.abs(a)))
    noise = ROUNDOFF_FIELD * jnp.finfo(V.dtype).eps * (1 + size)
    return relative | (jnp.maximum(jnp.max(jnp.abs(fV)), jnp.max(jnp.abs(fa))) < noise) | ~_all_finite(f)


def _nonfinite(tau, y, args, **kwargs):
    """Event: the field at the accepted state is non-finite (stop at once, keep this finite state)."""
    return ~_all_finite(log_time_field(tau, y, args[:2]))


def _all_finite(tree):
    return jax.tree.reduce(jnp.logical_and, jax.tree.map(lambda x: jnp.all(jnp.isfinite(x)), tree))


STALL_ULPS = 1024
"""The solve stalls (status ``stalled``) when its log-time step ``dτ`` falls below
``STALL_ULPS·eps·max(1, τ1)`` (≈ 6e-12 at ``t1 = 1e12``): a step that small moves the time by
a few hundred ulps, i.e. the solver cannot make progress (a singularity, kink or blow-up ahead)."""


def _nonfinite_ahead(model, loss, tau, y, dtmin):
    """After a stall: does the field turn non-finite within a few ``dtmin`` of ``(tau, y)``?
    (Explicit Euler probes at ``dtmin·4^k``, ``k = 0..5``; then the status is ``nonfinite``.)"""
    f = log_time_field(tau, y, (model, loss))

    def probe(h):
        return _all_finite(log_time_field(tau + h, jax.tree.map(lambda yi, fi: yi + h * fi, y, f), (model, loss)))

    hs = dtmin * 4.0 ** jnp.arange(6)
    return ~(_all_finite(f) & jnp.all(jax.vmap(probe)(hs)))


def _steady_field(tau, y, args):
    return log_time_field(tau, y, args[:2])


def _solve_raw(model, loss, y0, tau0, taus, rtol, atol, solver_name, max_steps):
    """One diffrax solve in log time from ``(tau0, y0)`` to ``taus[-1]``, saving at ``taus``.

    Save points before ``tau0`` are not computed here (``reached = False``). For losses with
    a finite minimiser the solve stops at a steady state (:func:`_steady`); the points after
    it hold that state and count as reached (the flow has converged to within tolerance)."""
    steady = not isinstance(loss, LogisticTeacher)
    solver = _make_solver(solver_name, rtol, atol)
    tau1 = taus[-1]
    dtmin = STALL_ULPS * jnp.finfo(tau1.dtype).eps * jnp.maximum(1.0, tau1)
    stall = dict(dtmin=dtmin, force_dtmin=False)
    if solver_name == "kvaerno5":
        controller = diffrax.PIDController(rtol=rtol, atol=atol, pcoeff=0.3, icoeff=0.4, **stall)
    else:
        controller = diffrax.PIDController(rtol=rtol, atol=atol, **stall)
    saveat = diffrax.SaveAt(subs=[diffrax.SubSaveAt(ts=jnp.clip(taus, tau0, tau1)), diffrax.SubSaveAt(t1=True)])
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(_steady_field),
        solver,
        t0=tau0,
        t1=tau1,
        dt0=None,
        y0=y0,
        args=(model, loss, rtol, atol),
        stepsize_controller=controller,
        saveat=saveat,
        max_steps=max_steps,
        throw=False,
        event=diffrax.Event(_steady if steady else _nonfinite),
    )
    (tau_s, tau_end) = sol.ts
    ys, y_end = sol.ys
    y_end = jax.tree.map(lambda x: x[0], y_end)
    reached = (taus >= tau0) & jnp.isfinite(tau_s) & jax.tree.reduce(
        jnp.logical_and,
        jax.tree.map(lambda x: jnp.all(jnp.isfinite(x.reshape(x.shape[0], -1)), axis=1), ys),
    )
    code = _result_code(sol.result)
    bad_end = _nonfinite_ahead(model, loss, tau_end[0], y_end, jnp.where(code == 2, dtmin, 0.0))
    at_rest = (sol.result == diffrax.RESULTS.event_occurred) & ~bad_end
    code = jnp.where(bad_end, 3, jnp.where(at_rest, 0, code))
    if steady:  # hold the steady state at the remaining save points
        later = at_rest & (taus >= tau0) & ~reached
        ys = jax.tree.map(lambda s, e: _where_leading(later, e[None], s), ys, y_end)
        reached = reached | later
    return dict(
        ys=ys,
        reached=reached,
        y_end=y_end,
        tau_end=jnp.where(at_rest, tau1, tau_end[0]),
        tau_steady=jnp.where(at_rest, tau_end[0], jnp.inf),
        num_steps=sol.stats["num_steps"],
        code=code,
    )


def _finish(model, loss, ys, valid, y0, y_end, code):
    """Forward-fill unreached points (from ``y0``), compute metrics, check the final field is finite."""
    V, a, Gamma = forward_fill(valid, ys, init=y0)
    metrics = jax.vmap(lambda V_, a_: compute_metrics(model, loss, V_, a_))(V, a)
    field_ok = jnp.all(
        jnp.asarray([jnp.all(jnp.isfinite(f)) for f in jax.tree.leaves(flow_field(model, loss, y_end))])
    )
    return dict(V=V, a=a, Gamma=Gamma, valid=valid, status_code=jnp.where(field_ok, code, 3), **metrics)


@eqx.filter_jit
def _solve_jit(model, loss, y0, tau0, taus, rtol, atol, solver_name, max_steps, loss_batched):
    fn = lambda l, y, t0: _solve_raw(model, l, y, t0, taus, rtol, atol, solver_name, max_steps)
    return _per_lane(fn, loss_batched, 2)(loss, y0, tau0)


def _finish_all(model, loss, state, y0, taus, t1_exact, loss_batched, keep, lane):
    """The result arrays of all lanes: :func:`_finish` per lane, the first ``keep`` save points
    (``taus`` may carry an extra end point), lane ``lane`` only if it is not ``None``."""
    fn = lambda l, y, v, y_0, ye, c: _finish(model, l, y, v, y_0, ye, c)
    reached = state["reached"] | (taus == 0)  # t = 0 is the initial state itself
    res = _per_lane(fn, loss_batched, 5)(loss, state["ys"], reached, y0, state["y_end"], state["code"])
    tau_end = state["tau_end"]
    t_end = jnp.where(tau_end == taus[-1], t1_exact, jnp.expm1(tau_end))
    res.update(num_steps=state["num_steps"], t_end=t_end, t_steady=jnp.expm1(state["tau_steady"]))
    res = {k: (v[:, :keep] if k in _TIME_AXIS_KEYS and v is not None else v) for k, v in res.items()}
    return res if lane is None else jax.tree.map(lambda x: x[lane], res)


_finish_jit = eqx.filter_jit(_finish_all)


@eqx.filter_jit
def _first_round(model, loss, V0, a0, taus, t1_exact, rtol, atol, solver_name, steps, loss_batched, keep, lane):
    """The first round of every lane, fused with the set-up and the finish into one compiled
    call: most runs end in their first round, and then this is the only dispatch of a solve
    (per-call overhead matters next to a 37-step solve of a few milliseconds). Returns the
    solve state (for further rounds if a lane is still running) and the finished result."""
    y0, state = _initial_state(V0, a0, taus)
    out = _solve_jit(model, loss, state["y_end"], state["tau_end"], taus, rtol, atol, solver_name, steps, loss_batched)
    lanes = jnp.arange(V0.shape[0])
    state = _merge(state, out, lanes, lanes)
    return state, _finish_all(model, loss, state, y0, taus, t1_exact, loss_batched, keep, lane)


def _per_lane(fn, loss_batched, n_lane_args):
    """``fn(loss, *lane_args)`` vmapped over lanes (over the loss too if it is stacked).

    A single lane (``simulate``, or the last pending lane of a batch) is not vmapped but
    computed directly and given its lane axis back: tracing a batched diffrax while loop
    costs about twice the time of the plain one (a cold process pays it), and the batched
    loop's per-step masking costs time too."""
    vmapped = eqx.filter_vmap(fn, in_axes=(0 if loss_batched else None,) + (0,) * n_lane_args)

    def call(loss, *lane_args):
        if {x.shape[0] for x in jax.tree.leaves(lane_args)} != {1}:
            return vmapped(loss, *lane_args)
        take = lambda tree: jax.tree.map(lambda x: x[0], tree)
        out = fn(take(loss) if loss_batched else loss, *take(lane_args))
        return jax.tree.map(lambda x: jnp.asarray(x)[None], out)

    return call


ROUND_STEPS = 512
"""Steps per solver round. Under ``vmap`` a solve runs every lane until the slowest one is
done, so solves run in rounds of at most this many steps: lanes still running after a round
(status ``max_steps`` of the round) continue from where they stopped in the next round,
gathered into a smaller batch (padded to a power of two, so few shapes get compiled); lanes
that finished are not computed again. A lone stiff seed then costs its own steps, not
``B ×`` its steps. Restarting costs one initial step-size estimate per round."""


LANES_PER_SOLVE = 256
"""At most this many lanes per device in one vmapped solve; larger rounds run as several
solves. Past a few hundred lanes the per-step save buffers (lanes × save points × state)
leave the CPU caches and the cost per lane grows (measured: ×5 per seed from 256 to 4096)."""


def _bucket(k: int, B: int, n_dev: int) -> int:
    """Lanes computed for ``k`` pending lanes of ``B``: a power of two ≥ ``k`` (``B`` for the
    first round), rounded up to a multiple of the device count."""
    size = B if k == B else min(1 << (k - 1).bit_length(), B)
    return -(-size // n_dev) * n_dev


def _place(tree, devices):
    """Shard the array leaves of ``tree`` along their leading (lane) axis over ``devices``."""
    if len(devices) == 1 and devices[0] == jax.devices()[0]:
        return tree
    mesh = jax.sharding.Mesh(np.asarray(devices), ("lanes",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("lanes"))
    return jax.tree.map(lambda x: jax.device_put(x, sharding) if eqx.is_array(x) else x, tree)


@eqx.filter_jit
def _gather(tree, idx):
    return jax.tree.map(lambda x: x[idx], tree)


@eqx.filter_jit
def _merge(state, out, idx, dest):
    """Write the round's results ``out`` (lanes ``idx``) into ``state`` at rows ``dest``
    (padding rows point past the end and are dropped). New save points are taken only where
    the lane had not been before; the rest of the lane's state is replaced."""
    old_reached = state["reached"][idx]
    new_points = out["reached"] & ~old_reached
    put = lambda new, old: old.at[dest].set(new, mode="drop")
    merge = lambda new, old: put(_where_leading(new_points, new, old[idx]), old)
    return dict(
        ys=jax.tree.map(merge, out["ys"], state["ys"]),
        reached=put(old_reached | out["reached"], state["reached"]),
        y_end=jax.tree.map(put, out["y_end"], state["y_end"]),
        tau_end=put(out["tau_end"], state["tau_end"]),
        tau_steady=put(out["tau_steady"], state["tau_steady"]),
        num_steps=put(state["num_steps"][idx] + out["num_steps"], state["num_steps"]),
        code=put(out["code"], state["code"]),
    )


def _round(model, loss, state, pending, taus, rtol, atol, solver_name, steps, loss_batched, devices):
    """Advance the lanes ``pending`` by at most ``steps`` solver steps; merge into ``state``."""
    B, k = state["code"].shape[0], pending.size
    size = _bucket(k, B, len(devices))
    idx = np.concatenate([pending, np.full(size - k, pending[0])])  # padding lanes repeat one lane
    dest = np.concatenate([pending, np.full(size - k, B)])  # ... and are dropped when merging
    whole = size == B and k == B
    lane_loss = loss if not loss_batched or whole else _gather(loss, idx)
    start = (state["y_end"], state["tau_end"]) if whole else _gather((state["y_end"], state["tau_end"]), idx)
    (y_start, tau_start), lane_loss = _place(start, devices), (_place(lane_loss, devices) if loss_batched else loss)
    out = _solve_jit(model, lane_loss, y_start, tau_start, taus, rtol, atol, solver_name, steps, loss_batched)
    return _merge(state, out, idx, dest)


@eqx.filter_jit
def _initial_state(V0, a0, taus):
    """``y0 = (V0, a0, Γ = 0)`` and the solve state of lanes not yet run (code 1)."""
    B, T = V0.shape[0], taus.shape[0]
    y0 = (V0, a0, jnp.zeros((B,), V0.dtype))
    state = dict(
        ys=jax.tree.map(lambda x: jnp.broadcast_to(x[:, None], (B, T) + x.shape[1:]), y0),
        reached=jnp.zeros((B, T), bool),
        y_end=y0,
        tau_end=jnp.zeros((B,), V0.dtype),
        tau_steady=jnp.full((B,), jnp.inf, V0.dtype),
        num_steps=jnp.zeros((B,), int),
        code=jnp.ones((B,), int),  # 1 (max_steps): still to run
    )
    return y0, state


_CACHEABLE_LOCK = threading.RLock()


def _nan_on_error(x, pred, index, msgs, *, on_error):
    """Stand-in for equinox's jitted check while gradflow traces a solve: a ``"default"`` check
    becomes ``"nan"`` (explicit ``on_error`` values are kept); traced inline, not through
    equinox's own jit cache, so nothing outlives :func:`_cacheable`."""
    return _eqx_errors.branched_error_if_impl(x, pred, index, msgs, on_error="nan" if on_error == "default" else on_error)


@contextlib.contextmanager
def _cacheable():
    """Trace the solves with equinox's ``on_error="nan"`` instead of a host callback.

    diffrax checks the (traced) save times with ``eqx.error_if`` — increasing, inside
    ``[t0, t1]`` — and equinox implements a raising check with a host callback; JAX never
    writes a computation with host callbacks to the persistent compilation cache, so every
    new process would recompile the solve. gradflow checks ``ts`` on the host before the solve
    (:func:`gradflow._validate.check_times`) and clips the save times into ``[t0, t1]``, so
    these checks cannot fire; with ``"nan"`` they compile to a ``cond`` and the executable
    can be cached. Inside this context equinox's jitted check (a module global it looks up
    at each call) is replaced by :func:`_nan_on_error`; it is restored afterwards, under a
    lock, so concurrent gradflow calls from several threads do not interleave the swap. A
    check in a user's own code traced by another thread meanwhile would also get ``"nan"``."""
    with _CACHEABLE_LOCK:
        old = _eqx_errors.branched_error_if_impl_jit
        _eqx_errors.branched_error_if_impl_jit = _nan_on_error
        try:
            yield
        finally:
            _eqx_errors.branched_error_if_impl_jit = old


def _run_rounds(model, loss, V0, a0, taus, t1_exact, rtol, atol, name, max_steps, loss_batched, devices,
                keep, lane=None) -> dict:
    """Solve ``B`` lanes (leading axis of ``V0``, ``a0``) in rounds (:data:`ROUND_STEPS`),
    switching explicit → implicit for ``auto`` on stiff losses, then finish (the first
    ``keep`` save points; lane ``lane`` only, if given)."""
    rtol, atol, t1_exact = np.asarray(rtol), np.asarray(atol), np.asarray(t1_exact)
    if name == AUTO_STIFF:  # the explicit solver's budget, then implicit for lanes that exhaust it
        explicit = min(EXPLICIT_BUDGET, max_steps)
        phases = [("dopri8", explicit), ("kvaerno5", max_steps - explicit)]
    else:
        phases = [(name, max_steps)]
    B, n_dev = V0.shape[0], len(devices)
    per_solve = LANES_PER_SOLVE * n_dev
    first_name, first_budget = phases[0]
    steps = min(ROUND_STEPS, first_budget)
    # First round: the lanes in chunks of at most ``per_solve`` (a short last chunk padded to a
    # power of two, every chunk to a multiple of the device count, by repeating the chunk's
    # first lane), each chunk one fused call
    # (set-up, solve, finish). Most runs end here; their results are only concatenated. Merging
    # each chunk into one state of all B lanes instead would copy that state once per chunk.
    size = min(-(-B // n_dev) * n_dev, per_solve)
    starts = range(0, B, size)
    states, results, kept = [], [], []
    for lo in starts:
        real = min(size, B - lo)
        csize = _bucket(real, size, n_dev)  # a short last chunk: a power of two, as in later rounds
        idx = np.concatenate([np.arange(lo, lo + real), np.full(csize - real, lo)])
        whole = real == B and csize == B
        pick = (lambda x: x) if whole else (lambda x: x[idx])
        chunk_loss = _place(jax.tree.map(pick, loss), devices) if loss_batched else loss
        state_c, res_c = _first_round(model, chunk_loss, _place(pick(V0), devices), _place(pick(a0), devices), taus,
                                      t1_exact, rtol, atol, first_name, steps, loss_batched, keep,
                                      lane if whole else None)
        states.append(state_c)
        results.append(res_c)
        kept.append(real)
    codes = np.concatenate([np.asarray(st["code"])[:k] for st, k in zip(states, kept)])
    first_used = steps  # steps of phase 0 spent in the first round
    join = lambda parts: jax.tree.map(
        lambda *xs: xs[0] if len(xs) == 1 and xs[0].shape[0] == kept[0] else jnp.concatenate(
            [x[:k] for x, k in zip(xs, kept)]), *parts)
    if not np.any(codes == 1):
        if len(results) == 1 and whole:
            return results[0]  # one unpadded chunk: lane and save points already selected inside the call
        res = join(results)
        return res if lane is None else jax.tree.map(lambda x: x[lane], res)
    state = join(states)
    del states, results  # only the joined state is needed from here on
    for i, (solver_name, budget) in enumerate(phases):
        used = first_used if i == 0 else 0
        while used < budget:
            pending = np.flatnonzero(np.asarray(state["code"]) == 1)
            if pending.size == 0:
                break
            steps = min(ROUND_STEPS, budget - used)
            for lo in range(0, pending.size, per_solve):
                piece = pending[lo : lo + per_solve]
                state = _round(model, loss, state, piece, taus, rtol, atol, solver_name, steps, loss_batched, devices)
            used += steps
    y0 = (V0, a0, jnp.zeros(V0.shape[:1], V0.dtype))
    return _finish_jit(model, loss, state, y0, taus, t1_exact, loss_batched, keep, lane)


def _run(*args, **kwargs) -> dict:
    """:func:`_run_rounds` with the solves traced as in :func:`_cacheable`."""
    with _cacheable():
        return _run_rounds(*args, **kwargs)


_TIME_AXIS_KEYS = ("V", "a", "s", "Gamma", "valid", "loss", "entropy", "u")


def _trajectory(out: dict, ts: np.ndarray, meta: dict, batch_shape=()) -> Trajectory:
    """Wrap solver output (already cut to ``len(ts)`` save points by :func:`_finish_all`)."""
    t = jnp.asarray(np.broadcast_to(ts, batch_shape + ts.shape))
    return Trajectory(t=t, meta=tuple(sorted(meta.items())), **out)


def _meta(model, loss, solver, rtol, atol, t1, max_steps):
    return {
        "method": "flow",
        "model": model.name,
        "normalization": model.normalization,
        "temperature": float(model.temperature),
        "loss": type(loss).__name__,
        "solver": solver,
        "rtol": rtol,
        "atol": atol,
        "t1": t1,
        "max_steps": max_steps,
        "time": "log1p",
    }


def simulate(
    loss: AbstractLoss,
    V0: Float[ArrayLike, "d n"],
    a0: Float[ArrayLike, "..."],
    *,
    t1: float,
    ts: Float[ArrayLike, " T"] | None = None,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    normalization: str = "softmax",
    temperature: float = 1.0,
    solver: str = "auto",
    model: str | AbstractModel = "value-softmax",
    max_steps: int = 16384,
) -> Trajectory:
    """Integrate the gradient flow of ``L(V, a) = ℓ(β(V, a))`` from ``(V0, a0)`` to flow time ``t1``.

    The flow (paper Eqs. 2–4; SPEC §3.1) is integrated in float64 in the log time
    ``τ = log(1 + t)`` with an adaptive diffrax solver, together with the polarisation
    coefficient ``Γ(t) = ∫₀ᵗ γ dt`` as a quadrature state (SPEC §3.5).

    **Arguments:**

    - ``loss``: a :class:`LogisticTeacher`, :class:`SquareLoss` or :class:`SoftTargetCrossEntropy`.
    - ``V0``: initial value block, shape ``(d, n)`` (``(D, D)`` for ``model="tied"``,
      ``(d, T)`` for ``"rowwise"``). Cast to float64.
    - ``a0``: initial logits, shape ``(n,)`` (``(T, T)`` for ``"rowwise"``).
    - ``t1``: final flow time, ``0 < t1 < ∞`` (``1e30`` is fine).
    - ``ts``: flow times to save at, strictly increasing in ``[0, t1]``; default
      :func:`default_ts` (``0`` and 400 log-spaced points from ``1e-3`` to ``t1``).
    - ``rtol``, ``atol``: tolerances of the PID step-size controller (default ``1e-8``, ``1e-10``),
      on the state ``(V, a, Γ)`` in log time. Passed as arrays: changing them does not recompile.
    - ``normalization``, ``temperature``: the map ``a ↦ s`` (:data:`gradflow.maps.MAPS`).
    - ``solver``: one of :data:`SOLVERS` (default ``"auto"``).
    - ``model``: ``"value-softmax"`` (default), ``"tied"``, ``"rowwise"`` or a model instance.
    - ``max_steps``: solver step budget, all phases together (default 16384); reaching it
      gives status ``max_steps``.

    **Returns:** a :class:`Trajectory` with ``t = ts``. Solver failures do not raise: see
    ``traj.status`` / ``traj.t_end``; points after a failure have ``valid = False``.

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
    t1, ts, taus, rtol, atol, max_steps, name = _check_solve(t1, ts, rtol, atol, max_steps, solver, loss)
    out = _run(mdl, loss, V0[None], a0[None], taus, t1, rtol, atol, name, max_steps, False, jax.devices()[:1],
               keep=len(ts), lane=0)
    return _trajectory(out, ts, _meta(mdl, loss, name, rtol, atol, t1, max_steps))


def _check_solve(t1, ts, rtol, atol, max_steps, solver, loss):
    """Validate the solve settings shared by :func:`simulate` and :func:`simulate_batch`."""
    t1, ts = check_times(t1, ts)
    if ts is None:
        ts = default_ts(t1)
    rtol = check_positive("rtol", rtol, upper=1.0)
    atol = check_positive("atol", atol)
    max_steps = check_positive_int("max_steps", max_steps)
    return t1, ts, _taus(ts, t1), rtol, atol, max_steps, resolve_solver(solver, loss)


def _check_devices(devices) -> list:
    if devices is None:
        return jax.devices()
    devices = list(devices) if isinstance(devices, (list, tuple)) else None
    if not devices or not all(isinstance(d, jax.Device) for d in devices) or len(set(devices)) != len(devices):
        raise bad_arg("devices", devices, "a non-empty list of distinct jax devices (e.g. jax.devices()[:2]) or None")
    return devices


def _taus(ts: np.ndarray, t1: float) -> Array:
    """Save points in log time; the last one is always ``log1p(t1)`` (the end of the solve)."""
    taus = np.log1p(ts)
    if ts[-1] != t1:
        taus = np.concatenate([taus, [np.log1p(t1)]])
    return taus


def simulate_batch(
    loss: AbstractLoss | Sequence[AbstractLoss],
    V0s: Float[ArrayLike, "B d n"],
    a0s: Float[ArrayLike, "B ..."],
    *,
    t1: float,
    ts: Float[ArrayLike, " T"] | None = None,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    normalization: str = "softmax",
    temperature: float = 1.0,
    solver: str = "auto",
    model: str | AbstractModel = "value-softmax",
    max_steps: int = 16384,
    devices: Sequence[jax.Device] | None = None,
) -> Trajectory:
    """:func:`simulate` for ``B`` initial conditions at once (``jax.vmap`` over lanes).

    ``V0s`` has shape ``(B, d, n)`` and ``a0s`` ``(B, n)``. ``loss`` is one loss shared by all
    lanes, or a sequence of ``B`` losses of the same type and shapes (one teacher per seed).
    Every array of the returned :class:`Trajectory` gains a leading axis ``B``; ``status``
    is per lane (a stiff or failing lane does not raise).

    Lanes are sharded over ``devices`` (default: all of ``jax.devices()``, e.g. every GPU of
    a host, or every host's devices after ``jax.distributed.initialize()``) with
    ``jax.sharding``; results do not depend on the number of devices. Solves run in rounds of
    :data:`ROUND_STEPS` steps, and only the lanes still running take part in the next round,
    so one slow lane does not hold the whole batch. Shapes (``B``, ``d``, ``n``, ``len(ts)``)
    and solver settings other than the tolerances are compiled once per process: ``t1``,
    ``ts`` values, ``rtol``, ``atol`` and the initial states can change without recompiling.

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
        shapes = {tuple((leaf.shape if hasattr(leaf, "shape") else leaf) for leaf in jax.tree.leaves(x)) for x in loss}
        if len(shapes) != 1 or len({jax.tree.structure(x) for x in loss}) != 1:
            raise bad_arg("loss", f"{len(loss)} losses of differing shapes", "losses of one type with equal array shapes")
        stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *loss)
    else:
        stacked = loss
    t1, ts, taus, rtol, atol, max_steps, name = _check_solve(t1, ts, rtol, atol, max_steps, solver, first)
    devices = _check_devices(devices)
    out = _run(mdl, stacked, V0s, a0s, taus, t1, rtol, atol, name, max_steps, loss_batched, devices, keep=len(ts))
    return _trajectory(out, ts, _meta(mdl, first, name, rtol, atol, t1, max_steps), batch_shape=(V0s.shape[0],))
