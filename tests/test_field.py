"""The autodiff field against hand-written formulas (Eqs. 2–4, Lemma 3.5, appendix Lemma D.2)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow
from gradflow import maps
from tests import reference as ref


def _problem(seed, d=5, n=6, scale=1.0):
    rng = np.random.RandomState(seed)
    return scale * rng.randn(d, n), rng.randn(n), rng.randn(d)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_logistic_field_matches_hand_formula(seed):
    V, a, bs = _problem(seed)
    model = gradflow.get_model("value-softmax")
    dV, da = gradflow.gradient_field(model, gradflow.LogisticTeacher(bs), jnp.asarray(V), jnp.asarray(a))
    hV, ha, _ = ref.field(V, a, ref.logistic_residual(bs))
    np.testing.assert_allclose(dV, hV, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(da, ha, rtol=1e-12, atol=1e-15)


def test_public_flow_field_and_log_time_field_by_hand():
    """The public ``flow_field`` (``dy/dt`` for ``y = (V, a, Γ)``: ``r sᵀ``, ``J(s)Vᵀr``, ``γ``) and
    ``log_time_field`` (``dy/dτ = (1 + t)·dy/dt``, ``t = e^τ − 1``) against the hand formula of
    :func:`tests.reference.field` (paper Eqs. 2–4, 6). Negative control: a factor ``t`` instead of
    ``1 + t`` differs by a relative ``1/(1 + t) = 0.5`` at ``τ = log 2``."""
    V, a, bs = _problem(3)
    model, loss = gradflow.get_model("value-softmax"), gradflow.LogisticTeacher(bs)
    hV, ha, hg = ref.field(V, a, ref.logistic_residual(bs))
    y = (jnp.asarray(V), jnp.asarray(a), jnp.asarray(0.7))
    dV, da, dG = gradflow.flow_field(model, loss, y)
    np.testing.assert_allclose(dV, hV, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(da, ha, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(dG, hg, rtol=1e-12)
    tau = np.log(2.0)  # t = 1, so 1 + t = 2
    lV, la, lG = gradflow.attention.flow.log_time_field(jnp.asarray(tau), y, (model, loss))
    for got, want in ((lV, hV), (la, ha), (lG, hg)):
        np.testing.assert_allclose(got, 2.0 * np.asarray(want), rtol=1e-12, atol=1e-15)
    assert abs(float(lG) - 1.0 * hg) > 0.4 * hg  # control: the factor t = 1 is far outside the tolerance


@pytest.mark.parametrize("seed", [0, 1])
def test_square_design_field_matches_hand_formula(seed):
    rng = np.random.RandomState(seed)
    V, a = rng.randn(4, 6), rng.randn(6)
    X, y = rng.randn(7, 4), rng.randn(7)
    loss = gradflow.SquareLoss(y, design=X, scale=1.0)
    dV, da = gradflow.gradient_field(gradflow.get_model("value-softmax"), loss, jnp.asarray(V), jnp.asarray(a))
    hV, ha, g = ref.field(V, a, ref.square_residual(y, X, 1.0))
    np.testing.assert_allclose(dV, hV, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(da, ha, rtol=1e-12, atol=1e-14)
    beta = V @ ref.softmax(a)
    np.testing.assert_allclose(loss.gamma(jnp.asarray(beta)), g, rtol=1e-12)


def test_reduced_u_a_system():
    """The reduced (u, a) system (docs/model.md; Eqs. 6/7 with the sign corrected): u̇ = γ‖β*‖² s, ȧ = γ s (u − ū), with γ = 1/(1+exp⟨s,u⟩)."""
    V, a, bs = _problem(3, d=6, n=6)
    model = gradflow.get_model("value-softmax")
    loss = gradflow.LogisticTeacher(bs)
    dV, da = gradflow.gradient_field(model, loss, jnp.asarray(V), jnp.asarray(a))
    s = ref.softmax(a)
    u = V.T @ bs
    gamma = 1 / (1 + np.exp(s @ u))
    np.testing.assert_allclose(np.asarray(dV).T @ bs, gamma * (bs @ bs) * s, rtol=1e-12)
    np.testing.assert_allclose(da, gamma * s * (u - s @ u), rtol=1e-11, atol=1e-15)
    np.testing.assert_allclose(loss.gamma(jnp.asarray(V @ s)), gamma, rtol=1e-13)


def test_output_response_lemma_d2():
    """dβ/dt = (‖s‖² I + V J(s)² Vᵀ) r (appendix Lemma D.2, with the square the printed version drops), via the chain rule."""
    V, a, bs = _problem(4, d=5, n=7)
    model = gradflow.get_model("value-softmax")
    loss = gradflow.LogisticTeacher(bs)
    dV, da = gradflow.gradient_field(model, loss, jnp.asarray(V), jnp.asarray(a))
    beta_fn = lambda V_, a_: model.beta(V_, a_)
    _, dbeta = jax.jvp(beta_fn, (jnp.asarray(V), jnp.asarray(a)), (dV, da))
    s = ref.softmax(a)
    J = np.diag(s) - np.outer(s, s)
    r, _ = ref.logistic_residual(bs)(V @ s)
    expected = ((s @ s) * np.eye(5) + V @ J @ J @ V.T) @ r
    np.testing.assert_allclose(dbeta, expected, rtol=1e-11)


def test_square_rank_one_gamma_lemma_3_5():
    """With V = β* uᵀ/‖β*‖², γ = 1 − ⟨u, s⟩/‖β*‖² and r = γ β* (Lemma 3.5)."""
    rng = np.random.RandomState(5)
    bs, u, a = rng.randn(4), rng.randn(6), rng.randn(6)
    V = np.outer(bs, u) / (bs @ bs)
    loss = gradflow.SquareLoss(bs)
    s = ref.softmax(a)
    beta = jnp.asarray(V @ s)
    gamma = 1 - (u @ s) / (bs @ bs)
    np.testing.assert_allclose(loss.gamma(beta), gamma, rtol=1e-12)
    np.testing.assert_allclose(loss.residual(beta), gamma * bs, rtol=1e-12, atol=1e-15)


def test_logistic_loss_is_stable_at_extreme_margins():
    loss = gradflow.LogisticTeacher(np.array([1.0]))
    assert float(loss(jnp.array([-1000.0]))) == pytest.approx(1000.0)
    assert float(loss(jnp.array([1000.0]))) == 0.0
    assert float(loss(jnp.array([0.0]))) == pytest.approx(np.log(2))
    assert float(loss.gamma(jnp.array([-1000.0]))) == 1.0


def test_grads_of_loss_pass_check_grads():
    from jax.test_util import check_grads

    V, a, bs = _problem(6, d=3, n=4)
    model = gradflow.get_model("value-softmax")
    loss = gradflow.LogisticTeacher(bs)
    check_grads(lambda V_, a_: model.loss(loss, V_, a_), (jnp.asarray(V), jnp.asarray(a)), order=2)


@pytest.mark.parametrize("name", sorted(maps.MAPS))
def test_maps_against_numpy(name):
    z = np.array([0.7, -1.2, 2.0, 0.1, -0.3])
    expected = {
        "softmax": np.exp(z) / np.exp(z).sum(),
        "l1": np.abs(z) / np.abs(z).sum(),
        "sum": z / z.sum(),
        "l2": z**2 / (z**2).sum(),
        "relu": np.maximum(z, 0) / np.maximum(z, 0).sum(),
        "sigmoid": 1 / (1 + np.exp(-z)),
        "sigmoid-norm": (1 / (1 + np.exp(-z))) / (1 / (1 + np.exp(-z))).sum(),
        "elu": np.where(z > 0, z, np.expm1(z)) + 1,
        "elu-norm": (np.where(z > 0, z, np.expm1(z)) + 1) / (np.where(z > 0, z, np.expm1(z)) + 1).sum(),
        "linear": z,
        # sparsemax by hand: sorted z = 2.0, 0.7, 0.1, ...; support {2.0} since 1 + 2·0.7 = 2.4 < 2.7
        "sparsemax": np.array([0.0, 0.0, 1.0, 0.0, 0.0]),
    }[name]
    np.testing.assert_allclose(maps.apply_map(jnp.asarray(z), name), expected, rtol=1e-13, atol=1e-15)


def test_sparsemax_two_active():
    # z = (0.5, 0.3, -1): support {0.5, 0.3}, tau = (0.8 - 1)/2 = -0.1 -> (0.6, 0.4, 0)
    np.testing.assert_allclose(maps.apply_map(jnp.array([0.5, 0.3, -1.0]), "sparsemax"), [0.6, 0.4, 0.0], atol=1e-15)


def test_temperature_and_guarded_denominator():
    z = jnp.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(maps.apply_map(z, "softmax", 2.0), ref.softmax(np.asarray(z) / 2), rtol=1e-14)
    out = maps.apply_map(jnp.array([-1.0, -2.0]), "relu")  # Σ relu = 0: undefined -> NaN, reported by the flow
    assert np.all(np.isnan(out))
    g = jax.grad(lambda x: jnp.sum(maps.apply_map(x, "l1")))(jnp.array([1.0, -2.0]))
    assert np.all(np.isfinite(g))


def test_entropy_from_logits_underflow_is_finite():
    a = jnp.array([0.0, -1e4, -2e4])
    h, g = jax.value_and_grad(lambda x: maps.softmax_entropy(x))(a)
    assert float(h) == 0.0 and np.all(np.isfinite(g))
    a = jnp.array([0.3, -0.2, 1.0])
    p = ref.softmax(np.asarray(a))
    np.testing.assert_allclose(maps.softmax_entropy(a), -(p * np.log(p)).sum(), rtol=1e-14)


def test_unknown_map_name_is_a_clear_error():
    with pytest.raises(gradflow.GradflowValueError, match="normalization: got 'softmx'; expected one of"):
        maps.get_map("softmx")
