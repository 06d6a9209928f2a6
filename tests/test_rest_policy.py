"""The engine policy's front door: ``rest_stop``, the deprecated ``steady``, bad input, the
README's example, run from the README (``∫ L dt`` to ``t1``, not to the stop), and the mutation table's
originals (each mutation must find its text, or ``python -m tests.mutate`` mutates nothing)."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradflow
from tests import mutate
from tests.test_corpus import radau_log_time

QUAD = lambda p: 0.5 * (p["w"] - 1.0) ** 2


def test_quadrature_continues_exactly_after_the_rest_stop():
    """``(w − 1)²/2`` from ``w = 0``: ``∫ w² dt = t − 2(1 − e^{−t}) + (1 − e^{−2t})/2`` (hand
    calculation) at ``t = 1e3, 1e4, 1e6``, all after the stop; the old engine froze it at 178.9."""
    ts = np.array([0.0, 1e3, 1e4, 1e6])
    sol = gradflow.integrate(QUAD, {"w": 0.0}, t1=1e6, ts=ts, quadratures={"w2": lambda p: p["w"] ** 2})
    assert sol.status == "ok" and float(sol.t_steady) < 1e3
    exact = ts - 2 * -np.expm1(-ts) + 0.5 * -np.expm1(-2 * ts)
    np.testing.assert_allclose(np.asarray(sol.quadratures["w2"]), exact, rtol=1e-9, atol=1e-12)
    frozen = np.asarray(sol.quadratures["w2"])[1]
    assert abs(frozen - exact[-1]) > 1e5  # control: a frozen value differs from the exact one at 1e6


def test_rest_stop_false_integrates_to_t1_on_the_implicit_method():
    """``rest_stop=False`` on a converged flow: stiffness detection still runs, so ``t1 = 1e6``
    takes a few hundred steps, not ``max_steps`` (the old ``steady=False`` ended at t ≈ 6e4)."""
    sol = gradflow.integrate(QUAD, {"w": 0.0}, t1=1e6, ts=np.array([0.0, 1e6]), rest_stop=False)
    assert sol.status == "ok" and np.isinf(float(sol.t_steady)) and int(sol.num_steps) < 1000
    assert float(sol.params["w"][-1]) == pytest.approx(1.0, abs=1e-9)


def test_steady_is_gone():
    """``steady``, deprecated in favour of ``rest_stop``, was removed (a 0.1 package): passing it
    is a TypeError naming it; ``rest_stop=False`` is what it meant (control)."""
    with pytest.raises(TypeError, match="steady"):
        gradflow.integrate(QUAD, {"w": 0.0}, t1=1e3, steady=False)
    sol = gradflow.integrate(QUAD, {"w": 0.0}, t1=1e3, rest_stop=False)
    assert np.isinf(float(sol.t_steady)) and sol.metadata["rest_stop"] is False


@pytest.mark.bad_input
@pytest.mark.parametrize("kw, match", [
    (dict(rest_stop="yes"), r"^rest_stop: got 'yes'; expected True"),
    (dict(policy="aggressive"), r"^policy: got 'aggressive'; expected a gradflow.AutoPolicy"),
])
def test_bad_rest_settings_are_refused(kw, match):
    with pytest.raises(gradflow.GradflowValueError, match=match):
        gradflow.integrate(QUAD, {"w": 0.0}, t1=1.0, **kw)


def _readme_example():
    """The README's Python block and the output block that follows it."""
    text = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    m = re.search(r"```python\n(.*?)```\s*```text\n(.*?)```", text, re.S)
    assert m, "README.md: no ```python block followed by its ```text output"
    return m.group(1), m.group(2)


