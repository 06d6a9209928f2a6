"""Many lanes of one flow: rounds of unfinished lanes, buckets, chunks and sharding over devices.

A *lane* is one run (one initial state, and one set of arguments if they are batched). Lanes are
solved together under ``vmap`` (:func:`_per_lane`) in rounds of at most :data:`ROUND_STEPS` steps;
after a round only the lanes still running (status ``max_steps`` of the round) take part in the
next one, gathered into a bucket of a power-of-two size (in a compile-bound batch, an explicit
round instead runs them padded to all lanes through the first round's program: :func:`_run_rounds`;
with ``Settings.fixed_width`` every round does, so a lane's bits do not depend on its batch: :func:`run`);
the solver of each lane in each round is decided by :func:`gradflow._engine.stiff.phase_of_lanes`.
Lanes are sharded over ``devices`` along their leading axis.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._errors import bad_arg
from . import _export, _fastjit
from . import solve as _solve
from . import stiff as _stiff
from .settings import Round, Settings
from .solvers import spec
from .solve import Flow, SolveState, Status, _where_leading

__all__ = ["Finished", "ROUND_STEPS", "LANES_PER_SOLVE", "UNROLL_LANES", "UNROLL_STATE", "run", "check_devices"]

ROUND_STEPS = 512
"""Steps per solver round. Under ``vmap`` a solve runs every lane until the slowest one is
done, so solves run in rounds of at most this many steps: lanes still running after a round
(status ``max_steps`` of the round) continue from where they stopped in the next round,
gathered into a smaller batch (padded to a power of two, so few shapes get compiled); lanes
that finished are not computed again. A lone stiff seed then costs its own steps, not
``B ×`` its steps. Restarting costs one initial step-size estimate per round. (Explicit rounds
of a compile-bound batch, whose steps cost far less than compiling a program for another lane
count, run the pending lanes padded to all ``B`` rows instead: :func:`_run_rounds`.)"""

LANES_PER_SOLVE = 256
"""At most this many lanes per device in one vmapped solve; larger rounds run as several
solves. Past a few hundred lanes the per-step save buffers (lanes × save points × state)
leave the CPU caches and the cost per lane grows (measured: ×5 per seed from 256 to 4096)."""


UNROLL_LANES = 64
"""Vmapped solves of at least this many lanes use Dopri8 with its stages unrolled
(:class:`gradflow._engine.erk.UnrolledDopri8`): faster per step at 1024 lanes, but slower to
compile a first time (the field is traced 13 times), as ``benchmarks/COSTS.md``, "Batch
throughput", measures against diffrax's stage loop in one run; smaller batches, whose solve is
short next to their compile, keep diffrax's stage loop."""


UNROLL_STATE = 2**18
"""Solves whose state has at least this many floats per lane (n = d ≳ 512) also use the
unrolled stages, a single lane included: diffrax's stage loop reads its whole stage buffer
(14 × the state) at each of the 13 stages, a memory-bound cost once the buffer leaves the caches.
Measured by hand (one trajectory to 1e12, same process, before ``simulate`` integrated that
problem's rank-one reduction): n = d = 1024, 14 s vs 40 s warm with a first compile of 73 s vs
66 s (loaded machine); n = d = 256, no gain (1.2 s vs 0.9 s)."""


class Finished(eqx.Module):
    """The engine's result for every lane (leading lane axis ``B``; none when one lane was asked for).

    ``params``: the parameter pytree at the save points (``(B, T, ...)``), unreached points
    holding the last saved state; ``quadratures``: dict of ``(B, T)``; ``observed``: dict of
    ``flow.observe`` at the save points (``(B, T, ...)``); ``valid (B, T)``; ``status_code (B,)``
    (a :class:`Status`); ``num_steps (B,)``; ``t_end (B,)``; ``t_steady (B,)`` (``inf``: none);
    ``params_end``, ``quadratures_end``: the parameter pytree (``(B, ...)``) and the quadratures
    (dict of ``(B,)``) of the state each lane's solve ended in, at ``t_end`` (between save points
    when a budget or a failure ended the solve)."""

    params: object
    quadratures: dict
    observed: dict
    valid: jax.Array
    status_code: jax.Array
    num_steps: jax.Array
    t_end: jax.Array
    t_steady: jax.Array
    params_end: object
    quadratures_end: dict


