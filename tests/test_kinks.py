"""Kinked maps under ``solver="auto"``: the L1 map's flow slides along its kinks (Filippov), the
relu-normalised and sparsemax flows cross theirs and freeze behind them; each reaches ``t1`` and
agrees with gradient descent to first order in the step size."""

import functools

import jax.numpy as jnp
import numpy as np
import pytest

import gradflow
from gradflow import flow as _flow


def _setting():
    """The norm-logistic figure's draws (n = d = 10, seed 42, logistic teacher)."""
    from gradflow.sims.draws import normalization_init

    beta_star, V0, a0 = normalization_init(42, 10)
    return gradflow.LogisticTeacher(beta_star), V0, a0


def test_l1_flow_slides_through_its_kinks_to_t1():
    """Two logits reach their kink (t ≈ 133 and 259) before t1 = 1e3: the run ends ``ok``, the
    stuck logits stay exactly at the kink; with the sliding rule switched off (negative control)
    the solver chatters across the kink and ends at ``max_steps`` before t1."""
    loss, V0, a0 = _setting()
    ts = np.linspace(0.0, 1e3, 11)
    traj = gradflow.simulate(loss, V0, a0, t1=1e3, ts=ts, normalization="l1", max_steps=4000)
    assert traj.status == "ok" and int(traj.num_steps) < 4000
    a_end = np.asarray(traj.a[-1])
    assert np.sum(np.abs(a_end) < 1e-8 * np.abs(a_end).max()) >= 2, a_end
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_flow, "KINK_BAND", -1.0)  # no logit counts as at its kink: plain autodiff
        plain = gradflow.simulate(loss, V0, a0, t1=1e3 + 1e-3, ts=ts * (1 + 1e-6), normalization="l1", max_steps=4000)
    assert plain.status != "ok" and float(plain.t_end) < 1e3, (plain.status, float(plain.t_end))


def test_l1_flow_matches_gradient_descent_to_first_order():
    """GD at lr and lr/2 to T = 300 (past two kinks) against the flow: the error halves with
    the step size (ratio ≈ 2, first order), i.e. GD converges to the sliding flow."""
    loss, V0, a0 = _setting()
    T = 300.0
    flow = gradflow.simulate(loss, V0, a0, t1=T, ts=np.array([0.0, T]), normalization="l1")
    assert flow.status == "ok"
    errs = []
    for lr in (0.02, 0.01):
        n = int(round(T / lr))
        gd = gradflow.descend(loss, V0, a0, lr=lr, steps=n, record=np.array([0, n]), normalization="l1")
        errs.append(float(np.max(np.abs(np.asarray(gd.a[-1]) - np.asarray(flow.a[1])))))
    assert errs[1] < 2e-3 and errs[0] / errs[1] == pytest.approx(2.0, rel=0.1), errs


# --- relu-normalised and sparsemax ------------------------------------------------------------
# For the value-softmax model (logits = a) both maps need no rule of their own: a logit that
# reaches its kink from the inside crosses it transversally and is frozen on the outside, which
# is the Filippov field there and the limit of GD (see gradflow.flow.KINKED_MAPS). These tests
# check that claim against a gradient descent written here by hand in NumPy (its own map, its
# own gradient), so nothing in it comes from gradflow.


def _relu_norm_np(z):
    p = np.maximum(z, 0.0)
    return p / p.sum()


def _sparsemax_np(z):
    zs = np.sort(z)[::-1]
    cums = np.cumsum(zs)
    k = np.sum(1 + np.arange(1, z.size + 1) * zs > cums)
    return np.maximum(z - (cums[k - 1] - 1) / k, 0.0)


def _gd_np(kind, loss_kind, teacher, V0, a0, lr, T):
    """Plain GD on ``L(V, a) = ℓ(V s(a))`` with hand-written gradients, to flow time ``T = lr·k``.

    A logit outside the support (relu: ``a_i ≤ 0``; sparsemax: ``s_i = 0``) has gradient 0
    (JAX's and PyTorch's ``relu'(0) = 0``); inside, ``∂L/∂a = (g − ⟨s, g⟩)/Σ relu(a)`` (relu) or
    ``g − mean_support(g)`` (sparsemax, the projection onto its support), ``g = Vᵀ ∇_β ℓ``."""
    V, a = np.array(V0, float), np.array(a0, float)
    for _ in range(int(round(T / lr))):
        s = _relu_norm_np(a) if kind == "relu" else _sparsemax_np(a)
        beta = V @ s
        gb = -teacher / (1.0 + np.exp(teacher @ beta)) if loss_kind == "logistic" else beta - teacher
        g = V.T @ gb
        if kind == "relu":
            ga = np.where(a > 0, g - s @ g, 0.0) / np.maximum(a, 0.0).sum()
        else:
            on = s > 0
            ga = np.where(on, g - g[on].mean(), 0.0)
        V -= lr * np.outer(gb, s)
        a -= lr * ga
    return V, a, (_relu_norm_np(a) if kind == "relu" else _sparsemax_np(a))


