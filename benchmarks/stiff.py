"""Stiff flows and kinked maps, side by side with SciPy in one run.

- **Stiff family**: the conditioning draws of the paper's Figs. 3/12 (square loss with design,
  ``Σ(y − X W s)²``, ``X`` with singular values ``linspace(1, 1/κ, d)``, seed 123 per κ),
  ``d = m = 20`` (421 states with Γ), ``t1 = 1e6``, ``rtol 1e-8``, ``atol 1e-10``. gradflow
  ``simulate`` (``solver="auto"``: Dopri8 with stiffness detection, then the implicit phase:
  Rodas4 with solves preconditioned by one symmetric eigendecomposition per round
  (``rodas4-eigh``); ROS34PW2 with the eigendecomposition alone (``ros34pw2-eigh``); Rodas4, a
  factorisation per step; Rodas4 with conjugate-gradient solves (``rodas4-krylov``,
  forced here whatever ``KRYLOV_MIN_STATE`` says); one row each) against
  SciPy ``solve_ivp`` LSODA, BDF and Radau on the same log-time system (the independent NumPy field
  of ``benchmarks/reference.py``), stopped once at rest to round-off as gradflow is; LSODA also at
  tighter tolerances, for the ratio *at equal accuracy* (the cheapest LSODA run at least as
  accurate as gradflow's). The error of every run is the largest absolute deviation of ``(V, a)``
  over the save points from a tight reference (Radau, ``rtol 1e-12``, ``atol 1e-14``).
  SciPy runs with one BLAS thread, as gradflow's implicit phase does
  (``gradflow.internal.blas_threads``); one LSODA row with the default BLAS threads.
- **Per-step costs** at ``d = 20`` (:func:`step_costs`): a field evaluation, a Jacobian–vector
  product, ``jacfwd``, an LU factorisation, an inverse, a solve with the LU factors, a product
  with ``W⁻¹``, and whole implicit steps (Rodas4; ROS34PW2 fresh and reused).
- **Scale** (``--scale 20,32,64,128``, :func:`bench_scale`): the dense implicit phase
  (``rodas4-eigh``) against ``rodas4-krylov`` as ``d`` grows, each run in a fresh process (first
  call, warm time, peak RSS, error against the dense run, CG iterations), written to
  ``benchmarks/SCALE.md`` (+ ``.json``).
- **Kinked maps**: the norm-logistic figure's setting (``n = d = 10``, seed 42, logistic
  teacher, ``t1 = 5e4``) with the L1, ReLU-normalised and sparsemax maps under ``auto``.

gradflow times are warm (a first call compiles and is not timed), medians over ``repeats``;
SciPy times are single runs, except LSODA's (medians; they set the ratios). ``--quick``: ``d = 4``,
two κ, ``t1 = 1e3`` (numbers meaningless).
"""

from __future__ import annotations

import contextlib
import os
import time

import numpy as np
import threadpoolctl
from scipy.integrate import solve_ivp

import gradflow
from benchmarks._report import equal_accuracy
from benchmarks._timing import peak_rss_mib, timed
from gradflow.sims.draws import conditioning_init, normalization_init
from benchmarks import reference as ref

__all__ = ["bench", "report", "scipy_square", "square_reference", "step_costs", "bench_scale", "scale_run",
           "scale_report", "cost_exponent", "krylov_counts"]


REST_ULPS = 1024
"""SciPy runs stop once the flow-time field is below ``REST_ULPS·ε·(1 + max|y|)`` (at rest to
round-off, the criterion gradflow uses too) and hold that state: beyond it a solver at a tight
tolerance would integrate round-off noise, amplified by ``1 + t`` in log time, to ``t1``."""


