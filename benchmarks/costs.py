"""What a solve costs: batch throughput, per-call overhead, scale in ``n`` and memory.

``python -m benchmarks.costs [--quick] [--out PATH]`` prints JSON and writes a Markdown report
(default ``benchmarks/COSTS.md`` and ``.json`` beside it). Every verdict is a ratio against a
baseline measured in the same run (the machine is shared: absolute times are noisy):

* ``batch``: 1024 seeds of Fig. 2's problem (n = d = 8, logistic teacher, one teacher per seed)
  to ``t = 1e12`` at rtol 1e-8, warm: ``simulate_batch`` as shipped (Dopri8 with its stages
  unrolled under ``vmap``, ``gradflow._engine.erk``), the same call with diffrax's own
  Dopri8 (its stage loop, the engine before the stages were unrolled), a SciPy DOP853 loop (measured on 32 seeds,
  extrapolated), and the *field floor*: the vmapped field alone, evaluated as many times as the
  solve evaluates it (13 per step × the slowest lane's steps) — what the arithmetic costs on
  XLA:CPU. Per-lane-step cost = time / (lanes × steps of the slowest lane: under ``vmap`` every
  lane of a solve takes as many steps as the slowest). Flops per field evaluation from XLA's
  cost analysis.
* ``per_call``: one ``simulate`` to ``1e12`` vs a bare jitted ``diffeqsolve`` of the same field
  (the floor under it) vs SciPy LSODA, at rtol 1e-8, 1e-10, 1e-11 (atol = rtol/100), calls
  interleaved; errors against SciPy DOP853 at rtol 1e-13. Also ``simulate(..., solver="dopri8")``
  (Dopri8 alone: no stiffness detection, rounds of 512 steps, so one round for these runs),
  interleaved with them: the part of the overhead that ``auto``'s rounds cost (a run of more steps
  than its first round of 64 runs the stiffness detector and a second round, whose restart also
  changes the step count).
* ``scale``: n = d = 1024 tokens to ``1e12`` (41 save points): time and peak memory, and the peak
  memory of 4096 seeds of the batch problem — each in a fresh process (peak resident set size,
  ``VmHWM``, :func:`benchmarks._timing.peak_rss_mib`; the process's baseline after ``import gradflow`` is subtracted).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from benchmarks._timing import interleaved_medians, interleaved_times

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)



def diffrax_stage_loop():
    """Batched solves with diffrax's own ``Dopri8`` (the engine before the stages were unrolled)."""
    from gradflow.internal import engine_knobs

    return engine_knobs(unrolled_dopri8=False)


def field_floor(V0s, teachers, evals: int, lanes: int):
    """``f() -> None``: the vmapped log-time field of Fig. 2's problem evaluated ``evals``
    times in a ``fori_loop`` over chunks of ``lanes`` lanes (as the engine's chunks), and the flops
    of one lane's field evaluation (XLA cost analysis)."""
    import jax
    import jax.numpy as jnp

    import gradflow
    from gradflow.attention.flow import log_time_field
    from gradflow.attention.models import get_model

    model = get_model("value-softmax", "softmax", 1.0)

    def one(V, a, g, b):
        return log_time_field(jnp.asarray(1.0), (V, a, g), (model, gradflow.LogisticTeacher(b)))

    @jax.jit
    def run(V, a, bs):
        def body(i, y):
            f = jax.vmap(one)(*y, bs)
            return jax.tree.map(lambda u, v: u + 1e-9 * v, y, f)

        return jax.lax.fori_loop(0, evals, body, (V, a, jnp.zeros(V.shape[0])))

    n = V0s.shape[-1]
    a0s = np.zeros(V0s.shape[:2])
    chunks = [(jnp.asarray(V0s[i:i + lanes]), jnp.asarray(a0s[i:i + lanes]), jnp.asarray(teachers[i:i + lanes]))
              for i in range(0, V0s.shape[0], lanes)]
    cost = jax.jit(one).lower(jnp.zeros((n, n)), jnp.zeros(n), jnp.zeros(()), jnp.ones(n)).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    flops = float(cost.get("flops", float("nan"))) if cost else float("nan")
    return (lambda: jax.block_until_ready([run(*c) for c in chunks])), flops


