"""The first call of a user's own model: where a new process's first ``gradflow.integrate`` spends
its time, side by side with SciPy ``solve_ivp`` on the same flow in the same process.

Every row (:data:`PROBLEMS`) runs in a fresh Python process (``python -m benchmarks.first_call
--child NAME``) with no persistent compilation cache (``GRADFLOW_NO_CACHE=1``, JAX's cache
disabled, cache folders pointed at an empty temporary folder; the child checks that no cache was
hit). In that child, in this order (:func:`measure`):

1. ``import gradflow`` (jax, equinox, diffrax; NumPy already imported), then JAX's backend
   started with one tiny jitted computation (``jax_init_s``, paid by neither side below);
2. gradflow's first call: ``gradflow.integrate(loss, params0, t1=...)`` with its defaults,
   wall-clock until the result is on the host, with JAX's duration events
   (``jax.monitoring``: ``/jax/core/compile/jaxpr_trace_duration``, ``.../jaxpr_to_mlir_module_duration``,
   ``.../backend_compile_duration``) summed per compiled function; every compile of the engine's
   round programs (``_fused_round``, ``_solve_jit``) is labelled with its solver;
3. the warm call (the same call again; median of ``warm_repeats``);
4. SciPy ``solve_ivp`` LSODA, BDF and Radau on the same flow in flow time: the field is a jitted
   ``-jax.grad`` of the loss flattened with ``jax.flatten_util.ravel_pytree``, ``jac`` a jitted
   ``-jax.hessian``; each method from fresh jit caches (``jax.clear_caches()`` and new functions),
   its total including its first jitted calls (tracing and compiling), at the tolerances
   gradflow's call ran at (its ``Solution.meta``: the defaults, rtol 1e-8, atol rtol/100), with
   one BLAS thread (as gradflow's implicit phase, ``benchmarks/stiff.py``);
5. the error of every final state ``θ(t1)`` against a tight reference: SciPy Radau at rtol
   1e-12, atol 1e-14 on the same field (max-norm relative error ``‖θ − θ_ref‖∞ / ‖θ_ref‖∞``);
6. with ``--ablate`` (the main row of a full run): the round's solve (``_solve_jit``, the first
   round's solver, one lane) traced, lowered and compiled again from empty caches, with the rest
   event and without any event (``rest_stop=False``), the stiffness detector (``_stiffness_jit``) on
   its own, the same solve by ``diffrax.diffeqsolve`` (the ``loop_by_diffeqsolve`` knob in place of
   the engine's own loop), and one bare Dopri8 step with its PID controller (``_bare_step``): what
   the rest event adds to a compile, what the detector costs when a run goes on, what the engine's
   own loop saves against diffeqsolve, and how much of a round's compile is the step itself rather
   than the loop around it;
7. also for the main row of a full run, a second fresh process with XLA's default compiler options
   (``--default-options``: the ``fast_compile`` knob set to ``()`` before the
   first call): gradflow's first and warm calls only, the baseline of the options the engine gives
   a single run.

``python -m benchmarks.first_call [--quick] [--only NAME]`` prints the Markdown and writes
``benchmarks/FIRST_CALL.md`` and ``benchmarks/FIRST_CALL.json``; ``python -m benchmarks``
runs it too (section "First call of a new model" in ``RESULTS.md``; the quick run: the
two-parameter row only). Times are wall-clock on whatever machine runs it: on a shared machine the
absolute numbers grow with the load, the ratios within one child much less.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone

import numpy as np

from . import _report

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

TARGET_S = 3.0
"""The issue's target for a new 75-parameter model's first call (seconds)."""
TARGET_LSODA = 3.0
"""... and as a multiple of SciPy LSODA's total, its jit included."""
REF_RTOL, REF_ATOL = 1e-12, 1e-14
"""The tight reference: SciPy Radau at these tolerances."""
SCIPY_METHODS = ("LSODA", "BDF", "Radau")


# ----------------------------------------------------------------------------- problems
@dataclasses.dataclass(frozen=True)
class Problem:
    """One row: ``make()`` returns ``(loss, params0, kwargs)`` for ``gradflow.integrate(loss,
    params0, t1=t1, **kwargs)`` (``kwargs``: e.g. ``args``; the rest at gradflow's defaults)."""

    name: str
    label: str
    make: Callable
    t1: float = 1e6
    main: bool = False  # the row the targets are judged on