def _kink_case(name):
    """``(map, loss kind, teacher, V0, a0, T)``: value-softmax problems (n = d = 10) in which
    several logits reach their kink before ``T``."""
    from gradflow.sims.draws import normalization_init

    kind, problem, loss_kind = name.split("-")
    if problem == "fig":  # the norm-logistic figure's draws
        beta_star, V0, a0 = normalization_init(42, 10)
    else:  # a wider spread of logits; relu starts with some logits negative (frozen)
        rs = np.random.RandomState(1)
        beta_star = rs.randn(10)
        beta_star /= np.linalg.norm(beta_star)
        V0, a0 = 0.5 * rs.randn(10, 10), 0.3 * rs.randn(10) + (0.3 if kind == "relu" else 0.0)
    if problem == "onkink":  # a start exactly on a kink (bad input, documented behaviour: frozen)
        if kind == "relu":
            a0[np.argsort(a0)[5]] = 0.0
        else:
            top = np.argmax(a0)
            a0[np.argsort(a0)[-2]] = a0[top] - 1.0  # s = e_top, the runner-up exactly at tau
    T = {"relu-fig-logistic": 300.0, "sparsemax-fig-logistic": 20.0}.get(f"{kind}-{problem}-{loss_kind}", 50.0)
    return kind, loss_kind, np.asarray(beta_star, float), np.asarray(V0, float), np.asarray(a0, float), T


def _loss(loss_kind, teacher):
    return gradflow.LogisticTeacher(teacher) if loss_kind == "logistic" else gradflow.SquareLoss(teacher)


@functools.lru_cache(maxsize=None)
def _kink_flow(case):
    """Default ``simulate`` of a case to ``t1 = 1e12``, saved at ``0``, ``T`` and ``t1`` (one
    compilation per map and loss kind, shared by the tests below)."""
    kind, loss_kind, teacher, V0, a0, T = _kink_case(case)
    return gradflow.simulate(_loss(loss_kind, teacher), V0, a0, t1=1e12, ts=np.array([0.0, T, 1e12]),
                             normalization=kind)


_SLOW = pytest.mark.slow  # a compilation of its own (square loss): ~20-60 s on a shared machine
KINK_CASES = ["relu-fig-logistic", "relu-seed1-logistic", "relu-onkink-logistic",
              "sparsemax-fig-logistic", "sparsemax-seed1-logistic",
              pytest.param("relu-seed1-square", marks=_SLOW), pytest.param("sparsemax-fig-square", marks=_SLOW),
              pytest.param("sparsemax-onkink-square", marks=_SLOW)]


@pytest.mark.parametrize("case", KINK_CASES)
def test_relu_and_sparsemax_flows_reach_t1_past_their_kinks(case):
    """Default ``simulate`` to ``t1 = 1e12``: status ``ok`` in a few hundred steps, at least one
    logit crossed its kink (a weight positive at the start is exactly 0 at the end), and the
    logits outside the support are frozen behind their kink: relu ``a_i ≤ 1e-8``, sparsemax
    ``a_i ≤ τ + 1e-8`` with ``τ`` from the support (``s_i = a_i − τ`` there)."""
    kind = _kink_case(case)[0]
    traj = _kink_flow(case)
    assert traj.status == "ok" and float(traj.t_end) == 1e12, (traj.status, float(traj.t_end), int(traj.num_steps))
    assert int(traj.num_steps) < 2000
    s0, s1, a1 = (np.asarray(x) for x in (traj.s[0], traj.s[-1], traj.a[-1]))
    out = s1 == 0
    if "onkink" not in case:
        assert np.any(out & (s0 > 0)), (s0, s1)
    tau = 0.0 if kind == "relu" else float(np.mean((a1 - s1)[~out]))
    assert np.all(a1[out] <= tau + 1e-8), (a1, tau)


