"""A sweep of 1024 seeds, analysed with xarray

`gradflow.attention.sweep` runs Fig. 2's setting (logistic teacher, `n = d = 8`, `V(0) = 0.1·randn`,
`a(0) = 0`) for seeds 0–1023 to `t = 1e12`, in four batches of 256 seeds, into one zarr store
(`gradflow sweep out/examples/sweep.zarr --seeds 0:1024 --chunk 256` on the command line does the
same; a rerun computes only what is missing). `xarray.open_zarr` reads it as labelled arrays, and
the analysis is a few lines: how far the weights polarised, whether the winner is always the token
with the largest `u_i(0)` (Thm 3.3(c)), the final slope `dΓ/d log t` (→ 1 for a unit teacher),
and the solver's step counts.
"""

import os

import numpy as np
import xarray as xr

import gradflow.attention.plot
from gradflow.attention.sweep import SweepSpec, run_sweep

out = "out/examples/sweep.zarr"
spec = SweepSpec(seed_start=0, seed_stop=1024, chunk=256, n=(8,), t1=(1e12,), points=50)
res = run_sweep(spec, out, progress=False)
print(f"{len(res['computed'])} batches computed, {len(res['skipped'])} already in the store")

ds = xr.open_zarr(out).squeeze()                # drop the grid axes of length 1
print(dict(ds.sizes))
assert bool(ds.done.all()) and bool((ds.status == "ok").all())

final = ds.isel(t=-1)
s_max = final.s.max("token")
winner_is_top_u0 = (final.s.argmax("token") == ds.u.isel(t=0).argmax("token"))
gamma_slope = ds.Gamma.diff("t").isel(t=-1) / np.log(ds.time.isel(t=-1) / ds.time.isel(t=-2))

print(f"final largest weight: median {float(s_max.median()):.4f}, min {float(s_max.min()):.4f}, "
      f"5 % quantile {float(s_max.quantile(0.05)):.4f}")
print(f"winner = argmax u(0) in {int(winner_is_top_u0.sum())} of {ds.sizes['seed']} seeds")
print(f"dGamma/dlog t at t = 1e12: mean {float(gamma_slope.mean()):.5f}, range "
      f"[{float(gamma_slope.min()):.5f}, {float(gamma_slope.max()):.5f}]")
print(f"solver steps: median {int(ds.num_steps.median())}, max {int(ds.num_steps.max())}")
slowest = int(s_max.argmin("seed"))
print(f"least polarised seed: {int(ds.seed[slowest])} "
      f"(gap between the two largest u_i(0): {float(np.diff(np.sort(ds.u.isel(t=0, seed=slowest).values))[-1]):.3g})")
assert bool(winner_is_top_u0.all()), "Thm 3.3(c): the weights polarise onto the top-u(0) token"

os.makedirs("out/examples", exist_ok=True)
gradflow.attention.plot.sweep(xr.open_zarr(out)).savefig("out/examples/sweep.png", dpi=200)
print("plot: out/examples/sweep.png")