def scipy_square(W0, a0, X, y, ts, method, rtol, atol):
    """``solve_ivp`` of the square-loss flow in log time, stopped at rest (:data:`REST_ULPS`).
    Returns ``(V (T, d, n), a (T, n), nfev, njev)``."""
    d, n = W0.shape
    residual = ref.square_residual(y, X, 1.0)

    def flow(z):
        dV, da, g = ref.field(z[: d * n].reshape(d, n), z[d * n: d * n + n], residual)
        return np.concatenate([dV.ravel(), da, [g]])

    def rhs(tau, z):
        return np.exp(tau) * flow(z)

    def rest(tau, z):
        return np.max(np.abs(flow(z)[:-1])) - REST_ULPS * np.finfo(float).eps * (1 + np.max(np.abs(z[:-1])))

    rest.terminal, rest.direction = True, -1
    z0 = np.concatenate([W0.ravel(), a0, [0.0]])
    taus = np.log1p(ts)
    sol = solve_ivp(rhs, (0.0, taus[-1]), z0, t_eval=taus, method=method, rtol=rtol, atol=atol, events=rest)
    if not sol.success:
        raise RuntimeError(f"solve_ivp {method} failed: {sol.message}")
    Y = sol.y.T
    if len(Y) < len(ts):  # stopped at rest: hold the state (Γ keeps growing, it is not compared)
        Y = np.concatenate([Y, np.repeat(sol.y_events[0][:1], len(ts) - len(Y), axis=0)])
    return Y[:, : d * n].reshape(-1, d, n), Y[:, d * n: d * n + n], int(sol.nfev), int(sol.njev)


def reference_cache(ref_dir, d: int, kappa: float, t1: float):
    """The cache file of :func:`square_reference` for the draw ``(d, κ)`` to ``t1`` in ``ref_dir``
    (created if missing), or ``None`` without ``ref_dir``; shared by :func:`bench_square` and
    :func:`bench_scale`."""
    if ref_dir is None:
        return None
    os.makedirs(ref_dir, exist_ok=True)
    return os.path.join(ref_dir, f"ref_d{d}_k{kappa:g}_t{t1:g}.npz")


def square_reference(W0, a0, X, y, ts, cache=None):
    """The tight reference: Radau at ``rtol 1e-12``, ``atol 1e-14``; ``(V, a)`` at ``ts``.
    ``cache``: an ``.npz`` path; read if it exists and holds these ``ts`` and initial state,
    else computed and written (minutes per draw at ``d = 20``)."""
    if cache is not None and os.path.exists(cache):
        z = np.load(cache)
        if np.array_equal(z["ts"], ts) and np.array_equal(z["V"][0], W0) and np.array_equal(z["a"][0], a0):
            return z["V"], z["a"]
    V, a, _, _ = scipy_square(W0, a0, X, y, ts, "Radau", 1e-12, 1e-14)
    if cache is not None:
        np.savez(cache, ts=ts, V=V, a=a)
    return V, a


def _error(V, a, Vr, ar):
    return float(max(np.max(np.abs(np.asarray(V) - Vr)), np.max(np.abs(np.asarray(a) - ar))))


def implicit_phase(name) -> gradflow.AutoPolicy:
    """``auto``'s policy with ``name`` as the implicit solver for gradient flows at every state size
    (``implicit`` set and the Krylov threshold ``krylov_min_state`` out of reach, or, for the
    Krylov solver, from zero parameters on)."""
    if name == gradflow.AutoPolicy().krylov:
        return gradflow.AutoPolicy(krylov_min_state=0)
    return gradflow.AutoPolicy(implicit=name, krylov_min_state=10 ** 12)