def deep_linear(depth: int = 3, d: int = 5, n: int = 50, init: float = 0.05, seed: int = 0):
    """A deep linear net ``x ↦ W3 W2 W1 x`` (``depth`` weight matrices ``d × d``, a list), square
    loss ``½ mean_i ‖W3 W2 W1 x_i − T x_i‖²`` against a fixed teacher ``T`` with singular values
    3, 2, 1, 0.5, 0.2 on ``n`` Gaussian inputs, all from ``np.random.RandomState(seed)``. From the
    small init (``init × N(0, 1)`` entries) the flow leaves the saddle at 0 and learns the teacher's
    modes one after another (saddle to saddle, the loss falls from 5.4 between t ≈ 2 and t ≈ 400),
    then rests at an interpolating minimum."""
    import jax.numpy as jnp

    rng = np.random.RandomState(seed)
    X = rng.randn(n, d)
    U, _, Vt = np.linalg.svd(rng.randn(d, d))
    T = U @ np.diag(np.geomspace(3.0, 0.2, d) if d != 5 else [3.0, 2.0, 1.0, 0.5, 0.2]) @ Vt
    Xj, Yj = jnp.asarray(X), jnp.asarray(X @ T.T)

    def loss(Ws):
        out = Xj
        for W in Ws:
            out = out @ W.T
        return 0.5 * jnp.mean(jnp.sum((out - Yj) ** 2, axis=1))

    return loss, [init * rng.randn(d, d) for _ in range(depth)], {}


def scalar_net():
    """The two-parameter example of ``gradflow.integrate``'s docstring: ``½ (2 − w2 w1)²`` from
    ``w1 = w2 = 0.1``."""
    loss = lambda p: 0.5 * (2.0 - p["w2"] * p["w1"]) ** 2
    return loss, {"w1": 0.1, "w2": 0.1}, {}


def readme_two_layer():
    """README.md's Python example: a two-layer linear net ``X W1 W2 ≈ Y`` (5×4 and 4×3, 32
    parameters) on 20 Gaussian samples, the data passed as ``args`` (README's quadrature left out)."""
    import jax.numpy as jnp

    rng = np.random.RandomState(0)
    X, Y = rng.randn(20, 5), rng.randn(20, 3)
    loss = lambda p, data: 0.5 * jnp.mean((data[0] @ p["W1"] @ p["W2"] - data[1]) ** 2)
    params0 = {"W1": 0.1 * rng.randn(5, 4), "W2": 0.1 * rng.randn(4, 3)}
    return loss, params0, {"args": (X, Y)}


PROBLEMS = [
    Problem("deep-linear-75", "deep linear net, 3 layers of 5×5", deep_linear, main=True),
    Problem("scalar-2", "two-layer scalar net (integrate's docstring)", scalar_net),
    Problem("readme-32", "two-layer linear net (README)", readme_two_layer),
]
"""The rows; append a :class:`Problem` to add one (its ``make`` must be importable by name in a
new process: a module-level function)."""

QUICK = ("scalar-2",)
"""The rows of ``--quick`` (and of ``python -m benchmarks --quick``)."""


def problem(name: str) -> Problem:
    for p in PROBLEMS:
        if p.name == name:
            return p
    raise KeyError(f"no problem {name!r}; known: {[p.name for p in PROBLEMS]}")


# ----------------------------------------------------------------------------- JAX's duration events
EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
          "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
          "/jax/core/compile/backend_compile_duration": "compile"}


class Recorder:
    """Collects JAX's trace/lower/compile durations while :attr:`on`, each with the compiled
    function's name (``fun_name``; for the engine's ``_solve_jit``, the round it was compiled for:
    :attr:`tag`), and counts persistent-cache hits and misses. One listener per process
    (:func:`recorder`): JAX has no way to unregister one."""

    def __init__(self):
        import jax

        self.on, self.tag, self.rows = False, None, []
        self.cache = collections.Counter()
        jax.monitoring.register_event_duration_secs_listener(self._duration)
        jax.monitoring.register_event_listener(self._event)

    def _duration(self, event, duration, **kw):
        kind = EVENTS.get(event)
        if self.on and kind is not None:
            name = str(kw.get("fun_name", "?"))
            if name.startswith("jit(") and name.endswith(")"):
                name = name[4:-1]
            if name in ("_solve_jit", "_fused_round") and self.tag:
                name = f"{name} [{self.tag}]"
            self.rows.append((kind, name, float(duration)))

    def _event(self, event, **kw):
        if event.startswith("/jax/compilation_cache/cache_"):
            self.cache[event.rsplit("/", 1)[1]] += 1

    @contextlib.contextmanager
    def recording(self):
        self.rows, self.on = [], True
        try:
            yield self
        finally:
            self.on = False

    def totals(self) -> dict:
        out = {k: 0.0 for k in EVENTS.values()}
        for kind, _, d in self.rows:
            out[kind] += d
        return out

    def by_function(self) -> list[dict]:
        """Per compiled function: trace, lower and compile seconds and how many compiles, largest first."""
        acc: dict = {}
        for kind, name, d in self.rows:
            r = acc.setdefault(name, dict(function=name, trace=0.0, lower=0.0, compile=0.0, compiles=0))
            r[kind] += d
            r["compiles"] += kind == "compile"
        rows = list(acc.values())
        for r in rows:
            r["total"] = r["trace"] + r["lower"] + r["compile"]
        return sorted(rows, key=lambda r: -r["total"])


