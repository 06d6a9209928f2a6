"""A corpus of users' flows under **default settings** (``gradflow.integrate`` with only ``t1``
and the save points given), each against an exact or independent reference to ``t1 ≥ 1e12``
(``1e20``–``1e30`` where the flow diverges): closed forms where the flow has one, SciPy's Radau
(rtol 1e-12, the exact Jacobian by JAX) in log time otherwise.

The rest stop and the stiffness switch decide these results; none of the flows here was used to
tune them (docs: solver guide, "The rest stop"). Flows without a finite minimiser (logistic,
exponential, softmax regression on separable data, p- and key–query attention) must never stop
early; flows with one must stop and carry their quadratures on exactly; a degenerate minimum
(``w⁴``) must not stop before the distance left is below the tolerance; a batch whose lanes come
to rest at different times keeps each lane's own stop.

``python -m tests.test_corpus`` prints the table (model, t1, max relative error, steps, status).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
import scipy.optimize
from jax.flatten_util import ravel_pytree

import gradflow
from gradflow.attention import maxmargin as mm

RTOL_DEFAULT = 1e-8  # integrate's default; the checks below allow the global error a margin of 100
TOL = 100 * RTOL_DEFAULT


def _ts(t1, num=13):
    return np.concatenate([[0.0], np.geomspace(1e-2, t1, num)])


def radau_log_time(loss, params0, ts, args=None, rtol=1e-12, atol=1e-14):
    """SciPy Radau on ``dθ/dτ = −(1 + t)∇L(θ)`` in ``τ = log(1 + t)`` (the exact Jacobian by
    ``jax.jacfwd``): the parameters at ``ts`` as a ``(T, n)`` array of the flattened pytree."""
    flat0, unravel = ravel_pytree(jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), params0))
    call = (lambda p: loss(p)) if args is None else (lambda p: loss(p, args))
    grad = lambda x: ravel_pytree(jax.grad(call)(unravel(x)))[0]
    f = jax.jit(lambda tau, x: -jnp.exp(tau) * grad(x))
    jac = jax.jit(lambda tau, x: -jnp.exp(tau) * jax.jacfwd(grad)(x))
    taus = np.log1p(ts)
    sol = scipy.integrate.solve_ivp(lambda tau, x: np.asarray(f(tau, x)), (0.0, taus[-1]), np.asarray(flat0),
                                    method="Radau", t_eval=taus, rtol=rtol, atol=atol,
                                    jac=lambda tau, x: np.asarray(jac(tau, x)))
    assert sol.success, sol.message
    return sol.y.T


def _flat(sol):
    """``sol.params`` as a ``(T, n)`` array (leaves flattened in ``ravel_pytree``'s order)."""
    leaves = jax.tree.leaves(sol.params)
    T = leaves[0].shape[0]
    return np.concatenate([np.asarray(x).reshape(T, -1) for x in leaves], axis=1)


def rel_err(got, want):
    """Max over save points of ``‖got − want‖∞ / ‖want‖∞`` (per save point; the scale floored at
    1e-3 of its largest value, so a start at ``θ = 0`` does not divide by zero)."""
    got, want = np.atleast_2d(got), np.atleast_2d(want)
    if got.shape[0] != want.shape[0]:
        got, want = got.reshape(want.shape[0], -1), want.reshape(want.shape[0], -1)
    scale = np.max(np.abs(want), axis=1)
    scale = np.maximum(scale, 1e-3 * scale.max())
    return float(np.max(np.max(np.abs(got - want), axis=1) / scale))


@dataclasses.dataclass
class Case:
    """One corpus flow: ``run()`` returns ``(sol, {quantity: relative error})``; ``rests`` says
    whether the flow must come to rest before ``t1`` (``None``: not asserted)."""

    name: str
    t1: float
    run: Callable
    rests: bool | None


# ----------------------------------------------------------------------------- closed forms
def _logistic_1d():
    """``L = log(1 + e^{−w})``, ``w0 = 0``: ``w + e^w = 1 + t`` exactly; ``∫L dt`` by quadrature in
    ``w`` (``dt = (1 + e^w) dw``)."""
    t1 = 1e20
    ts = _ts(t1)
    sol = gradflow.integrate(lambda p: jnp.logaddexp(0.0, -p["w"]), {"w": 0.0}, t1=t1, ts=ts,
                             quadratures={"L": lambda p: jnp.logaddexp(0.0, -p["w"])})
    w = np.array([scipy.optimize.brentq(lambda x: x + np.exp(x) - 1 - t, -1.0, 100.0, xtol=1e-14) if t > 0 else 0.0
                  for t in ts])
    area = np.array([scipy.integrate.quad(lambda x: np.log1p(np.exp(-x)) * (1 + np.exp(x)), 0.0, wi,
                                          epsabs=1e-13, epsrel=1e-13)[0] for wi in w])
    return sol, {"w": rel_err(sol.params["w"][:, None], w[:, None]),
                 "∫L dt": rel_err(sol.quadratures["L"][1:, None], area[1:, None])}


def _exponential_1d():
    """``L = e^{−w}``, ``w0 = 0``: ``w = log(1 + t)`` exactly (``κ = 0``: the bound is infinite)."""
    t1 = 1e30
    ts = _ts(t1)
    sol = gradflow.integrate(lambda p: jnp.exp(-p["w"]), {"w": 0.0}, t1=t1, ts=ts)
    return sol, {"w": rel_err(sol.params["w"][:, None], np.log1p(ts)[:, None])}


def _quartic():
    """``L = w⁴/4`` (a degenerate minimum, algebraic convergence): ``w = w0/√(1 + 2w0²t)``. The
    stop may fire only once ``w`` is below the tolerance: where ``w < 1e-6`` the error is checked
    against ``atol`` (the exact ``w(1e30) = 7e-16``), elsewhere relative."""
    t1 = 1e30
    ts = _ts(t1, 31)
    sol = gradflow.integrate(lambda p: 0.25 * p["w"] ** 4, {"w": 1.0}, t1=t1, ts=ts)
    w = 1.0 / np.sqrt(1.0 + 2.0 * ts)
    got = np.asarray(sol.params["w"])
    atol = RTOL_DEFAULT / 100
    tiny = w < 1e-6
    assert np.max(np.abs(got - w)[tiny]) < atol, np.max(np.abs(got - w)[tiny])
    assert float(sol.t_steady) > 1e20  # w(1e20) = 7e-11: it could not rest before that
    return sol, {"w (where w ≥ 1e-6)": rel_err(got[~tiny, None], w[~tiny, None])}


def _linear_regression():
    """``L = ½‖Xw − y‖²/n`` (n > d, a residual at the minimiser): eigenbasis closed form of ``w``
    and of ``∫L dt = L*·t + Σ c_i²λ_i (1 − e^{−2λ_i t})/(4λ_i)``, which keeps growing after the stop."""
    rng = np.random.RandomState(3)
    n, d = 12, 4
    X, y = rng.randn(n, d), rng.randn(n)
    loss = lambda p: 0.5 * jnp.mean((X @ p["w"] - y) ** 2)
    t1 = 1e12
    ts = _ts(t1)
    sol = gradflow.integrate(loss, {"w": np.zeros(d)}, t1=t1, ts=ts, quadratures={"L": loss})
    H = X.T @ X / n
    lam, Q = np.linalg.eigh(H)
    w_star = np.linalg.solve(H, X.T @ y / n)
    c = Q.T @ (np.zeros(d) - w_star)
    w = np.stack([w_star + Q @ (np.exp(-lam * t) * c) for t in ts])
    L_star = 0.5 * np.mean((X @ w_star - y) ** 2)
    area = L_star * ts + np.array([np.sum(c ** 2 * lam * -np.expm1(-2 * lam * t) / (4 * lam)) for t in ts])
    return sol, {"w": rel_err(sol.params["w"], w), "∫L dt": rel_err(sol.quadratures["L"][1:, None], area[1:, None])}


def _two_layer_scalar():
    """``L = ½(y − w₂w₁)²`` from balanced ``w₀``: ``w² = y/(1 + (y/w₀² − 1)e^{−2yt})``."""
    y, w0 = 2.0, 0.1
    t1 = 1e12
    ts = _ts(t1)
    sol = gradflow.integrate(lambda p: 0.5 * (y - p["w2"] * p["w1"]) ** 2, {"w1": w0, "w2": w0}, t1=t1, ts=ts)
    w = np.sqrt(y / (1 + (y / w0 ** 2 - 1) * np.exp(-2 * y * ts)))
    return sol, {"w1": rel_err(sol.params["w1"][:, None], w[:, None]),
                 "w2": rel_err(sol.params["w2"][:, None], w[:, None])}


def _batch_rests_at_different_times():
    """``integrate_batch`` of ``L = ½λ(w − 1)²`` with ``λ = 1, 1e-2, 1e-4`` (one per lane,
    ``args_batched``): each lane stops at its own time (``∝ 1/λ``), holds ``w = 1`` and continues
    ``∫(w − 1)² dt`` exactly: ``(1 − e^{−2λt})/(2λ)``."""
    lam = np.array([1.0, 1e-2, 1e-4])
    t1 = 1e12
    ts = _ts(t1)
    loss = lambda p, lm: 0.5 * lm * (p["w"] - 1.0) ** 2
    sol = gradflow.integrate_batch(loss, {"w": np.zeros(3)}, args=lam, args_batched=True, t1=t1, ts=ts,
                                   quadratures={"e2": lambda p, lm: (p["w"] - 1.0) ** 2})
    w = 1.0 - np.exp(-np.outer(lam, ts))
    area = -np.expm1(-2 * np.outer(lam, ts)) / (2 * lam[:, None])
    t_rest = np.asarray(sol.t_steady)
    assert np.all(np.isfinite(t_rest)) and np.all(np.diff(t_rest) > 0), t_rest  # later for smaller λ
    return sol, {"w": max(rel_err(sol.params["w"][b][:, None], w[b][:, None]) for b in range(3)),
                 "∫(w−1)² dt": max(rel_err(sol.quadratures["e2"][b][1:, None], area[b][1:, None]) for b in range(3))}


# ----------------------------------------------------------------------------- SciPy references
def _against_radau(loss, p0, t1):
    """``integrate`` of ``loss`` from ``p0`` under defaults, and its error against SciPy Radau."""
    ts = _ts(t1)
    sol = gradflow.integrate(loss, p0, t1=t1, ts=ts)
    return sol, {"params": rel_err(_flat(sol), radau_log_time(loss, p0, ts))}


def _deep_linear():
    """A 3-layer linear net ``W3 W2 W1`` (2×2 each) from small init towards ``diag(3, 1)``:
    saddle-to-saddle (two plateaus), finite minimiser; SciPy Radau reference."""
    rng = np.random.RandomState(0)
    target = np.diag([3.0, 1.0])
    loss = lambda p: 0.5 * jnp.sum((p["W3"] @ p["W2"] @ p["W1"] - target) ** 2)
    p0 = {k: 1e-2 * rng.randn(2, 2) for k in ("W1", "W2", "W3")}
    return _against_radau(loss, p0, 1e12)


def _softmax_regression_separable():
    """Multinomial logistic regression on separable data (no finite minimiser, ``‖W‖ ∼ log t``)."""
    rng = np.random.RandomState(1)
    centres = np.array([[3.0, 0.0], [0.0, 3.0], [-3.0, -3.0]])
    X = np.concatenate([c + 0.3 * rng.randn(4, 2) for c in centres])
    labels = np.repeat(np.arange(3), 4)
    loss = lambda p: -jnp.mean(gradflow.log_softmax(X @ p["W"] + p["b"], axis=-1)[np.arange(12), labels])
    p0 = {"W": np.zeros((2, 3)), "b": np.zeros(3)}
    return _against_radau(loss, p0, 1e20)


def _p_attention():
    """p-attention max-margin token selection (logistic loss, ``v`` fixed): ``‖p‖ ∼ log t``."""
    data = mm.token_selection_data(0, n=3, T=4, d=6)
    t1 = 1e30
    ts = _ts(t1)
    sol = gradflow.integrate(mm.p_loss, jnp.zeros(6), args=data, t1=t1, ts=ts)
    ref = radau_log_time(mm.p_loss, jnp.zeros(6), ts, args=data)
    return sol, {"p": rel_err(np.asarray(sol.params), ref)}


def _kq_attention():
    """Key–query attention ``softmax(X W z_i)`` (``W`` trained, logistic loss): ``‖W‖ ∼ log t``."""
    data = mm.token_selection_data(1, n=3, T=4, d=4)
    t1 = 1e20
    ts = _ts(t1)
    W0 = 1e-2 * np.eye(4)
    sol = gradflow.integrate(mm.kq_loss, W0, args=data, t1=t1, ts=ts)
    ref = radau_log_time(mm.kq_loss, W0, ts, args=data)
    return sol, {"W": rel_err(np.asarray(sol.params).reshape(len(ts), -1), ref)}


def _matrix_factorisation():
    """``½‖UVᵀ − M‖²`` with ``M`` of rank 2, ``U, V`` 4×2 from small init: a manifold of minima."""
    rng = np.random.RandomState(2)
    M = rng.randn(4, 2) @ rng.randn(2, 4)
    loss = lambda p: 0.5 * jnp.sum((p["U"] @ p["V"].T - M) ** 2)
    p0 = {"U": 0.1 * rng.randn(4, 2), "V": 0.1 * rng.randn(4, 2)}
    return _against_radau(loss, p0, 1e12)


def _tanh_net():
    """A 2-4-1 tanh network on 6 points, square loss (SciPy Radau reference)."""
    rng = np.random.RandomState(4)
    X, y = rng.randn(6, 2), rng.randn(6)
    loss = lambda p: 0.5 * jnp.mean((jnp.tanh(X @ p["W"] + p["b"]) @ p["v"] - y) ** 2)
    p0 = {"W": 0.5 * rng.randn(2, 4), "b": np.zeros(4), "v": 0.5 * rng.randn(4)}
    return _against_radau(loss, p0, 1e12)


def _value_softmax_square():
    """The value-softmax model ``β = V softmax(a)`` with a square loss towards a target, written
    as a user loss with :func:`gradflow.softmax` (SciPy Radau reference)."""
    rng = np.random.RandomState(5)
    target = rng.randn(3)
    loss = lambda p: 0.5 * jnp.sum((p["V"] @ gradflow.softmax(p["a"]) - target) ** 2)
    p0 = {"V": 0.1 * rng.randn(3, 4), "a": np.zeros(4)}
    return _against_radau(loss, p0, 1e12)


def _value_softmax_logistic():
    """The value-softmax model under the logistic teacher (``simulate``; no finite minimiser)
    against SciPy Radau on the same loss written with :func:`gradflow.softmax`."""
    rng = np.random.RandomState(6)
    beta = rng.randn(4)
    V0, a0 = 0.1 * rng.randn(4, 5), np.zeros(5)
    t1 = 1e20
    ts = _ts(t1)
    traj = gradflow.simulate(gradflow.LogisticTeacher(beta), V0, a0, t1=t1, ts=ts)
    loss = lambda p: jnp.logaddexp(0.0, -beta @ (p[0] @ gradflow.softmax(p[1])))
    ref = radau_log_time(loss, (V0, a0), ts)
    got = np.concatenate([np.asarray(traj.V).reshape(len(ts), -1), np.asarray(traj.a)], axis=1)
    return traj, {"(V, a)": rel_err(got, ref)}


def _logistic_nonseparable():
    """Logistic regression on non-separable data: a finite minimiser, reached exponentially."""
    rng = np.random.RandomState(7)
    X = rng.randn(10, 2)
    y = np.where(rng.rand(10) < 0.5, 1.0, -1.0)
    loss = lambda p: jnp.mean(jnp.logaddexp(0.0, -y * (X @ p["w"] + p["c"])))
    p0 = {"w": np.zeros(2), "c": np.zeros(())}
    return _against_radau(loss, p0, 1e12)


CASES = [
    Case("1-D logistic (w + e^w = 1 + t)", 1e20, _logistic_1d, rests=False),
    Case("1-D exponential (w = log(1 + t))", 1e30, _exponential_1d, rests=False),
    Case("quartic w⁴/4 (algebraic)", 1e30, _quartic, rests=None),
    Case("linear regression (eigenbasis)", 1e12, _linear_regression, rests=True),
    Case("two-layer scalar net (closed form)", 1e12, _two_layer_scalar, rests=True),
    Case("batch resting at 3 times (closed form)", 1e12, _batch_rests_at_different_times, rests=True),
    Case("deep linear net 3×(2×2) (Radau)", 1e12, _deep_linear, rests=True),
    Case("softmax regression, separable (Radau)", 1e20, _softmax_regression_separable, rests=False),
    Case("p-attention max-margin (Radau)", 1e30, _p_attention, rests=False),
    Case("key–query attention W (Radau)", 1e20, _kq_attention, rests=False),
    Case("matrix factorisation (Radau)", 1e12, _matrix_factorisation, rests=True),
    Case("tanh net 2-4-1 (Radau)", 1e12, _tanh_net, rests=None),
    Case("value-softmax, square loss (Radau)", 1e12, _value_softmax_square, rests=True),
    Case("value-softmax, logistic teacher (Radau)", 1e20, _value_softmax_logistic, rests=False),
    Case("logistic, non-separable (Radau)", 1e12, _logistic_nonseparable, rests=True),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_flow_matches_its_reference_under_defaults(case):
    sol, errs = case.run()
    status = sol.status if isinstance(sol.status, str) else set(sol.status)
    assert status in ("ok", {"ok"}), status
    assert np.all(np.asarray(sol.t_end) == case.t1)
    assert bool(np.all(np.asarray(sol.valid)))
    rested = np.isfinite(np.asarray(sol.t_steady))
    if case.rests is not None:
        assert bool(np.all(rested == case.rests)), (case.rests, np.asarray(sol.t_steady))
    for what, err in errs.items():
        assert err < TOL, (what, err)


def test_corpus_reference_detects_a_wrong_answer():
    """Negative control: the old rest test's answer on the 1-D logistic flow (frozen at
    ``w = 28.97`` from ``t ≈ 3.8e12``, status ``ok``) fails the corpus's comparison."""
    t1 = 1e20
    ts = _ts(t1)
    w = np.array([scipy.optimize.brentq(lambda x: x + np.exp(x) - 1 - t, -1.0, 100.0) if t > 0 else 0.0 for t in ts])
    frozen = np.minimum(w, 28.97)
    assert rel_err(frozen[:, None], w[:, None]) > TOL


def main():
    print(f"| model | t1 | max relative error | steps | status | rest at t |\n|---|---|---|---|---|---|")
    for case in CASES:
        sol, errs = case.run()
        err = max(errs.values())
        steps = np.asarray(sol.num_steps).tolist()
        rest = np.asarray(sol.t_steady)
        rest = "—" if not np.any(np.isfinite(rest)) else ", ".join(f"{r:.2g}" for r in np.atleast_1d(rest))
        print(f"| {case.name} | {case.t1:.0e} | {err / (TOL if 'abs' in ''.join(errs) else 1):.1e} | {steps} | "
              f"{sol.status} | {rest} |")


if __name__ == "__main__":
    main()