def forward_fill(valid, tree, init):
    """Replace rows where ``valid`` is False by the last valid row before them (``init`` before any)."""

    def step(prev, xs):
        ok, row = xs
        new = jax.tree.map(lambda r, p: jnp.where(ok, r, p), row, prev)
        return new, new

    _, filled = jax.lax.scan(step, init, (valid, tree))
    return filled


def _take(tree, idx):
    """Index the array leaves of ``tree`` along their leading (lane) axis; other leaves are shared."""
    return jax.tree.map(lambda x: x[idx] if eqx.is_array(x) else x, tree)


def _per_lane(fn, args_batched, n_lane_args):
    """``fn(args, *lane_args)`` vmapped over lanes (over ``args`` too if it is batched).

    A single lane (``simulate``, or the last pending lane of a batch) is not vmapped but
    computed directly and given its lane axis back: tracing a batched while loop (the solve's)
    costs about twice the time of the plain one (a cold process pays it), and the batched
    loop's per-step masking costs time too."""
    vmapped = eqx.filter_vmap(fn, in_axes=(0 if args_batched else None,) + (0,) * n_lane_args)

    def call(args, *lane_args):
        if not _one_lane(lane_args):
            return vmapped(args, *lane_args)
        out = fn(_take(args, 0) if args_batched else args, *_take(lane_args, 0))
        return jax.tree.map(lambda x: jnp.asarray(x)[None], out)

    return call


def _one_lane(lane_args) -> bool:
    """Whether the lane arguments (pytrees with a leading lane axis) hold a single lane, which
    :func:`_per_lane` computes without ``vmap``."""
    return {x.shape[0] for x in jax.tree.leaves(lane_args)} == {1}


def _throughput_bound(y) -> bool:
    """Whether a solve of the lanes ``y`` (a pytree of arrays with a leading lane axis) is bound by
    its run rather than its compile: :data:`UNROLL_LANES` lanes or more, or :data:`UNROLL_STATE`
    floats per lane or more. Such a solve runs Dopri8 with its stages unrolled and is compiled with
    XLA's default options; any other engine program of these lanes is compiled with
    :data:`gradflow._engine._fastjit.FAST_COMPILE` (same results, a shorter compile)."""
    leaves = jax.tree.leaves(y)
    lanes = leaves[0].shape[0]
    return lanes >= UNROLL_LANES or sum(x.size for x in leaves) // lanes >= UNROLL_STATE


def _compile_bound(y, n_dev: int) -> bool:
    """Whether a batch of lanes ``y`` is bound by its compiles (not :func:`_throughput_bound`, and
    one solve of at most :data:`LANES_PER_SOLVE` lanes per device): after its first round, its
    explicit rounds run through the first round's program with the pending lanes padded to all
    rows, and the detector and the stall probe compute all rows (a few evaluations each), so no
    lane count but ``B`` is ever compiled (:func:`_run_rounds`)."""
    lanes = jax.tree.leaves(y)[0].shape[0]
    return not _throughput_bound(y) and lanes <= LANES_PER_SOLVE * n_dev


@_fastjit.filter_jit(compile_fast=lambda flow, fargs, y0, *rest: not _throughput_bound(y0))
def _solve_jit(flow, fargs, y0, tau0, settings: Settings, rnd: Round):
    """Solve the lanes ``(y0, tau0)`` (leading lane axis) for one round ``rnd``."""
    unrolled = _throughput_bound(y0)
    vmapped = not _one_lane((y0, tau0))  # as :func:`_per_lane` decides
    fn = lambda a, y, t0: _solve.solve_lane(flow, a, y, t0, taus=settings.taus, rtol=settings.rtol, atol=settings.atol,
                                            solver=rnd.solver, max_steps=rnd.cap, budget=rnd.steps,
                                            batched=unrolled, vmapped=vmapped)
    return _per_lane(fn, settings.args_batched, 2)(fargs, y0, tau0)


def _finish(flow, fargs, ys, valid, y0, code):
    """Forward-fill unreached points (from ``y0``) and observe. (A non-finite field at the end
    state is already in ``code``: :func:`gradflow._engine.solve.solve_lane` checks it.)"""
    params, quads = forward_fill(valid, ys, init=y0)
    observed = {} if flow.observe is None else jax.vmap(lambda p: flow.observe(p, fargs))(params)
    return dict(params=params, quadratures=quads, observed=observed, valid=valid, status_code=code)