def bench_square(kappas, d, t1, rtol, atol, repeats, methods=("LSODA", "BDF", "Radau"),
                 implicit=("rodas4-eigh", "ros34pw2-eigh", "rodas4", "rodas4-krylov"), lsoda_rtols=(1e-9, 1e-10),
                 ref_dir=None) -> list[dict]:
    """One row per (κ, method): time, steps (gradflow) or field/Jacobian evaluations (SciPy), error.
    gradflow: one row per implicit phase of ``auto`` in ``implicit``; SciPy: ``methods`` at
    ``rtol`` (one BLAS thread), LSODA with the default BLAS threads, LSODA at ``lsoda_rtols``
    (``atol = rtol/100``). ``ref_dir``: where to cache the references (:func:`square_reference`)."""
    ts = np.concatenate([[0.0], np.geomspace(1.0, t1, 13)])
    rows = []
    for kappa in kappas:
        W0, a0, X, y = conditioning_init(kappa, 123, d)
        loss = gradflow.SquareLoss(y, design=X, scale=1.0)
        start = time.perf_counter()
        Vr, ar = square_reference(W0, a0, X, y, ts, reference_cache(ref_dir, d, kappa, t1))
        print(f"benchmarks: stiff κ={kappa:g}: reference in {time.perf_counter() - start:.0f} s", flush=True)

        def run(policy=None):
            traj = gradflow.simulate(loss, W0, a0, t1=t1, ts=ts, rtol=rtol, atol=atol, policy=policy)
            np.asarray(traj.a)
            return traj

        def lsoda(r=rtol, a=atol, threads=1):
            limit = threadpoolctl.threadpool_limits(threads, user_api="blas") if threads else contextlib.nullcontext()
            with limit:
                start = time.perf_counter()
                out = scipy_square(W0, a0, X, y, ts, "LSODA", r, a)
                return time.perf_counter() - start, out

        first = None
        for name in implicit:
            policy = implicit_phase(name)
            start = time.perf_counter()
            run(policy)
            cold = time.perf_counter() - start
            # gradflow and LSODA interleaved: the ratio is the median of per-pair ratios, robust
            # to the load of a shared machine drifting during the run
            pairs = [(timed(lambda: run(policy), 1), lsoda()) for _ in range(repeats)]
            traj = pairs[-1][0][1]
            g = dict(kappa=kappa, method=f"gradflow auto ({name})", time_s=float(np.median([p[0][0] for p in pairs])),
                     cold_s=cold, steps=int(traj.num_steps), status=traj.status, error=_error(traj.V, traj.a, Vr, ar),
                     lsoda_s=float(np.median([p[1][0] for p in pairs])),
                     lsoda_ratio=float(np.median([p[1][0] / p[0][0] for p in pairs])))
            rows.append(g)
            first = first or g
        scipy_runs = [(m, rtol, 1) for m in methods] + [("LSODA", rtol, None)] + [("LSODA", r, 1) for r in lsoda_rtols]
        for m, r, threads in scipy_runs:
            limit = (threadpoolctl.threadpool_limits(threads, user_api="blas") if threads
                     else contextlib.nullcontext())
            # LSODA at the tighter tolerances sets the equal-accuracy ratio: the median of ``repeats`` runs
            runs = repeats if (m == "LSODA" and r != rtol) else 1
            with limit:
                times = []
                for _ in range(runs):
                    start = time.perf_counter()
                    V, a, nfev, njev = scipy_square(W0, a0, X, y, ts, m, r, r / 100 if r != rtol else atol)
                    times.append(time.perf_counter() - start)
                t = float(np.median(times))
            if m == "LSODA" and r == rtol and threads:
                t = first["lsoda_s"]  # the median of the interleaved runs
            label = f"SciPy {m}" + ("" if r == rtol else f" rtol {r:g}") + ("" if threads else " (default BLAS threads)")
            rows.append(dict(kappa=kappa, method=label, rtol=r, time_s=t, nfev=nfev, njev=njev,
                             error=_error(V, a, Vr, ar), ratio=t / first["time_s"]))
        print(f"benchmarks: stiff κ={kappa:g}: " + ", ".join(
            f"{r['method']} {r['time_s']:.2f} s" for r in rows if r["kappa"] == kappa), flush=True)
    return rows


