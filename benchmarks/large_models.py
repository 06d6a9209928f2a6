"""Large users' models: how far in flow time each method gets in a fixed wall-clock budget.

Three models (fixed seeds, float64), each a plain JAX loss over a parameter pytree, as a user
writes it (:data:`MODELS`):

- ``deep-linear``: a deep linear net ``x ↦ W3 W2 W1 x``, three ``32 × 32`` layers (3,072
  parameters), square loss against a full-rank teacher with four groups of singular values
  (3, 1, 0.3, 0.1; eight each) on 128 Gaussian inputs, from a small init (``0.01·N(0, 1)``
  entries): the flow leaves the saddle at 0 and learns the groups one after another (saddle to
  saddle: loss 38 at the start, plateaus near 3.7 and 0.6, the last group learned near
  ``t ≈ 3000``), then rests at a global minimum;
- ``mlp``: a two-layer tanh MLP ``16 → 600 → 1`` (10,801 parameters, LeCun-normal init) on a
  small regression set (256 Gaussian inputs, targets from a random 8-unit tanh teacher), half
  the mean squared error;
- ``transformer``: the Sec. 4 induction transformer's full-batch loss on a fixed training set
  (:func:`gradflow.sims.beyond.flow_sinks.setup`, the loss builder of the ``flow-sinks``
  experiment: pre-LN blocks, MLP, last-position cross-entropy + 0.2 × next-token cross-entropy),
  softmax attention, ``d_model`` 32, 2 layers × 4 heads, 64 sequences (32,356 parameters), the
  authors' initialisation of run seed 0.

Per model, three methods, each given the same wall-clock budget (``--budget``, default 600 s per
method per model; its compilation counts against it) and each run in a fresh process (no
persistent compilation cache, as :mod:`benchmarks.first_call`), one after another. Each method
does at least one unit of work (a call, a chunk, a step), even where its compilation alone
overruns the budget (the row then says so). The flow time, loss and wall reported are those of
the last checkpoint within the budget; a call, chunk or step that ended after it is not counted
(the notes say how far it got).

- **gradflow**: :func:`gradflow.integrate` with its defaults (``solver="auto"``, rtol 1e-8,
  rest stop on) towards ``t1 = 1e12`` (:data:`T_MAX`). ``integrate`` has no wall-clock limit, so
  the run is a chain of calls, each resuming from the previous end state at its flow time
  (``integrate(..., t0=t, t1=t + Δ)``, so the log time keeps its origin at ``t = 0`` and a call's
  steps go on at the length the last one reached): the first over
  ``Δ = 1``, each next one over a ``Δ`` extrapolated linearly from the last call's wall time (its
  compilation taken off) to take half the budget left, at most 100× and at least 1/8 of the last
  ``Δ`` (no more than it after a call that ended at ``max_steps``; :func:`run_gradflow`). A call
  is started only while the budget is not spent and its prediction fits what is left. Each call
  saves 12 points in its segment (``t``, ``t + 2^-10 Δ …  t + Δ``), so a call that ends at ``max_steps`` still hands on its last saved state. A call that
  ends at rest (status ``ok``, finite ``t_steady``) ends the run: the flow holds that state to
  ``t1``, so the flow time reached is ``1e12`` (the table says from when it is at rest). Every call
  starts ``auto`` anew (Dopri8 for 64 steps, then stiffness detection): a single call to
  ``t1 = 1e12`` would keep its stiff phase instead; the chain costs that. (Before ``t0`` existed,
  each call also restarted the log time at its own start, so its first steps were sized for
  ``t = 0`` again: gradflow rows measured before 2026-12-07 19:50 UTC ran so.)
- **GD** at its stability limit: ``θ ← θ − lr ∇L(θ)`` as one jitted ``lax.fori_loop`` per chunk
  (about 1/25 of the budget each, the last cut to what is left), flow time ``t = Σ lr·k`` (``k`` iterations per chunk).
  ``lr = 1.9/λ_max`` of the Hessian at the start (λ_max: the largest-magnitude eigenvalue by power
  iteration with Hessian–vector products, ``jax.jvp`` of ``jax.grad``, 50 iterations); before every
  chunk λ_max is re-estimated at the current θ (8 iterations, warm-started) and ``lr`` lowered to
  ``1.9/λ_max`` when that is smaller (never raised: a flow's sharpness grows as it leaves a
  saddle); a chunk whose loss ends non-finite or above its start (by more than 1e-12 of the start
  loss: not round-off at a minimum) is undone and ``lr`` halved.
- **SciPy** ``solve_ivp``'s LSODA stepped one step at a time (``scipy.integrate.LSODA``, flow
  time, rtol 1e-8, atol 1e-10 as gradflow's defaults; field a jitted ``-jax.grad`` of the raveled
  loss; one BLAS thread) until the budget is spent, with the Hessian (jitted ``jax.hessian``) as
  ``jac`` where ``n ≤ 2000`` (:data:`SCIPY_HESSIAN_MAX`) and SciPy's own finite differences above,
  up to ``n =`` :data:`SCIPY_LSODA_MAX`. Larger models: LSODA (and BDF, Radau) would hold a dense
  ``n × n`` Jacobian and take ``n`` gradient evaluations per finite-difference Jacobian, so the
  row runs SciPy's explicit DOP853 instead (no Jacobian; the report says why). The process is
  killed once it overruns the budget (one LSODA step can be a dense LU of minutes); its last
  progress line before the budget is the result.

Reported per (model, method): flow time reached within the budget, loss there, wall seconds,
solver steps / GD iterations / SciPy steps, compilation seconds (gradflow: JAX's trace + lower +
compile events; GD: the ahead-of-time compile of its two programs; SciPy: the first jitted
gradient (and Hessian) calls). Every run records its checkpoints (wall, t, loss) in the JSON.

``python -m benchmarks.large_models [--budget SECONDS] [--quick] [--only NAME] [--out PATH]``
writes ``benchmarks/LARGE_MODELS.md`` and ``.json``; ``python -m benchmarks`` runs it as its
section "Large models" (``--large-budget``). ``--quick``: tiny sizes, a 1-second budget, every
method in this process (numbers meaningless; for tests and CI). Times are wall-clock on whatever
machine runs it: on a shared machine they move with its load (the load average is recorded).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone

import numpy as np

from . import _report

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

T_MAX = 1e12
"""gradflow's horizon: the run aims at ``t1 = 1e12`` (reached at once when the flow comes to rest)."""
DELTA0 = 1.0
"""Flow time of gradflow's first call."""
GROWTH = (1 / 8, 100.0)
"""Each next call's ``Δ`` relative to the last one's: at least, at most."""
FRACTIONS = np.concatenate([[0.0], 2.0 ** -np.arange(10, -1, -1)])
"""Save points of one gradflow call, as fractions of its ``Δ`` (12 points: one compiled shape)."""
GD_CHUNKS = 25
"""GD runs in chunks of about ``budget / GD_CHUNKS`` seconds."""
LR_FACTOR = 1.9
"""GD's ``lr = LR_FACTOR / λ_max`` (2 / λ_max is the stability limit of GD on a quadratic)."""
POWER_FIRST, POWER_RECHECK = 50, 8
"""Power iterations for λ_max at the start and at each re-check (warm-started)."""
SCIPY_HESSIAN_MAX = 2000
"""SciPy gets the Hessian as ``jac`` up to this many parameters."""
SCIPY_LSODA_MAX = 12000
"""SciPy runs LSODA (finite-difference Jacobian above :data:`SCIPY_HESSIAN_MAX`) up to this many
parameters, DOP853 above."""
RTOL, ATOL = 1e-8, 1e-10
"""gradflow's default tolerances; SciPy runs at the same."""
QUICK_BUDGET = 1.0
CONVERGED = 1e-12
"""The table's convergence column: the first checkpoint with loss at most this times the start loss
(checkpoints: gradflow after each call, GD after each chunk, SciPy about every 0.5 s)."""
METHODS = ("gradflow", "gradflow-loose", "gradflow-rkc", "gd", "scipy")
"""The methods of every model, in this order (``--method``: a subset)."""