def _finish_all(flow, fargs, state, y0, settings: Settings) -> Finished:
    """The result of all lanes: :func:`_finish` per lane, the first ``settings.keep`` save points
    (``settings.taus`` may carry an extra end point), lane ``settings.lane`` only if it is not ``None``."""
    fn = lambda a, y, v, y_0, c: _finish(flow, a, y, v, y_0, c)
    taus = settings.taus
    reached = state.reached | (taus == settings.tau0)  # t = t0 is the initial state itself
    res = _per_lane(fn, settings.args_batched, 4)(fargs, state.ys, reached, y0, state.code)
    tau_end = state.tau_end
    t_end = jnp.where(tau_end == taus[-1], settings.t1, jnp.expm1(tau_end))
    cut = lambda tree: jax.tree.map(lambda x: x[:, :settings.keep], tree)
    out = Finished(params=cut(res["params"]), quadratures=cut(res["quadratures"]), observed=cut(res["observed"]),
                   valid=cut(res["valid"]), status_code=res["status_code"], num_steps=state.num_steps,
                   t_end=t_end, t_steady=jnp.expm1(state.tau_steady), params_end=state.y_end[0],
                   quadratures_end=state.y_end[1])
    return out if settings.lane is None else jax.tree.map(lambda x: x[settings.lane], out)


_finish_jit = eqx.filter_jit(_finish_all)


def _initial_y(flow, fargs, params0, args_batched):
    """``y0 = (params0, quadratures = 0)`` for every lane (leading axis of ``params0``)."""
    leaves = jax.tree.leaves(params0)
    B, dtype = leaves[0].shape[0], leaves[0].dtype
    lane0, args0 = _take(params0, 0), (_take(fargs, 0) if args_batched else fargs)
    shapes = eqx.filter_eval_shape(lambda p, a: {} if flow.rates is None else flow.rates(p, a), lane0, args0)
    return params0, jax.tree.map(lambda s: jnp.zeros((B,) + s.shape, dtype), shapes)


_initial_y_jit = eqx.filter_jit(_initial_y)


def _start_time(B: int, tau0, dtype):
    """Log start time ``τ0`` of ``B`` lanes not yet run, as a runtime value rather than a constant:
    with a constant start time folded into the vmapped solve, XLA's algebraic simplifier
    (jaxlib 0.10) cycles on the first round's program and prints "Algebraic simplifier is likely
    stuck in a circular simplification loop" at every such compile (tested in
    ``tests/test_xla_messages.py``)."""
    return jax.lax.optimization_barrier(jnp.full((B,), tau0, dtype))


def _initial_state(y0, taus, tau0) -> SolveState:
    """The solve state of lanes not yet run (status ``max_steps``: still to run)."""
    leaves = jax.tree.leaves(y0)
    B, T, dtype = leaves[0].shape[0], taus.shape[0], leaves[0].dtype
    return SolveState(
        ys=jax.tree.map(lambda x: jnp.broadcast_to(x[:, None], (B, T) + x.shape[1:]), y0),
        reached=jnp.zeros((B, T), bool),
        y_end=y0,
        tau_end=_start_time(B, tau0, dtype),
        tau_steady=jnp.full((B,), jnp.inf, dtype),
        num_steps=jnp.zeros((B,), int),
        code=jnp.full((B,), Status.max_steps, int),
        tau_start=jnp.full((B,), tau0, dtype),
        round_steps=jnp.zeros((B,), int),
    )


_export.register_output(SolveState)
_export.register_output(Finished)


@_fastjit.filter_jit
def _start(flow, fargs, params0, settings: Settings) -> SolveState:
    """The solve state of every lane of ``params0`` before its first round."""
    return _initial_state(_initial_y(flow, fargs, params0, settings.args_batched), settings.taus, settings.tau0)