def step_costs(d=20, kappa=20.0, repeats=50) -> dict:
    """Milliseconds per operation on the log-time field of the conditioning draw ``(d, κ)`` at
    ``t = 1e3`` (one BLAS thread, inside one compiled loop of ``repeats`` iterations)."""
    import jax
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl
    import diffrax
    from jax.flatten_util import ravel_pytree

    from gradflow.internal import FlowArgs, KrylovRodas4, Rodas4, Ros34pw2, engine_knobs, log_time_rhs
    from gradflow.attention.models import prepare
    from gradflow.attention import value_softmax_flow

    W0, a0, X, y = conditioning_init(kappa, 123, d)
    loss = gradflow.SquareLoss(y, design=X, scale=1.0)
    mdl, V, a = prepare(loss, W0, a0, "value-softmax", "softmax", 1.0, batch=False)
    flow = value_softmax_flow(loss)
    y0 = ((V, a), {"Gamma": jnp.zeros((), V.dtype)})
    flat0, unravel = ravel_pytree(y0)
    n, tau = flat0.size, float(np.log1p(1e3))
    args = FlowArgs(flow, (mdl, loss), 1e-8, 1e-10)
    f = lambda x: ravel_pytree(log_time_rhs(tau, unravel(x), args))[0]
    W = jnp.eye(n) / (0.01 * 0.25) - jax.jacfwd(f)(flat0)
    lu, W_inv = jsl.lu_factor(W), jnp.linalg.inv(W)
    term = diffrax.ODETerm(log_time_rhs)

    def per_call(body, x0, k=repeats):
        g = jax.jit(lambda x: jax.lax.fori_loop(0, k, lambda i, x: body(x), x))
        jax.block_until_ready(g(x0))
        start = time.perf_counter()
        jax.block_until_ready(g(x0))
        return (time.perf_counter() - start) / k * 1e3

    def steps(solver, dt, k=repeats):
        def body(carry):
            yy, st, t0 = carry
            y1, _, _, st, _ = solver.step(term, t0, t0 + dt, yy, args, st, False)
            return y1, st, t0 + dt
        st0 = solver.init(term, tau, tau + dt, y0, args)
        return per_call(body, (y0, st0, jnp.asarray(tau)), k)

    small = lambda fn: (lambda x: x + 1e-12 * fn(x))
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        out = dict(n=n, d=d, kappa=kappa,
                   field=per_call(small(f), flat0),
                   jvp=per_call(small(lambda x: jax.jvp(f, (flat0,), (x,))[1]), flat0),
                   jacfwd=per_call(small(lambda x: jax.jacfwd(f)(x)[0]), flat0),
                   lu_factor=per_call(lambda M: M + 1e-12 * jsl.lu_factor(M)[0], W, 10),
                   inverse=per_call(lambda M: M + 1e-12 * jnp.linalg.inv(M), W, 10),
                   lu_solve=per_call(lambda x: jsl.lu_solve(lu, x), flat0),
                   inverse_matvec=per_call(lambda x: W_inv @ x, flat0),
                   rodas4_step=steps(Rodas4(), 1e-3),
                   ros34pw2_fresh_step=None, ros34pw2_reused_step=None)
        with engine_knobs(held_inverse_max_age=0):  # every step fresh
            out["ros34pw2_fresh_step"] = steps(Ros34pw2(), 1e-3)
        with engine_knobs(held_inverse_max_age=10 ** 9):  # one matrix for every step of the loop
            out["ros34pw2_reused_step"] = steps(Ros34pw2(), 1e-3)
    return out


def bench_kinked(maps, t1, rtol, atol) -> list[dict]:
    """The kinked maps under ``auto`` on the norm-logistic setting: status, steps, t_end, time (warm)."""
    beta_star, V0, a0 = normalization_init(42, 10)
    loss = gradflow.LogisticTeacher(beta_star)
    rows = []
    for name in maps:
        run = lambda: gradflow.simulate(loss, V0, a0, t1=t1, rtol=rtol, atol=atol, normalization=name)
        np.asarray(run().a)
        t, traj = timed(lambda: (lambda tr: (np.asarray(tr.a), tr)[1])(run()), 1)
        rows.append(dict(map=name, status=traj.status, steps=int(traj.num_steps), t_end=float(traj.t_end), time_s=t))
    return rows


def bench(q, R, d=None) -> dict:
    """The section's results; ``q(full, quick)`` picks a size, ``R(k)`` a repeat count; ``d``
    overrides the size of the square family (default 20, quick 4)."""
    d = q(20, 4) if d is None else d
    square = bench_square(q([1, 2, 5, 20, 50], [2, 20]), d, q(1e6, 1e3), 1e-8, 1e-10, R(3))
    kinked = bench_kinked(["l1", "relu", "sparsemax"], q(5e4, 50.0), 1e-8, 1e-10)
    costs = step_costs(d, 20.0, 50) if q(True, False) else None  # a dozen compiles: not in a smoke run
    return dict(square=square, kinked=kinked, costs=costs, d=d, t1=q(1e6, 1e3))


