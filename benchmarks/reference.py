"""Independent NumPy/SciPy implementation of the flow, the reference of the benchmarks and the tests
(``tests/reference.py`` re-exports it; neither folder is installed).

It follows the paper's gradient flow (Eqs. 2–4) by hand (no JAX, no autodiff): ``r = −∇ℓ(β)``, ``dV/dt = r sᵀ``,
``da/dt = J(s) Vᵀ r`` with ``J(s) = diag(s) − s sᵀ``, and the log-time change ``τ = log(1+t)``.
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp
from scipy.special import expit


def softmax(a):
    z = np.exp(a - a.max())
    return z / z.sum()


def logistic_residual(beta_star):
    def r(beta):
        m = beta_star @ beta
        gamma = expit(-m)  # 1/(1+e^m); 0.5(1 - tanh(m/2)) would lose all digits at m ≈ 27
        return gamma * beta_star, gamma

    return r


def square_residual(target, design=None, scale=0.5):
    def r(beta):
        if design is None:
            res = 2 * scale * (target - beta)
            return res, res @ target / (target @ target)
        res = 2 * scale * design.T @ (target - design @ beta)
        return res, np.linalg.norm(res)

    return r


def cross_entropy_residual(p_star):
    """Soft-target cross-entropy ``−Σ p*_k log softmax(β)_k``: ``r = p* − softmax(β)``, ``γ = ‖r‖``."""

    def r(beta):
        res = p_star - softmax(beta)
        return res, np.linalg.norm(res)

    return r


def field(V, a, residual, temperature=1.0):
    """``dV/dt = r sᵀ``, ``da/dt = J(s) Vᵀ r / T`` with ``s = softmax(a / T)`` (chain rule through
    ``a / T``), and ``γ``."""
    s = softmax(a / temperature)
    beta = V @ s
    r, gamma = residual(beta)
    J = np.diag(s) - np.outer(s, s)
    return np.outer(r, s), J @ (V.T @ r) / temperature, gamma


def integrate(V0, a0, residual, ts, rtol=1e-13, atol=1e-15, method="DOP853", temperature=1.0):
    """Integrate in ``τ = log(1+t)``; returns ``(V (T,d,n), a (T,n), Gamma (T,))`` at ``ts``."""
    d, n = V0.shape

    def rhs(tau, y):
        V = y[: d * n].reshape(d, n)
        a = y[d * n : d * n + n]
        dV, da, g = field(V, a, residual, temperature)
        return np.exp(tau) * np.concatenate([dV.ravel(), da, [g]])

    y0 = np.concatenate([V0.ravel(), a0, [0.0]])
    taus = np.log1p(ts)
    sol = solve_ivp(rhs, (0.0, taus[-1]), y0, t_eval=taus, rtol=rtol, atol=atol, method=method)
    assert sol.success, sol.message
    Y = sol.y.T
    return Y[:, : d * n].reshape(-1, d, n), Y[:, d * n : d * n + n], Y[:, -1]


def euler(V0, a0, residual, lr, steps, record):
    """Plain gradient descent (explicit Euler) in NumPy; states at the iteration indices ``record``."""
    V, a = V0.copy(), a0.copy()
    out_V, out_a, Gamma, G = [], [], [], 0.0
    rec = set(int(k) for k in record)
    for k in range(steps + 1):
        if k in rec:
            out_V.append(V.copy())
            out_a.append(a.copy())
            Gamma.append(G)
        if k == steps:
            break
        dV, da, g = field(V, a, residual)
        V, a, G = V + lr * dV, a + lr * da, G + lr * g
    return np.array(out_V), np.array(out_a), np.array(Gamma)