def bench_batch(q, R) -> dict:
    import gradflow
    from gradflow.internal import engine_knob, usable_cores

    from .problems import TS_1E12, draws
    from .baselines import scipy_flow

    B, B_scipy = q(1024, 16), q(32, 2)
    V0s, a0s, teachers = draws(range(B))
    losses = [gradflow.LogisticTeacher(b) for b in teachers]

    def solve():
        traj = gradflow.simulate_batch(losses, V0s, a0s, t1=1e12, ts=TS_1E12)
        np.asarray(traj.a)
        return traj

    def scipy_loop():
        for i in range(B_scipy):
            scipy_flow(V0s[i], a0s[i], teachers[i], TS_1E12, "DOP853", 1e-8, 1e-10)

    t0 = time.perf_counter()
    solve()
    compile_s = time.perf_counter() - t0
    with diffrax_stage_loop():
        t0 = time.perf_counter()
        solve()
        compile_loop_s = time.perf_counter() - t0
        old = interleaved_medians({"diffrax Dopri8 (stage loop)": solve}, R(5))
    steps = None
    timed = interleaved_medians({"gradflow simulate_batch": solve, "SciPy loop": scipy_loop}, R(5))
    traj = timed["gradflow simulate_batch"][1]
    steps = np.asarray(traj.num_steps)
    lanes = min(engine_knob("lanes_per_solve"), B)
    chunk_max = [int(steps[i:i + lanes].max()) for i in range(0, B, lanes)]
    computed_lane_steps = sum(m * min(lanes, B - i * lanes) for i, m in enumerate(chunk_max))
    floor_fn, flops = field_floor(V0s, teachers, 13 * max(chunk_max), lanes)
    floor = interleaved_medians({"field floor": floor_fn}, R(5))["field floor"][0]
    t_new = timed["gradflow simulate_batch"][0]
    # the same batch in fresh processes with one JAX CPU device, then one per core (lanes sharded)
    cores = usable_cores()
    one_dev, per_core = (_scale_run("seeds", B, R(7), cpu_devices=k) for k in (1, cores))
    t_old = old["diffrax Dopri8 (stage loop)"][0]
    t_scipy = timed["SciPy loop"][0] * B / B_scipy
    return dict(
        B=B, lanes_per_solve=lanes, steps_max=int(steps.max()), steps_mean=float(steps.mean()), ok=bool(traj.ok),
        time_s=t_new, time_stage_loop_s=t_old, scipy_extrapolated_s=t_scipy, scipy_lanes=B_scipy,
        floor_s=floor, compile_s=compile_s, compile_stage_loop_s=compile_loop_s,
        ratio_scipy=t_scipy / t_new, ratio_scipy_stage_loop=t_scipy / t_old, speedup=t_old / t_new,
        us_per_lane_step=t_new / computed_lane_steps * 1e6, us_per_lane_step_stage_loop=t_old / computed_lane_steps * 1e6,
        floor_us_per_lane_step=floor / computed_lane_steps * 1e6, flops_per_field_eval=flops,
        flops_per_lane_step=13 * flops, repeats=R(5), cores=cores, one_device_s=one_dev["warm_s"],
        per_core_s=per_core["warm_s"], per_core_ok=per_core["ok"] and one_dev["ok"],
    )