@pytest.mark.parametrize("case", KINK_CASES)
def test_relu_and_sparsemax_flows_match_gradient_descent_to_first_order(case):
    """Hand-written GD at lr 0.02 and 0.01 to ``T`` (past the kinks) against the flow: the error
    of ``V`` and the weights halves with the step size (first order). The logits frozen behind a
    kink differ by GD's overshoot there, ``O(lr)`` with a constant that depends on where the
    crossing falls between two iterations, so for ``a`` the check is ``error ≤ 0.5·lr``."""
    kind, loss_kind, teacher, V0, a0, T = _kink_case(case)
    flow = _kink_flow(case)
    assert flow.status == "ok"
    errs = []
    for lr in (0.02, 0.01):
        V, a, s = _gd_np(kind, loss_kind, teacher, V0, a0, lr, T)
        err_Vs = max(np.max(np.abs(V - np.asarray(flow.V[1]))), np.max(np.abs(s - np.asarray(flow.s[1]))))
        err_a = np.max(np.abs(a - np.asarray(flow.a[1])))
        assert err_a <= 0.5 * lr, (lr, err_a)
        errs.append(err_Vs)
    assert errs[1] < 5e-3 and errs[0] / errs[1] == pytest.approx(2.0, rel=0.15), errs


class _Unclipped(gradflow.models.ValueSoftmax):
    """The kinked maps' formula on their initial support, without the kink: ``a/Σa`` (relu-norm
    while every logit is positive) or ``a − (Σa − 1)/n`` (sparsemax while the support is full)."""

    def weights(self, V, a):
        if self.normalization == "relu":
            return a / jnp.sum(a)
        return a - (jnp.sum(a) - 1.0) / a.shape[-1]


@pytest.mark.slow  # two compilations of the field of a model class of its own: ~2 min on a shared machine
@pytest.mark.parametrize("kind", ["relu", "sparsemax"])
def test_gradient_descent_check_fails_for_a_flow_that_ignores_the_kinks(kind):
    """Negative control of the first-order check: a start where every weight is positive (the
    norm-logistic draws, sparsemax's logits pulled to 1 so that its support is full), and the flow
    of the same formula without the kink (:class:`_Unclipped`). Both flows agree until a logit
    reaches its kink; after it GD follows the kinked map, so this flow's error does not shrink
    with the step size (ratio ≈ 1) and stays above 1e-2, where the kinked flow's is ~1e-4."""
    from gradflow.sims.draws import normalization_init

    teacher, V0, a0 = normalization_init(42, 10)
    teacher = np.asarray(teacher, float)
    if kind == "sparsemax":
        a0 = 1.0 + 0.2 * (np.asarray(a0) - 1.0)
    T = 300.0 if kind == "relu" else 20.0
    assert np.all((_relu_norm_np(a0) if kind == "relu" else _sparsemax_np(a0)) > 0)
    loss = gradflow.LogisticTeacher(teacher)
    ts = np.array([0.0, T])
    kinked = gradflow.simulate(loss, V0, a0, t1=T, ts=ts, normalization=kind)
    plain = gradflow.simulate(loss, V0, a0, t1=T, ts=ts, model=_Unclipped(normalization=kind))
    errs = {"kinked": [], "plain": []}
    for lr in (0.02, 0.01):
        V, a, s = _gd_np(kind, "logistic", teacher, V0, a0, lr, T)
        for name, traj in (("kinked", kinked), ("plain", plain)):
            errs[name].append(np.max(np.abs(V - np.asarray(traj.V[-1]))))
    assert errs["kinked"][0] / errs["kinked"][1] == pytest.approx(2.0, rel=0.15), errs
    assert errs["plain"][1] > 1e-2 and errs["plain"][0] / errs["plain"][1] < 1.2, errs


def test_relu_start_without_a_positive_logit_is_refused():
    """The relu map's denominator is 0 when no logit is positive: a clear error, not a NaN run."""
    teacher = np.ones(3) / np.sqrt(3.0)
    with pytest.raises(gradflow.GradflowValueError, match="a0: .*'relu' map is defined"):
        gradflow.simulate(gradflow.LogisticTeacher(teacher), 0.1 * np.eye(3), np.array([0.0, -1.0, -0.5]),
                          t1=1.0, normalization="relu")