def test_readme_example_prints_what_the_readme_shows():
    """The README's example, run as printed: its output matches the README's (numbers to 1e-5),
    the loss at rest is the least-squares residual (``numpy.linalg.lstsq``: the product ``W1 W2``
    can be any 5 × 3 matrix), and ``∫ L dt`` to ``t1 = 1e6`` is ``L*·t1`` plus the transient, far
    above its value at the stop (281 in the old engine's output)."""
    code, shown = _readme_example()
    out = io.StringIO()
    scope: dict = {}
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), scope)
    got, want = out.getvalue().split(), shown.split()
    assert len(got) == len(want) and got[0] == want[0] == "ok", (got, want)
    np.testing.assert_allclose([float(x) for x in got[1:]], [float(x) for x in want[1:]], rtol=1e-5)
    sol, X, Y = scope["sol"], scope["X"], scope["Y"]
    B = np.linalg.lstsq(X, Y, rcond=None)[0]
    assert float(sol.loss[-1]) == pytest.approx(0.5 * np.mean((X @ B - Y) ** 2), rel=1e-7)
    t_rest, L_end, area = float(sol.t_steady), float(sol.loss[-1]), float(sol.quadratures["area"][-1])
    at_rest = np.interp(t_rest, np.asarray(sol.t), np.asarray(sol.quadratures["area"]))
    assert sol.status == "ok" and t_rest < 1e6
    assert area == pytest.approx(at_rest + L_end * (1e6 - t_rest), rel=1e-9)
    assert area > at_rest and area > 0.9 * L_end * 1e6
    # control: the comparison sees a wrong number in the README's output
    with pytest.raises(AssertionError):
        np.testing.assert_allclose([float(x) for x in got[1:]], [float(want[1]) * 1.001, float(want[2])], rtol=1e-5)


def test_every_mutation_finds_its_original_text():
    root = pathlib.Path(mutate.__file__).resolve().parents[1]
    muts = [m for name in dir(mutate) if name.isupper() for m in (getattr(mutate, name) if isinstance(
        getattr(mutate, name), (list, tuple)) else ()) if isinstance(m, mutate.Mutation)]
    assert len(muts) > 50
    missing = [m.name for m in muts if m.old not in (root / m.file).read_text()]
    assert not missing, missing


# ------------------------------------------------------------------ property-based fuzzer
def _random_loss(p, c):
    """A random small loss: a convex quadratic part, a logistic part (which may have no finite
    minimiser) and a quartic coupling, all weighted by the drawn coefficients ``c``."""
    w = p["w"]
    quad = 0.5 * c["q"] * jnp.sum((c["A"] @ w - c["y"]) ** 2)
    logi = c["l"] * jnp.sum(jnp.logaddexp(0.0, -(c["B"] @ w)))
    return quad + logi + 0.25 * c["r"] * jnp.sum(w ** 4)


def _draw(seed, q, l, r):
    rng = np.random.RandomState(seed)
    return dict(A=rng.randn(2, 2), y=rng.randn(2), B=rng.randn(3, 2), q=np.float64(q), l=np.float64(l),
                r=np.float64(r)), {"w": rng.randn(2)}


def _fuzz(seed, q, l, r):
    c, p0 = _draw(seed, q, l, r)
    ts = np.concatenate([[0.0], np.geomspace(1e-2, 1e12, 9)])
    sol = gradflow.integrate(_random_loss, p0, args=c, t1=1e12, ts=ts)
    assert sol.status == "ok"
    ref = radau_log_time(_random_loss, p0, ts, args=c)
    got = np.asarray(sol.params["w"])
    scale = np.maximum(np.abs(ref).max(axis=1, keepdims=True), 1e-3)
    err = float(np.max(np.abs(got - ref) / scale))
    assert err < 1e-6, (seed, q, l, r, err, float(sol.t_steady))


_coef = st.sampled_from([0.0, 1e-3, 1.0, 10.0])


@settings(max_examples=6, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), q=_coef, l=_coef, r=_coef)
def test_fuzz_integrate_matches_scipy_radau_to_1e12(seed, q, l, r):
    """Random small losses and starts, defaults, against SciPy Radau in log time to ``t = 1e12``
    (the losses share one function, so one compilation serves every example)."""
    _fuzz(seed, q, l, r)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), q=_coef, l=_coef, r=_coef)
def test_fuzz_integrate_matches_scipy_radau_to_1e12_many(seed, q, l, r):
    _fuzz(seed, q, l, r)