# ----------------------------------------------------------------------------- per-call overhead
def bench_per_call(q, R) -> list:
    import gradflow

    from .problems import tolerance_case
    from .baselines import scipy_flow

    V0, a0, bs, ts, err, loss, bare = tolerance_case()
    rows = []
    for rtol in q((1e-8, 1e-10, 1e-11), (1e-8,)):
        atol = rtol / 100

        def sim(rtol=rtol, atol=atol):
            traj = gradflow.simulate(loss, V0, a0, t1=1e12, ts=ts, rtol=rtol, atol=atol)
            return np.asarray(traj.a), int(traj.num_steps)

        def fixed(rtol=rtol, atol=atol):
            traj = gradflow.simulate(loss, V0, a0, t1=1e12, ts=ts, rtol=rtol, atol=atol, solver="dopri8")
            return np.asarray(traj.a), int(traj.num_steps)

        times = interleaved_times({"simulate": sim, "fixed": fixed, "bare": lambda rtol=rtol, atol=atol: bare(rtol, atol),
                                   "lsoda": lambda rtol=rtol, atol=atol: scipy_flow(V0, a0, bs, ts, "LSODA", rtol, atol)}, R(30))
        res = {name: (float(np.median(t)), out) for name, (t, out) in times.items()}
        best = {name: float(np.min(t)) for name, (t, _) in times.items()}  # a loaded machine inflates medians most
        # LSODA at the next tighter tolerance too: "equal accuracy" compares against the SciPy run
        # whose error is at most gradflow's
        tighter = rtol / 10
        lsoda_t, (a_t, _) = interleaved_medians({"x": lambda: scipy_flow(V0, a0, bs, ts, "LSODA", tighter, tighter / 100)},
                                     R(10))["x"]
        (t_sim, (a_sim, steps)), (t_bare, (a_bare, _)), (t_ls, (a_ls, nfev)) = res["simulate"], res["bare"], res["lsoda"]
        e_sim, e_ls, e_ls_t = err(a_sim), err(a_ls), err(a_t)
        equal = (t_ls, rtol, e_ls) if e_ls <= e_sim else (lsoda_t, tighter, e_ls_t)
        rows.append(dict(rtol=rtol, simulate_s=t_sim, bare_s=t_bare, overhead_ms=(t_sim - t_bare) * 1e3, steps=steps,
                         error=e_sim, error_bare=err(a_bare), lsoda_s=t_ls, lsoda_error=e_ls, lsoda_nfev=nfev,
                         lsoda_tighter_s=lsoda_t, lsoda_tighter_error=e_ls_t, equal_lsoda_rtol=equal[1],
                         equal_lsoda_s=equal[0], equal_lsoda_error=equal[2], ratio_lsoda=equal[0] / t_sim,
                         ratio_lsoda_bare=equal[0] / t_bare, repeats=R(30), simulate_min_s=best["simulate"],
                         bare_min_s=best["bare"], overhead_min_ms=(best["simulate"] - best["bare"]) * 1e3,
                         fixed_s=res["fixed"][0], fixed_steps=res["fixed"][1][1], fixed_min_s=best["fixed"],
                         host_us=host_overhead_us(loss, V0, a0, ts, rtol, atol, R(300))))
    return rows


def host_overhead_us(loss, V0, a0, ts, rtol, atol, repeats) -> float:
    """Microseconds ``simulate`` spends on the host besides dispatching its compiled solve rounds
    (input checks, the engine's bookkeeping, building the ``Trajectory``; the stiffness detector
    between rounds, a compiled call, is included): the call timed with every compiled round
    (``_fused_round``) replaced by the result it gave in a first, recorded call, in the same order
    (best of ``repeats``; the rounds' own dispatch, ~15–25 µs each, is not included)."""
    import gradflow
    from gradflow.internal import observe_rounds

    recorded, at = [], [None]

    def replay(kind, rnd, run):
        if at[0] is None:  # the recording call
            recorded.append(run())
            return recorded[-1]
        at[0] += 1
        return recorded[at[0] - 1]

    def sim():
        return np.asarray(gradflow.simulate(loss, V0, a0, t1=1e12, ts=ts, rtol=rtol, atol=atol).a)

    with observe_rounds(replay):
        sim()
        times = []
        for _ in range(repeats):
            at[0] = 0
            start = time.perf_counter()
            sim()
            times.append(time.perf_counter() - start)
            assert at[0] == len(recorded), "a replayed call took another path than the recorded one"
    return float(np.min(times)) * 1e6


# ----------------------------------------------------------------------------- scale and memory
SCALE = r"""
import json, sys, time
import numpy as np
import gradflow
from benchmarks._timing import peak_rss_mib as rss
from benchmarks.problems import draws, fig2_draws, TS_1E12
base = rss()
kind, size = sys.argv[1], int(sys.argv[2])
if kind == "n":
    V0, a0, bs = fig2_draws(123, size)
    ts = np.concatenate([[0.0], np.geomspace(1e-2, 1e12, 40)])
    run = lambda: gradflow.simulate(gradflow.LogisticTeacher(bs), V0, a0, t1=1e12, ts=ts)
else:
    V0s, a0s, teachers = draws(range(size))
    losses = [gradflow.LogisticTeacher(b) for b in teachers]
    run = lambda: gradflow.simulate_batch(losses, V0s, a0s, t1=1e12, ts=TS_1E12)
t0 = time.perf_counter(); traj = run(); np.asarray(traj.a); first = time.perf_counter() - t0
times = []
for _ in range(int(sys.argv[3])):
    t0 = time.perf_counter(); traj = run(); np.asarray(traj.a); times.append(time.perf_counter() - t0)
print(json.dumps(dict(first_s=first, warm_s=float(np.median(times)), peak_mib=rss(), base_mib=base,
                      steps=int(np.max(traj.num_steps)), ok=bool(np.all(np.asarray(traj.status_code) == 0)),
                      state=traj.metadata.get("state", "full (V, a)"))))
"""