def report(res: dict | None) -> str:
    """The Markdown section for :func:`bench`'s results."""
    if not res:
        return ""
    L = ["", f"## Stiff flows: square loss with design (Figs. 3/12 draws, d = m = {res['d']}, t1 = {res['t1']:g}, "
             "rtol 1e-8, atol 1e-10)", "",
         "gradflow `simulate` with `solver=\"auto\"` (Dopri8 in rounds of 64 steps with stiffness detection, "
         "then the implicit phase: rodas4-eigh, the default; ros34pw2-eigh; or Rodas4) vs SciPy `solve_ivp` on the "
         "same log-time system (one BLAS thread, as gradflow's implicit phase; one LSODA row with the default "
         "threads). Error: max |Δ(V, a)| over 14 save points against Radau at rtol 1e-12. gradflow rows: warm, "
         "each run paired with a LSODA run (rtol 1e-8) right after it; time the median over the pairs, ratio the "
         "median of the per-pair ratios LSODA/gradflow. SciPy rows: ratio = SciPy time / time of the first "
         "gradflow row (LSODA at rtol 1e-8: the median of its paired runs; LSODA at the tighter tolerances: the "
         "median of as many runs; the others single runs).", "",
         "| κ | method | time (s) | steps / nfev (njev) | error | ratio |", "|---|---|---|---|---|---|"]
    for r in res["square"]:
        if r["method"].startswith("gradflow"):
            L.append(f"| {r['kappa']:g} | {r['method']} ({r['status']}; cold {r['cold_s']:.1f} s) | {r['time_s']:.3f} | "
                     f"{r['steps']} steps | {r['error']:.1e} | LSODA/this {r['lsoda_ratio']:.2f}× |")
        else:
            L.append(f"| {r['kappa']:g} | {r['method']} | {r['time_s']:.3f} | {r['nfev']} ({r['njev']}) | "
                     f"{r['error']:.1e} | {r['ratio']:.2f}× |")
    L += ["", "At equal accuracy: the cheapest LSODA run (rtol 1e-8, 1e-9 or 1e-10, one BLAS thread) whose error is "
              "at most gradflow's, and its time over gradflow's.", "",
          "| κ | gradflow | LSODA run | ratio |", "|---|---|---|---|"]
    for e in equal_accuracy(res["square"]):
        L.append(f"| {e['kappa']:g} | {e['method']} | {e['lsoda'] or 'none as accurate'} | "
                 + (f"{e['ratio']:.2f}× |" if e["ratio"] else "– |"))
    c = res.get("costs")
    if c:
        L += ["", f"## Per-step costs (d = {c['d']}: {c['n']} states, κ = {c['kappa']:g}, one BLAS thread; ms)", "",
              "| operation | ms |", "|---|---|"]
        for k in ("field", "jvp", "jacfwd", "lu_factor", "inverse", "lu_solve", "inverse_matvec", "rodas4_step",
                  "ros34pw2_fresh_step", "ros34pw2_reused_step"):
            L.append(f"| {k} | {c[k]:.3f} |")
    L += ["", "## Kinked maps under `auto` (norm-logistic setting, n = d = 10, seed 42)", "",
          "| map | status | steps | t_end | time (s) |", "|---|---|---|---|---|"]
    for r in res["kinked"]:
        L.append(f"| {r['map']} | {r['status']} | {r['steps']} | {r['t_end']:.4g} | {r['time_s']:.3f} |")
    L.append("")
    return "\n".join(L)


# --- scale: the dense implicit phase against rodas4-krylov as the state grows ----------------------

SCALE_SOLVERS = ("rodas4-eigh", "rodas4-krylov")
"""The implicit phases of ``auto`` compared by :func:`bench_scale`: the dense default below
``AutoPolicy.krylov_min_state`` and the Jacobian-free one."""


