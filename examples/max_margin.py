"""Max-margin token selection: p-attention's flow turns to the att-SVM direction

p-attention `f(X) = vᵀ Xᵀ softmax(X p)` under the logistic loss, with `v` fixed (Tarzanagh, Li,
Zhang, Oymak, NeurIPS 2023; Tarzanagh, Li, Thrampoulidis, Oymak, "Transformers as Support Vector
Machines", 2023): `‖p‖` diverges and its direction tends to the att-SVM solution
`p_mm = argmin ‖p‖ s.t. (x_{i,opt_i} − x_it)ᵀ p ≥ 1`. `gradflow.attention.maxmargin` holds the data
(`token_selection_data`: a stated optimal token per sample, non-optimal tokens sharing one score),
the losses (`p_loss`, `pv_loss`, `kq_loss`) and the SVMs (`att_svm`, solved with Clarabel); here
the flow runs with `gradflow.integrate_batch` to `t = 1e30` for 4 draws, against the att-SVM of
the stated selection and, as a negative control, of a wrong one. The same statement is the
check `mm.direction` (`gradflow check mm.direction`; also `mm.regpath` and `mm.value-softmax`).
"""

import os

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import gradflow
from gradflow.attention import maxmargin as mm

draws = [mm.token_selection_data(seed, n=3, T=4, d=10) for seed in range(4)]
right = [mm.att_svm(dt.X, dt.Y, dt.v, dt.opt).w for dt in draws]
wrong = [mm.att_svm(dt.X, dt.Y, dt.v, (np.asarray(dt.opt) + 1) % 4).w for dt in draws]   # control

ts = np.concatenate([[0.0], np.logspace(-2, 30, 161)])
data = jax.tree.map(lambda *xs: jnp.stack(xs), *draws)                 # one data set per lane
sol = gradflow.integrate_batch(mm.p_loss, jnp.zeros((4, 10)), args=data, args_batched=True,
                               t1=1e30, ts=ts, rtol=1e-10)
print(f"statuses {list(sol.status)}, solver steps to t = 1e30: {np.asarray(sol.num_steps).tolist()}")

P = np.asarray(sol.params)                                             # (4, len(ts), 10)
err = np.array([[1 - mm.cosine(p, right[b]) if np.any(p) else 1.0 for p in P[b]] for b in range(4)])
err_wrong = np.array([1 - mm.cosine(P[b, -1], wrong[b]) for b in range(4)])
for t0 in (1e4, 1e12, 1e30):
    i = int(np.argmin(abs(ts - t0)))
    print(f"1 - cos(p, p_mm) at t = {t0:.0e}: {' '.join(f'{e:.1e}' for e in err[:, i])}")
print(f"control, 1 - cos(p(1e30), SVM of a wrong selection): {np.round(err_wrong, 2)}")
late = ts >= 1e20
slopes = [np.polyfit(np.log(ts[late]), np.linalg.norm(P[b, late], axis=1), 1)[0] / np.linalg.norm(right[b])
          for b in range(4)]
print(f"d|p|/d log t over [1e20, 1e30] divided by |p_mm|: {np.round(slopes, 4)}")
assert sol.ok and np.all(err[:, -1] < 1e-2) and np.all(err_wrong > 0.05)
assert np.all(err[:, -1] < err[:, int(np.argmin(abs(ts - 1e6)))])        # still falling

os.makedirs("out/examples", exist_ok=True)
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.2), layout="constrained")
for b in range(4):
    ax1.loglog(ts[1:], err[b, 1:], label=f"draw {b}")
    ax2.semilogx(ts[1:], np.linalg.norm(P[b, 1:], axis=1), color=f"C{b}")
    ax2.semilogx(ts[1:], np.linalg.norm(right[b]) * np.log(ts[1:]), ":", color=f"C{b}")
ax1.set(xlabel="t", ylabel="1 − cos(p(t), p_mm)", title="direction → att-SVM")
ax1.legend(fontsize=7)
ax2.set(xlabel="t", ylabel="‖p(t)‖", ylim=(0, None), title="‖p‖ vs ‖p_mm‖ log t (dotted)")
fig.savefig("out/examples/max_margin.png", dpi=150)
print("plot: out/examples/max_margin.png")
