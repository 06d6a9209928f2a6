"""The baselines: the authors' NumPy gradient-descent loop and SciPy ``solve_ivp``.

The GD loop is written as the paper's authors would (plain NumPy, one iteration per Python
loop turn, lr 0.1, the setting of the paper's Fig. 2), with a numerically stable ``γ = expit(−⟨β*, β⟩)``. SciPy
integrates the same log-time system ``τ = log(1 + t)`` with the independent NumPy field of
``benchmarks/reference.py``.
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp
from scipy.special import expit

from benchmarks import reference as ref


def authors_gd(V, a, beta_star, lr: float, iters: int, record) -> tuple[np.ndarray, np.ndarray]:
    """Plain GD on the logistic teacher; returns ``(V, a)`` at the iteration indices ``record``."""
    rec = set(int(k) for k in record)
    Vs, As = [], []
    V, a = V.copy(), a.copy()
    for k in range(iters + 1):
        if k in rec:
            Vs.append(V.copy())
            As.append(a.copy())
        if k == iters:
            break
        z = np.exp(a - a.max())
        s = z / z.sum()
        beta = V @ s
        gamma = expit(-beta_star @ beta)
        r = gamma * beta_star
        g = V.T @ r
        V = V + lr * np.outer(r, s)
        a = a + lr * s * (g - s @ g)
    return np.array(Vs), np.array(As)


def scipy_flow(V0, a0, beta_star, ts, method: str, rtol: float, atol: float):
    """``solve_ivp`` in log time; returns ``(a at ts (T, n), number of field evaluations)``."""
    d, n = V0.shape
    residual = ref.logistic_residual(beta_star)

    def rhs(tau, y):
        dV, da, g = ref.field(y[: d * n].reshape(d, n), y[d * n : d * n + n], residual)
        return np.exp(tau) * np.concatenate([dV.ravel(), da, [g]])

    y0 = np.concatenate([V0.ravel(), a0, [0.0]])
    taus = np.log1p(ts)
    sol = solve_ivp(rhs, (0.0, taus[-1]), y0, t_eval=taus, method=method, rtol=rtol, atol=atol)
    if not sol.success:
        raise RuntimeError(f"solve_ivp {method} failed: {sol.message}")
    return sol.y[d * n : d * n + n].T, int(sol.nfev)