def krylov_counts(loss, W0, a0, t1, rtol, atol) -> dict:
    """Krylov iterations of ``rodas4-krylov`` run alone (diffrax, no rest stop) from ``t = 0`` to
    ``t1`` on the log-time field: mean per stage solve, the most in one solve, GMRES fallbacks
    (the solver's counters, :class:`gradflow._engine.rosenbrock.Krylov`; accepted steps only)."""
    import diffrax
    import jax.numpy as jnp

    from gradflow.internal import FlowArgs, KrylovRodas4, log_time_rhs
    from gradflow.attention.models import prepare
    from gradflow.attention import value_softmax_flow

    mdl, V, a = prepare(loss, W0, a0, "value-softmax", "softmax", 1.0, batch=False)
    y0 = ((V, a), {"Gamma": jnp.zeros((), V.dtype)})
    args = FlowArgs(value_softmax_flow(loss), (mdl, loss), rtol, atol)
    sol = diffrax.diffeqsolve(diffrax.ODETerm(log_time_rhs), KrylovRodas4(rtol, atol), 0.0,
                              float(np.log1p(t1)), None, y0, args=args, max_steps=100_000,
                              stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol, pcoeff=0.3, icoeff=0.4),
                              saveat=diffrax.SaveAt(t1=True, solver_state=True))
    its, solves, fallbacks, most = (int(v) for v in np.asarray(sol.solver_state).ravel())
    return dict(cg_steps=int(sol.stats["num_accepted_steps"]), cg_mean=its / max(solves, 1), cg_max=most,
                cg_fallbacks=fallbacks)


def scale_run(d, solver, kappa=5.0, t1=1e6, rtol=1e-8, atol=1e-10, repeats=2, save=None) -> dict:
    """One row of :func:`bench_scale`, meant for a fresh process (its first call compiles; peak
    RSS is the process's): the square-family draw ``(κ, d)`` under ``auto`` with the implicit
    phase ``solver`` forced (``rodas4-eigh``: the dense default; ``rodas4-krylov``), steps, first
    call and warm times (median of ``repeats``), peak RSS above the RSS after import; ``save``: an
    ``.npz`` for ``(V, a)`` at the save points."""
    rss0 = peak_rss_mib()
    W0, a0, X, y = conditioning_init(kappa, 123, d)
    loss = gradflow.SquareLoss(y, design=X, scale=1.0)
    ts = np.concatenate([[0.0], np.geomspace(1.0, t1, 13)])
    policy = implicit_phase(solver)
    run = lambda: gradflow.simulate(loss, W0, a0, t1=t1, ts=ts, rtol=rtol, atol=atol, policy=policy)
    start = time.perf_counter()
    traj = run()
    np.asarray(traj.a)
    cold = time.perf_counter() - start
    warm = []
    for _ in range(repeats):
        start = time.perf_counter()
        traj = run()
        np.asarray(traj.a)
        warm.append(time.perf_counter() - start)
    row = dict(d=d, n=int(W0.size + a0.size + 1), solver=solver, kappa=kappa, status=traj.status,
               steps=int(traj.num_steps), cold_s=cold, warm_s=float(np.median(warm)),
               rss_mib=peak_rss_mib() - rss0, load=os.getloadavg()[0])
    if save:  # with the draw's settings, from which bench_scale builds its reference
        np.savez(save, V=np.asarray(traj.V), a=np.asarray(traj.a), ts=ts, kappa=kappa, t1=t1)
    if solver == "rodas4-krylov":
        row.update(krylov_counts(loss, W0, a0, t1, rtol, atol))
    return row