# equinox.filter_jit's semantics, cheaper per call (a single solve's overhead); with the compilation
# cache on, stored as a serialised program that a new process loads instead of tracing it
@_fastjit.filter_jit(export=True, compile_fast=lambda flow, fargs, params0, state, *rest: not _throughput_bound(state.y_end))
def _fused_round(flow, fargs, params0, state: SolveState, settings: Settings, rnd: Round, idx, dest):
    """One round of the lanes ``idx`` of ``state`` (an integer array as long as the state's lane
    axis: every lane, or the pending lanes padded by repeating the first), written back at rows
    ``dest`` (padding rows ``B``: dropped), fused with the finish into one compiled call. Most
    runs end in their first round, and then this is the only dispatch of a solve (per-call
    overhead matters next to a 37-step solve of a few milliseconds); a single run that goes on,
    and a compile-bound batch whose lanes end at different rounds (:func:`_run_rounds`), run
    every later round of the same solver through the same program (``rnd.steps``, ``idx`` and
    ``dest`` are runtime values), whatever the round's length. Returns the solve state (for
    further rounds if a lane is still running) and the finished result."""
    y0 = _initial_y(flow, fargs, params0, settings.args_batched)
    lane_args = _take(fargs, idx) if settings.args_batched else fargs
    out = _solve_jit(flow, lane_args, _take(state.y_end, idx), state.tau_end[idx], settings, rnd)
    state = _merge(state, out, idx, dest)
    return state, _finish_all(flow, fargs, state, y0, settings)


