"""Max-margin token selection to ``t = 1e30``: :func:`gradflow.integrate` against SciPy
``solve_ivp`` (DOP853, LSODA) on the same flow, in the same log time ``τ = log(1 + t)``, with the
same field (``jax.grad`` of :func:`gradflow.attention.maxmargin.p_loss`, centred softmax derivatives), at
equal tolerances; error of ``p(t1)`` against a tight SciPy DOP853 reference (rtol 1e-13).

Also the numbers of the max-margin closing note: ``1 − cos(p(t), p_mm)`` at ``t = 1e4, 1e12,
1e30``, the fitted rate ``k`` of ``1 − cos ∝ (log t)^{−k}``, and the solver steps to ``1e30``.
Problem: draw 0 of :func:`gradflow.theory.maxmargin.mm_draws` (``n = 3, T = 4, d = 10``), ``p(0) = 0``.

Run: ``python -m benchmarks.maxmargin [--quick] [--out PATH]`` (prints the Markdown table and the
JSON; ``--out`` also writes the Markdown, atomically; ``benchmarks/MAXMARGIN.md`` holds a run).
Times are medians over ``repeats`` warm calls (gradflow compiled once beforehand; the SciPy field
jitted and warmed).
"""

from __future__ import annotations

import argparse
import json
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
from scipy.integrate import solve_ivp

import gradflow
from benchmarks._timing import timed
from gradflow.attention import maxmargin as mm
from gradflow.theory import maxmargin as tmm

T1 = 1e30


def _problem():
    data, svm, _ = tmm.mm_draws(1, 0)[0]
    return data, np.asarray(svm.w)


def _scipy_field(data):
    grad = jax.jit(jax.grad(mm.p_loss))

    def f(tau, p):
        return -math.exp(tau) * np.asarray(grad(jnp.asarray(p), data))

    f(0.0, np.zeros(data.X.shape[2]))  # compile
    return f


def scipy_run(data, method, rtol, t_eval=None):
    f = _scipy_field(data)
    d = data.X.shape[2]
    start = time.perf_counter()
    sol = solve_ivp(f, (0.0, math.log1p(T1)), np.zeros(d), method=method, rtol=rtol, atol=rtol * 1e-2,
                    t_eval=None if t_eval is None else np.log1p(t_eval))
    return time.perf_counter() - start, sol


def gradflow_run(data, rtol, ts=None):
    kw = dict(t1=T1, args=data, rtol=rtol)
    if ts is not None:
        kw["ts"] = ts
    sol = gradflow.integrate(mm.p_loss, jnp.zeros(data.X.shape[2]), **kw)
    np.asarray(sol.params)
    return sol




def run(quick: bool = False) -> dict:
    data, p_mm = _problem()
    rtols = [1e-6, 1e-8] if quick else [1e-6, 1e-8, 1e-10]
    repeats = 1 if quick else 3
    _, ref = scipy_run(data, "DOP853", 1e-13)
    p_ref = ref.y[:, -1]

    def err(p):
        return float(np.linalg.norm(np.asarray(p) - p_ref) / np.linalg.norm(p_ref))

    rows = []
    for rtol in rtols:
        gradflow_run(data, rtol)  # compile
        sec, sol = timed(lambda: gradflow_run(data, rtol), repeats)
        rows.append(dict(method="gradflow.integrate", rtol=rtol, seconds=sec, steps=int(sol.num_steps),
                         nfev=None, error=err(sol.params[-1]), status=str(sol.status)))
        for method in ("DOP853", "LSODA"):
            times, s = [], None
            for _ in range(repeats):
                sec, s = scipy_run(data, method, rtol)
                times.append(sec)
            rows.append(dict(method=f"SciPy {method}", rtol=rtol, seconds=float(np.median(times)), steps=None,
                             nfev=int(s.nfev), error=err(s.y[:, -1]), status="ok" if s.success else s.message))
    # the closing-note numbers, from a dense save grid at rtol 1e-10
    ts = tmm.save_times(T1, per_decade=10)
    sol = gradflow_run(data, 1e-10, ts)
    e = tmm._one_minus_cos(np.asarray(sol.params), p_mm)
    t = np.asarray(sol.t)

    def at(t0):
        return float(e[int(np.argmin(np.abs(np.log(np.maximum(t, 1e-300)) - math.log(t0))))])

    w = t >= T1 * 1e-10
    slope = float(np.polyfit(np.log(t[w]), np.linalg.norm(np.asarray(sol.params)[w], axis=1), 1)[0])
    note = dict(one_minus_cos_1e4=at(1e4), one_minus_cos_1e12=at(1e12), one_minus_cos_1e30=at(1e30),
                rate_k=tmm.fitted_rate(t, e), steps_to_1e30=int(sol.num_steps), status=str(sol.status),
                norm_slope_over_p_mm_norm=slope / float(np.linalg.norm(p_mm)), p_mm_norm=float(np.linalg.norm(p_mm)),
                reference="SciPy DOP853 rtol 1e-13", reference_nfev=int(ref.nfev))
    return dict(rows=rows, note=note, quick=quick, repeats=repeats)


def markdown(res: dict) -> str:
    lines = ["## Max-margin token selection to t = 1e30 (p-attention, n = 3, T = 4, d = 10)", "",
             f"Median of {res['repeats']} warm runs; error = ‖p(t1) − p_ref‖/‖p_ref‖, reference "
             f"{res['note']['reference']} ({res['note']['reference_nfev']} field evaluations).", "",
             "| method | rtol | time (s) | steps | field evals | error | status |", "|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['method']} | {r['rtol']:.0e} | {r['seconds']:.3f} | {r['steps'] or ''} | {r['nfev'] or ''} "
                     f"| {r['error']:.1e} | {r['status']} |")
    n = res["note"]
    lines += ["", f"1 − cos(p, p_mm): {n['one_minus_cos_1e4']:.2e} at t = 1e4, {n['one_minus_cos_1e12']:.2e} at 1e12, "
              f"{n['one_minus_cos_1e30']:.2e} at 1e30; fitted (log t)^(−k), k = {n['rate_k']:.2f} (t ≥ 1e6); "
              f"d‖p‖/d log t / ‖p_mm‖ = {n['norm_slope_over_p_mm_norm']:.4f}; {n['steps_to_1e30']} steps to 1e30 (rtol 1e-10)."]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.maxmargin")
    ap.add_argument("--quick", action="store_true", help="smoke run (fewer tolerances, one repeat)")
    ap.add_argument("--out", help="also write the Markdown report here")
    args = ap.parse_args(argv)
    res = run(args.quick)
    text = markdown(res)
    if args.out:
        from gradflow.io import atomic_write

        atomic_write(args.out, lambda f: f.write((text + "\n").encode()))
    print(text)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