_RECORDER = None


def recorder() -> Recorder:
    global _RECORDER
    if _RECORDER is None:
        _RECORDER = Recorder()
    return _RECORDER


@contextlib.contextmanager
def tagged_rounds(rec: Recorder, rounds: list):
    """Label the engine's round compiles: while this is active, each call of
    ``gradflow._engine.batch._fused_round`` (a round fused with the finish: every round of a
    single run, the explicit rounds of a small batch) and of ``_solve_jit`` from the host (a round
    of a bucket of a batch's lanes)
    sets ``rec.tag`` to its solver's name (one program per solver: the round's length is a runtime
    value) and appends the round to ``rounds`` (:func:`gradflow.internal.observe_rounds`)."""
    from gradflow.internal import observe_rounds, solver_entry

    def tagged(kind, rnd, run):
        name = solver_entry(rnd.solver).name
        rounds.append(f"{name}, {int(rnd.steps)} steps{' (fused)' if kind == 'fused' else ''}")
        prev, rec.tag = rec.tag, name
        try:
            return run()
        finally:
            rec.tag = prev

    with observe_rounds(tagged):
        yield


# ----------------------------------------------------------------------------- one row, in a child
def tolerances(sol) -> tuple[float, float]:
    """The ``rtol`` and ``atol`` a gradflow solve ran at (its ``meta``; for a call with the
    defaults, gradflow's defaults: rtol 1e-8, atol rtol/100)."""
    meta = dict(sol.meta)
    return float(meta["rtol"]), float(meta["atol"])


@dataclasses.dataclass(frozen=True)
class NegGrad:
    """``−∇L`` as ``integrate`` builds it (hashable: a static part of the engine's compiled program)."""

    loss: Callable
    with_args: bool

    def __call__(self, params, args):
        import jax
        import jax.numpy as jnp

        g = jax.grad(self.loss)(params, args) if self.with_args else jax.grad(self.loss)(params)
        return jax.tree.map(jnp.negative, g)


def _scipy_run(loss, params0, kwargs, t1, method, rtol, atol, rec: Recorder | None = None):
    """SciPy ``solve_ivp`` of ``dθ/dt = −∇L(θ)`` from fresh jit caches; returns a dict with the
    total seconds (jit included), the compile seconds within it, the final state and SciPy's counts."""
    import jax
    import threadpoolctl
    from jax.flatten_util import ravel_pytree
    from scipy.integrate import solve_ivp

    jax.clear_caches()
    flat0, unravel = ravel_pytree(jax.tree.map(lambda x: np.asarray(x, np.float64), params0))
    flat0 = np.asarray(flat0)
    args = kwargs.get("args")
    L = (lambda th: loss(unravel(th))) if args is None else (lambda th: loss(unravel(th), args))
    ctx = rec.recording() if rec is not None else contextlib.nullcontext()
    with ctx, threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        start = time.perf_counter()
        grad = jax.jit(jax.grad(L))
        hess = jax.jit(jax.hessian(L))
        fun = lambda t, y: -np.asarray(grad(y))
        jac = lambda t, y: -np.asarray(hess(y))
        sol = solve_ivp(fun, (0.0, t1), flat0, method=method, rtol=rtol, atol=atol, jac=jac)
        total = time.perf_counter() - start
    compile_s = sum(rec.totals().values()) if rec is not None else None
    return dict(method=method, total_s=total, jit_s=compile_s, success=bool(sol.success), message=str(sol.message),
                nfev=int(sol.nfev), njev=int(sol.njev), nlu=int(sol.nlu), y_end=sol.y[:, -1])


