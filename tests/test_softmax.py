"""``gradflow.softmax`` / ``gradflow.log_softmax``: values against jax.nn, derivatives against
jax.nn at moderate logits (``check_grads``) and against a 60-digit ``decimal`` computation at
large logit gaps, where jax.nn's derivatives lose the top entry."""

from __future__ import annotations

import decimal

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import gradflow

D = decimal.Decimal


def _ref_softmax(x):
    """Softmax of a 1-D float sequence in 60-digit decimal arithmetic."""
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        xs = [D(float(v)) for v in x]
        top = max(xs)
        e = [(v - top).exp() for v in xs]
        z = sum(e)
        return [v / z for v in e]


def _ref_softmax_jvp(x, t):
    """``J(s) t = s ⊙ (t − ⟨s, t⟩)`` (also the VJP: ``J`` is symmetric), 60 digits."""
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        s = _ref_softmax(x)
        ts = [D(float(v)) for v in t]
        st = sum(a * b for a, b in zip(s, ts))
        return np.array([float(a * (b - st)) for a, b in zip(s, ts)])


def _ref_log_softmax_jvp(x, t):
    """``t − ⟨s, t⟩``, 60 digits."""
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        s = _ref_softmax(x)
        ts = [D(float(v)) for v in t]
        st = sum(a * b for a, b in zip(s, ts))
        return np.array([float(b - st) for b in ts])


def _ref_log_softmax_vjp(x, g):
    """``g − s Σg``, 60 digits."""
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        s = _ref_softmax(x)
        gs = [D(float(v)) for v in g]
        tot = sum(gs)
        return np.array([float(b - a * tot) for a, b in zip(s, gs)])


def _rel_err(got, ref):
    got, ref = np.asarray(got, float), np.asarray(ref, float)
    return np.abs(got - ref) / np.maximum(np.abs(ref), 1e-300)


def _large_gap(seed, n=6, gap=80.0):
    """Logits with one entry ``gap`` above the rest (``s_top`` rounds to 1 in float64)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    x[rng.integers(n)] += gap
    return jnp.asarray(x), jnp.asarray(rng.normal(size=n))


@pytest.mark.parametrize("shape,axis", [((7,), -1), ((3, 5), 0), ((3, 5), 1), ((2, 3, 4), 1), ((2, 3, 4), -3)])
def test_values_equal_jax(shape, axis):
    x = jnp.asarray(np.random.default_rng(0).normal(size=shape) * 5)
    np.testing.assert_array_equal(gradflow.softmax(x, axis), jax.nn.softmax(x, axis=axis))
    np.testing.assert_array_equal(gradflow.log_softmax(x, axis), jax.nn.log_softmax(x, axis=axis))


@pytest.mark.parametrize("axis", [0, 1, -1, 2])
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_derivatives_match_jax_at_moderate_logits(fn, axis):
    x = jnp.asarray(np.random.default_rng(1).normal(size=(3, 4, 5)))
    ours, theirs = getattr(gradflow, fn), getattr(jax.nn, fn)
    check_grads(lambda z: ours(z, axis), (x,), order=2, modes=("fwd", "rev"))
    t = jnp.asarray(np.random.default_rng(2).normal(size=x.shape))
    _, jo = jax.jvp(lambda z: ours(z, axis), (x,), (t,))
    _, jt = jax.jvp(lambda z: theirs(z, axis=axis), (x,), (t,))
    np.testing.assert_allclose(jo, jt, rtol=1e-12, atol=1e-15)
    vo = jax.vjp(lambda z: ours(z, axis), x)[1](t)[0]
    vt = jax.vjp(lambda z: theirs(z, axis=axis), x)[1](t)[0]
    np.testing.assert_allclose(vo, vt, rtol=1e-12, atol=1e-15)
    x1, t1 = x[0, 0], t[0, 0]  # second derivatives of a scalar, against jax.nn's
    ho = jax.hessian(lambda z: jnp.sum(ours(z) * t1))(x1)
    ht = jax.hessian(lambda z: jnp.sum(theirs(z) * t1))(x1)
    np.testing.assert_allclose(ho, ht, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("seed", range(6))
def test_softmax_derivatives_exact_at_large_gaps(seed):
    x, g = _large_gap(seed)
    ref = _ref_softmax_jvp(x, g)
    vjp = jax.vjp(gradflow.softmax, x)[1](g)[0]
    jvp = jax.jvp(gradflow.softmax, (x,), (g,))[1]
    assert np.max(_rel_err(vjp, ref)) < 1e-12
    assert np.max(_rel_err(jvp, ref)) < 1e-12
    # jax.nn's own derivative loses the top entry entirely here
    top = int(np.argmax(x))
    theirs = jax.vjp(jax.nn.softmax, x)[1](g)[0]
    assert _rel_err(theirs, ref)[top] > 1e-3


@pytest.mark.parametrize("seed", range(6))
def test_log_softmax_derivatives_exact_at_large_gaps(seed):
    x, g = _large_gap(seed)
    vjp = jax.vjp(gradflow.log_softmax, x)[1](g)[0]
    jvp = jax.jvp(gradflow.log_softmax, (x,), (g,))[1]
    assert np.max(_rel_err(vjp, _ref_log_softmax_vjp(x, g))) < 1e-12
    assert np.max(_rel_err(jvp, _ref_log_softmax_jvp(x, g))) < 1e-12
    # cross-entropy on the top class: the exact gradient of −log s_top is −Σ_{j≠top} s_j e_top + ...
    top = int(np.argmax(x))
    onehot = jnp.zeros_like(x).at[top].set(1.0)
    ours = jax.grad(lambda z: -jnp.sum(onehot * gradflow.log_softmax(z)))(x)
    theirs = jax.grad(lambda z: -jnp.sum(onehot * jax.nn.log_softmax(z)))(x)
    ref = _ref_log_softmax_vjp(x, -np.asarray(onehot))
    assert np.max(_rel_err(ours, ref)) < 1e-12
    assert theirs[top] == 0.0  # 1 − s_top rounded to 0: jax.nn's gradient loses it
    assert ours[top] < 0.0


def test_large_gap_any_axis_and_vmap():
    x, g = _large_gap(7, n=5)
    X = jnp.stack([x, x[::-1]], axis=1)  # (5, 2): softmax along axis 0
    G = jnp.stack([g, g[::-1]], axis=1)
    out = jax.vjp(lambda z: gradflow.softmax(z, axis=0), X)[1](G)[0]
    for k, (xk, gk) in enumerate(((x, g), (x[::-1], g[::-1]))):
        assert np.max(_rel_err(out[:, k], _ref_softmax_jvp(xk, gk))) < 1e-12
    batched = jax.vmap(lambda z, c: jax.vjp(gradflow.softmax, z)[1](c)[0], in_axes=1, out_axes=1)(X, G)
    np.testing.assert_array_equal(batched, out)


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "x,axis,match",
    [
        (jnp.arange(3), -1, "x: got"),
        (jnp.float64(1.0), -1, "x: got"),
        (jnp.ones(3), 1, "axis: got 1"),
        (jnp.ones((2, 3)), -3, "axis: got -3"),
        (jnp.ones(3), 0.5, "axis: got 0.5"),
        (jnp.ones(3), (0,), "axis: got"),
    ],
)
@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
def test_bad_input(fn, x, axis, match):
    with pytest.raises(gradflow.GradflowValueError, match=match):
        getattr(gradflow, fn)(x, axis)
