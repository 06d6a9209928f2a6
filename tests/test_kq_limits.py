"""The KKT residual of the factorised att-SVM, the local KKT solve, the regularisation path of
(K, Q) and the classification rules (theory/kq_limits.py), against hand calculations, CVXPY's
nuclear-norm SVM (with its dual certificate) and Clarabel's Frobenius SVM; the checks
``mm.kq-kkt`` and ``mm.kq-aligned`` end to end (slow)."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradflow.attention import maxmargin as mm
from gradflow import theory
from gradflow.theory import kq_limits as kl
from gradflow.theory import maxmargin as tmm


@pytest.fixture(scope="module")
def draw():
    """The first ``mm.kq-nuclear`` draw: (data, nuclear SVM, Frobenius SVM, start, offset)."""
    return tmm.kq_draws(1, 0)[0]


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.5, 2.0])
def test_residual_of_one_constraint_matches_hand_calculation(eps):
    """One constraint ``A = a bᵀ``, ``K = a + ε e`` (``e ⊥ a``), ``Q = b`` (unit vectors): the margin is
    1, the NNLS multiplier is 1, and by hand ``‖θ − λ∇q‖/‖θ‖ = ε/√(2 + ε²)``, slackness 0. The
    residual does not depend on the scale of ``(K, Q)``."""
    a, b, e = np.eye(3)
    A = np.outer(a, b)[None]
    for scale in (1.0, 7.0):
        res = kl.kkt_residual(scale * (a + eps * e)[:, None], scale * b[:, None], A)
        assert res.r == pytest.approx(eps / math.sqrt(2 + eps ** 2), abs=1e-14)
        assert res.r_cs == 0.0 and res.G_op == pytest.approx(1.0)


def test_residual_is_infinite_without_a_positive_margin():
    a, b, _ = np.eye(3)
    res = kl.kkt_residual(-a[:, None], b[:, None], np.outer(a, b)[None])
    assert math.isinf(res.r)


def test_constraints_are_the_svm_rows_and_the_svm_selects_the_stated_tokens(draw):
    data, nuc, fro = draw[:3]
    A = kl.constraint_matrices(data, data.opt)
    d = A.shape[1]
    np.testing.assert_array_equal(A.reshape(len(A), d * d), fro.A)  # Clarabel's rows, built by maxmargin
    np.testing.assert_array_equal(kl.selection(nuc.w, data), np.asarray(data.opt))
    assert np.all(np.einsum("jab,ab->j", A, nuc.w) >= 1 - 1e-7)


def test_nuclear_svm_is_a_kkt_point_and_its_multipliers_certify_it(draw):
    """The balanced factors of CVXPY's ``W_*`` meet the KKT conditions of the factorised problem,
    and the fitted ``G = Σ λ_j A_j`` has ``‖G‖_op = 1`` (the certificate of global optimality)."""
    data, nuc = draw[:2]
    A = kl.constraint_matrices(data, data.opt)
    for scale in (1.0, 40.0):
        K, Q = kl.balanced_factors(scale * nuc.w)
        res = kl.kkt_residual(K, Q, A)
        assert res.r < 1e-5, res  # CVXPY's W_* is certified to 1e-7; its SVD factors amplify that
        assert res.G_op == pytest.approx(1.0, abs=1e-6)
    assert abs(kl.nuclear_excess(3.0 * nuc.w, A, nuc.w)) < 1e-7


def test_frobenius_svm_and_a_perturbed_direction_are_not_kkt_points(draw):
    """The controls of ``mm.kq-kkt``: Clarabel's Frobenius SVM as balanced factors, and ``W_*``'s
    factors moved by a random direction of relative size ``PERTURB``, have residuals above the
    threshold; the Frobenius SVM is feasible, so its nuclear excess is positive (``W_*`` is the
    minimum)."""
    data, nuc, fro = draw[:3]
    A = kl.constraint_matrices(data, data.opt)
    K, Q = kl.balanced_factors(fro.w)
    assert kl.kkt_residual(K, Q, A).r > kl.KKT_TOL
    assert kl.nuclear_excess(fro.w, A, nuc.w) > 1e-3
    K, Q = kl.balanced_factors(nuc.w)
    Kp, Qp = kl._perturbed(K[None, None], Q[None, None], 0)
    assert kl.kkt_residual(Kp[0, 0], Qp[0, 0], A).r > kl.KKT_TOL


def test_local_solve_returns_the_nuclear_svm_from_nearby(draw):
    """SLSQP from ``W_*`` moved by 5 % (at ``W_*``'s rank) ends on CVXPY's ``W_*``."""
    data, nuc = draw[:2]
    A = kl.constraint_matrices(data, data.opt)
    rng = np.random.default_rng(1)
    W = nuc.w + 0.05 * np.linalg.norm(nuc.w) * rng.normal(size=nuc.w.shape) / 4
    K, Q = kl.balanced_factors(W)
    P, res, ok = kl.kkt_polish(K, Q, A, nuc.rank)
    assert ok and res.r < kl.POLISH_KKT
    assert abs(kl.nuclear_excess(P, A, nuc.w)) < 1e-7
    assert 1 - mm.cosine(P, nuc.w) < 1e-8


def test_kq_log_excess_matches_the_direct_difference(draw):
    data = draw[0]
    d = data.X.shape[2]
    L_star = float(np.mean(mm.logistic(jnp.take_along_axis(mm.scores(data), data.opt[:, None], axis=1))))
    K, Q = kl.balanced_factors(2.0 * draw[1].w)
    theta = jnp.asarray(np.concatenate([K.ravel(), Q.ravel()]))
    direct = math.log(float(jax.jit(mm.kq_factored_loss)({"K": theta[: d * d].reshape(d, d), "Q": theta[d * d:].reshape(d, d)},
                                                data)) - L_star)
    assert float(jax.jit(kl.kq_log_excess)(theta, data)) == pytest.approx(direct, rel=1e-8)


def test_regularisation_path_turns_to_the_nuclear_svm(draw):
    """Tarzanagh et al. (2023): ``argmin L`` over ``‖K‖² + ‖Q‖² = 2R`` turns to ``W_*`` (CVXPY) as ``R``
    grows, from a random start; the Frobenius SVM is left behind."""
    data, nuc, fro = draw[:3]
    radii = np.asarray([1.0, 10.0, 100.0]) * np.linalg.norm(nuc.w, "nuc")
    W, val, ok = kl.kq_regularisation_path(data, radii, np.random.default_rng(0).normal(size=2 * nuc.w.size))
    assert ok.all()
    c = [1 - mm.cosine(w, nuc.w) for w in W]
    assert c[2] < 1e-4 and c[2] < c[1] < c[0]
    assert 1 - mm.cosine(W[-1], fro.w) > 10 * c[2]
    assert np.all(np.diff(val) < 0)  # the excess loss falls as the radius grows


def test_aligned_start_has_the_svm_singular_spaces(draw):
    nuc = draw[1]
    p0 = kl.aligned_start(nuc.w, 0, scale=1e-12)
    W0 = np.asarray(p0["K"]) @ np.asarray(p0["Q"]).T
    U, S, Vt = np.linalg.svd(nuc.w)
    r = nuc.rank
    np.testing.assert_allclose(W0, S.sum() / r * U[:, :r] @ Vt[:r], atol=1e-9)
    assert np.linalg.norm(W0, "nuc") == pytest.approx(np.linalg.norm(nuc.w, "nuc"), rel=1e-9)


@pytest.mark.parametrize("args, expected", [
    # (r_end, (c*(√t1), c*(t1)), polish excess, (c_P(√t1), c_P(t1)), selection is the stated one)
    ((0.02, (1e-2, 5e-3), 0.0, (1e-2, 5e-3), True), "global nuclear SVM"),
    ((0.02, (1e-2, 5e-3), 0.0, (1e-2, 5e-3), False), "another selection's SVM"),
    ((0.02, (1e-2, 9e-3), 1e-3, (2e-3, 1e-3), True), "non-global KKT point"),
    ((0.02, (1e-2, 9e-3), 1e-3, (2e-3, 4e-3), True), "not settled"),  # moving away from the KKT point
    ((0.02, (1e-2, 2e-3), 1e-3, (2e-3, 1e-3), True), "global nuclear SVM"),  # not 3x closer to the other point
    ((0.08, (1e-2, 5e-3), 0.0, (1e-2, 5e-3), True), "not settled"),  # residual above KKT_TOL
    ((0.02, (1e-2, 9e-3), 0.0, (1e-2, 9e-3), True), "not settled"),  # c* falls by less than KKT_FALL
])
def test_classification_rules(args, expected):
    assert kl.classify(*args) == expected


def test_new_checks_are_registered_as_exploratory():
    ids = theory.check_ids()
    assert ids[-4:] == ["mm.kq-nuclear", "mm.kq-kkt", "mm.kq-kkt-rate", "mm.kq-aligned"]
    assert {"mm.kq-kkt", "mm.kq-kkt-rate", "mm.kq-aligned"} <= theory.EXPLORATORY


def test_kkt_verdict_measures_the_fall_from_the_time_it_is_given(draw):
    """``W_*``'s balanced factors moved by a fixed direction of shrinking size ``ε(t)``: the verdict's
    residuals are :func:`kkt_residual` at the save times, the fall is measured from ``t_fall`` (the
    save nearest it in ``log t``; default ``√t1``), and its margins are, by hand,
    ``min(log10(tol/r(t1)), log10(r(t_fall)/r(t1)) − log10(fall))``."""
    data, nuc = draw[:2]
    K, Q = kl.balanced_factors(nuc.w, tmm.KQ_M)
    R = np.random.default_rng(3).normal(size=(2,) + K.shape)
    R /= np.linalg.norm(R)
    t = np.array([1e2, 1e10, 1e150, 1e300])
    eps = np.array([0.6, 0.3, 0.2, 0.1])
    scale = np.sqrt(np.sum(K**2) + np.sum(Q**2))
    Ks = np.stack([K + e * scale * R[0] for e in eps])[None]
    Qs = np.stack([Q + e * scale * R[1] for e in eps])[None]
    A = kl.constraint_matrices(data, kl.selection(Ks[0, -1] @ Qs[0, -1].T, data))
    r = [kl.kkt_residual(Ks[0, k], Qs[0, k], A).r for k in range(4)]
    for t_fall, k in ((kl.KKT_RATE_FROM, 1), (None, 2)):
        v = kl.kkt_verdict(t, Ks, Qs, [data], tol=kl.KKT_RATE_TOL, fall=kl.KKT_RATE_FALL, t_fall=t_fall)
        assert list(v.details["kkt_r_half"]) == [r[k]] and list(v.details["kkt_r_end"]) == [r[3]]
        hand = min(math.log10(kl.KKT_RATE_TOL / r[3]), math.log10(r[k] / r[3]) - math.log10(kl.KKT_RATE_FALL))
        assert v.margins[0] == pytest.approx(hand, abs=1e-12)


@pytest.mark.slow  # ~1 min each on 2 shared cores: two draws, factorised and combined flows (to 1e100 / 1e30)
@pytest.mark.parametrize("cid", ["mm.kq-kkt", "mm.kq-kkt-rate", "mm.kq-aligned"])
def test_check_runs_and_its_control_fails(cid):
    r = theory.run_check(cid, trials=2, seed=0)
    assert r.holds == (r.worst_margin > 0)
    assert not r.control_holds, dict(r.details)["control"]
    assert dict(r.details)["control"]["worst_margin"] < 0
    json.dumps(r.to_dict(), allow_nan=False)


def test_docs_table_is_generated_from_the_committed_json(tmp_path):
    """docs/kq-nuclear.md's per-draw tables are what ``python -m gradflow.sims.beyond.kq_classify`` writes
    from figures/kq-classify.json and figures/kq-classify-fresh.json. Control: a number edited in the page is caught, and rewriting
    puts the JSON's number back."""
    import pathlib
    import shutil

    from gradflow.sims.beyond import kq_classify

    root = pathlib.Path(__file__).resolve().parents[1]
    assert kq_classify.write_docs(str(root), check=True)
    (tmp_path / "docs").mkdir()
    (tmp_path / "figures").mkdir()
    shutil.copy(root / "figures" / "kq-classify.json", tmp_path / "figures")
    shutil.copy(root / kq_classify.FRESH_JSON, tmp_path / "figures")
    page = tmp_path / "docs" / "kq-nuclear.md"
    text = (root / "docs" / "kq-nuclear.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| 19 |"))
    page.write_text(text.replace(row, row.replace("| 19 |", "| 91 |")))
    assert not kq_classify.write_docs(str(tmp_path), check=True)
    assert not kq_classify.write_docs(str(tmp_path))
    assert page.read_text() == text