def _ablation(loss, params0, kwargs, sol) -> list[dict]:
    """The round's solve (``_solve_jit``: the first round's solver, one lane) traced, lowered and
    compiled from empty caches as ``auto`` runs it (the rest event) and without any event
    (``rest_stop=False``), the stiffness detector (``_stiffness_jit``, a program of its own, compiled only when
    a lane goes on to a second round), the solve as auto runs it by ``diffrax.diffeqsolve`` instead of the engine's
    loop, and one bare Dopri8 step (:func:`_bare_step`); trace/lower/compile seconds of each."""
    import jax
    import jax.numpy as jnp

    from gradflow.internal import (Flow, Round, Settings, engine_knob, engine_knobs, phase_of_lanes, solve_round,
                                   solver_entry, stiffness_round)

    meta = dict(sol.meta)
    rtol, atol = tolerances(sol)
    args = kwargs.get("args")
    ts = np.asarray(sol.t)  # integrate's save times (the default grid); the last is t1
    settings = Settings(taus=np.log1p(ts), t1=np.asarray(meta["t1"]), rtol=np.asarray(rtol),
                               atol=np.asarray(atol), solver=meta["solver"], max_steps=int(meta["max_steps"]),
                               keep=len(ts))
    lanes = jax.tree.map(lambda x: np.asarray(x, np.float64)[None], params0)
    y0, tau0 = (lanes, {}), jnp.zeros((1,))
    codes, left, _ = phase_of_lanes(settings.solver, np.zeros(1, np.int64), settings.max_steps)
    cap = engine_knob("round_steps")
    rnd = Round.of(codes[0], min(cap, left[0]), cap)  # the first round's
    rec, out = recorder(), []
    for label, rest_stop in ((SOLVE, True),
                             ("the solve without the rest event (no event)", False),
                             ("the stiffness detector after a round (a program of its own)", None),
                             (BY_DIFFEQSOLVE, True)):
        jax.clear_caches()
        flow = Flow(field=NegGrad(loss, args is not None), rest_stop=bool(rest_stop))
        with engine_knobs(loop_by_diffeqsolve=label == BY_DIFFEQSOLVE), rec.recording():
            start = time.perf_counter()
            if rest_stop is None:
                ends = (y0, tau0 + 1.0, tau0, jnp.ones((1,), int))
                res = stiffness_round(flow, args, ends, False, settings.policy.power_iterations)
            else:
                res = solve_round(flow, args, y0, tau0, settings.replace(lane=None), rnd)
            jax.block_until_ready(res)
            wall = time.perf_counter() - start
        tot = rec.totals()
        out.append(dict(variant=label, solver=solver_entry(rnd.solver).name, steps=int(rnd.steps), wall_s=wall,
                        **{f"{k}_s": v for k, v in tot.items()}))
    out.append(_bare_step(loss, args, y0, rtol, atol, rec))
    return out


BARE_STEP = "one Dopri8 step and its PID controller alone (no loop, no event, no saving)"
SOLVE = "the solve as auto runs it (rest event)"
BY_DIFFEQSOLVE = "the same solve by `diffrax.diffeqsolve` (the engine's loop before 2026-12-05)"


def _bare_step(loss, args, y0, rtol, atol, rec) -> dict:
    """Trace/lower/compile seconds of one step of diffrax's ``Dopri8`` on the engine's log-time
    field of ``loss`` (its ``solver.step`` and a ``PIDController``'s ``adapt_step_size`` at the
    same tolerances, jitted alone with the options of a single run's round): what remains of the
    round's program without the loop (the while loop, the save points' interpolation), the rest
    event, the save points' observables and the finish, i.e. what a first call stepped from the
    host would compile for its explicit phase."""
    import diffrax
    import jax

    from gradflow.internal import Flow, FlowArgs, engine_knob, log_time_rhs

    jax.clear_caches()
    flow = Flow(field=NegGrad(loss, args is not None))
    term = diffrax.ODETerm(log_time_rhs)
    fargs = FlowArgs(flow, args)
    solver, ctrl = diffrax.Dopri8(), diffrax.PIDController(rtol=float(rtol), atol=float(atol))
    y = jax.tree.map(lambda x: x[0], y0)
    state = solver.init(term, 0.0, 0.1, y, fargs)
    _, cstate = ctrl.init(term, 0.0, 1.0, y, 0.1, fargs, solver.func, solver.order(term))

    def step(t0, t1, y, state, cstate):  # fargs (the flow, static) closed over
        y1, err, _, state, _ = solver.step(term, t0, t1, y, fargs, state, False)
        keep, t0n, t1n, _, cstate, _ = ctrl.adapt_step_size(t0, t1, y, y1, fargs, err, solver.order(term), cstate)
        return keep, t0n, t1n, y1, state, cstate

    jitted = jax.jit(step, compiler_options=dict(engine_knob("fast_compile")) or None)
    with rec.recording():
        start = time.perf_counter()
        jax.block_until_ready(jitted(0.0, 0.1, y, state, cstate))
        wall = time.perf_counter() - start
    tot = rec.totals()
    return dict(variant=BARE_STEP, solver="dopri8", steps=1, wall_s=wall, **{f"{k}_s": v for k, v in tot.items()})