RKC_RTOL = 1e-4
"""The tolerance of the ``gradflow-rkc`` row (``solver="rkc"``, ``atol = rtol/100``). A
second-order method's accuracy-limited step grows as ``rtol^(1/3)`` and, with ``s ∝ √(h·ρ)``
stages a step, its gradients per unit log time fall as ``h^(-1/2)``, so as ``rtol^(-1/6)``: on the
transformer to ``t = 3000``, rtol 1e-4 took 6,231 gradients (162 steps) against 12,637 (659
steps) at rtol 1e-6, and the two end states differ by 2.3e-4 relative (a development
measurement; the report gives the row's error against a tighter run)."""


LOOSE_RTOL = 1e-6
"""The tolerance of the ``gradflow-loose`` row: ``integrate`` with ``solver="auto"`` (its defaults
otherwise) at ``rtol = 1e-6``, ``atol = rtol/100``, the tolerance the large-model guide
(docs/performance.md) tells a user of a large model to pass. ``auto`` runs ``rkc`` in the stiff phase
of these models, a second-order method whose cost grows as ``rtol^(-1/6)``."""


def _is_gradflow(row: dict) -> bool:
    """Whether a row is one of gradflow's (``gradflow``, ``gradflow-loose``, ``gradflow-rkc``)."""
    return row["method"].startswith("gradflow")


# ----------------------------------------------------------------------------- models
@dataclasses.dataclass(frozen=True)
class Model:
    """One row group: ``build(quick)`` returns ``(loss, params0, description)`` with ``loss(params)``."""

    name: str
    label: str
    build: Callable


