"""Seeds per second on an accelerator: ``python -m benchmarks.gpu [--seeds N ...] [--quick]``.

For a session lent a GPU (check the device status first): solves ``N`` seeds of Fig. 2's problem
(n = d = 8, logistic teacher, one teacher per seed, ``t1 = 1e12``, rtol 1e-8, 50 save points)
with :func:`gradflow.simulate_batch` on ``jax.devices()[0]``'s platform, for each ``N`` in
``--seeds`` (default 1e5 and 1e6), and prints one JSON object: per size the first call (compile
included), the warm time (median of ``--repeats``), the time per trajectory and whether every lane
ended ``ok``; plus the device and versions. The states are drawn on the host in NumPy (seed
``i`` as :func:`benchmarks.__main__.draws`, vectorised). ``--lanes`` sets how many lanes one
vmapped solve takes (the engine knob ``lanes_per_solve``, ``gradflow.internal.engine_knobs``; the CPU default 256 is tuned for
caches, a GPU wants tens of thousands). ``--quick``: 64 seeds, one repeat — a smoke run that
also works on a CPU (``tests/test_benchmarks.py`` runs it).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import numpy as np


def draws(B: int, n: int = 8, seed: int = 0):
    """``(V0s (B, n, n), a0s (B, n), teachers (B, n))``: Fig. 2's draws for ``B`` seeds at once
    (``0.1·N(0, 1)`` values, zero logits, unit-norm Gaussian teachers)."""
    rng = np.random.default_rng(seed)
    V0s = 0.1 * rng.standard_normal((B, n, n))
    bs = rng.standard_normal((B, n))
    return V0s, np.zeros((B, n)), bs / np.linalg.norm(bs, axis=1, keepdims=True)


def run(seeds, repeats: int, lanes: int | None) -> dict:
    import jax

    import gradflow
    from gradflow.internal import engine_knob, engine_knobs

    with engine_knobs(**({} if lanes is None else {"lanes_per_solve": lanes})):
        return _run(seeds, repeats, engine_knob("lanes_per_solve"))


def _run(seeds, repeats: int, lanes_per_solve: int) -> dict:
    import jax

    import gradflow

    ts = np.geomspace(1e-2, 1e12, 50)
    rows = []
    for B in seeds:
        V0s, a0s, teachers = draws(B)
        losses = [gradflow.LogisticTeacher(b) for b in teachers]

        def solve():
            traj = gradflow.simulate_batch(losses, V0s, a0s, t1=1e12, ts=ts)
            np.asarray(traj.a)
            return traj

        t0 = time.perf_counter()
        traj = solve()
        first = time.perf_counter() - t0
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            traj = solve()
            times.append(time.perf_counter() - t0)
        warm = float(np.median(times))
        rows.append(dict(seeds=B, first_s=first, warm_s=warm, per_trajectory_us=warm / B * 1e6,
                         steps_max=int(np.max(traj.num_steps)), all_ok=bool(np.all(np.asarray(traj.status_code) == 0))))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    dev = jax.devices()[0]
    return dict(device=str(dev), platform=dev.platform, device_kind=getattr(dev, "device_kind", ""),
                lanes_per_solve=lanes_per_solve, repeats=repeats, jax=jax.__version__,
                python=platform.python_version(), rows=rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu", description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[100_000, 1_000_000], help="batch sizes (default 1e5 1e6)")
    p.add_argument("--repeats", type=int, default=3, help="warm repeats per size (default 3)")
    p.add_argument("--lanes", type=int, default=None, help="lanes per vmapped solve (default: gradflow's)")
    p.add_argument("--quick", action="store_true", help="64 seeds, one repeat: a smoke run (also on a CPU)")
    args = p.parse_args(argv)
    seeds, repeats = ([64], 1) if args.quick else (args.seeds, args.repeats)
    print(json.dumps(run(seeds, repeats, args.lanes), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