def _scale_run(kind: str, size: int, repeats: int, cpu_devices: int = 1) -> dict:
    """Run :data:`SCALE` in a fresh process with ``cpu_devices`` JAX CPU devices (``JAX_NUM_CPU_DEVICES``)."""
    env = {**os.environ, "GRADFLOW_NO_CACHE": "1", "JAX_NUM_CPU_DEVICES": str(cpu_devices),
           "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", SCALE, kind, str(size), str(repeats)], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_scale(q, R) -> dict:
    from .baselines import scipy_flow
    from .problems import fig2_draws

    n = q(1024, 32)
    big = _scale_run("n", n, R(3))
    seeds = _scale_run("seeds", q(4096, 64), R(1))
    # baseline in the same run: SciPy DOP853 on the same n = d problem (one run: it is slow)
    V0, a0, bs = fig2_draws(123, n)
    ts = np.concatenate([[0.0], np.geomspace(1e-2, 1e12, 40)])
    t0 = time.perf_counter()
    _, nfev = scipy_flow(V0, a0, bs, ts, "DOP853", 1e-8, 1e-10)
    scipy_s = time.perf_counter() - t0
    return dict(n=n, n_run=big, seeds=q(4096, 64), seeds_run=seeds, scipy_n_s=scipy_s, scipy_n_nfev=nfev)


