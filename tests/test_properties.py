"""Property-based tests (hypothesis) over random shapes, scales and logits: the field against the
independent NumPy reference, the metrics against hand formulas, and validation."""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import gradflow
from gradflow import maps
from gradflow.attention.trajectory import compute_metrics
from tests import reference as ref

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MODEL = gradflow.get_model("value-softmax")


@st.composite
def problems(draw):
    d, n = draw(st.integers(1, 4)), draw(st.integers(2, 5))
    seed = draw(st.integers(0, 2**31 - 1))
    v_scale = 10.0 ** draw(st.floats(-3, 1))
    a_scale = 10.0 ** draw(st.floats(-2, 1.3))  # logit spreads up to ~40
    rng = np.random.default_rng(seed)
    bs = rng.standard_normal(d)
    bs = bs if np.any(bs != 0) else np.ones(d)
    return v_scale * rng.standard_normal((d, n)), a_scale * rng.standard_normal(n), bs


@SETTINGS
@given(problems())
@example((np.array([[-0.13210486, 0.64042265]]), np.array([2.00459191, -10.23638982]), np.array([0.12573022])))
@example((np.array([[0.82161814, 0.33043708]]), np.array([-13.03157232, 9.05355867]), np.array([0.34558419])))
@example((np.array([[-0.82878389, 0.42797502, 0.37501729], [1.021025, 0.45583428, -1.95403747],
                    [0.72999094, 2.26740128, 0.40412478], [-0.03231214, -0.40985864, -1.04878472]]),
          np.array([0.22061212, 14.67655367, 7.97141867]), np.array([-1.56034467, 0.56878108, -0.26547139, -1.24059122])))
def test_field_matches_numpy_reference(problem):
    V, a, bs = problem
    dV, da = gradflow.gradient_field(MODEL, gradflow.LogisticTeacher(bs), jnp.asarray(V), jnp.asarray(a))
    hV, ha, _ = ref.field(V, a, ref.logistic_residual(bs))
    np.testing.assert_allclose(dV, hV, rtol=1e-12, atol=1e-15 * (1 + np.abs(hV).max()))
    # the reference's J(s) = diag(s) − s sᵀ loses the top entry's digits (1 − s_top) at large
    # spreads: compare with the same formula in replicator form, ȧ_i = s_i Σ_j s_j (w_i − w_j)
    s = ref.softmax(a)
    w = V.T @ ref.logistic_residual(bs)(V @ s)[0]
    exact = s * ((w[:, None] - w[None, :]) @ s)
    # the reference agrees up to its own rounding of ⟨s, w⟩ (≈ eps·|w|, absolute)
    np.testing.assert_allclose(ha, exact, rtol=0, atol=8 * np.finfo(float).eps * np.abs(w).max())
    # each entry to its own rounding: w = Vᵀr carries ≈ eps·(|V|ᵀ|r|) (more than eps·|w| where Vᵀr
    # cancels), so w_i − ⟨s, w⟩ about twice that, times s_i. (A bound of 1e-13·max|exact| fails where
    # the largest velocity is itself a cancellation: the third example, a hypothesis draw of
    # 2026-12-07, off by 3.7e-13 of max|exact|.)
    r = ref.logistic_residual(bs)(V @ s)[0]
    bound = 8 * np.finfo(float).eps * s * (np.abs(V).T @ np.abs(r)).max() + 1e-300
    assert np.all(np.abs(np.asarray(da) - exact) <= bound), (np.asarray(da) - exact, bound)
    assert abs(float(jnp.sum(da))) <= 1e-13 * float(jnp.sum(jnp.abs(da))) + 1e-300  # Σ da/dt = 0


@SETTINGS
@given(problems(), st.floats(0.1, 10.0))
def test_metrics_match_hand_formulas(problem, temperature):
    V, a, bs = problem
    model = gradflow.get_model("value-softmax", temperature=temperature)
    m = compute_metrics(model, gradflow.LogisticTeacher(bs), jnp.asarray(V), jnp.asarray(a))
    s = ref.softmax(a / temperature)
    np.testing.assert_allclose(m["s"], s, rtol=1e-12, atol=1e-300)
    nz = s[s > 0]
    assert float(m["entropy"]) == pytest.approx(-np.sum(nz * np.log(nz)), rel=1e-10, abs=1e-12)
    assert float(m["loss"]) == pytest.approx(np.logaddexp(0, -bs @ (V @ s)), rel=1e-12)
    np.testing.assert_allclose(m["u"], V.T @ bs, rtol=1e-12, atol=1e-15)
    w = gradflow.winners(np.asarray(m["s"]))
    assert w[np.argmax(s)] and np.all(np.asarray(m["s"])[w] >= s.max() * (1 - 1e-12))


@SETTINGS
@given(st.integers(1, 4), st.integers(2, 5), st.integers(0, 10**6), st.sampled_from([np.nan, np.inf, -np.inf]),
       st.sampled_from(["V0", "a0"]))
def test_any_nonfinite_entry_is_refused_by_name(d, n, pos, bad, which):
    V0, a0 = np.ones((d, n)), np.zeros(n)
    arr = V0 if which == "V0" else a0
    arr.flat[pos % arr.size] = bad
    with pytest.raises(gradflow.GradflowValueError, match=rf"^{which}: got array of shape .*; expected finite"):
        gradflow.simulate(gradflow.LogisticTeacher(np.ones(d)), V0, a0, t1=1.0)


@SETTINGS
@given(st.one_of(st.floats(max_value=0.0), st.just(float("inf")), st.just(float("nan"))))
def test_any_nonpositive_or_nonfinite_horizon_is_refused(t1):
    with pytest.raises(gradflow.GradflowValueError, match=r"^t1: got .*; expected a positive finite number$"):
        gradflow.simulate(gradflow.LogisticTeacher(np.ones(2)), np.eye(2), np.zeros(2), t1=t1)


@SETTINGS
@given(st.integers(2, 6), st.integers(0, 2**31 - 1), st.floats(0.0, 60.0))
def test_softmax_vjp_sums_to_zero_and_is_permutation_equivariant(n, seed, gap):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(n)
    a[0] += gap
    g = rng.standard_normal(n)
    s = maps.softmax(jnp.asarray(a))
    out = np.asarray(maps.softmax_vjp(s, jnp.asarray(g)))
    assert abs(out.sum()) <= 1e-14 * np.abs(out).sum() + 1e-300
    perm = rng.permutation(n)
    out_p = np.asarray(maps.softmax_vjp(maps.softmax(jnp.asarray(a[perm])), jnp.asarray(g[perm])))
    np.testing.assert_allclose(out_p, out[perm], rtol=1e-12, atol=1e-300)