def measure(name: str, warm_repeats: int = 3, ablate: bool = False, scipy_methods=SCIPY_METHODS,
            reference: bool = True, default_options: bool = False) -> dict:
    """One row, timed in this process (:mod:`benchmarks.first_call`'s docstring says what, in which
    order). Meant for a fresh process (``--child``); in-process (tests) the "first" call is only
    first for this problem's functions. ``default_options``: every engine program compiled with
    XLA's default options (the baseline of the engine's ``fast_compile`` options)."""
    start = time.perf_counter()
    import gradflow  # noqa: F401 - timed: the import is part of the row (import_s)
    from gradflow.internal import engine_knob, engine_knobs

    with engine_knobs(fast_compile=() if default_options else engine_knob("fast_compile")):
        return _measure(name, warm_repeats, ablate, scipy_methods, reference, default_options, start)


def _measure(name, warm_repeats, ablate, scipy_methods, reference, default_options, start) -> dict:
    import jax
    import jax.numpy as jnp

    import gradflow

    import_s = time.perf_counter() - start
    rec = recorder()
    t = time.perf_counter()
    jax.block_until_ready(jax.jit(lambda x: x + 1.0)(jnp.zeros(1)))
    jax_init_s = time.perf_counter() - t

    prob = problem(name)
    loss, params0, kwargs = prob.make()
    rounds: list = []
    with rec.recording(), tagged_rounds(rec, rounds):
        t = time.perf_counter()
        sol = gradflow.integrate(loss, params0, t1=prob.t1, **kwargs)
        jax.block_until_ready(sol.params)
        first_s = time.perf_counter() - t
    first_totals, functions = rec.totals(), rec.by_function()
    warm = []
    for _ in range(warm_repeats):
        t = time.perf_counter()
        sol2 = gradflow.integrate(loss, params0, t1=prob.t1, **kwargs)
        jax.block_until_ready(sol2.params)
        warm.append(time.perf_counter() - t)

    from jax.flatten_util import ravel_pytree

    end = lambda s: np.asarray(ravel_pytree(jax.tree.map(lambda x: x[-1], s.params))[0])
    g_end = end(sol)
    rtol, atol = tolerances(sol)
    scipy_rows = [_scipy_run(loss, params0, kwargs, prob.t1, m, rtol, atol, rec) for m in scipy_methods]
    ref = None
    if reference:
        t = time.perf_counter()
        ref_run = _scipy_run(loss, params0, kwargs, prob.t1, "Radau", REF_RTOL, REF_ATOL)
        ref = dict(method="SciPy Radau", rtol=REF_RTOL, atol=REF_ATOL, seconds=time.perf_counter() - t,
                   success=ref_run["success"], nfev=ref_run["nfev"])
        y_ref = ref_run["y_end"]
        err = lambda y: float(np.max(np.abs(y - y_ref)) / np.max(np.abs(y_ref)))
    else:
        err = lambda y: None
    for r in scipy_rows:
        r["error"] = err(r.pop("y_end"))
    ablation = _ablation(loss, params0, kwargs, sol) if ablate else None
    return dict(
        problem=name, label=prob.label, main=prob.main, t1=prob.t1, states=int(g_end.size), rtol=rtol, atol=atol,
        import_s=import_s, jax_init_s=jax_init_s,
        first_s=first_s, warm_s=float(np.median(warm)), warm_repeats=warm_repeats,
        status=sol.status, steps=int(sol.num_steps), t_steady=float(sol.t_steady), rounds=rounds,
        first_error=err(g_end), warm_same_as_first=bool(np.array_equal(g_end, end(sol2))),
        first_breakdown=first_totals, functions=functions, default_options=default_options, end=g_end.tolist(),
        scipy=scipy_rows, reference=ref, ablation=ablation,
        cache=dict(dir=str(jax.config.jax_compilation_cache_dir), enabled=bool(jax.config.jax_enable_compilation_cache),
                   gradflow_no_cache=os.environ.get("GRADFLOW_NO_CACHE"), **rec.cache),
    )