# ----------------------------------------------------------------------------- report
def report(res: dict, quick: bool) -> str:
    b, pc, sc = res["batch"], res["per_call"], res["scale"]
    ok = lambda c: "met" if c else "**missed**"
    L = [f"# What a solve costs: batch throughput, per-call overhead, scale{' (QUICK smoke run: numbers meaningless)' if quick else ''}", "",
         f"`python -m benchmarks.costs{' --quick' if quick else ''}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
         f"load average at start {res['load']:.1f} on {os.cpu_count()} cores (a shared machine: read the ratios, "
         "not the absolute times).", "",
         f"## Batch throughput: {b['B']} seeds of Fig. 2's problem to t = 1e12 (rtol 1e-8), warm", "",
         "| run | time (s) | µs per lane-step | SciPy loop / this |", "|---|---|---|---|",
         f"| gradflow `simulate_batch` (unrolled Dopri8 stages) | {b['time_s']:.3f} | {b['us_per_lane_step']:.2f} | {b['ratio_scipy']:.0f}× |",
         f"| same, diffrax's Dopri8 stage loop (engine before the stages were unrolled) | {b['time_stage_loop_s']:.3f} | "
         f"{b['us_per_lane_step_stage_loop']:.2f} | {b['ratio_scipy_stage_loop']:.0f}× |",
         f"| field floor: the vmapped field alone, 13 evaluations × {b['steps_max']} steps | {b['floor_s']:.3f} | "
         f"{b['floor_us_per_lane_step']:.2f} | – |",
         f"| same batch in a fresh process, one JAX CPU device (the default) | {b['one_device_s']:.3f} | – | "
         f"{b['scipy_extrapolated_s'] / b['one_device_s']:.0f}× |",
         f"| same, `JAX_NUM_CPU_DEVICES={b['cores']}`: one device per core, lanes sharded over them | "
         f"{b['per_core_s']:.3f} | – | {b['scipy_extrapolated_s'] / b['per_core_s']:.0f}× |",
         f"| SciPy DOP853 loop (measured on {b['scipy_lanes']} seeds, extrapolated) | {b['scipy_extrapolated_s']:.2f} | – | 1 |", "",
         f"Speed-up of the batched solve: {b['speedup']:.2f}× (stage loop / unrolled, same run); all ok: {b['ok']}; "
         f"steps max {b['steps_max']}, mean {b['steps_mean']:.1f}; {b['lanes_per_solve']} lanes per vmapped solve. "
         f"A lane-step evaluates the field 13 times, {b['flops_per_lane_step']:.0f} flops by XLA's count "
         f"({b['flops_per_field_eval']:.0f} per evaluation), i.e. {b['flops_per_lane_step'] / (b['us_per_lane_step'] * 1e3):.2f} "
         f"GFLOP/s achieved; the solve costs {b['time_s'] / b['floor_s']:.1f}× its field floor. "
         f"First call (compile) {b['compile_s']:.1f} s unrolled vs {b['compile_stage_loop_s']:.1f} s with the stage loop. "
         f"One device per core: {b['one_device_s'] / b['per_core_s']:.2f}× the one-device time on {b['cores']} cores "
         f"(fresh processes, median of warm calls; all ok: {b['per_core_ok']}). JAX gives a CPU one device by default, "
         "and a vmapped solve of a few hundred lanes runs on one core; with several devices the engine shards "
         "the lanes over them and each runs on its own core.", "",
         "Where a lane-step went (XLA:CPU thunk profile, `jax.profiler.trace`, and HLO of the vmapped solve): "
         "diffrax runs an explicit Runge–Kutta step as a loop over its stages with a stage buffer `ks` "
         "(14 stages × state); each stage input is a tensordot of a tableau row with that buffer. Under `vmap` "
         "the buffer's lane axis comes first, so every stage copies the whole buffer into stage-major order "
         "(a `transpose` + `copy` of lanes × 14 × 73 floats) before a (1 × 14)·(14 × lanes·73) product, and the "
         "dense output at each save point does the same with a per-lane coefficient vector. Not the cause: saving "
         "(in-place scatters, no full-buffer selects), lanes per chunk (64, 256 and 1024 lanes cost the same per "
         "lane within noise), the event (one extra field evaluation per step). With the stages written out "
         "(`gradflow/_engine/erk.py`: each stage input one fused elementwise sum of the earlier stages) the "
         "transposes are gone; what remains above the field floor is diffrax's per-step bookkeeping under `vmap` "
         "(controller, selects of the carried state on the batched predicate, the save loop's interpolation).", "",
         f"Target: ≥ 3× the old ratio against the SciPy loop (0.15 s vs 0.45–0.50 s): "
         f"{b['ratio_scipy'] / b['ratio_scipy_stage_loop']:.2f}× in this run: {ok(b['ratio_scipy'] / b['ratio_scipy_stage_loop'] >= 3)}.", "",
         "## Per-call overhead: one trajectory to t = 1e12 (n = d = 8)", "",
         "| rtol | simulate (ms) | bare diffeqsolve (ms) | overhead (ms) | error | LSODA at equal accuracy: rtol, ms, error | LSODA / simulate | LSODA / bare |",
         "|---|---|---|---|---|---|---|---|"]
    for r in pc:
        L.append(f"| {r['rtol']:g} | {r['simulate_s'] * 1e3:.2f} | {r['bare_s'] * 1e3:.2f} | {r['overhead_ms']:.2f} | "
                 f"{r['error']:.1e} | {r['equal_lsoda_rtol']:g}, {r['equal_lsoda_s'] * 1e3:.1f}, {r['equal_lsoda_error']:.1e} | "
                 f"{r['ratio_lsoda']:.1f}× | {r['ratio_lsoda_bare']:.1f}× |")
    L += ["", "Best of the repeats (closest to an idle machine's time): " + "; ".join(
        f"rtol {r['rtol']:g}: simulate {r['simulate_min_s'] * 1e3:.2f} ms, bare {r['bare_min_s'] * 1e3:.2f} ms, "
        f"overhead {r['overhead_min_ms']:.2f} ms" for r in pc if "simulate_min_s" in r) + ". Host work of `simulate` "
        "besides its compiled rounds (each round replaced by its recorded result; the stiffness detector between "
        "rounds included), best of 300: " + ", ".join(
        f"{r['host_us']:.0f} µs" for r in pc if "host_us" in r) + "."]
    split = [r for r in pc if "fixed_s" in r]
    if split:
        import gradflow

        FIRST_ROUND = gradflow.AutoPolicy().explicit_round  # auto's explicit rounds
        L += ["", "Where the overhead goes: the same call with `solver=\"dopri8\"` (Dopri8 alone, no stiffness "
              "detection; rounds of 512 steps, so one round here), "
              "interleaved with the others, best of the repeats against `simulate`'s best (medians in parentheses): "
              + "; ".join(
                  f"rtol {r['rtol']:g}: {r['fixed_min_s'] * 1e3:.2f} ms against {r['simulate_min_s'] * 1e3:.2f} ms "
                  f"({r['fixed_s'] * 1e3:.2f} against {r['simulate_s'] * 1e3:.2f} ms), {r['fixed_steps']} "
                  f"against {r['steps']} steps"
                  + (f"; auto took more than its first round of {FIRST_ROUND}: the detector and a second round, "
                     f"whose restart changed the step count, cost {(r['simulate_min_s'] - r['fixed_min_s']) * 1e3:.2f} ms"
                     if r["steps"] > FIRST_ROUND else "") for r in split)
              + ". What remains above the bare `diffeqsolve` is mostly what `simulate` computes besides the steps (the rest "
              "test, the Γ quadrature, the metrics at the save points, the `Trajectory`) and its host work above; "
              "the bare solve also steps in diffrax's own loop, without the rest event, and may take a step more or "
              "less."]
    L += ["", "Targets: overhead ≤ 0.3 ms: " + ", ".join(f"{r['rtol']:g}: {ok(r['overhead_ms'] <= 0.3)}" for r in pc)
          + "; ≥ 10× LSODA at equal accuracy: " + ", ".join(f"{r['rtol']:g}: {ok(r['ratio_lsoda'] >= 10)}" for r in pc) + ".", "",
          "## Scale", "",
          "| run | first call (s) | warm (s) | peak RSS (MiB) | RSS after import (MiB) | steps | ok |", "|---|---|---|---|---|---|---|"]
    nr, sr = sc["n_run"], sc["seeds_run"]
    L.append(f"| n = d = {sc['n']}, one trajectory to 1e12 (41 save points) | {nr['first_s']:.2f} | {nr['warm_s']:.3f} | "
             f"{nr['peak_mib']:.0f} | {nr['base_mib']:.0f} | {nr['steps']} | {nr['ok']} |")
    L.append(f"| {sc['seeds']} seeds (n = d = 8) to 1e12 (50 save points) | {sr['first_s']:.2f} | {sr['warm_s']:.3f} | "
             f"{sr['peak_mib']:.0f} | {sr['base_mib']:.0f} | {sr['steps']} | {sr['ok']} |")
    L += ["", f"Baseline in the same run: SciPy DOP853 on the n = d = {sc['n']} problem took {sc['scipy_n_s']:.2f} s "
          f"({sc['scipy_n_nfev']} field evaluations), {sc['scipy_n_s'] / nr['warm_s']:.1f}× gradflow warm. "
          f"Target n = d = 1024 in ≤ 2 s: {ok(nr['warm_s'] <= 2)} (warm), {ok(nr['first_s'] <= 2)} (first call, compile included). "
          f"State gradflow integrated: {nr.get('state', 'full (V, a)')} (the logistic teacher moves V only along β*: "
          "`gradflow.simulate` integrates that exact reduction once V has ≥ 2^16 entries; SciPy integrates the full "
          "system). Before the reduction the same call took 14–56 s warm on this machine.", ""]
    return "\n".join(L)


def _write(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file beside it, then ``os.replace``)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv=None) -> int:
    import jax

    jax.config.update("jax_enable_x64", True)
    p = argparse.ArgumentParser(prog="python -m benchmarks.costs", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke run at small sizes (numbers meaningless)")
    p.add_argument("--out", default=os.path.join(HERE, "COSTS.md"), help="report path (default benchmarks/COSTS.md)")
    p.add_argument("--only", nargs="*", choices=("batch", "per_call", "scale"), help="sections to run (default all)")
    args = p.parse_args(argv)
    q = (lambda full, quick: quick) if args.quick else (lambda full, quick: full)
    R = (lambda k: 1) if args.quick else (lambda k: k)
    res = {"load": os.getloadavg()[0]}
    for name, fn in (("batch", bench_batch), ("per_call", bench_per_call), ("scale", bench_scale)):
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        res[name] = fn(q, R)
        print(f"costs: {name} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    print(json.dumps(res, indent=1, default=float))
    if not args.only:
        _write(args.out, report(res, args.quick))
        _write(os.path.splitext(args.out)[0] + ".json", json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