def bench_scale(ds=(20, 32, 64, 128), dense_max=64, solvers=SCALE_SOLVERS, workdir=None, ref_max=32,
                ref_dir=None, **kw) -> list[dict]:
    """:func:`scale_run` for every ``d`` in ``ds`` and solver (the dense one up to ``d = dense_max``),
    each in a fresh ``nice -n 5`` process; ``error``: max |Δ(V, a)| over the save points against the
    dense run of the same ``d`` (``None`` where it did not run); ``error_ref``: the same against SciPy
    Radau at rtol 1e-12 (:func:`square_reference`, an independent reference, computed up to
    ``d = ref_max``; ``None`` above; cached in ``ref_dir`` if given), so that the Krylov path's
    distance from the dense one can be read against each path's own error."""
    import json
    import subprocess
    import sys
    import tempfile

    workdir = workdir or tempfile.mkdtemp(prefix="gradflow-scale-")
    rows = []
    for d in ds:
        for solver in solvers:
            if solver != "rodas4-krylov" and d > dense_max:
                continue
            save = os.path.join(workdir, f"d{d}_{solver}.npz")
            args = dict(dict(repeats=2 if d < 64 else 1), **kw)  # the large sizes: one warm run
            code = (f"import json; from benchmarks.stiff import scale_run; "
                    f"print('ROW', json.dumps(scale_run({d}, {solver!r}, save={save!r}, **{args!r})))")
            out = subprocess.run(["nice", "-n", "5", sys.executable, "-c", code], capture_output=True, text=True)
            line = [ln for ln in out.stdout.splitlines() if ln.startswith("ROW ")]
            if not line:
                raise RuntimeError(f"scale_run d={d} {solver} failed:\n{out.stderr[-3000:]}")
            row = json.loads(line[-1][4:])
            rows.append(row)
            print(f"benchmarks: scale {row}", flush=True)
        dense = os.path.join(workdir, f"d{d}_{solvers[0]}.npz")
        ref_va = None
        if d <= ref_max:
            z = np.load(os.path.join(workdir, f"d{d}_{solvers[-1]}.npz"))  # the draw scale_run solved
            kappa, t1 = float(z["kappa"]), float(z["t1"])
            W0, a0, X, y = conditioning_init(kappa, 123, d)
            ref_va = square_reference(W0, a0, X, y, z["ts"], reference_cache(ref_dir, d, kappa, t1))
        for row in rows:
            if row["d"] == d:
                z1 = np.load(os.path.join(workdir, f"d{d}_{row['solver']}.npz"))
                row["error_ref"] = None if ref_va is None else _error(z1["V"], z1["a"], *ref_va)
                if os.path.exists(dense):
                    z0 = np.load(dense)
                    row["error"] = _error(z1["V"], z1["a"], z0["V"], z0["a"])
                else:
                    row["error"] = None
    return rows


def cost_exponent(rows, solver, key="warm_s") -> float | None:
    """Least-squares slope of ``log(key)`` against ``log(n)`` over ``solver``'s rows."""
    pts = [(r["n"], r[key]) for r in rows if r["solver"] == solver]
    if len(pts) < 2:
        return None
    n, t = np.log(np.array(pts, float)).T
    return float(np.polyfit(n, t, 1)[0])