# ----------------------------------------------------------------------------- the parent
def child_env(tmp: str) -> dict:
    """The environment of a measuring child: no persistent cache anywhere, cache folders empty."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env.update(GRADFLOW_NO_CACHE="1", GRADFLOW_CACHE_DIR=os.path.join(tmp, "gradflow"),
               XDG_CACHE_HOME=os.path.join(tmp, "xdg"), JAX_ENABLE_COMPILATION_CACHE="false",
               PYTHONPATH=ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""))
    return env


def run_child(name: str, warm_repeats: int, ablate: bool, default_options: bool = False) -> dict:
    """:func:`measure` of one row in a fresh process (``python -m benchmarks.first_call --child``;
    ``default_options``: gradflow's calls only, with XLA's default compiler options)."""
    with tempfile.TemporaryDirectory(prefix="gradflow-first-call-") as tmp:
        cmd = [sys.executable, "-m", "benchmarks.first_call", "--child", name, "--warm", str(warm_repeats)]
        if ablate:
            cmd.append("--ablate")
        if default_options:
            cmd.append("--default-options")
        start = time.perf_counter()
        out = subprocess.run(cmd, cwd=ROOT, env=child_env(tmp), capture_output=True, text=True)
        wall = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"first-call child {name} failed:\n{out.stderr[-3000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["process_wall_s"] = wall
    if res["cache"].get("cache_hits") or res["cache"]["enabled"]:
        raise RuntimeError(f"first-call child {name} used a persistent compilation cache: {res['cache']}")
    return res


def run(quick: bool = False, only=None) -> dict:
    """Every row (``quick``: :data:`QUICK`; ``only``: these names), each in a fresh process."""
    names = list(only) if only else [p.name for p in PROBLEMS if not quick or p.name in QUICK]
    rows = []
    for name in names:
        t = time.perf_counter()
        rows.append(run_child(name, warm_repeats=1 if quick else 3, ablate=problem(name).main and not quick))
        if problem(name).main and not quick:
            rows[-1]["baseline"] = run_child(name, warm_repeats=3, ablate=False, default_options=True)
        print(f"first_call: {name} done in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    return dict(quick=quick, rows=rows, measured=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                load_average=os.getloadavg()[0], cores=os.cpu_count())


# ----------------------------------------------------------------------------- the report
BEGIN = "<!-- first call: begin (benchmarks/first_call.py) -->"
END = "<!-- first call: end -->"

KNOWN = {
    "_fused_round": "a round fused with the finish (one program per solver, every round of a single run)",
    "_stall_probe_jit": "the probe just ahead of a stall, only for lanes that stall",
    "_stiffness_jit": "the stiffness detector after a round (h·ρ, asymmetry), only for lanes that go on",
    "_start": "the initial solve state",
    "_finish_all": "the finish after rounds of part of a batch (save points, observables)",
    "_merge": "writing a round of part of a batch into the state",
    "_at_start": "the check of loss and gradient at params0",
    "_initial_y": "the initial state after rounds of part of a batch",
}


def _scipy(row, method):
    return next((r for r in row["scipy"] if r["method"] == method), None)


def _f(x, spec=".2f"):
    return "–" if x is None else format(x, spec)


def targets(row) -> dict:
    """The issue's two targets on a row: first call ≤ :data:`TARGET_S`, ≤ :data:`TARGET_LSODA` × LSODA's total."""
    lsoda = _scipy(row, "LSODA")
    ratio = row["first_s"] / lsoda["total_s"] if lsoda else None
    return dict(first_s=row["first_s"], ratio=ratio, seconds_met=row["first_s"] <= TARGET_S,
                ratio_met=ratio is not None and ratio <= TARGET_LSODA)


def markdown(res: dict) -> str:
    rows = res["rows"]
    L = ["| problem | states | gradflow first call (s) | gradflow warm (s) | LSODA total (s) | BDF (s) | Radau (s) "
         "| first / LSODA | errors: gradflow · LSODA · BDF · Radau | status |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        sp = {m: _scipy(r, m) for m in SCIPY_METHODS}
        errs = " · ".join(_f(e, ".1e") for e in [r["first_error"]] + [sp[m] and sp[m]["error"] for m in SCIPY_METHODS])
        ok = "/".join("ok" if sp[m] and sp[m]["success"] else "fail" for m in SCIPY_METHODS)
        ratio = targets(r)["ratio"]
        L.append(f"| {r['problem']}: {r['label']} | {r['states']} | {r['first_s']:.2f} | {r['warm_s']:.3f} "
                 f"| {_f(sp['LSODA'] and sp['LSODA']['total_s'])} | {_f(sp['BDF'] and sp['BDF']['total_s'])} "
                 f"| {_f(sp['Radau'] and sp['Radau']['total_s'])} | {_f(ratio, '.1f')}× | {errs} "
                 f"| {r['status']} ({r['steps']} steps); SciPy {ok} |")
    return "\n".join(L)


def breakdown(row) -> str:
    b, first = row["first_breakdown"], row["first_s"]
    jit = b["trace"] + b["lower"] + b["compile"]
    L = [f"**{row['problem']}** ({row['states']} states): first call {first:.2f} s = tracing {b['trace']:.2f} s "
         f"+ lowering {b['lower']:.2f} s + XLA compile {b['compile']:.2f} s (together {jit:.2f} s, "
         f"{100 * jit / first:.0f}%) + the rest {first - jit:.2f} s (the solve itself, host work; "
         f"warm call {row['warm_s']:.3f} s). Rounds run: {'; '.join(row['rounds'])}.", "",
         "| compiled function | compiles | trace (s) | lower (s) | XLA compile (s) | total (s) | share of first call |",
         "|---|---|---|---|---|---|---|"]
    rest = dict(trace=0.0, lower=0.0, compile=0.0, compiles=0, total=0.0, n=0)
    for f in row["functions"]:
        base = f["function"].split(" [")[0]
        if f["total"] < 0.02 * first and base not in KNOWN:
            for k in ("trace", "lower", "compile", "compiles", "total"):
                rest[k] += f[k]
            rest["n"] += 1
            continue
        what = KNOWN.get(base, "a round of part of a batch" if base == "_solve_jit" else "")
        name = f"`{f['function']}`" + (f": {what}" if what else "")
        L.append(f"| {name} | {f['compiles']} | {f['trace']:.2f} | {f['lower']:.2f} | {f['compile']:.2f} | "
                 f"{f['total']:.2f} | {100 * f['total'] / first:.0f}% |")
    if rest["n"]:
        L.append(f"| {rest['n']} others (op-by-op jits, probes) | {rest['compiles']} | {rest['trace']:.2f} | "
                 f"{rest['lower']:.2f} | {rest['compile']:.2f} | {rest['total']:.2f} | {100 * rest['total'] / first:.0f}% |")
    sp = [r for r in row["scipy"] if r.get("jit_s") is not None]
    if sp:
        L += ["", "SciPy's totals, of which tracing + compiling its two jitted functions: " + "; ".join(
            f"{r['method']} {r['total_s']:.2f} s, {r['jit_s']:.2f} s ({r['nfev']} field, {r['njev']} Hessian calls)"
            for r in sp) + "."]
    if row.get("ablation"):
        a = row["ablation"]
        tot = [x["trace_s"] + x["lower_s"] + x["compile_s"] for x in a]
        L += ["", f"The round's solve (`_solve_jit`, {a[0]['solver']}, one lane), the stiffness detector, the same solve by "
              "`diffrax.diffeqsolve` and one bare solver step compiled again, each from empty caches (trace + lower + XLA "
              "compile, seconds):", "",
              "| program | trace | lower | XLA compile | total |", "|---|---|---|---|---|"]
        for x, t in zip(a, tot):
            L.append(f"| {x['variant']} | {x['trace_s']:.2f} | {x['lower_s']:.2f} | {x['compile_s']:.2f} | {t:.2f} |")
        if len(a) >= 3:
            L += ["", f"The rest event adds {tot[0] - tot[1]:.2f} s to the solve's compile (against no event, as without the rest stop); "
                  f"the stiffness detector, a program of its own, costs {tot[2]:.2f} s and is compiled only when a lane "
                  "goes on to a second round."]
        by = {x["variant"]: t for x, t in zip(a, tot)}
        if BY_DIFFEQSOLVE in by:
            L[-1] += (f" The same solve by `diffrax.diffeqsolve` (the same solver, controller, save points and rest event; "
                      f"the engine's loop before 2026-12-05) compiles in {by[BY_DIFFEQSOLVE]:.2f} s against "
                      f"{by[SOLVE]:.2f} s in the engine's own loop (`gradflow._engine.loop`, the same steps bit for bit): "
                      "diffeqsolve also traces its step body three times, unrolls `t1 − 100 ulp` into a 1,700-instruction "
                      "kernel and compiles machinery these solves do not use.")
        if BARE_STEP in by:
            L[-1] += (f" One step of the same field with diffrax's Dopri8 and a PID controller, jitted alone, compiles in "
                      f"{by[BARE_STEP]:.2f} s of the solve's {by[SOLVE]:.2f} s: the rest is the loop around the step "
                      "(the while loop, the save points' interpolation), the rest event, the save points' observables "
                      "and the finish.")
    base = row.get("baseline")
    if base:
        bb = base["first_breakdown"]
        L += ["", f"The same first call with XLA's default compiler options (a fresh process of this run, "
              "`--default-options`: the engine's programs compiled with XLA's defaults instead of `FAST_COMPILE`, "
              "the older elementwise emitters that a single run gets): "
              f"first call {base['first_s']:.2f} s (XLA compile {bb['compile']:.2f} s, "
              f"tracing {bb['trace']:.2f} s), warm {base['warm_s']:.3f} s; with the options {first:.2f} s (XLA compile "
              f"{b['compile']:.2f} s), warm {row['warm_s']:.3f} s: {base['first_s'] / first:.2f}× faster first call, "
              f"final state {_same(base, row)}."]
    return "\n".join(L)


def _same(a, b) -> str:
    """How the final states of two rows compare: bitwise, or their largest relative difference."""
    x, y = np.asarray(a["end"]), np.asarray(b["end"])
    if np.array_equal(x, y):
        return "bitwise the same"
    return f"the same to {np.max(np.abs(x - y)) / np.max(np.abs(y)):.1e} (max-norm, relative)"


def notes(rows) -> str:
    """What the rounds say: which solve programs (one per solver) each first call compiled."""
    out = []
    for r in rows:
        progs = sorted({f["function"].split(" [")[1][:-1] for f in r["functions"]
                        if f["function"].startswith(("_fused_round [", "_solve_jit ["))})
        out.append(f"{r['problem']} ({r['steps']} steps in {len(r['rounds'])} round(s)): "
                   f"{len(progs)} solve program(s) ({', '.join(progs) or '?'})")
    return ("Solve programs per first call (one compiled program per solver, fused with set-up and finish; every "
            "round of a single run, whatever its length, runs its solver's program): " + "; ".join(out) + ".")


def report(res: dict, cmd: str = "python -m benchmarks.first_call") -> str:
    rows = res["rows"]
    r0 = rows[0] if rows else None
    L = [f"Command: `{cmd}`{' (QUICK: rows reduced)' if res['quick'] else ''}, {res['measured']}, "
         f"{res['cores']} cores, load average {res['load_average']:.1f} at the end. Each row is one fresh process "
         "without any persistent compilation cache (checked: no cache hits). In it: `import gradflow` "
         + ("(" + ", ".join(f"{r['import_s']:.1f}" for r in rows) + " s)" if rows else "")
         + ", JAX's backend started by one tiny jitted computation (" + (", ".join(f"{r['jax_init_s']:.2f}" for r in rows))
         + " s; in neither side's time), gradflow's first call (`integrate(loss, params0, t1=1e6)`, defaults, "
         "until the result is on the host), the warm call (median of "
         f"{r0['warm_repeats'] if r0 else '?'}), then SciPy `solve_ivp` in flow time on the same field (jitted "
         "`-jax.grad` of the raveled loss, jitted `-jax.hessian` as `jac`), each method from fresh jit caches, its total "
         f"including tracing and compiling both, at gradflow's default tolerances (rtol {r0['rtol']:g}, atol {r0['atol']:g}; "
         "one BLAS thread). " if r0 else "",
         f"Errors: ‖θ(t1) − θ_ref(t1)‖∞ / ‖θ_ref(t1)‖∞ against SciPy Radau at rtol {REF_RTOL:g}, atol {REF_ATOL:g} "
         "(the same method as the Radau row, so that row's error is not independent of it).", "",
         markdown(res), "", notes(rows), "",
         "### Where gradflow's first call goes", "",
         "From JAX's duration events (`jax.monitoring`: `/jax/core/compile/jaxpr_trace_duration`, "
         "`jaxpr_to_mlir_module_duration`, `backend_compile_duration`) per compiled function; a jit traced inside "
         "another is counted in the outer one. Round programs are labelled with their solver.", ""]
    for r in rows:
        L += [breakdown(r), ""]
    main = next((r for r in rows if r["main"]), None)
    if main is not None:
        t = targets(main)
        L.append(f"**Targets** ({main['problem']}, {main['states']} parameters): first call ≤ {TARGET_S:g} s: "
                 f"{'met' if t['seconds_met'] else 'missed'} ({t['first_s']:.2f} s); ≤ {TARGET_LSODA:g}× SciPy LSODA's "
                 f"total: {'met' if t['ratio_met'] else 'missed'} ({_f(t['ratio'], '.1f')}×).")
    else:
        L.append("**Targets**: not judged in this run (the main row, deep-linear-75, was not run).")
    return "\n".join(L) + "\n"


def section(res: dict, cmd: str) -> str:
    """The ``RESULTS.md`` section (between markers, replaced in place by later runs)."""
    return _report.section(BEGIN, END, "First call of a new model", report(res, cmd))


def insert(md: str, text: str) -> str:
    return _report.insert(md, text, BEGIN, END)


def write(res: dict, out: str, cmd: str) -> str:
    return _report.write_report(out, "First call of a user's own model: gradflow vs SciPy in one fresh process",
                         report(res, cmd), res, default=str)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.first_call", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}, one warm call, no ablation")
    p.add_argument("--only", action="append", metavar="NAME", help="run only this row (repeatable)")
    p.add_argument("--out", default=os.path.join(HERE, "FIRST_CALL.md"), help="report path (JSON beside it)")
    p.add_argument("--child", metavar="NAME", help=argparse.SUPPRESS)
    p.add_argument("--warm", type=int, default=3, help=argparse.SUPPRESS)
    p.add_argument("--ablate", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--default-options", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        kw = dict(scipy_methods=(), reference=False) if args.default_options else {}
        print(json.dumps(measure(args.child, warm_repeats=args.warm, ablate=args.ablate,
                                 default_options=args.default_options, **kw), default=str))
        return 0
    res = run(quick=args.quick, only=args.only)
    cmd = _report.command("benchmarks.first_call", args.quick, only=args.only)
    return _report.published(write(res, args.out, cmd), args.out, "first_call")


if __name__ == "__main__":
    sys.exit(main())
