"""Quick start: the paper's Fig. 2 in five lines, and a plot

The logistic teacher with `n = d = 8` and the authors' seed 123: the gradient flow to
`t = 1e12` (Dopri8 in log time, float64), plain gradient descent at the authors' step size
`lr = 0.1` for 1e5 iterations (flow time `t = 1e4`), and `gradflow.attention.plot.trajectory` with GD
overlaid. The weights keep the order of `u(0)` (Thm 3.2) and polarise onto the top token
(Thm 3.3), logarithmically slowly.
"""

import os

import numpy as np

import gradflow
import gradflow.attention.plot

rng = np.random.RandomState(123)                               # the paper's Fig. 2 draws
V0, a0 = 0.1 * rng.randn(8, 8), 0.0 * rng.randn(8)
beta_star = rng.randn(8); beta_star /= np.linalg.norm(beta_star)
flow = gradflow.simulate(gradflow.LogisticTeacher(beta_star), V0, a0, t1=1e12)
gd = gradflow.descend(gradflow.LogisticTeacher(beta_star), V0, a0, lr=0.1, steps=10**5)

print(f"flow: status {flow.status}, {int(flow.num_steps)} steps to t = {float(flow.t_end):.0e}")
print(f"  max weight s_0(1e12) = {float(flow.s[-1].max()):.5f}, Gamma(1e12) = {float(flow.Gamma[-1]):.2f}, "
      f"entropy {float(flow.entropy[-1]):.4f} nats")
print(f"GD:   max weight at t = {float(gd.t[-1]):.0e} (1e5 iterations) = {float(gd.s[-1].max()):.5f}")
top = int(np.argmax(np.asarray(flow.u[0])))
assert flow.ok and int(np.argmax(np.asarray(flow.s[-1]))) == top, "the top-u token must win (Thm 3.3(c))"

os.makedirs("out/examples", exist_ok=True)
fig = gradflow.attention.plot.trajectory(flow, gd=gd)
fig.savefig("out/examples/quickstart.png", dpi=200)
print("plot: out/examples/quickstart.png")