def scale_report(rows, head="") -> str:
    """Markdown for :func:`bench_scale`'s rows."""
    L = [head, "Square family (Figs. 3/12 draws), κ = 5, t1 = 1e6, rtol 1e-8, atol 1e-10, `solver=\"auto\"` with its "
         "implicit phase forced: `rodas4-eigh` (the dense default: one jacfwd + eigh per round of 64 steps) or "
         "`rodas4-krylov` (CG on Jacobian–vector products). Each row a fresh process under `nice -n 5`: first call "
         "(compiles), warm (median of 2; one run from d = 64 on), peak RSS above the RSS after import (compilation included). Error: "
         "max |Δ(V, a)| over the 14 save points against the dense run of the same d, and (where SciPy can "
         "afford it) against SciPy Radau at rtol 1e-12, atol 1e-14, an independent reference: the "
         "distance between the two paths is to be read against each one's own error at rtol 1e-8. CG: iterations "
         "per stage solve (mean / most) of rodas4-krylov run alone from t = 0 (diffrax, no rest stop; accepted steps).",
         "", "| d | states | solver | status | steps | warm (s) | first call (s) | peak RSS (MiB) | error vs dense | "
         "error vs Radau | CG mean / max (fallbacks) | load |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda x: "–" if x is None else f"{x:.1e}"
    for r in rows:
        cg = f"{r['cg_mean']:.1f} / {r['cg_max']} ({r['cg_fallbacks']})" if "cg_mean" in r else "–"
        L.append(f"| {r['d']} | {r['n']} | {r['solver']} | {r['status']} | {r['steps']} | {r['warm_s']:.3f} | "
                 f"{r['cold_s']:.1f} | {r['rss_mib']:.0f} | {fmt(r.get('error'))} | {fmt(r.get('error_ref'))} | {cg} | "
                 f"{r['load']:.1f} |")
    L += ["", "Cost exponent (least-squares slope of log warm time against log states):"]
    for solver in sorted({r["solver"] for r in rows}):
        e = cost_exponent(rows, solver)
        L.append(f"- {solver}: {'–' if e is None else f'{e:.2f}'}")
    ratios = [(r["d"], r["warm_s"], s["warm_s"]) for r in rows for s in rows
              if r["d"] == s["d"] and r["solver"] == "rodas4-eigh" and s["solver"] == "rodas4-krylov"]
    if ratios:
        L += ["", "Warm time dense / Krylov (same run): " + ", ".join(f"d = {d}: {a / b:.1f}×" for d, a, b in ratios)]
    L.append("")
    return "\n".join(L)


def main(argv=None) -> int:
    """``python -m benchmarks.stiff``: this section alone at full size, written to ``--out``."""
    import argparse
    import datetime
    import json
    import platform

    from gradflow.io import atomic_write

    p = argparse.ArgumentParser(prog="python -m benchmarks.stiff", description=main.__doc__)
    p.add_argument("--d", type=int, default=20, help="size of the square family (default 20: 421 states)")
    p.add_argument("--kappas", default="1,2,5,20,50", help="comma-separated condition numbers")
    p.add_argument("--repeats", type=int, default=3, help="interleaved gradflow/LSODA pairs per run")
    p.add_argument("--ref-dir", default=None, help="folder caching the Radau references (minutes per draw)")
    p.add_argument("--out", default=None, help="Markdown report (default benchmarks/STIFF_d<d>.md)")
    p.add_argument("--scale", default=None,
                   help="comma-separated sizes d: only the scale table (dense vs rodas4-krylov), written to "
                        "benchmarks/SCALE.md (+ .json) unless --out")
    p.add_argument("--dense-max", type=int, default=64, help="--scale: largest d the dense path runs at")
    p.add_argument("--ref-max", type=int, default=32,
                   help="--scale: largest d with an error against SciPy Radau at rtol 1e-12 (d = 64: about 10 minutes)")
    args = p.parse_args(argv)
    if args.scale:
        start = time.perf_counter()
        rows = bench_scale([int(x) for x in args.scale.split(",")], args.dense_max, ref_max=args.ref_max,
                           ref_dir=args.ref_dir)
        out = args.out or os.path.join(os.path.dirname(__file__), "SCALE.md")
        load = os.getloadavg()[0]
        ref = (f" --ref-max {args.ref_max}" if args.ref_max != 32 else "") + (
            f" --ref-dir {args.ref_dir}" if args.ref_dir else "")  # cached references: not computed in the time
        head = (f"# `python -m benchmarks.stiff --scale {args.scale}{ref}` ({datetime.date.today()}, {platform.machine()}, "
                f"{os.cpu_count()} cores shared, load average {load:.1f} at the end; "
                f"{time.perf_counter() - start:.0f} s)\n")
        text = scale_report(rows, head)
        atomic_write(out, lambda f: f.write(text.encode()))
        atomic_write(os.path.splitext(out)[0] + ".json", lambda f: f.write(json.dumps(rows, indent=1).encode()))
        print(text)
        return 0
    out = args.out or os.path.join(os.path.dirname(__file__), f"STIFF_d{args.d}.md")
    start = time.perf_counter()
    res = dict(square=bench_square([float(k) for k in args.kappas.split(",")], args.d, 1e6, 1e-8, 1e-10,
                                   args.repeats, ref_dir=args.ref_dir), d=args.d, t1=1e6)
    res["costs"] = step_costs(args.d, 20.0, 50)
    res["kinked"] = bench_kinked(["l1", "relu", "sparsemax"], 5e4, 1e-8, 1e-10)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    head = (f"# `python -m benchmarks.stiff --d {args.d}` ({datetime.date.today()}, {platform.machine()}, "
            f"{os.cpu_count()} cores, load average {load:.1f} at the end; {time.perf_counter() - start:.0f} s)\n")
    text = head + report(res)
    atomic_write(out, lambda f: f.write(text.encode()))
    atomic_write(os.path.splitext(out)[0] + ".json", lambda f: f.write(json.dumps(res, indent=1, default=str).encode()))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
