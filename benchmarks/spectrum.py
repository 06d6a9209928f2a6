"""The Hessian's spectrum along the exact flow of the Sec. 4 transformer: the outliers above the
bulk, which decide what a stabilised explicit method pays per step.

A Chebyshev method's stage number grows as ``√(h·ρ)`` with ``ρ`` the spectral radius of the
log-time Jacobian ``(1 + t)·∇²L``. If ``∇²L`` has a few outlier eigenvalues far above its bulk (deep
networks' Hessians often have about as many outliers as classes: Sagun et al. 2017, Papyan
2019), treating those few exactly would leave the stages only the bulk's radius, fewer by
``√(λ_1/λ_{k+1})``. This measures it: the flow (``gradflow.integrate``, ``solver="rkc"``, rtol 1e-6
to ``t = 1000``, 1e-4 beyond, each segment resumed from the last end state) to each time of
:data:`TIMES`, and there the largest and smallest eigenvalues of the Hessian by Lanczos on exact
Hessian–vector products (``scipy.sparse.linalg.eigsh``, :data:`TOP` of each end).

``python -m benchmarks.spectrum [--times 10,1000,10000] [--out benchmarks/SPECTRUM.md]`` writes
``SPECTRUM.md`` and ``.json``. Minutes to an hour on 2 cores (the flow's cost grows with ``t``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone

import numpy as np

from benchmarks import _report

HERE = os.path.dirname(os.path.abspath(__file__))

TIMES = (10.0, 1000.0, 10000.0)
"""Flow times at which the spectrum is measured."""

TOP = 64
"""Eigenvalues at each end of the spectrum."""


def _eigs(hvp, n, k, which):
    from scipy.sparse.linalg import LinearOperator, eigsh

    op = LinearOperator((n, n), matvec=lambda v: np.asarray(hvp(v)), dtype=np.float64)
    vals = eigsh(op, k=k, which=which, tol=1e-6, return_eigenvectors=False,
                 v0=np.random.RandomState(0).standard_normal(n))
    return np.sort(vals)[::-1]


def run(times=TIMES, top: int = TOP, log=None) -> dict:
    import jax
    import jax.numpy as jnp
    from jax.flatten_util import ravel_pytree

    import gradflow
    from benchmarks.large_models import transformer

    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    loss, params0, desc = transformer()
    flat0, unravel = ravel_pytree(params0)
    L = lambda x: loss(unravel(x))  # noqa: E731
    hvp = jax.jit(lambda x, v: jax.jvp(jax.grad(L), (x,), (v,))[1])
    theta, t, rows = params0, 0.0, []
    start = time.perf_counter()
    for target in times:
        rtol = 1e-6 if target <= 1000 else 1e-4
        c0 = time.perf_counter()
        sol = gradflow.integrate(loss, theta, t1=target - t, ts=np.array([0.0, target - t]), solver="rkc",
                                 rtol=rtol, atol=rtol / 100, rest_stop=False, max_steps=200000)
        flow_s = time.perf_counter() - c0
        if sol.status != "ok":
            log(f"spectrum: the flow ended {sol.status} at t = {t + float(sol.t_end):.4g}; stopping")
            break
        theta, t = sol.params_end, target
        x = jnp.asarray(ravel_pytree(theta)[0])
        c0 = time.perf_counter()
        big = _eigs(lambda v: hvp(x, jnp.asarray(v)), x.size, top, "LA")
        small = _eigs(lambda v: hvp(x, jnp.asarray(v)), x.size, top, "SA")
        eig_s = time.perf_counter() - c0
        row = dict(t=t, loss=float(L(x)), rtol=rtol, steps=int(sol.num_steps), flow_s=flow_s, eig_s=eig_s,
                   largest=big.tolist(), smallest=small.tolist())
        rows.append(row)
        log(f"spectrum: t = {t:g}, loss {row['loss']:.4g}, λ1 = {big[0]:.4g}, λ8 = {big[7]:.4g}, "
            f"λ64 = {big[-1]:.4g}, λmin = {small[-1]:.4g} (flow {flow_s:.0f} s, eigsh {eig_s:.0f} s)")
    cpu, rev = _report.cpu_and_revision()
    return dict(model="transformer", n=int(flat0.size), description=desc, top=top, rows=rows,
                measured=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), elapsed_s=time.perf_counter() - start,
                machine=dict(cpu=cpu, cores=os.cpu_count(), git_revision=rev))


def report(res: dict, cmd: str) -> str:
    L = [f"Command: `{cmd}`, {res['measured']}, {res['elapsed_s']:.0f} s in all; revision "
         f"{res['machine']['git_revision']}. Model: the Sec. 4 transformer of `benchmarks/large_models.py` "
         f"({res['n']:,} parameters). The flow by `integrate(solver=\"rkc\")` (rtol per row), the eigenvalues of "
         f"∇²L by `scipy.sparse.linalg.eigsh` on exact Hessian–vector products (the {res['top']} largest and the "
         f"{res['top']} smallest).", "",
         "| t | loss | λ1 | λ2 | λ4 | λ8 | λ16 | λ32 | λ64 | λ1/λ8 | λ1/λ64 | λmin | rtol, steps, flow s |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        b = r["largest"]
        L.append(f"| {r['t']:g} | {r['loss']:.4g} | " + " | ".join(f"{b[i - 1]:.4g}" for i in (1, 2, 4, 8, 16, 32, 64))
                 + f" | {b[0] / b[7]:.3g} | {b[0] / b[63]:.3g} | {r['smallest'][-1]:.3g} | "
                   f"{r['rtol']:g}, {r['steps']}, {r['flow_s']:.0f} |")
    L += ["", "A stabilised explicit method with the top k eigenvalues treated exactly would need "
          "√(λ1/λ(k+1)) times fewer stages per step (the column λ1/λ8: k = 7; λ1/λ64: k = 63)."]
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.spectrum", description=__doc__.splitlines()[0])
    p.add_argument("--times", default=",".join(f"{t:g}" for t in TIMES), help="flow times, comma-separated")
    p.add_argument("--out", default=os.path.join(HERE, "SPECTRUM.md"), help="report path (JSON beside it)")
    args = p.parse_args(argv)
    times = tuple(float(x) for x in args.times.split(","))
    res = run(times)
    cmd = "python -m benchmarks.spectrum" + ("" if times == TIMES else f" --times {args.times}")
    print(_report.write_report(args.out, "The Hessian's spectrum along the transformer's flow", report(res, cmd), res,
                               default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
