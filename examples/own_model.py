"""Your own model: the flow of any JAX loss over a parameter pytree

`gradflow.integrate` integrates `dθ/dt = −∇L(θ)` for a loss you write yourself, on the same
engine as `gradflow.simulate` (float64, adaptive, in log time, so `t1 = 1e12` is cheap). Here:
a single attention head `f(X) = vᵀ Xᵀ softmax(X p)` with *both* `p` and `v` trained, as a dict
pytree, under a logistic loss on a few random sequences. `observe` saves functions of the
parameters at every save point (the attention weights), `quadratures` integrates a quantity
along the flow (`∫ ‖p‖² dt`), `integrate_batch` runs several initialisations in one call and
`descend_params` is the gradient-descent twin (iteration `k` at flow time `t = lr·k`).

Why `gradflow.softmax` and not `jax.nn.softmax`: the flow selects one token, so the logit gap
grows like `log t` and one weight rounds to `1`. JAX differentiates softmax as
`s ⊙ (g − ⟨s, g⟩)`, whose top entry then cancels to `0` (or the wrong sign);
`gradflow.softmax` has the same values and a centred derivative without that cancellation
(see `gradflow.softmax` in the API reference). The last lines show it at a logit gap of 60.
"""

import os

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import gradflow

rng = np.random.default_rng(0)
n, T, d = 4, 5, 6                                                   # sequences, tokens, dimension
X = jnp.asarray(rng.standard_normal((n, T, d)))
Y = jnp.asarray(rng.choice([-1.0, 1.0], n))


def loss(params, X):
    """Mean logistic loss of one attention head; params = {"p": (d,), "v": (d,)}."""
    s = gradflow.softmax(X @ params["p"])                           # (n, T) attention weights
    f = jnp.einsum("ntd,nt,d->n", X, s, params["v"])
    return jnp.mean(jnp.logaddexp(0.0, -Y * f))


params0 = {"p": jnp.zeros(d), "v": 0.1 * jnp.asarray(rng.standard_normal(d))}
sol = gradflow.integrate(
    loss, params0, args=X, t1=1e12,
    observe={"top_weight": lambda p, X: gradflow.softmax(X @ p["p"]).max(axis=-1)},
    quadratures={"int_p2": lambda p, X: jnp.sum(p["p"] ** 2)})    # no minimiser: no rest stop fires
print(f"integrate: status {sol.status}, {int(sol.num_steps)} steps to t = {float(sol.t_end):.0e}")
print(f"  loss {float(sol.loss[0]):.3f} -> {float(sol.loss[-1]):.2e}; |p| = {float(jnp.linalg.norm(sol.params['p'][-1])):.1f}")
print(f"  top attention weight per sequence at t1: {np.round(np.asarray(sol.observed['top_weight'][-1]), 6)}")
print(f"  int_0^t1 |p|^2 dt = {float(sol.quadratures['int_p2'][-1]):.3e}")
assert sol.ok and float(sol.loss[-1]) < 1e-6

B = 4                                                               # four initialisations at once
batch0 = {"p": jnp.zeros((B, d)), "v": 0.1 * jnp.asarray(rng.standard_normal((B, d)))}
bsol = gradflow.integrate_batch(loss, batch0, args=X, t1=1e12)
print(f"integrate_batch: statuses {list(bsol.status)}, steps {np.asarray(bsol.num_steps).tolist()}")

gd = gradflow.descend_params(loss, params0, args=X, lr=0.5, steps=20_000)
t_gd = float(gd.t[-1])
i = int(np.searchsorted(np.asarray(sol.t), t_gd))
print(f"descend_params: loss at t = {t_gd:.0e} is {float(gd.loss[-1]):.3e} (flow at t = {float(sol.t[i]):.1e}: {float(sol.loss[i]):.3e})")

# the centred derivative: d/dx log softmax(x)_0 at x = (60, 0, 0) is exactly 2 e^{-60}
x = jnp.array([60.0, 0.0, 0.0])
exact = 2 * np.exp(-60.0)
g_jax = float(jax.grad(lambda z: jax.nn.log_softmax(z)[0])(x)[0])
g_gf = float(jax.grad(lambda z: gradflow.log_softmax(z)[0])(x)[0])
print(f"d log s_0 / d x_0 at gap 60: exact {exact:.6e}, jax.nn {g_jax:.6e}, gradflow {g_gf:.6e}")
assert abs(g_gf - exact) <= 1e-12 * exact and g_jax != g_gf

os.makedirs("out/examples", exist_ok=True)
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.2), layout="constrained")
t = np.asarray(sol.t)
ax1.loglog(t[1:], np.asarray(sol.loss)[1:], label="flow")
ax1.loglog(np.asarray(gd.t)[1:], np.asarray(gd.loss)[1:], "--", label="GD, lr 0.5")
ax1.set(xlabel="t", ylabel="loss", title="logistic loss of one head")
ax1.legend()
ax2.semilogx(t[1:], 1 - np.asarray(sol.observed["top_weight"])[1:], label=[f"seq {k}" for k in range(n)])
ax2.set(xlabel="t", ylabel="1 − max weight", yscale="log", title="token selection (observe)")
ax2.legend(fontsize=7)
fig.savefig("out/examples/own_model.png", dpi=150)
print("plot: out/examples/own_model.png")