def _bucket(k: int, B: int, n_dev: int, pad_all: bool = False) -> int:
    """Lanes computed for ``k`` pending lanes of ``B``: a power of two ≥ ``k`` (``B`` for the
    first round), rounded up to a multiple of the device count; ``B`` itself if ``pad_all``."""
    size = B if k == B or pad_all else min(1 << (k - 1).bit_length(), B)
    return -(-size // n_dev) * n_dev


def _default_device():
    """The device where this thread's uncommitted arrays and computations go: the one set by
    :func:`jax.default_device` (thread-local), else this process's first device."""
    device = jax.config.jax_default_device
    if isinstance(device, jax.Device):
        return device
    return jax.local_devices(backend=device)[0] if device else jax.local_devices()[0]


def _is_local(devices) -> bool:
    """Whether ``devices`` is this thread's default device alone (:func:`_default_device`):
    nothing to place or shard."""
    return len(devices) == 1 and devices[0] == _default_device()


def _place(tree, devices):
    """Shard the array leaves of ``tree`` along their leading (lane) axis over ``devices``."""
    if _is_local(devices):
        return tree
    mesh = jax.sharding.Mesh(np.asarray(devices), ("lanes",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("lanes"))
    return jax.tree.map(lambda x: jax.device_put(x, sharding) if eqx.is_array(x) else x, tree)


@eqx.filter_jit
def _gather(tree, idx):
    return _take(tree, idx)


@eqx.filter_jit
def _merge(state: SolveState, out: SolveState, idx, dest) -> SolveState:
    """Write the round's results ``out`` (lanes ``idx``) into ``state`` at rows ``dest``
    (padding rows point past the end and are dropped). New save points are taken only where
    the lane had not been before; the rest of the lane's state is replaced."""
    old_reached = state.reached[idx]
    new_points = out.reached & ~old_reached
    put = lambda new, old: old.at[dest].set(new, mode="drop")
    merge = lambda new, old: put(_where_leading(new_points, new, old[idx]), old)
    return SolveState(
        ys=jax.tree.map(merge, out.ys, state.ys),
        reached=put(old_reached | out.reached, state.reached),
        y_end=jax.tree.map(put, out.y_end, state.y_end),
        tau_end=put(out.tau_end, state.tau_end),
        tau_steady=put(out.tau_steady, state.tau_steady),
        num_steps=put(state.num_steps[idx] + out.num_steps, state.num_steps),
        code=put(out.code, state.code),
        tau_start=put(out.tau_start, state.tau_start),
        round_steps=put(out.round_steps, state.round_steps),
    )


@_fastjit.filter_jit(compile_fast=lambda flow, fargs, ends, *rest: not _throughput_bound(ends[0]))
def _stiffness_jit(flow, fargs, ends, args_batched: bool, iterations: int):
    return _per_lane(lambda a, *end: _solve.stiffness_of(flow, a, *end, iterations=iterations), args_batched, 4)(
        fargs, *ends)


@_fastjit.filter_jit(compile_fast=lambda flow, fargs, ends, *rest: not _throughput_bound(ends[0]))
def _stall_probe_jit(flow, fargs, ends, dtmin, args_batched: bool):
    return _per_lane(lambda a, y, tau: _solve.nonfinite_ahead(flow, a, tau, y, dtmin), args_batched, 2)(fargs, *ends)


def _probe_stalls(flow, fargs, codes, y_end, tau_end, result: Finished, settings: Settings, devices) -> Finished:
    """``result`` with status ``nonfinite`` for every lane whose solve stalled (``codes``, NumPy
    ``(B,)``) where the field turns non-finite just ahead of its end state (``y_end``, ``tau_end``:
    leading lane axis ``B``; :func:`gradflow._engine.solve.nonfinite_ahead`); the other lanes, and
    a result without stalled lanes, are returned as they are. The probe is a program of its own,
    compiled only when a lane stalls (a rare end), not part of every round."""
    codes = np.asarray(codes)
    stalled = np.flatnonzero(codes == Status.stalled)
    if stalled.size == 0:
        return result
    _, _, ends, lane_args = _lanes((y_end, tau_end), fargs, stalled, codes.shape[0], settings.args_batched, devices,
                                   settings.fixed_width or _compile_bound(y_end, len(devices)))
    bad = np.asarray(_stall_probe_jit(flow, lane_args, ends, _solve.stall_dtmin(settings.taus[-1]),
                                      settings.args_batched))[:stalled.size]
    if not np.any(bad):
        return result
    codes = codes.copy()
    codes[stalled[bad]] = Status.nonfinite
    status = jnp.asarray(codes if settings.lane is None else codes[settings.lane], result.status_code.dtype)
    return eqx.tree_at(lambda r: r.status_code, result, status)


def _padded(pending, size: int, B: int):
    """``(idx, dest)`` of the lanes ``pending`` (NumPy indices into ``B`` lanes) in ``size`` rows:
    ``idx`` the lane each row computes (padding rows repeat the first pending lane), ``dest`` where
    each row goes back in the state (``B``, dropped, for padding)."""
    pad = size - pending.size
    return np.concatenate([pending, np.full(pad, pending[0])]), np.concatenate([pending, np.full(pad, B)])


def _lanes(fields, fargs, pending, B: int, args_batched: bool, devices, pad_all: bool = False):
    """The lanes ``pending`` of ``fields`` (a pytree of state arrays, leading lane axis ``B``)
    and of ``fargs`` (if ``args_batched``) as one bucket (:func:`_bucket`; all ``B`` rows if
    ``pad_all``), placed on ``devices``. Returns ``(idx, dest, fields, fargs)``: ``idx`` the
    bucket's lanes (padding lanes repeat the first pending lane), ``dest`` where each goes back in
    the state (``B``, dropped, for padding)."""
    k = pending.size
    size = _bucket(k, B, len(devices), pad_all)
    idx, dest = _padded(pending, size, B)
    whole = size == B and k == B
    fields = _place(fields if whole else _gather(fields, idx), devices)
    if args_batched:
        fargs = _place(fargs if whole else _gather(fargs, idx), devices)
    return idx, dest, fields, fargs


def _stiffness(flow, fargs, state, pending, settings: Settings, devices):
    """``(h·ρ, asymmetry)`` of the lanes ``pending`` after their last round (NumPy ``(k,)``;
    ``NaN`` unless ``flow.detect_stiffness``): :func:`gradflow._engine.solve.stiffness_of`, on a
    bucket of lanes as in :func:`_round`."""
    k = pending.size
    if not flow.detect_stiffness:
        return np.full(k, np.nan), np.full(k, np.nan)
    ends = (state.y_end, state.tau_end, state.tau_start, state.round_steps)
    _, _, ends, lane_args = _lanes(ends, fargs, pending, state.code.shape[0], settings.args_batched, devices,
                                   settings.fixed_width or _compile_bound(state.y_end, len(devices)))
    h_rho, asym = _stiffness_jit(flow, lane_args, ends, settings.args_batched, settings.policy.power_iterations)
    return np.asarray(h_rho)[:k], np.asarray(asym)[:k]


def _round(flow, fargs, state, pending, settings: Settings, rnd: Round, devices):
    """Advance the lanes ``pending`` by one round ``rnd`` (at most ``rnd.steps`` steps of solver
    ``rnd.solver``) as one bucket (:func:`_lanes`; all ``B`` rows with ``settings.fixed_width``);
    merge into ``state``."""
    idx, dest, (y_start, tau_start), lane_args = _lanes(
        (state.y_end, state.tau_end), fargs, pending, state.code.shape[0], settings.args_batched, devices,
        settings.fixed_width)
    out = _solve_jit(flow, lane_args, y_start, tau_start, settings.replace(lane=None), rnd)
    return _merge(state, out, idx, dest)


def _run_rounds(flow: Flow, fargs, params0, settings: Settings, devices, before=lambda code: None) -> Finished:
    """Solve ``B`` lanes (leading axis of every leaf of ``params0``) in rounds
    (:data:`ROUND_STEPS`), each lane's solver per round from
    :func:`gradflow._engine.stiff.phase_of_lanes`, then finish (the first ``settings.keep`` save
    points; lane ``settings.lane`` only, if given). ``before(code)`` is called before each round
    with its solver's code."""
    args_batched, lane, max_steps = settings.args_batched, settings.lane, settings.max_steps
    B, n_dev = jax.tree.leaves(params0)[0].shape[0], len(devices)
    per_solve = LANES_PER_SOLVE * n_dev
    codes, left, _ = _stiff.phase_of_lanes(settings.solver, np.zeros(1, np.int64), max_steps, policy=settings.policy)
    first = Round.of(codes[0], min(ROUND_STEPS, left[0]), ROUND_STEPS)
    before(first.solver)
    # First round: the lanes in chunks of at most ``per_solve`` (a short last chunk padded to a
    # power of two, every chunk to a multiple of the device count, by repeating the chunk's
    # first lane), each chunk its initial state (``_start``) and one fused call (solve and
    # finish). Most runs end here; their
    # results are only concatenated. Merging each chunk into one state of all B lanes instead
    # would copy that state once per chunk.
    size = min(-(-B // n_dev) * n_dev, per_solve)
    states, results, kept = [], [], []
    for lo in range(0, B, size):
        real = min(size, B - lo)
        csize = _bucket(real, size, n_dev)  # a short last chunk: a power of two
        idx, _ = _padded(np.arange(lo, lo + real), csize, B)
        whole = real == B and csize == B
        pick = (lambda x: x) if whole else (lambda x: _take(x, idx))
        chunk_args = _place(pick(fargs), devices) if args_batched else fargs
        chunk = settings if whole else settings.replace(lane=None)  # a lane is picked after joining
        chunk_params = _place(pick(params0), devices)
        every = _place(np.arange(csize), devices)  # sharded like the lanes: each device solves its own
        state_c, res_c = _fused_round(flow, chunk_args, chunk_params, _start(flow, chunk_args, chunk_params, chunk),
                                      chunk, first, every, every)
        states.append(state_c)
        results.append(res_c)
        kept.append(real)
    codes = np.concatenate([np.asarray(st.code)[:k] for st, k in zip(states, kept)])
    join = lambda parts: jax.tree.map(
        lambda *xs: xs[0] if len(xs) == 1 and xs[0].shape[0] == kept[0] else jnp.concatenate(
            [x[:k] for x, k in zip(xs, kept)]), *parts)
    if not np.any(codes == Status.max_steps):
        if len(results) == 1 and whole:
            res = results[0]  # one unpadded chunk: lane and save points already selected inside the call
        else:
            res = join(results)
            res = res if lane is None else jax.tree.map(lambda x: x[lane], res)
        if np.any(codes == Status.stalled):
            y_end, tau_end = join([(st.y_end, st.tau_end) for st in states])
            res = _probe_stalls(flow, fargs, codes, y_end, tau_end, res, settings, devices)
        return res
    state = join(states)
    fused = results[0] if len(results) == 1 and whole else None  # the finished result, while it is current
    local = _is_local(devices)  # arrays stay where they are (no sharding)
    del states, results  # only the joined state is needed from here on
    compile_bound = _compile_bound(state.y_end, n_dev)
    stiff = np.zeros(B, bool)  # each lane's phase under ``auto`` (True: implicit)
    n_params = sum(int(np.prod(x.shape[1:])) for x in jax.tree.leaves(params0))  # per lane
    while True:
        pending = np.flatnonzero(np.asarray(state.code) == Status.max_steps)
        if pending.size == 0:
            break
        h_rho, asym = _stiffness(flow, fargs, state, pending, settings, devices)
        codes, left, stiff[pending] = _stiff.phase_of_lanes(
            settings.solver, np.asarray(state.num_steps)[pending], max_steps, stiff[pending], h_rho, asym, n_params,
            settings.policy, float(settings.rtol))
        steps_now = np.minimum(left, ROUND_STEPS)
        if not np.any(steps_now > 0):
            break  # every unfinished lane has spent its budget: status max_steps
        for code, n in sorted({(int(c), int(n)) for c, n in zip(codes, steps_now) if n > 0}):
            group = pending[(codes == code) & (steps_now == n)]
            before(code)
            if B <= per_solve and local and (group.size == B or (compile_bound and not spec(code).implicit)):
                # every lane in one call, as the first round; or, in a compile-bound batch, an
                # explicit round of the pending lanes padded to all B rows: the first round's
                # program again. (An implicit step costs up to cubically more with the state, so
                # implicit rounds keep their buckets: padding would cost B/k on every call.
                # ``settings.fixed_width`` pays it: :func:`_round` then runs all B rows.)
                idx, dest = _padded(group, B, B)
                state, fused = _fused_round(flow, fargs, params0, state, settings, Round.of(code, n, ROUND_STEPS),
                                            idx, dest)
                continue
            fused = None
            for lo in range(0, group.size, per_solve):
                state = _round(flow, fargs, state, group[lo: lo + per_solve], settings, Round.of(code, n, ROUND_STEPS), devices)
    if fused is None:  # else the last round was fused with the finish: nothing ran since
        fused = _finish_jit(flow, fargs, state, _initial_y_jit(flow, fargs, params0, args_batched), settings)
    return _probe_stalls(flow, fargs, state.code, state.y_end, state.tau_end, fused, settings, devices)


def run(flow: Flow, fargs, params0, settings: Settings, *, devices: Sequence[jax.Device],
        phases: list | None = None) -> Finished:
    """Integrate ``flow`` for every lane of ``params0`` (a pytree whose leaves share a leading
    lane axis ``B``) from ``t0 = expm1(settings.tau0)`` (default 0) to ``settings.t1``, saving at the log times ``settings.taus``.

    **Arguments:** ``fargs`` the flow's arguments (a leading lane axis on its array leaves if
    ``settings.args_batched``); ``settings`` the run's :class:`gradflow._engine.settings.Settings`
    (from :func:`gradflow._engine.settings.check_settings`); ``devices`` to shard lanes over.

    A lane's result is bitwise a function of its own inputs and of the programs it runs in, but
    those programs' shapes depend on the batch: XLA:CPU rounds a vmapped solver step differently at
    different lane counts (one Dopri8 step of 4, 8 or 16 lanes differs in the last bit from the same
    step of 2, 3 or 5 lanes, measured on a 2-core x86 CPU), sharding over several devices compiles
    another program, and a lone pending lane is solved without ``vmap``; the step-size control
    carries such a bit into differences within the tolerances. With ``settings.fixed_width`` (and
    ``B ≤`` :data:`LANES_PER_SOLVE` per device) every program of the batch, each later round,
    implicit ones included, the stiffness detector and the stall probe, runs all ``B`` rows (the
    pending lanes padded by repeating one of them), as the first round does: a lane's result is then
    the same bit for bit whichever other lanes run beside it and whenever they finish, for the same
    ``B`` and devices (a single device: the same whichever it is). It costs the padding rows' work
    in later rounds.

    ``phases``: a list to which the name of each solver a round runs is appended, once each, in
    the order first run (any lane's rounds: under ``auto`` the phases the run went through).

    BLAS runs with
    :func:`gradflow._engine.stiff.blas_threads` from the first implicit round on (a run that stays
    explicit, as most do, never touches the thread pools: ~0.05 ms a call)."""
    with contextlib.ExitStack() as stack:
        def before(code):
            if phases is not None and spec(code).name not in phases:
                phases.append(spec(code).name)
            if spec(code).implicit and not limited:
                stack.enter_context(_stiff.blas_threads(spec(code).name, settings.policy.blas_threads))
                limited.append(code)

        limited = []
        return _run_rounds(flow, fargs, params0, settings, devices, before)


def check_devices(devices) -> list:
    """``devices`` as a list (default: all of ``jax.local_devices()``: this process's devices).

    **Raises:** :class:`gradflow.GradflowValueError` unless a non-empty list of distinct devices or ``None``."""
    if devices is None:
        return jax.local_devices()
    devices = list(devices) if isinstance(devices, (list, tuple)) else None
    if not devices or not all(isinstance(d, jax.Device) for d in devices) or len(set(devices)) != len(devices):
        raise bad_arg("devices", devices, "a non-empty list of distinct jax devices (e.g. jax.devices()[:2]) or None")
    return devices
