"""Kinked maps under ``solver="auto"``: the L1 map's flow slides along its kinks (Filippov), the
relu-normalised and sparsemax flows cross theirs and freeze behind them; each reaches ``t1`` and
agrees with gradient descent to first order in the step size."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow
from gradflow.attention import flow as _flow


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
    # the field is traced once per shapes and its trace reused (a nested jit in the engine), so a
    # constant it reads while tracing is patched between cleared caches, before and after
    jax.clear_caches()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(_flow, "KINK_BAND", -1.0)  # no logit counts as at its kink: plain autodiff
            plain = gradflow.simulate(loss, V0, a0, t1=1e3 + 1e-3, ts=ts * (1 + 1e-6), normalization="l1",
                                      max_steps=4000)
    finally:
        jax.clear_caches()
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
# is the Filippov field there and the limit of GD (see gradflow.attention.flow.KINKED_MAPS). These tests
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


class _Unclipped(gradflow.attention.models.ValueSoftmax):
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


# --- the tied model: logits z = U a that move with U and a -------------------------------------
# A logit at its kink is no longer frozen: U and a move it, and the field can point towards the
# kink from both sides, so the flow slides along it (gradflow.attention.flow._kink_sliding_field). These
# tests check a run that slides against a gradient descent of the tied model written here by hand
# in NumPy (its own maps and gradient).


def _tied_case(name):
    """``(map, teacher, U0, a0)``: the tied model, n = 6, ``U0 = I + 0.5·randn``, ``a0 = 0.5·randn``
    (+0.3 for relu), a random unit teacher; in each the flow slides along a kink during
    ``[2, 4]`` (checked by :func:`test_tied_flow_slides_along_a_kink_to_t1`)."""
    kind, seed = name.split("-")
    rs = np.random.RandomState(int(seed))
    teacher = rs.randn(6)
    teacher /= np.linalg.norm(teacher)
    U0 = np.eye(6) + 0.5 * rs.randn(6, 6)
    a0 = 0.5 * rs.randn(6) + (0.3 if kind == "relu" else 0.0)
    return kind, teacher, U0, a0


def _tied_map_np(kind, z):
    if kind == "relu":
        return _relu_norm_np(z)
    if kind == "sparsemax":
        return _sparsemax_np(z)
    return np.abs(z) / np.abs(z).sum()


def _tied_kink_distance_np(kind, z):
    """``h``: ``z`` itself (relu, l1), ``z − τ`` (sparsemax, ``τ`` from the support)."""
    if kind != "sparsemax":
        return z
    on = _sparsemax_np(z) > 0
    return z - (z[on].sum() - 1.0) / on.sum()


def _tied_field_np(kind, teacher, U, a, flip=None):
    """``(−∇_U L, −∇_a L)`` of the tied model ``L = ℓ(U s(U a))`` (logistic ``ℓ``), by hand.

    ``gβ = ∇ℓ(β)``, ``gs = Uᵀgβ``, ``gz = (∂s/∂z)ᵀ gs``; ``∇_U L = gβ sᵀ + gz aᵀ``, ``∇_a L = Uᵀ gz``.
    relu: ``gz_j = (gs_j − ⟨s, gs⟩)/Σ relu(z)`` where ``z_j > 0``, else 0 (``relu'(0) = 0``);
    sparsemax: ``gs − mean_support(gs)`` on the support, else 0; l1: ``sign(z_j)·(gs_j − ⟨s, gs⟩)/Σ|z|``.
    ``flip = (i, inside)`` evaluates one side of logit ``i``'s kink (inside or outside the support;
    l1: ``sign = +1`` or ``−1``) whatever its value: the one-sided fields at a kink."""
    z = U @ a
    s = _tied_map_np(kind, z)
    gb = -teacher / (1.0 + np.exp(teacher @ (U @ s)))
    gs = U.T @ gb
    if kind == "relu":
        on = z > 0
        if flip is not None:
            on[flip[0]] = flip[1]
        gz = np.where(on, gs - s @ gs, 0.0) / np.maximum(z, 0.0).sum()
    elif kind == "sparsemax":
        on = s > 0
        if flip is not None:
            on[flip[0]] = flip[1]
        gz = np.where(on, gs - gs[on].mean(), 0.0)
    else:
        sign = np.sign(z)
        if flip is not None:
            sign[flip[0]] = 1.0 if flip[1] else -1.0
        gz = sign * (gs - s @ gs) / np.abs(z).sum()
    return -(np.outer(gb, s) + np.outer(gz, a)), -(U.T @ gz)


def _tied_gd_np(kind, teacher, U, a, lr, steps):
    U, a = np.array(U, float), np.array(a, float)
    for _ in range(steps):
        dU, da = _tied_field_np(kind, teacher, U, a)
        U, a = U + lr * dU, a + lr * da
    return U, a


TIED_CASES = ["relu-3", "sparsemax-4", "l1-4"]
_TIED_WINDOW = np.linspace(2.0, 4.0, 5)


@functools.lru_cache(maxsize=None)
def _tied_flow(case, autodiff=False):
    """Default ``simulate`` of a case to ``t1 = 1e12`` saved at ``0``, ``[2, 4]`` and ``t1``
    (``autodiff``: with :class:`_AutodiffTied` and 3000 steps)."""
    kind, teacher, U0, a0 = _tied_case(case)
    ts = np.concatenate([[0.0], _TIED_WINDOW, [1e12]])
    model = _AutodiffTied(normalization=kind) if autodiff else "tied"
    return gradflow.simulate(gradflow.LogisticTeacher(teacher), U0, a0, t1=1e12, ts=ts, model=model,
                             normalization=kind, max_steps=3000 if autodiff else 16384)


class _AutodiffTied(gradflow.attention.models.Tied):
    """The tied model differentiated by plain autodiff (its ``loss`` is overridden, with the same
    formula, so the field takes no kink rule): the flow that ignores the sliding."""

    def loss(self, loss, V, a):
        return self.loss_of_weights(loss, V, self.weights(V, a))


@pytest.mark.parametrize("case", [
    # relu and sparsemax to t1 are slow (~20 s each on 2 cores); in the default run their sliding is
    # tested by test_tied_flow_matches_gradient_descent_to_first_order (a flow that chatters instead of
    # sliding ends at max_steps before t = 4 there: test_tied_flow_without_the_sliding_rule_chatters)
    pytest.param(c, marks=pytest.mark.slow) if c != "l1-4" else c for c in TIED_CASES])
def test_tied_flow_slides_along_a_kink_to_t1(case):
    """Default ``simulate`` of the tied model to ``t1 = 1e12`` ends ``ok``. On ``t ∈ [2, 4]`` one
    logit sits at its kink (``|h_i| ≤ 1e-6·max|h|``, ``h = z`` or ``z − τ``) while, by the
    hand-written one-sided fields, the field points towards the kink from both sides
    (``ḣ_i > 0`` outside, ``< 0`` inside; l1: from ``−`` and ``+``): genuine sliding."""
    kind, teacher = _tied_case(case)[:2]
    traj = _tied_flow(case)
    assert traj.status == "ok" and float(traj.t_end) == 1e12, (traj.status, float(traj.t_end), int(traj.num_steps))
    Us, As = np.asarray(traj.V), np.asarray(traj.a)
    hs = np.array([_tied_kink_distance_np(kind, U @ a) for U, a in zip(Us, As)])
    window = hs[1:-1]
    at_kink = np.all(np.abs(window) <= 1e-6 * np.abs(window).max(axis=1, keepdims=True), axis=0)
    assert np.sum(at_kink) == 1, window
    i = int(np.argmax(at_kink))
    for U, a in zip(Us[1:-1], As[1:-1]):
        z = U @ a
        rest = np.arange(6) != i
        on = (_tied_kink_distance_np(kind, z) > 1e-6) & rest
        hdot = {}
        for inside in (False, True):
            dU, da = _tied_field_np(kind, teacher, U, a, flip=(i, inside))
            zdot = dU @ a + U @ da
            hdot[inside] = zdot[i] - (zdot[on].mean() if kind == "sparsemax" else 0.0)
        assert hdot[False] > 1e-3 and hdot[True] < -1e-3, hdot


@pytest.mark.parametrize("case", TIED_CASES)
def test_tied_flow_matches_gradient_descent_to_first_order(case):
    """Hand-written GD at lr 0.04, 0.02, 0.01, 0.005 to ``T = 4`` (two flow-time units of sliding)
    against the flow: the error of ``(U, a)`` halves with the step size (first order).

    GD zigzags across the kink while the flow slides, so its state at ``T`` carries an ``O(lr)``
    offset that depends on where the kink falls between two iterations; each lr's error is
    therefore the mean of the signed differences over 8 starts shifted by ``lr/8`` (GD from
    the flow's state at ``δ = j·lr/8``, compared with the flow at ``δ + k·lr``)."""
    kind, teacher, U0, a0 = _tied_case(case)
    lrs, shifts, T = (0.04, 0.02, 0.01, 0.005), 8, 4.0
    plan = [(lr, j * lr / shifts, int(round(T / lr)) - 1) for lr in lrs for j in range(shifts)]
    ts = np.unique(np.round([0.0] + [d for _, d, _ in plan] + [d + k * lr for lr, d, k in plan], 12))
    flow = gradflow.simulate(gradflow.LogisticTeacher(teacher), U0, a0, t1=float(ts[-1]), ts=ts, model="tied",
                             normalization=kind)
    assert flow.status == "ok"
    Us, As = np.asarray(flow.V), np.asarray(flow.a)
    at = lambda t: int(np.argmin(np.abs(ts - t)))
    errs = []
    for lr in lrs:
        dU, da = 0.0, 0.0
        for lr_, d, k in plan:
            if lr_ == lr:
                U, a = _tied_gd_np(kind, teacher, Us[at(d)], As[at(d)], lr, k)
                dU, da = dU + (U - Us[at(d + k * lr)]) / shifts, da + (a - As[at(d + k * lr)]) / shifts
        errs.append(max(np.abs(dU).max(), np.abs(da).max()))
    ratios = [errs[j] / errs[j + 1] for j in range(3)]
    assert errs[-1] < 2e-3 and all(r == pytest.approx(2.0, rel=0.2) for r in ratios), (errs, ratios)


@pytest.mark.parametrize("case", TIED_CASES)
def test_tied_flow_without_the_sliding_rule_chatters(case):
    """Negative control of the two tests above: the same start under plain autodiff
    (:class:`_AutodiffTied`, no rule at the kinks, the engine before the sliding rule): the adaptive
    solver chatters across the kink and ends at ``max_steps`` (3000) before ``t = 4``, so neither
    the run to ``t1`` nor the GD comparison can pass."""
    traj = _tied_flow(case, autodiff=True)
    assert traj.status == "max_steps" and float(traj.t_end) < 4.0, (traj.status, float(traj.t_end))


@pytest.mark.parametrize("kind", ["relu", "sparsemax", "l1"])
@pytest.mark.parametrize("T", [1.0, 1.7])
def test_tied_sliding_field_is_the_gradient_away_from_kinks(kind, T):
    """Away from every kink the sliding rule's field is ``−∇L`` (autodiff of ``model.loss``)."""
    import jax

    rs = np.random.RandomState(7)
    teacher = rs.randn(6)
    loss = gradflow.LogisticTeacher(teacher / np.linalg.norm(teacher))
    model = gradflow.get_model("tied", normalization=kind, temperature=T)
    U, a = jnp.asarray(np.eye(6) + 0.5 * rs.randn(6, 6)), jnp.asarray(rs.randn(6) + 0.3)
    assert np.min(np.abs(np.asarray(_tied_kink_distance_np(kind, np.asarray(U @ a) / T)))) > 1e-3
    dU, da = gradflow.gradient_field(model, loss, U, a)
    gU, ga = jax.grad(lambda U_, a_: model.loss(loss, U_, a_), argnums=(0, 1))(U, a)
    np.testing.assert_allclose(np.asarray(dU), -np.asarray(gU), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(da), -np.asarray(ga), rtol=1e-12, atol=1e-14)


class _RowLogitsOfV(gradflow.attention.models.RowWise):
    """Row-wise logits that (nominally) depend on ``V``: a matrix of logits, not one vector."""

    def logits(self, V, a):
        return a + 0.0 * jnp.sum(V)


@pytest.mark.bad_input
def test_kink_sliding_refuses_logits_that_are_not_a_vector():
    """The sliding rule solves for one vector of logits; a matrix of logits that depends on ``V``
    is refused with a clear error rather than integrated wrongly."""
    loss = gradflow.LogisticTeacher(np.ones(3) / np.sqrt(3.0))
    model = _RowLogitsOfV(normalization="relu")
    with pytest.raises(gradflow.GradflowValueError, match=r"^logits: got \(3, 3\); expected one vector"):
        gradflow.gradient_field(model, loss, jnp.eye(3), jnp.ones((3, 3)))