def test_quadrature_singular_at_rest_never_continues_a_wrong_rate():
    """``L = (w − 1)²/2`` from ``w = 0`` (``w = 1 − e^{−t}``) with the integrand ``1/|w − 1| = e^t``,
    whose integral diverges: the rest stop must not fire (it would continue a finite, wrong rate
    with status ``ok``); the run ends ``max_steps`` or ``nonfinite`` and its quadrature, where it
    has one, is the closed form ``e^t − 1``. Control: the smooth integrand ``w²`` on the same flow
    stops at rest and its integral to ``t1`` is the hand value ``t1 − 3/2`` (+ exponentially small)."""
    loss = lambda w: 0.5 * (w - 1.0) ** 2
    sol = gradflow.integrate(loss, 0.0, t1=1e6, ts=[0.0, 1.0, 10.0, 1e6], quadratures={"q": lambda w: 1.0 / jnp.abs(w - 1.0)},
                             max_steps=2000)
    assert sol.status in ("max_steps", "nonfinite") and not np.isfinite(float(sol.t_steady)), sol.status
    q = np.asarray(sol.quadratures["q"])
    np.testing.assert_allclose(q[1:3], np.expm1([1.0, 10.0]), rtol=1e-6)
    ok = gradflow.integrate(loss, 0.0, t1=1e6, ts=[0.0, 1e6], quadratures={"w2": lambda w: w ** 2})
    assert ok.status == "ok" and np.isfinite(float(ok.t_steady))
    assert float(ok.quadratures["w2"][-1]) == pytest.approx(1e6 - 1.5, rel=1e-9)


def test_quadrature_non_finite_at_the_start_ends_nonfinite_at_once():
    """An integrand that is ``−inf`` everywhere (``log(w − w)``): status ``nonfinite`` at ``t = 0``,
    the state finite. Control: the field alone (no quadrature) reaches ``t1``."""
    loss = lambda w: 0.5 * (w - 1.0) ** 2
    sol = gradflow.integrate(loss, 0.0, t1=10.0, quadratures={"bad": lambda w: jnp.log(w - w)})
    assert sol.status == "nonfinite" and float(sol.t_end) == 0.0 and np.all(np.isfinite(np.asarray(sol.params)))
    assert gradflow.integrate(loss, 0.0, t1=10.0).status == "ok"


def test_several_quadratures_at_rest_including_one_that_vanishes_there():
    """``L = (w − 1)²/2`` from ``w = 0`` (``w = 1 − e^{−t}``) with three quadratures at once and the
    rest stop on: ``∫ w² dt`` (closed form ``t − 2(1 − e^{−t}) + (1 − e^{−2t})/2``), ``∫ (w − 1)² dt``
    (vanishes at rest; ``(1 − e^{−2t})/2 → 1/2``) and ``∫ w dt`` (``t − 1 + e^{−t}``) to ``t1 = 1e6``.
    The vanishing one must not hold the stop back (status ``ok``, a rest time) and all three match."""
    loss = lambda w: 0.5 * (w - 1.0) ** 2
    t1 = 1e6
    sol = gradflow.integrate(loss, 0.0, t1=t1, ts=[0.0, 1.0, t1], quadratures={
        "w2": lambda w: w ** 2, "gap2": lambda w: (w - 1.0) ** 2, "w": lambda w: w})
    assert sol.status == "ok" and np.isfinite(float(sol.t_steady))
    q = {k: np.asarray(v) for k, v in sol.quadratures.items()}
    e1 = np.exp(-1.0)
    np.testing.assert_allclose(q["w2"][1], 1.0 - 2.0 * (1.0 - e1) + 0.5 * (1.0 - e1 ** 2), rtol=1e-7)
    np.testing.assert_allclose(q["gap2"][1:], [0.5 * (1.0 - e1 ** 2), 0.5], rtol=1e-7)
    np.testing.assert_allclose(q["w2"][-1], t1 - 1.5, rtol=1e-9)
    np.testing.assert_allclose(q["w"][-1], t1 - 1.0, rtol=1e-9)
