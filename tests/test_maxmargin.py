"""Max-margin token selection: models against a NumPy re-implementation, data generator
properties, the att-SVM against its KKT conditions, an independent formulation (Lawson–Hanson
least-distance programming via SciPy's NNLS) and a hand-solved case, and the checks' verdicts on
constructed trajectories (``gradflow.theory.maxmargin``)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads
from scipy.optimize import nnls

import gradflow
from gradflow.attention import maxmargin as mm
from gradflow.theory import maxmargin as tmm


def _np_softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def _ldp(A):
    """``argmin ‖w‖ s.t. A w ≥ 1`` by Lawson & Hanson's least-distance programming: NNLS on
    ``E = [Aᵀ; 1ᵀ]``, ``f = e_last``; ``w = −r[:D]/r[D]`` with ``r = E u − f``."""
    m, D = A.shape
    E = np.vstack([A.T, np.ones((1, m))])
    f = np.zeros(D + 1)
    f[-1] = 1.0
    u, _ = nnls(E, f, maxiter=50 * m)
    r = E @ u - f
    return -r[:D] / r[D]


def _kkt(sol):
    """Primal/dual feasibility, complementary slackness and stationarity residuals."""
    w, A, lam = np.ravel(sol.w), sol.A, sol.dual
    slack = A @ w - 1
    return dict(primal=max(0.0, -slack.min()), dual=max(0.0, -lam.min()),
                slackness=float(np.max(np.abs(lam * slack))),
                stationarity=float(np.linalg.norm(w - A.T @ lam) / np.linalg.norm(w)))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("shared", [True, False])
def test_generator_states_the_optimal_token(seed, shared):
    data = mm.token_selection_data(seed, n=4, T=5, d=16, shared_scores=shared)
    g = np.asarray(mm.scores(data))
    opt = np.asarray(data.opt)
    np.testing.assert_array_equal(mm.optimal_tokens(data), opt)
    np.testing.assert_allclose(g[np.arange(4), opt], 1.0, rtol=1e-13)
    others = g[np.arange(5)[None, :] != opt[:, None]].reshape(4, 4)
    if shared:
        np.testing.assert_allclose(others, 0.5, rtol=1e-12)
    else:
        assert np.all(others <= 0.9 + 1e-12) and np.ptp(others, axis=1).min() > 0


def test_models_match_numpy():
    data = mm.token_selection_data(3, n=3, T=4, d=6)
    rng = np.random.default_rng(0)
    p, W, v2 = rng.normal(size=6), rng.normal(size=(6, 6)), rng.normal(size=6)
    X, Y, v, Z = (np.asarray(a) for a in (data.X, data.Y, data.v, data.Z))
    f_p = np.array([v @ X[i].T @ _np_softmax(X[i] @ p) for i in range(3)])
    f_w = np.array([v @ X[i].T @ _np_softmax(X[i] @ W @ Z[i]) for i in range(3)])
    f_pv = np.array([v2 @ X[i].T @ _np_softmax(X[i] @ p) for i in range(3)])
    ell = lambda u: np.log1p(np.exp(-u))  # noqa: E731
    assert float(mm.p_loss(jnp.asarray(p), data)) == pytest.approx(np.mean(ell(Y * f_p)), rel=1e-13)
    assert float(mm.kq_loss(jnp.asarray(W), data)) == pytest.approx(np.mean(ell(Y * f_w)), rel=1e-13)
    pv = {"p": jnp.asarray(p), "v": jnp.asarray(v2)}
    assert float(mm.pv_loss(pv, data)) == pytest.approx(np.mean(ell(Y * f_pv)), rel=1e-13)
    # the key-query model with W = p z^T / |z|^2 is p-attention for every sample sharing z
    z = Z[0]
    same_z = mm.TokenData(X, Y, v, data.opt, np.tile(z, (3, 1)))
    assert float(mm.kq_loss(jnp.asarray(np.outer(p, z)), same_z)) == pytest.approx(float(mm.p_loss(jnp.asarray(p), data)), rel=1e-13)
    check_grads(lambda q: mm.p_loss(q, data), (jnp.asarray(p),), order=2)


def test_log_excess_loss_matches_direct_difference():
    data = mm.token_selection_data(1)
    L_star = float(np.mean(np.logaddexp(0.0, -np.ones(3))))
    rng = np.random.default_rng(1)
    for scale in (0.1, 1.0, 5.0):
        p = jnp.asarray(scale * rng.normal(size=10))
        direct = math.log(float(mm.p_loss(p, data)) - L_star)
        assert float(mm.log_excess_loss(p, data)) == pytest.approx(direct, rel=1e-9)
    # far beyond float resolution of L: still finite, and ≈ −min margin·‖p‖
    svm = mm.att_svm(data.X, data.Y, data.v, data.opt)
    val = float(mm.log_excess_loss(jnp.asarray(1e3 * svm.w), data))
    assert math.isfinite(val) and val == pytest.approx(-1e3, rel=0.01)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("kind", ["p", "W"])
def test_att_svm_kkt_and_independent_formulation(seed, kind):
    data = mm.token_selection_data(seed, n=3, T=4, d=10 if kind == "p" else 4)
    if kind == "p":
        sol = mm.att_svm(data.X, data.Y, data.v, data.opt)
        assert sol.w.shape == (10,)
    else:
        sol = mm.att_svm_kq(data.X, data.Y, data.v, data.opt, data.Z)
        assert sol.w.shape == (4, 4)
    kkt = _kkt(sol)
    assert kkt["primal"] < 1e-10 and kkt["dual"] == 0.0
    assert kkt["slackness"] < 1e-10 and kkt["stationarity"] < 1e-10
    # constraint rows built independently from X, opt (and Z)
    X, opt, Z = np.asarray(data.X), np.asarray(data.opt), np.asarray(data.Z)
    rows = []
    for i in range(3):
        for t in range(4):
            if t != opt[i]:
                diff = X[i, opt[i]] - X[i, t]
                rows.append(diff if kind == "p" else np.outer(diff, Z[i]).ravel())
    np.testing.assert_allclose(sol.A, np.asarray(rows), rtol=0, atol=0)
    np.testing.assert_allclose(np.ravel(sol.w), _ldp(np.asarray(rows)), rtol=1e-8, atol=1e-10)
    assert sol.margin == pytest.approx(1 / np.linalg.norm(sol.w))


def test_att_svm_hand_solved_cases():
    # one sample, two tokens: p_mm = (x_opt − x_1)/‖x_opt − x_1‖²
    X = np.array([[[2.0, 1.0, 0.0], [0.0, 0.0, 1.0]]])
    sol = mm.att_svm(X, np.ones(1), np.array([1.0, 0.0, 0.0]), np.array([0], np.int32))
    diff = X[0, 0] - X[0, 1]
    np.testing.assert_allclose(sol.w, diff / (diff @ diff), rtol=1e-12)
    # X = I (the value-softmax logits): the centred one-hot e_w − 1/n
    n = 5
    sol = tmm.identity_svm(n, 2)
    np.testing.assert_allclose(sol.w, np.eye(n)[2] - 1 / n, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(sol.dual, np.full(n - 1, 1 / n), rtol=1e-10)


def test_value_svm():
    data = mm.token_selection_data(2, labels="random")
    sol = mm.value_svm(data.X, data.Y, data.opt)
    rows = np.asarray(data.Y)[:, None] * np.asarray(data.X)[np.arange(3), np.asarray(data.opt)]
    np.testing.assert_allclose(sol.w, _ldp(rows), rtol=1e-8, atol=1e-10)


def test_infeasible_selection_raises():
    # identical tokens cannot be separated
    X = np.ones((1, 3, 2))
    with pytest.raises(gradflow.GradflowValueError, match="separable"):
        mm.att_svm(X, np.ones(1), np.array([1.0, 0.0]), np.array([0], np.int32))


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(n=0), "n: got 0"),
        (dict(T=1), "T: got 1"),
        (dict(d=2.5), "d: got 2.5"),
        (dict(opt_score=0.5, other_score=0.5), "opt_score"),
        (dict(noise=-1.0), "noise"),
        (dict(labels="mixed"), "labels"),
        (dict(other_score=float("nan")), "other_score"),
    ],
)
def test_generator_bad_input(kwargs, match):
    with pytest.raises(gradflow.GradflowValueError, match=match):
        mm.token_selection_data(0, **kwargs)


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("X", np.ones((2, 3)), "X: got"),
        ("Y", np.array([1.0, 0.0]), "Y: got"),
        ("v", np.ones(5), "v: got"),
        ("opt", np.array([0, 3]), "opt: got"),
        ("opt", np.array([0.0, 1.0]), "opt: got"),
        ("X", np.full((2, 3, 4), np.nan), "X: got"),
    ],
)
def test_svm_bad_input(field, value, match):
    args = dict(X=np.random.default_rng(0).normal(size=(2, 3, 4)), Y=np.ones(2), v=np.ones(4), opt=np.array([0, 1]))
    args[field] = value
    with pytest.raises(gradflow.GradflowValueError, match=match):
        mm.att_svm(args["X"], args["Y"], args["v"], args["opt"])


def test_optimal_tokens_rejects_ties():
    data = mm.TokenData(np.ones((1, 2, 2)), np.ones(1), np.ones(2), np.array([0], np.int32))
    with pytest.raises(gradflow.GradflowValueError, match="tied"):
        mm.optimal_tokens(data)


def _synthetic_path(ref, t, k=2.0, wrong=None):
    """``p(t) = ‖ref‖ log t · (ref/‖ref‖ + q/log t)``: 1 − cos ∝ (log t)^{−2}, ‖p‖ slope = ‖ref‖."""
    q = np.random.default_rng(0).normal(size=ref.shape)
    q -= (q @ ref) / (ref @ ref) * ref
    L = np.log(np.maximum(t, 2.0))[:, None]
    return np.linalg.norm(ref) * L * (ref / np.linalg.norm(ref) + q[None] / L ** (k / 2))


def test_direction_verdict_on_constructed_paths():
    ref = np.array([1.0, 2.0, 0.5])
    t = tmm.save_times()
    P = _synthetic_path(ref, t)[None]
    v = tmm.direction_verdict(t, P, ref[None])
    assert v.holds and v.details["slope_ratio"][0] == pytest.approx(1.0, abs=1e-3)
    assert v.details["rate_k"][0] == pytest.approx(2.0, abs=0.1)
    # negative controls: a wrong reference; a path that stalls (direction error stops falling)
    other = np.array([1.0, -2.0, 0.5])
    assert not tmm.direction_verdict(t, P, other[None]).holds
    stalled = P.copy()
    stalled[0, t > 1e10] = P[0, np.searchsorted(t, 1e10)]
    assert not tmm.direction_verdict(t, stalled, ref[None], slope_tol=None).holds
    # a norm growing twice too fast fails (iv)
    assert not tmm.direction_verdict(t, 2 * P, ref[None]).holds


# --------------------------------------------------------------------------------------------
# factorised key–query attention and the nuclear-norm att-SVM
# --------------------------------------------------------------------------------------------


def test_factored_models_match_numpy_and_the_combined_W():
    data = mm.token_selection_data(5, n=3, T=4, d=5)
    rng = np.random.default_rng(2)
    K, Q, v2 = rng.normal(size=(5, 3)), rng.normal(size=(5, 3)), rng.normal(size=5)
    X, Y, v, Z = (np.asarray(a) for a in (data.X, data.Y, data.v, data.Z))
    ell = lambda u: np.log1p(np.exp(-u))  # noqa: E731
    f = np.array([v @ X[i].T @ _np_softmax(X[i] @ K @ Q.T @ Z[i]) for i in range(3)])
    f2 = np.array([v2 @ X[i].T @ _np_softmax(X[i] @ K @ Q.T @ Z[i]) for i in range(3)])
    params = {"K": jnp.asarray(K), "Q": jnp.asarray(Q)}
    assert float(mm.kq_factored_loss(params, data)) == pytest.approx(np.mean(ell(Y * f)), rel=1e-13)
    assert float(mm.kq_factored_loss(params, data)) == pytest.approx(float(mm.kq_loss(jnp.asarray(K @ Q.T), data)), rel=1e-13)
    assert float(mm.kqv_factored_loss({**params, "v": jnp.asarray(v2)}, data)) == pytest.approx(np.mean(ell(Y * f2)), rel=1e-13)
    check_grads(lambda p: mm.kq_factored_loss(p, data), (params,), order=2)
    # chain rule: dL/dK = G Q, dL/dQ = G^T K with G = dL/dW at W = K Q^T
    G = np.asarray(jax.grad(mm.kq_loss)(jnp.asarray(K @ Q.T), data))
    g = jax.grad(mm.kq_factored_loss)(params, data)
    np.testing.assert_allclose(np.asarray(g["K"]), G @ Q, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.asarray(g["Q"]), G.T @ K, rtol=1e-12, atol=1e-15)


def test_kq_factors_init():
    p = mm.kq_factors_init(3, 6, 2, scale=1e-3)
    assert p["K"].shape == p["Q"].shape == (6, 2) and p["K"].dtype == jnp.float64
    assert 1e-4 < float(jnp.std(p["K"])) < 1e-2
    assert mm.kq_factors_init(3, 6)["K"].shape == (6, 6)


@pytest.mark.bad_input
@pytest.mark.parametrize("kwargs,match", [(dict(m=5), "m: got 5"), (dict(m=0), "m: got 0"), (dict(scale=0.0), "scale"),
                                          (dict(scale=float("inf")), "scale")])
def test_kq_factors_init_bad_input(kwargs, match):
    with pytest.raises(gradflow.GradflowValueError, match=match):
        mm.kq_factors_init(0, 4, **kwargs)


def _nuclear_sdp(A, d):
    """``min ½(tr P + tr R)`` s.t. ``[[P, W], [Wᵀ, R]] ⪰ 0``, ``A vec(W) ≥ 1``: the nuclear-norm
    SVM written with an explicit PSD block (Fazel's SDP form), not CVXPY's ``normNuc`` atom."""
    import cvxpy as cp

    M = cp.Variable((2 * d, 2 * d), PSD=True)
    W = M[:d, d:]
    cons = [A[j].reshape(d, d).ravel() @ cp.vec(W, order="C") >= 1 for j in range(len(A))]
    prob = cp.Problem(cp.Minimize(0.5 * cp.trace(M)), cons)
    prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    return np.asarray(W.value), prob.value


def _nuclear_dual(A, d):
    """The dual ``max 1ᵀλ`` s.t. ``λ ≥ 0``, ``‖Σ_j λ_j A_j‖_op ≤ 1`` (CVXPY's ``sigma_max``)."""
    import cvxpy as cp

    lam = cp.Variable(len(A), nonneg=True)
    G = cp.reshape(A.T @ lam, (d, d), order="C")
    prob = cp.Problem(cp.Maximize(cp.sum(lam)), [cp.sigma_max(G) <= 1])
    prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    return prob.value


@pytest.mark.parametrize("seed", range(4))
def test_att_svm_nuclear_against_sdp_form_dual_and_certificate(seed):
    data = mm.token_selection_data(seed, n=4, T=4, d=4)
    sol = mm.att_svm_nuclear(data.X, data.Y, data.v, data.opt, data.Z)
    fro = mm.att_svm_kq(data.X, data.Y, data.v, data.opt, data.Z)
    np.testing.assert_array_equal(sol.A, fro.A)  # the same constraints as the Frobenius att-SVM
    W, lam = sol.w, sol.dual
    nuc = np.linalg.norm(W, "nuc")
    # the certificate, recomputed here with NumPy: feasibility, ||G||_op <= 1, zero duality gap
    G = (sol.A.T @ lam).reshape(4, 4)
    assert (sol.A @ W.ravel()).min() >= 1 - 1e-9 and lam.min() >= 0
    assert np.linalg.norm(G, 2) <= 1 + 1e-9
    assert lam.sum() == pytest.approx(nuc, rel=1e-9)
    assert np.sum(G * W) == pytest.approx(nuc, rel=1e-9)  # G is a subgradient of ||.||_* at W
    # an independent formulation: the SDP with an explicit PSD block, and the dual problem
    W_sdp, val_sdp = _nuclear_sdp(sol.A, 4)
    assert val_sdp == pytest.approx(nuc, rel=1e-8)
    np.testing.assert_allclose(W_sdp, W, atol=1e-6 * np.abs(W).max())
    assert _nuclear_dual(sol.A, 4) == pytest.approx(nuc, rel=1e-8)
    # the nuclear solution has the smaller nuclear norm, the Frobenius one the smaller Frobenius norm
    assert nuc <= np.linalg.norm(fro.w, "nuc") * (1 + 1e-9)
    assert np.linalg.norm(fro.w) <= np.linalg.norm(W) * (1 + 1e-9)
    assert sol.rank == mm.numerical_rank(W, 1e-6) and sol.margin == pytest.approx(1 / nuc)


def test_att_svm_nuclear_hand_solved_shared_query():
    # every sample with the same query z: only W z enters, and ||W||_* >= ||W z||/||z|| with equality
    # at W = p zᵀ/||z||², so W_* = p_mm zᵀ/||z||² (rank one), equal to the Frobenius solution
    data = mm.token_selection_data(4, n=3, T=3, d=5)
    z = np.asarray(data.Z[0])
    Z = np.tile(z, (3, 1))
    sol = mm.att_svm_nuclear(data.X, data.Y, data.v, data.opt, Z)
    p_mm = mm.att_svm(data.X, data.Y, data.v, data.opt).w
    expected = np.outer(p_mm, z) / (z @ z)
    np.testing.assert_allclose(sol.w, expected, atol=1e-7 * np.abs(expected).max())
    assert sol.rank == 1
    np.testing.assert_allclose(mm.att_svm_kq(data.X, data.Y, data.v, data.opt, Z).w, expected, atol=1e-9)


def test_att_svm_nuclear_infeasible_raises():
    with pytest.raises(gradflow.GradflowValueError, match="separable"):
        mm.att_svm_nuclear(np.ones((1, 3, 2)), np.ones(1), np.array([1.0, 0.0]), np.array([0], np.int32),
                           np.array([[1.0, 0.0]]))


@pytest.mark.bad_input
def test_att_svm_nuclear_bad_input():
    X = np.random.default_rng(0).normal(size=(2, 3, 4))
    with pytest.raises(gradflow.GradflowValueError, match="Z: got"):
        mm.att_svm_nuclear(X, np.ones(2), np.ones(4), np.array([0, 1]), np.ones((2, 3)))


def test_numerical_rank():
    rng = np.random.default_rng(0)
    U, V = rng.normal(size=(5, 2)), rng.normal(size=(5, 2))
    W = U @ V.T
    assert mm.numerical_rank(W) == 2 and mm.numerical_rank(np.zeros((3, 3))) == 0
    np.testing.assert_array_equal(mm.numerical_rank(np.stack([W, W + 1e-2 * np.eye(5)]), 1e-6), [2, 5])


def _turning_path(t, target, other, k=1.0):
    """``W(t) = log t · (target/‖target‖ + E/(log t)^{k/2})`` with ``E`` orthogonal to ``target``
    and pointing to ``other``: ``1 − cos ∝ (log t)^{−k}`` towards ``target``."""
    u = target / np.linalg.norm(target)
    E = other / np.linalg.norm(other) - np.sum(other * u) / np.linalg.norm(other) * u
    L = np.log(np.maximum(t, 2.0))[:, None, None]
    return L * (u[None] + E[None] / L ** (k / 2))


def test_nuclear_verdict_on_constructed_paths():
    data = mm.token_selection_data(7, n=4, T=4, d=4)
    nuc = mm.att_svm_nuclear(data.X, data.Y, data.v, data.opt, data.Z).w
    fro = mm.att_svm_kq(data.X, data.Y, data.v, data.opt, data.Z).w
    t = tmm.save_times(per_decade=3)
    to_nuc = _turning_path(t, nuc, fro)[None]
    v = tmm.nuclear_verdict(t, to_nuc, nuc[None], fro[None])
    assert v.holds, v.details
    assert v.details["rate_k_nuc"][0] == pytest.approx(1.0, abs=0.1)
    assert v.details["rank_end"][0] == 4 and v.details["rank_nuc_svm"][0] == 2
    # negative controls: a path turning to the Frobenius solution; a path that stops turning
    assert not tmm.nuclear_verdict(t, _turning_path(t, fro, nuc)[None], nuc[None], fro[None]).holds
    stalled = to_nuc.copy()
    stalled[0, t > 1e8] = to_nuc[0, np.searchsorted(t, 1e8)]
    assert not tmm.nuclear_verdict(t, stalled, nuc[None], fro[None]).holds