def deep_linear(quick: bool = False, seed: int = 0):
    """Three ``d × d`` layers (``d = 32``; quick 4), square loss ``½ mean_i ‖W3 W2 W1 x_i − T x_i‖²``
    on ``n = 128`` (quick 16) Gaussian inputs; teacher ``T = U diag(s) Vᵀ`` with ``s`` four equal
    groups of 3, 1, 0.3, 0.1; init ``0.01·N(0, 1)``. All from ``np.random.RandomState(seed)``."""
    import jax.numpy as jnp

    d, n = (4, 16) if quick else (32, 128)
    rng = np.random.RandomState(seed)
    X = rng.randn(n, d)
    U, _, Vt = np.linalg.svd(rng.randn(d, d))
    s = np.repeat([3.0, 1.0, 0.3, 0.1], d // 4)
    T = U @ np.diag(s) @ Vt
    Xj, Yj = jnp.asarray(X), jnp.asarray(X @ T.T)

    def loss(Ws):
        out = Xj
        for W in Ws:
            out = out @ W.T
        return 0.5 * jnp.mean(jnp.sum((out - Yj) ** 2, axis=1))

    params0 = [0.01 * rng.randn(d, d) for _ in range(3)]
    return loss, params0, f"deep linear net, 3 layers of {d}×{d}, {n} inputs, teacher singular values 3, 1, 0.3, 0.1 (×{d // 4})"


def mlp(quick: bool = False, seed: int = 0):
    """``f(x) = tanh(x W1 + b1)·w2 + c``, ``16 → 600 → 1`` (quick ``4 → 16 → 1``), LeCun-normal
    weights, zero biases; ``n = 256`` (quick 32) Gaussian inputs, targets ``Σ_j a_j tanh(x·b_j)``
    of an 8-unit teacher (``b_j ~ N(0, I/d)``, ``a_j ~ N(0, 1/8)``); loss ``½ mean (f(x) − y)²``."""
    import jax.numpy as jnp

    d, h, n = (4, 16, 32) if quick else (16, 600, 256)
    rng = np.random.RandomState(seed)
    X = rng.randn(n, d)
    B, a = rng.randn(d, 8) / np.sqrt(d), rng.randn(8) / np.sqrt(8)
    y = np.tanh(X @ B) @ a
    Xj, yj = jnp.asarray(X), jnp.asarray(y)
    params0 = {"W1": rng.randn(d, h) / np.sqrt(d), "b1": np.zeros(h), "w2": rng.randn(h) / np.sqrt(h), "c": np.zeros(())}

    def loss(p):
        f = jnp.tanh(Xj @ p["W1"] + p["b1"]) @ p["w2"] + p["c"]
        return 0.5 * jnp.mean((f - yj) ** 2)

    return loss, params0, f"two-layer tanh MLP {d} → {h} → 1 on {n} regression samples (8-unit tanh teacher)"


def transformer(quick: bool = False, seed: int = 0):
    """The Sec. 4 induction transformer's full-batch loss (:func:`gradflow.sims.beyond.flow_sinks.setup`),
    softmax attention, ``d_model`` 32, 2 layers × 4 heads, 64 fixed sequences (quick: ``d_model`` 4,
    1 layer × 1 head, 4 sequences), vocab 50, aux weight 0.2, run seed ``seed``."""
    from gradflow.sims.beyond.flow_sinks import setup
    from gradflow.sims.sec4.train import induction_config

    dm, layers, heads, n = (4, 1, 1, 4) if quick else (32, 2, 4, 64)
    # quick: also without the MLP, LayerNorm and biases (a smaller program: its compiles dominate a smoke run)
    strip = dict(use_mlp=False, use_layernorm=False, bias=False) if quick else {}
    rc = induction_config("softmax", True, seed, d_model=dm, n_layers=layers, n_heads=heads, vocab=50, n_train=n,
                          batch=n, n_test=10, aux_weight=0.2, **strip)
    loss_args, params0, args, _ = setup(rc)
    loss = lambda p: loss_args(p, args)  # noqa: E731
    return loss, params0, (f"Sec. 4 induction transformer (flow-sinks loss), softmax, d_model {dm}, {layers} layer(s) × "
                           f"{heads} head(s){' (no MLP, LayerNorm or biases)' if quick else ''}, {n} fixed sequences of "
                           f"length {args[0].shape[1]}")


MODELS = [
    Model("deep-linear", "deep linear net 3 × (32 × 32), saddle to saddle", deep_linear),
    Model("mlp", "2-layer MLP on a small regression set", mlp),
    Model("transformer", "Sec. 4 induction transformer, fixed batch", transformer),
]


def model(name: str) -> Model:
    for m in MODELS:
        if m.name == name:
            return m
    raise KeyError(f"no model {name!r}; known: {[m.name for m in MODELS]}")


# ----------------------------------------------------------------------------- the three methods
class Clock:
    """Wall seconds since the method started, the budget, and the checkpoints ``(wall, t, loss, count)``
    (each also handed to ``emit``, e.g. printed by a child process)."""

    def __init__(self, budget: float, emit=None):
        self.start, self.budget, self.emit, self.points = time.perf_counter(), float(budget), emit, []

    def now(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        return self.budget - self.now()

    def point(self, t: float, loss: float, count: int, **extra):
        p = dict(wall_s=self.now(), t=float(t), loss=float(loss), count=int(count), **extra)
        self.points.append(p)
        if self.emit is not None:
            self.emit(p)
        return p


def _flat(loss, params0):
    """``(L(θ) on the flat vector, θ0 flat float64, n)``."""
    import jax
    from jax.flatten_util import ravel_pytree

    flat0, unravel = ravel_pytree(jax.tree.map(lambda x: np.asarray(x, np.float64), params0))
    return (lambda th: loss(unravel(th))), flat0, int(flat0.size)


def run_gradflow(loss, params0, budget: float, emit=None, t_max: float = T_MAX, **integrate_kw) -> dict:
    """gradflow towards ``t_max`` in a chain of :func:`gradflow.integrate` calls within ``budget``
    seconds (the module docstring says how each call is sized); ``integrate_kw`` (e.g. ``solver``,
    ``rtol``, ``atol``) passed to every call (default: ``integrate``'s defaults)."""
    import jax

    import gradflow
    from benchmarks.first_call import recorder

    rec = recorder()
    clock = Clock(budget, emit)
    theta, t, delta, steps, calls = params0, 0.0, DELTA0, 0, []
    compile_first = compile_total = None
    status, t_rest = "running", None
    while True:
        c0 = clock.now()
        rounds: list = []
        with rec.recording(), _labelled(rec, rounds):
            ts = t + delta * FRACTIONS  # ts[0] = t exactly
            sol = gradflow.integrate(loss, theta, t0=t, t1=t + delta, ts=ts, **integrate_kw)
            jax.block_until_ready(sol.params)
        wall = clock.now() - c0
        comp = sum(rec.totals().values())
        compiled = {f["function"]: round(f["total"], 2) for f in rec.by_function() if f["total"] >= 0.5}
        compile_first = comp if compile_first is None else compile_first
        compile_total = comp + (compile_total or 0.0)
        valid = np.asarray(sol.valid)
        j = int(np.flatnonzero(valid)[-1])
        at_rest = sol.status == "ok" and np.isfinite(float(sol.t_steady))
        reached = delta if sol.status == "ok" else float(ts[j]) - t
        theta = jax.tree.map(lambda x: np.asarray(x[j]), sol.params)
        loss_t = float(np.asarray(sol.loss)[j])
        loss0 = float(np.asarray(sol.loss)[0]) if not calls else loss0
        steps += int(sol.num_steps)
        calls.append(dict(delta=delta, status=sol.status, wall_s=wall, compile_s=comp, steps=int(sol.num_steps),
                          reached=reached, rounds=rounds, compiled=compiled))
        if at_rest:
            t_rest = float(sol.t_steady)  # absolute: the call started at t0 = t
            t, status = t_max, "at rest"
        else:
            t += reached
        clock.point(t, loss_t, steps, calls=len(calls), compile_s=comp, compiled=compiled)
        if status == "at rest":
            break
        if sol.status not in ("ok", "max_steps"):
            status = sol.status
            break
        if t >= t_max * (1 - 1e-12):
            status = "reached t1"
            break
        left = clock.left()
        if left <= 0:
            status = "budget spent"
            break
        # seconds per unit of flow time in the last call, its compilation taken off (linear: an
        # overestimate where the flow is slow in log time, so calls end early rather than late)
        base = max(reached, delta * GROWTH[0])
        rate = max(wall - comp, 1e-3) / base
        grow = np.clip(0.5 * left / (rate * base), GROWTH[0], GROWTH[1] if sol.status == "ok" else 1.0)
        nxt = min(base * float(grow), t_max - t)
        if rate * nxt > left:  # even the smallest next call would overrun the budget
            status = "budget spent"
            break
        delta = nxt
    return dict(status=status, t_rest=t_rest, steps=steps, calls=calls, compile_first_s=compile_first,
                compile_s=compile_total, loss0=loss0, points=clock.points)


@contextlib.contextmanager
def _labelled(rec, rounds: list):
    """:func:`benchmarks.first_call.tagged_rounds` (each round's solver appended to ``rounds``, the
    engine's round programs labelled with it in ``rec``), or nothing where it cannot wrap this
    engine (it wraps engine internals, which may change)."""
    from benchmarks.first_call import tagged_rounds

    try:
        ctx = tagged_rounds(rec, rounds)
        ctx.__enter__()
    except Exception:  # noqa: BLE001  (labels only: the run goes on without them)
        yield
        return
    try:
        yield
    finally:
        ctx.__exit__(None, None, None)


def run_gd(loss, params0, budget: float, emit=None) -> dict:
    """GD at its stability limit in jitted chunks until ``budget`` seconds (module docstring)."""
    import jax
    import jax.numpy as jnp

    clock = Clock(budget, emit)
    L, flat0, n = _flat(loss, params0)
    grad = jax.grad(L)

    def chunk(th, lr, k):
        th = jax.lax.fori_loop(0, k, lambda i, th: th - lr * grad(th), th)
        return th, L(th)

    def power(th, v, iters):
        hvp = lambda u: jax.jvp(grad, (th,), (u,))[1]  # noqa: E731
        v = jax.lax.fori_loop(0, iters, lambda i, v: (lambda w: w / jnp.linalg.norm(w))(hvp(v)), v / jnp.linalg.norm(v))
        return jnp.vdot(v, hvp(v)), v, L(th)

    th = jnp.asarray(flat0)
    c0 = clock.now()
    f64, i64 = jnp.float64, jnp.int64
    chunk_c = jax.jit(chunk).lower(th, jnp.zeros((), f64), jnp.zeros((), i64)).compile()
    power_c = jax.jit(power).lower(th, th, jnp.zeros((), i64)).compile()
    compile_s = clock.now() - c0
    v = jnp.asarray(np.random.RandomState(1).randn(n))
    lam, v, loss_cur = power_c(th, v, jnp.asarray(POWER_FIRST, i64))
    lam0 = abs(float(lam))
    lr = lr0 = LR_FACTOR / max(lam0, 1e-300)
    loss_cur = float(loss_cur)
    loss0 = loss_cur
    clock.point(0.0, loss_cur, 0, compile_s=compile_s)
    t, iters, halvings, lowered, segments = 0.0, 0, 0, 0, []
    k, per_iter = 16, None
    target = budget / GD_CHUNKS
    while clock.left() > 0 or iters == 0:  # at least one chunk, even after a compile past the budget
        lam, v, _ = power_c(th, v, jnp.asarray(POWER_RECHECK, i64))
        if LR_FACTOR / max(abs(float(lam)), 1e-300) < lr:
            lr, lowered = LR_FACTOR / abs(float(lam)), lowered + 1
        if per_iter is not None:
            k = int(np.clip(min(target, clock.left()) / per_iter, 1, 10 ** 8))
        c1 = clock.now()
        th1, l1 = chunk_c(th, jnp.asarray(lr, f64), jnp.asarray(k, i64))
        l1 = float(l1)
        per_iter = (clock.now() - c1) / k
        if not np.isfinite(l1) or l1 > loss_cur + 1e-12 * abs(loss0):  # a rise, not round-off at a minimum
            lr, halvings = lr / 2, halvings + 1
            if lr < 1e-12 * lr0:
                break
            continue
        th, loss_cur = th1, l1
        t += lr * k
        iters += k
        if segments and segments[-1][0] == lr:
            segments[-1][1] += k
        else:
            segments.append([lr, k])
        clock.point(t, loss_cur, iters, lr=lr)
    return dict(status="budget spent" if lr >= 1e-12 * lr0 else "lr collapsed", steps=iters, loss0=loss0, lr0=lr0,
                lambda0=lam0, lr=lr, halvings=halvings, lowered=lowered,
                segments=segments, compile_s=compile_s, compile_first_s=compile_s, points=clock.points)


def scipy_method(n: int) -> tuple[str, bool, str | None]:
    """``(method, jac given, why not LSODA)`` for a model of ``n`` parameters."""
    if n <= SCIPY_HESSIAN_MAX:
        return "LSODA", True, None
    if n <= SCIPY_LSODA_MAX:
        return "LSODA", False, None
    gb = n * n * 8 / 2 ** 30
    return "DOP853", False, (f"LSODA/BDF/Radau n/a at n = {n:,}: a dense n × n Jacobian ({gb:.1f} GiB; LSODA "
                             f"allocates it up front) and n gradient evaluations per finite-difference Jacobian")


def run_scipy(loss, params0, budget: float, emit=None, t_max: float = T_MAX) -> dict:
    """SciPy stepped one step at a time (:func:`scipy_method`) until ``budget`` seconds or ``t_max``."""
    import jax
    import scipy.integrate as si
    import threadpoolctl

    clock = Clock(budget, emit)
    L, flat0, n = _flat(loss, params0)
    method, with_jac, why = scipy_method(n)
    grad = jax.jit(jax.grad(L))
    loss_j = jax.jit(L)
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        c0 = clock.now()
        loss0 = float(loss_j(flat0))
        np.asarray(grad(flat0))
        jac = None
        if with_jac:
            hess = jax.jit(jax.hessian(L))
            np.asarray(hess(flat0))
            jac = lambda t, y: -np.asarray(hess(y))  # noqa: E731
        compile_s = clock.now() - c0
        clock.point(0.0, loss0, 0, compile_s=compile_s)
        fun = lambda t, y: -np.asarray(grad(y))  # noqa: E731
        cls = dict(LSODA=si.LSODA, DOP853=si.DOP853)[method]
        kw = dict(jac=jac) if method == "LSODA" else {}
        solver = cls(fun, 0.0, flat0, t_max, rtol=RTOL, atol=ATOL, **kw)
        steps, last = 0, -1.0
        while solver.status == "running" and (clock.left() > 0 or steps == 0):
            solver.step()
            steps += 1
            if clock.now() - last >= 0.5 or solver.status != "running" or clock.left() <= 0:
                last = clock.now()
                clock.point(solver.t, float(loss_j(solver.y)), steps, nfev=int(solver.nfev), njev=int(solver.njev))
    status = {"running": "budget spent", "finished": "reached t1", "failed": "failed"}[solver.status]
    return dict(status=status, steps=steps, loss0=loss0, method_name=method, jac="Hessian" if with_jac else
                ("finite differences (SciPy)" if method == "LSODA" else None), why=why, nfev=int(solver.nfev),
                njev=int(solver.njev), compile_s=compile_s, compile_first_s=compile_s, points=clock.points)


def run_gradflow_rkc(loss, params0, budget: float, emit=None, t_max: float = T_MAX) -> dict:
    """:func:`run_gradflow` with ``solver="rkc"`` at ``rtol =`` :data:`RKC_RTOL`, ``atol = rtol/100``
    (the stabilised explicit solver by name; the row the issue of large models is judged by)."""
    res = run_gradflow(loss, params0, budget, emit, t_max, solver="rkc", rtol=RKC_RTOL, atol=RKC_RTOL / 100)
    return {**res, "rtol": RKC_RTOL}


def run_gradflow_loose(loss, params0, budget: float, emit=None, t_max: float = T_MAX) -> dict:
    """:func:`run_gradflow` (``solver="auto"``) at ``rtol =`` :data:`LOOSE_RTOL`, ``atol = rtol/100``."""
    res = run_gradflow(loss, params0, budget, emit, t_max, rtol=LOOSE_RTOL, atol=LOOSE_RTOL / 100)
    return {**res, "rtol": LOOSE_RTOL}


RUNNERS = {"gradflow": run_gradflow, "gradflow-loose": run_gradflow_loose, "gradflow-rkc": run_gradflow_rkc,
           "gd": run_gd, "scipy": run_scipy}


def measure(name: str, method: str, budget: float, quick: bool = False, emit=None) -> dict:
    """One (model, method) run in this process: the runner's result, the model's size and start
    loss, the load average before and after, and the process's peak resident memory
    (``peak_rss_mib``, MiB: the Python process with JAX, the model and every compiled program)."""
    import jax

    import gradflow  # noqa: F401  (float64 on)

    m = model(name)
    loss, params0, desc = m.build(quick)
    n = int(sum(np.size(x) for x in jax.tree.leaves(params0)))
    head = dict(model=name, label=m.label, description=desc, n=n, method=method, budget_s=float(budget),
                load_before=os.getloadavg()[0])
    if emit is not None:
        emit(dict(head=head))
    res = RUNNERS[method](loss, params0, budget, emit=emit)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return summarise({**head, **res, "load_after": os.getloadavg()[0], "peak_rss_mib": peak})


def summarise(row: dict) -> dict:
    """``row`` with its reported point: the last checkpoint within the budget; if no work was done
    within it (a compile longer than the budget), the first checkpoint after some work (then
    ``over_budget``); and the last checkpoint of all (``t_all``, ``wall_all_s``)."""
    pts = row["points"]
    inside = [p for p in pts if p["wall_s"] <= row["budget_s"]]
    worked = [p for p in pts if p["count"] > 0]
    best = inside[-1] if inside and (inside[-1]["count"] > 0 or not worked) else (worked or pts)[0]
    row.update(t=best["t"], loss=best["loss"], wall_s=best["wall_s"], count=best["count"],
               over_budget=best["wall_s"] > row["budget_s"],
               loss0=row.get("loss0", pts[0]["loss"] if not _is_gradflow(row) else None),
               t_all=pts[-1]["t"], wall_all_s=pts[-1]["wall_s"])
    return row


# ----------------------------------------------------------------------------- children
def _child_env(tmp: str) -> dict:
    from benchmarks.first_call import child_env

    return child_env(tmp)


def run_child(name: str, method: str, budget: float, quick: bool = False, grace: float = 10.0) -> dict:
    """:func:`measure` in a fresh process (``--child``), which prints its checkpoints as JSON lines;
    killed once it overruns the budget by ``grace`` seconds (a SciPy step can be a dense LU of
    minutes), its row then rebuilt from the checkpoints it printed."""
    with tempfile.TemporaryDirectory(prefix="gradflow-large-") as tmp:
        cmd = [sys.executable, "-m", "benchmarks.large_models", "--child", name, method, "--budget", str(budget)]
        cmd += ["--quick"] if quick else []
        proc = subprocess.Popen(cmd, cwd=ROOT, env=_child_env(tmp), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        lines, started, err = [], threading.Event(), []

        def read():
            for line in proc.stdout:
                lines.append(line)
                if line.startswith("HEAD "):
                    started.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        err_reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
        err_reader.start()
        killed = False
        started.wait(timeout=600)  # the child's imports and model build, then its budget starts
        try:
            proc.wait(timeout=budget + grace)
        except subprocess.TimeoutExpired:
            if method == "scipy":
                proc.kill()
                killed = True
                proc.wait()
            else:  # gradflow / GD stop themselves; wait for the call in flight
                proc.wait(timeout=4 * budget + 600)
        reader.join(timeout=30)
        err_reader.join(timeout=30)
    result = [ln for ln in lines if ln.startswith("RESULT ")]
    if result:
        return json.loads(result[-1][7:])
    head = [json.loads(ln[5:]) for ln in lines if ln.startswith("HEAD ")]
    points = [json.loads(ln[6:]) for ln in lines if ln.startswith("POINT ")]
    if not head or not points:
        raise RuntimeError(f"large-models child {name} {method} failed (rc {proc.returncode}):\n{''.join(err)[-3000:]}")
    comp = points[0].get("compile_s")
    row = dict(head[-1], points=points, status="killed after the budget" if killed else f"exit {proc.returncode}",
               steps=points[-1]["count"], compile_s=comp, compile_first_s=comp, killed_after_s=budget + grace,
               load_after=os.getloadavg()[0])
    if method == "scipy":
        n = row["n"]
        meth, with_jac, why = scipy_method(n)
        row.update(method_name=meth, jac="Hessian" if with_jac else ("finite differences (SciPy)" if meth == "LSODA" else None),
                   why=why, nfev=points[-1].get("nfev"), njev=points[-1].get("njev"))
    return summarise(row)


def _child(name: str, method: str, budget: float, quick: bool) -> int:
    emit = lambda p: print(("HEAD " + json.dumps(p["head"])) if "head" in p else ("POINT " + json.dumps(p)), flush=True)  # noqa: E731
    row = measure(name, method, budget, quick, emit=emit)
    print("RESULT " + json.dumps(row, default=float), flush=True)
    return 0


# ----------------------------------------------------------------------------- the whole run
def machine() -> dict:
    cpu, rev = _report.cpu_and_revision()
    return dict(cpu=cpu, cores=os.cpu_count(), platform=platform.platform(), git_revision=rev)


def run(budget: float | None = None, quick: bool = False, only=None, isolate: bool | None = None,
        log=None, methods=None) -> dict:
    """Every model (``only``: these names) × every method (``methods``: these), one after another;
    ``isolate``: each in a fresh process (default: not under ``quick``)."""
    budget = (QUICK_BUDGET if quick else 600.0) if budget is None else float(budget)
    isolate = (not quick) if isolate is None else isolate
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    names = list(only) if only else [m.name for m in MODELS]
    start = time.perf_counter()
    load0 = os.getloadavg()[0]
    rows = []
    for name in names:
        for method in [m for m in METHODS if not methods or m in methods]:
            t0 = time.perf_counter()
            row = run_child(name, method, budget, quick) if isolate else measure(name, method, budget, quick)
            row["measured"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
            rows.append(row)
            log(f"large_models: {name} {method}: t = {row['t']:.4g}, loss {row['loss']:.4g}, "
                f"{row['wall_s']:.0f} s ({time.perf_counter() - t0:.0f} s with start-up), {row['status']}")
    return dict(budget_s=budget, quick=quick, isolated=isolate, rows=rows, machine=machine(),
                measured=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                load_start=load0, load_end=os.getloadavg()[0], elapsed_s=time.perf_counter() - start)


# ----------------------------------------------------------------------------- the report
BEGIN = "<!-- large models: begin (benchmarks/large_models.py) -->"
END = "<!-- large models: end -->"

LABELS = {"gradflow": "gradflow `integrate` (auto)", "gradflow-loose": f"gradflow `integrate` (auto, rtol {LOOSE_RTOL:g})",
          "gradflow-rkc": f"gradflow `integrate` (`rkc`, rtol {RKC_RTOL:g})",
          "gd": "GD at its stability limit"}


def _method_label(r: dict) -> str:
    if r["method"] == "scipy":
        name = r.get("method_name") or "?"
        jac = f", jac: {r['jac']}" if r.get("jac") else ""
        return f"SciPy {name}{jac}"
    return LABELS[r["method"]]


def _t(r: dict) -> str:
    if _is_gradflow(r) and r.get("t_rest") is not None and r["t"] >= T_MAX * (1 - 1e-12):
        return f"{r['t']:.3g} (at rest from t = {r['t_rest']:.3g})"
    return f"{r['t']:.3g}"


def _count(r: dict) -> str:
    if _is_gradflow(r):
        point = next((p for p in r["points"] if p["wall_s"] == r["wall_s"]), r["points"][-1])  # the reported one
        return f"{r['count']:,} steps in {point.get('calls', len(r['points']))} call(s)"
    if r["method"] == "gd":
        return f"{r['count']:,} iterations"
    nfev = f", {r['points'][-1]['nfev']:,} gradients" if r["points"][-1].get("nfev") is not None else ""
    return f"{r['count']:,} steps{nfev}"


def _notes(r: dict) -> str:
    out = []
    if r["method"] == "gd":
        out.append(f"lr {r['lr0']:.3g} at the start (λ_max {r['lambda0']:.3g}), {r['lr']:.3g} at the end "
                   f"({r['lowered']} re-check(s) lowered it, {r['halvings']} halving(s) after a rise)")
    if _is_gradflow(r) and r.get("calls"):
        sts = sorted({c["status"] for c in r["calls"]})
        out.append(f"calls ended {', '.join(sts)}")
    if r["method"] == "scipy" and r.get("why"):
        out.append(r["why"])
    if r.get("peak_rss_mib") is not None:
        out.append(f"peak memory {r['peak_rss_mib'] / 1024:.2f} GiB (the process's resident set)")
    if r["over_budget"]:
        out.append("**its first unit of work already ended after the budget** (shown)")
    elif r["wall_all_s"] > r["budget_s"] * 1.01:
        what = "call" if _is_gradflow(r) else {"gd": "chunk", "scipy": "step"}[r["method"]]
        last = r["points"][-1]
        comp = last.get("compile_s") or 0.0
        why = ""
        if _is_gradflow(r) and comp >= 1:
            progs = ", ".join(f"`{k}` {v:.0f} s" for k, v in sorted(last.get("compiled", {}).items(), key=lambda kv: -kv[1]))
            why = f", {comp:.0f} s of it compiling ({progs})" if progs else f", {comp:.0f} s of it compiling"
        out.append(f"its last {what} ended after the budget ({r['wall_all_s']:.0f} s, t = {r['t_all']:.3g}{why}; "
                   "not counted)")
    if r.get("killed_after_s") is not None and r["status"].startswith("killed"):
        last = r["points"][-1]
        jac = f"; {last['njev']} Jacobians done" if last.get("njev") else ""
        out.append(f"killed at {r['killed_after_s']:.0f} s: the step in flight since {last['wall_s']:.0f} s had not "
                   f"ended{jac}")
    if _is_gradflow(r) and r.get("calls"):
        rounds = [c.get("rounds") for c in r["calls"]]
        solvers = sorted({x.split(",")[0] for rs in rounds if rs for x in rs})
        if solvers:
            out.append(f"solvers run: {', '.join(solvers)}")
    out.append(f"status: {r['status']}")
    return "; ".join(out)


def converged(r: dict) -> dict | None:
    """The first checkpoint within the budget with loss ≤ :data:`CONVERGED` × the start loss (``None``: none)."""
    return next((p for p in r["points"] if p["wall_s"] <= r["budget_s"] and r.get("loss0") is not None
                 and p["loss"] <= CONVERGED * r["loss0"]), None)


def table(res: dict) -> str:
    L = ["| model | parameters n | method | flow time t reached | loss at t | × GD's t | wall (s) | "
         f"loss ≤ {CONVERGED:g} × start: first at wall s (t) | steps / iterations | compile (s) | notes |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        gd = next((x for x in res["rows"] if x["model"] == r["model"] and x["method"] == "gd"), None)
        ratio = f"{r['t'] / gd['t']:.3g}×" if gd and gd["t"] > 0 else "–"
        if _is_gradflow(r) and r.get("t_rest") is not None:
            ratio = "– (at rest)"
        conv = converged(r)
        conv = "not within the budget" if conv is None else f"{conv['wall_s']:.1f} ({conv['t']:.3g})"
        comp = "–" if r.get("compile_first_s") is None else f"{r['compile_first_s']:.1f}"
        if _is_gradflow(r) and r.get("compile_s") is not None and r["compile_s"] > r["compile_first_s"] + 0.05:
            comp += f" (first call; {r['compile_s']:.1f} in all)"
        notes = _notes(r)
        if r.get("measured") and r["measured"] != res.get("measured"):
            notes = f"measured {r['measured']}" + (f"; {notes}" if notes else "")
        L.append(f"| {r['model']} | {r['n']:,} | {_method_label(r)} | {_t(r)} | {r['loss']:.4g} | {ratio} | "
                 f"{r['wall_s']:.1f} | {conv} | {_count(r)} | {comp} | {notes} |")
    return "\n".join(L)


def report(res: dict, cmd: str) -> str:
    m = res["machine"]
    budget = res["budget_s"]
    full = "" if budget >= 600 or res["quick"] else (
        f" The default is 600 s per method; this run used {budget:g} s (the full-budget run is "
        "`python -m benchmarks.large_models --budget 600`, about 1.5 hours).")
    starts = {}
    for r in res["rows"]:
        starts.setdefault(r["model"], (r["n"], r["description"], r.get("loss0")))
    L = [f"Command: `{cmd}`{' (QUICK: tiny sizes, numbers meaningless)' if res['quick'] else ''}, {res['measured']}, "
         f"{res['elapsed_s']:.0f} s in all. Machine: {m['cpu']}, {m['cores']} cores shared with other work (timings "
         f"are noisy: load average {res['load_start']:.1f} at the start, {res['load_end']:.1f} at the end; per row "
         "in the JSON), revision " + m["git_revision"] + ".", "",
         f"**Budget: {budget:g} s of wall-clock time per method per model**, compilation included.{full} "
         + ("Each method ran in a fresh process without a persistent compilation cache, one after another. "
            if res["isolated"] else "Every method ran in this one process. ")
         + "gradflow: `integrate` with its defaults (auto solver, rtol 1e-8, rest stop) towards t1 = 1e12 as a "
         "chain of calls, each resuming from the last end state and sized from the last call's wall time; "
         f"gradflow (auto, rtol {LOOSE_RTOL:g}): the same chain at rtol {LOOSE_RTOL:g}, atol {LOOSE_RTOL / 100:g}; "
         f"gradflow (`rkc`): the same chain with `solver=\"rkc\"` (the stabilised explicit Runge–Kutta–Chebyshev "
         f"method) at rtol {RKC_RTOL:g}, atol {RKC_RTOL / 100:g}; GD: "
         f"lr = {LR_FACTOR:g}/λ_max of the Hessian at the start, re-checked before each jitted chunk (lowered, never "
         "raised), halved when a chunk's loss rises; SciPy: LSODA (Hessian as jac for n ≤ "
         f"{SCIPY_HESSIAN_MAX}, finite differences above) stepped until the budget, DOP853 where LSODA cannot hold "
         "the dense Jacobian. Flow time t, loss and wall are those of the last checkpoint within the budget "
         "(`benchmarks/large_models.py`'s docstring has the details). A gradflow row *at rest*: the rest stop fired, "
         "the flow holds that state to t1 = 1e12 (so no ratio to GD's t). Every gradflow call starts the auto solver "
         "anew (Dopri8, then stiffness detection) and compiles a program the first time it is needed; the sizing "
         "of the calls cannot foresee a compile, so a call can end well after the budget (its notes say so).", "",
         table(res), ""]
    if res.get("accuracy"):
        L += [accuracy_text(res["accuracy"], res["rows"]), ""]
    L += ["Models (fixed seeds, float64):", ""]
    for name, (n, desc, loss0) in starts.items():
        L.append(f"- {name} ({n:,} parameters): {desc}; loss at the start {loss0:.4g}." if loss0 is not None
                 else f"- {name} ({n:,} parameters): {desc}.")
    return "\n".join(L) + "\n"


def section(res: dict, cmd: str) -> str:
    """The ``RESULTS.md`` section (between markers, replaced in place by later runs)."""
    return _report.section(BEGIN, END, "Large models: flow time reached in a fixed wall-clock budget", report(res, cmd))


ACCURACY_T = 100.0
"""The horizon of the accuracy check (:func:`accuracy`)."""

ACCURACY_TS = (1.0, 3.0, 10.0, 30.0, 100.0)
"""Its save points (scaled by ``t1/ACCURACY_T`` for another horizon)."""

QUICK_ACCURACY_T = 1.0
"""The horizon under ``--quick`` (tiny models; numbers meaningless)."""

GD_ETAS = (0.4, 0.2, 0.1, 0.05)
"""GD's step sizes in the accuracy check (each below the stability limit ``2/λ_max`` of the
transformer's start, ``λ_max ≈ 0.96``, and of its path to ``t = 100``, ``λ_max ≈ 5``)."""


ACCURACY_ROWS = (("gradflow-loose", dict(solver="auto", rtol=LOOSE_RTOL, atol=LOOSE_RTOL / 100)),
                 ("gradflow-rkc", dict(solver="rkc", rtol=RKC_RTOL, atol=RKC_RTOL / 100)))
"""The rows whose error :func:`accuracy` measures, with the ``integrate`` settings of their chain."""


def accuracy(name: str = "transformer", quick: bool = False, t1: float = ACCURACY_T) -> dict:
    """The error of the loose gradflow rows (:data:`ACCURACY_ROWS`), and GD's at equal accuracy, on ``[0, t1]``.

    - reference: :func:`gradflow.integrate` with ``solver="auto"`` at rtol 1e-10, atol 1e-12 (Dopri8
      and the stiff phases, a tolerance at least ten thousand times tighter than the rows');
    - each row's ``integrate`` at its settings (one call from ``t = 0``): ``‖θ − θ_ref‖ / ‖θ_ref‖`` at
      each of :data:`ACCURACY_TS`;
    - GD at each η of :data:`GD_ETAS` to ``t1`` (``t1/η`` iterations): the same error at ``t1``; GD's
      error is ``O(η)`` (the explicit Euler scheme of the flow), so ``err(η) ≈ c·η`` fitted on the
      two smallest η gives, per row, the η at which GD matches the row's error at ``t1``, and the wall
      clock GD would need for it at its measured seconds per iteration (an extrapolation, labelled so)."""
    import jax
    import jax.numpy as jnp
    from jax.flatten_util import ravel_pytree

    import gradflow

    loss, params0, _ = model(name).build(quick)
    L, flat0, _n = _flat(loss, params0)
    ts = np.array((0.0,) + tuple(x * t1 / ACCURACY_T for x in ACCURACY_TS))
    c0 = time.perf_counter()
    ref = gradflow.integrate(loss, params0, t1=t1, ts=ts, rtol=1e-10, atol=1e-12, rest_stop=False)
    ref_wall = time.perf_counter() - c0
    flat = lambda sol: np.stack([np.asarray(ravel_pytree(  # noqa: E731
        jax.tree.map(lambda x: x[i], sol.params))[0]) for i in range(len(ts))])
    R = flat(ref)
    rel = lambda a, b: float(np.linalg.norm(a - b) / np.linalg.norm(b))  # noqa: E731
    rows = []
    for method, kw in ACCURACY_ROWS:
        c0 = time.perf_counter()
        sol = gradflow.integrate(loss, params0, t1=t1, ts=ts, rest_stop=False, **kw)
        rows.append(dict(method=method, **kw, wall_s=time.perf_counter() - c0, status=sol.status,
                         steps=int(sol.num_steps), err=[rel(x, r) for x, r in zip(flat(sol), R)]))
    grad = jax.jit(jax.grad(L))
    run = jax.jit(lambda th, eta, k: jax.lax.fori_loop(0, k, lambda i, th: th - eta * grad(th), th))
    gd = []
    for eta in GD_ETAS:
        k = int(round(t1 / eta))
        th = run(jnp.asarray(flat0), eta, 1)  # compile
        c0 = time.perf_counter()
        th = jax.block_until_ready(run(jnp.asarray(flat0), eta, k))
        wall = time.perf_counter() - c0
        gd.append(dict(eta=eta, iterations=k, wall_s=wall, err=rel(np.asarray(th), R[-1])))
    a, b = gd[-2], gd[-1]
    c = (a["err"] / a["eta"] + b["err"] / b["eta"]) / 2
    per_iter = b["wall_s"] / b["iterations"]
    for row in rows:
        row["eta_match"] = row["err"][-1] / c
        row["gd_iterations_match"] = t1 / row["eta_match"]
        row["gd_wall_match_s"] = per_iter * t1 / row["eta_match"]
    return dict(model=name, t1=t1, ts=ts.tolist(), ref_wall_s=ref_wall, ref_status=ref.status, rows=rows, gd=gd,
                gd_slope=c)


def accuracy_text(acc: dict, rows: list | None = None) -> str:
    """The report's paragraph on :func:`accuracy`; with the benchmark's ``rows``, also what GD at
    each matching η would need to reach the flow time that row reached (extrapolated)."""
    gd = "; ".join(f"η = {g['eta']:g}: {g['err']:.2g} ({g['iterations']:,} iterations, {g['wall_s']:.1f} s)"
                   for g in acc["gd"])
    when = f", {acc['measured']}" if acc.get("measured") else ""
    parts = []
    reached = {r["method"]: r["t"] for r in rows or () if r["model"] == acc["model"]}
    for r in acc["rows"]:
        errs = ", ".join(f"{e:.2g} at t = {t:g}" for t, e in zip(acc["ts"][1:], r["err"][1:]))
        far = ""
        if r["method"] in reached:
            t = reached[r["method"]]
            far = (f" (to the row's t = {t:.3g}: {t / r['eta_match']:,.3g} iterations, about "
                   f"{r['gd_wall_match_s'] * t / acc['t1'] / 3600:,.0f} h, an estimate, with the errors at t = 100 "
                   f"carried to that t; GD would be unstable at that η once λ_max > {2 / r['eta_match']:.3g})")
        parts.append(f"{LABELS[r['method']]} ({r['steps']} steps, {r['wall_s']:.0f} s from t = 0) is off by "
                     f"‖θ − θ_ref‖/‖θ_ref‖ = {errs}; GD matches its error at t = {acc['t1']:g} at "
                     f"η ≈ {r['eta_match']:.2g}, {r['gd_iterations_match']:,.0f} iterations, about "
                     f"{r['gd_wall_match_s']:.0f} s{far}")
    what = "the loose gradflow rows" if len(acc["rows"]) > 1 else f"the {LABELS[acc['rows'][0]['method']]} row"
    return (f"**Accuracy of {what}** ({acc['model']}, to t = {acc['t1']:g}{when}): against "
            f"`integrate` with `auto` at rtol 1e-10, atol 1e-12 ({acc['ref_wall_s']:.0f} s), "
            + "; ".join(parts) + ". The reference's own error is not measured: under the default policy its stiff "
            "phase may be `rkc`, second order, whose global error was 90–360 times its rtol on the linear flow of "
            "`tests/test_start_time.py` (9e-9 to 4e-8 at rtol 1e-10), so errors below about 4e-8 above may be the "
            f"reference's own. GD (the explicit Euler scheme of the flow) to the same t: {gd}. Its error is "
            f"O(η), fitted as {acc['gd_slope']:.3g}·η on the two smallest η; the η, iterations and seconds at "
            "which GD would match each row are **extrapolated** from that fit at GD's measured cost per "
            "iteration, not run.")


def merge_rows(path: str, res: dict) -> dict:
    """``res`` with the rows of the JSON at ``path`` (if any) whose (model, method) it did not
    measure, in :data:`MODELS` × :data:`METHODS` order; an older row without its own date gets
    its file's ``measured``."""
    if not os.path.exists(path):
        return res
    with open(path) as fh:
        old = json.load(fh)
    new = {(r["model"], r["method"]): r for r in res["rows"]}
    for r in old.get("rows", []):
        key = (r["model"], r["method"])
        if key not in new:
            new[key] = {**r, "measured": r.get("measured", old.get("measured"))}
    order = {(m.name, k): i for i, (m, k) in enumerate((m, k) for m in MODELS for k in METHODS)}
    out = {**res, "rows": sorted(new.values(), key=lambda r: order.get((r["model"], r["method"]), 1 << 30))}
    if "accuracy" not in res and "accuracy" in old:
        out["accuracy"] = old["accuracy"]
    return out


def insert(md: str, text: str) -> str:
    return _report.insert(md, text, BEGIN, END)


def write(res: dict, out: str, cmd: str) -> str:
    return _report.write_report(out, "Large users' models: flow time reached in a fixed wall-clock budget",
                         report(res, cmd), res, default=float)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.large_models", description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=float, default=None,
                   help=f"wall-clock seconds per method per model (default 600; --quick: {QUICK_BUDGET:g})")
    p.add_argument("--quick", action="store_true", help="tiny sizes, a short budget, in this process (numbers meaningless)")
    p.add_argument("--only", action="append", metavar="NAME", help="run only this model (repeatable)")
    p.add_argument("--out", default=os.path.join(HERE, "LARGE_MODELS.md"), help="report path (JSON beside it)")
    p.add_argument("--method", action="append", choices=METHODS + ("none",), metavar="METHOD",
                   help=f"run only this method (repeatable; one of {', '.join(METHODS)}, or none: no runs, e.g. "
                        "with --accuracy); the rows of the other (model, method) pairs, and an accuracy "
                        "measurement not made now, are kept from the JSON at --out, each with its own date")
    p.add_argument("--accuracy", action="store_true",
                   help=f"also measure the loose gradflow rows' error and GD's at equal accuracy on the transformer to "
                        f"t = {ACCURACY_T:g} (a few minutes)")
    p.add_argument("--child", nargs=2, metavar=("MODEL", "METHOD"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return _child(*args.child, budget=args.budget, quick=args.quick)
    res = run(budget=args.budget, quick=args.quick, only=args.only, methods=args.method)
    cmd = _report.command("benchmarks.large_models", args.quick,
                          budget=None if args.budget is None else [f"{args.budget:g}"], only=args.only,
                          method=args.method)
    if args.accuracy:
        res["accuracy"] = accuracy(quick=args.quick, t1=QUICK_ACCURACY_T if args.quick else ACCURACY_T)
        res["accuracy"]["measured"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        cmd += " --accuracy"
    if args.method:
        res = merge_rows(os.path.splitext(args.out)[0] + ".json", res)
    return _report.published(write(res, args.out, cmd), args.out, "large_models")


if __name__ == "__main__":
    sys.exit(main())
