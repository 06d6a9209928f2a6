"""Stiff flows and kinked maps (issue 14), side by side with SciPy in one run.

- **Stiff family**: the conditioning draws of the paper's Figs. 3/12 (square loss with design,
  ``Σ(y − X W s)²``, ``X`` with singular values ``linspace(1, 1/κ, d)``, seed 123 per κ),
  ``d = m = 20`` (421 states with Γ), ``t1 = 1e6``, ``rtol 1e-8``, ``atol 1e-10``. gradflow
  ``simulate`` (``solver="auto"``: Dopri8 with stiffness detection, then Rodas4) against SciPy
  ``solve_ivp`` LSODA, BDF and Radau on the same log-time system (the independent NumPy field of
  ``benchmarks/reference.py``), stopped once at rest to round-off as gradflow is. The error of every run is the largest absolute deviation of ``(V, a)``
  over the save points from a tight reference (Radau, ``rtol 1e-12``, ``atol 1e-14``).
- **Kinked maps**: the norm-logistic figure's setting (``n = d = 10``, seed 42, logistic
  teacher, ``t1 = 5e4``) with the L1, ReLU-normalised and sparsemax maps under ``auto``.

gradflow times are warm (a first call compiles and is not timed), medians over ``repeats``;
SciPy times are single runs. ``--quick``: ``d = 4``, two κ, ``t1 = 1e3`` (numbers meaningless).
"""

from __future__ import annotations

import time

import numpy as np
from scipy.integrate import solve_ivp

import gradflow
from benchmarks._timing import timed
from gradflow.sims.draws import conditioning_init, normalization_init
from benchmarks import reference as ref

__all__ = ["bench", "report", "scipy_square", "square_reference"]


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


def square_reference(W0, a0, X, y, ts):
    """The tight reference: Radau at ``rtol 1e-12``, ``atol 1e-14``; ``(V, a)`` at ``ts``."""
    V, a, _, _ = scipy_square(W0, a0, X, y, ts, "Radau", 1e-12, 1e-14)
    return V, a


def _error(V, a, Vr, ar):
    return float(max(np.max(np.abs(np.asarray(V) - Vr)), np.max(np.abs(np.asarray(a) - ar))))




def bench_square(kappas, d, t1, rtol, atol, repeats, methods=("LSODA", "BDF", "Radau")) -> list[dict]:
    """One row per (κ, method): time, steps (gradflow) or field/Jacobian evaluations (SciPy), error."""
    ts = np.concatenate([[0.0], np.geomspace(1.0, t1, 13)])
    rows = []
    for kappa in kappas:
        W0, a0, X, y = conditioning_init(kappa, 123, d)
        loss = gradflow.SquareLoss(y, design=X, scale=1.0)
        start = time.perf_counter()
        Vr, ar = square_reference(W0, a0, X, y, ts)
        print(f"benchmarks: stiff κ={kappa:g}: reference in {time.perf_counter() - start:.0f} s", flush=True)

        def run():
            traj = gradflow.simulate(loss, W0, a0, t1=t1, ts=ts, rtol=rtol, atol=atol)
            np.asarray(traj.a)
            return traj

        start = time.perf_counter()
        run()
        cold = time.perf_counter() - start
        t, traj = timed(run, repeats)
        g = dict(kappa=kappa, method="gradflow auto", time_s=t, cold_s=cold, steps=int(traj.num_steps),
                 status=traj.status, error=_error(traj.V, traj.a, Vr, ar))
        rows.append(g)
        for m in methods:
            start = time.perf_counter()
            V, a, nfev, njev = scipy_square(W0, a0, X, y, ts, m, rtol, atol)
            t = time.perf_counter() - start
            rows.append(dict(kappa=kappa, method=f"SciPy {m}", time_s=t, nfev=nfev, njev=njev,
                             error=_error(V, a, Vr, ar), ratio=t / g["time_s"]))
        print(f"benchmarks: stiff κ={kappa:g}: " + ", ".join(
            f"{r['method']} {r['time_s']:.2f} s" for r in rows if r["kappa"] == kappa), flush=True)
    return rows


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
    return dict(square=square, kinked=kinked, d=d, t1=q(1e6, 1e3))


def report(res: dict | None) -> str:
    """The Markdown section for :func:`bench`'s results."""
    if not res:
        return ""
    L = ["", f"## Stiff flows: square loss with design (Figs. 3/12 draws, d = m = {res['d']}, t1 = {res['t1']:g}, "
             "rtol 1e-8, atol 1e-10)", "",
         "gradflow `simulate` with `solver=\"auto\"` (Dopri8 in rounds of 64 steps with stiffness detection, "
         "then Rodas4) vs SciPy `solve_ivp` on the same log-time system. Error: max |Δ(V, a)| over 14 save points "
         "against Radau at rtol 1e-12. Ratio: SciPy time / gradflow time (warm median).", "",
         "| κ | method | time (s) | steps / nfev (njev) | error | ratio |", "|---|---|---|---|---|---|"]
    for r in res["square"]:
        if r["method"].startswith("gradflow"):
            L.append(f"| {r['kappa']:g} | {r['method']} ({r['status']}; cold {r['cold_s']:.1f} s) | {r['time_s']:.3f} | "
                     f"{r['steps']} steps | {r['error']:.1e} | 1 |")
        else:
            L.append(f"| {r['kappa']:g} | {r['method']} | {r['time_s']:.3f} | {r['nfev']} ({r['njev']}) | "
                     f"{r['error']:.1e} | {r['ratio']:.2f}× |")
    L += ["", "## Kinked maps under `auto` (norm-logistic setting, n = d = 10, seed 42)", "",
          "| map | status | steps | t_end | time (s) |", "|---|---|---|---|---|"]
    for r in res["kinked"]:
        L.append(f"| {r['map']} | {r['status']} | {r['steps']} | {r['t_end']:.4g} | {r['time_s']:.3f} |")
    L.append("")
    return "\n".join(L)
