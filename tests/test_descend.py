"""descend (GD / optax twin) against a hand-written NumPy explicit-Euler loop."""

import numpy as np
import optax
import pytest

import gradflow
from tests import reference as ref
from tests.test_simulate import fig2_problem


def test_gd_equals_numpy_euler():
    V0, a0, bs = fig2_problem()
    record = np.array([0, 1, 2, 10, 137, 500, 2000])
    traj = gradflow.descend(gradflow.LogisticTeacher(bs), V0, a0, lr=0.1, steps=2000, record=record)
    Vr, ar, Gr = ref.euler(V0, a0, ref.logistic_residual(bs), 0.1, 2000, record)
    assert traj.status == "ok" and np.all(np.asarray(traj.valid))
    np.testing.assert_allclose(traj.V, Vr, rtol=0, atol=1e-10)
    np.testing.assert_allclose(traj.a, ar, rtol=0, atol=1e-10)
    np.testing.assert_allclose(traj.Gamma, Gr, rtol=0, atol=1e-10)
    np.testing.assert_array_equal(traj.k, record)
    np.testing.assert_allclose(traj.t, 0.1 * record)


def test_gd_square_design_equals_numpy_euler():
    rng = np.random.RandomState(1)
    V0, a0, X, y = 1e-2 * rng.randn(4, 5), 1e-3 * rng.randn(5), rng.randn(6, 4), rng.randn(6)
    record = np.arange(0, 301, 50)
    traj = gradflow.descend(gradflow.SquareLoss(y, design=X, scale=1.0), V0, a0, lr=1e-2, steps=300, record=record)
    Vr, ar, _ = ref.euler(V0, a0, ref.square_residual(y, X, 1.0), 1e-2, 300, record)
    np.testing.assert_allclose(traj.V, Vr, rtol=0, atol=1e-10)
    np.testing.assert_allclose(traj.a, ar, rtol=0, atol=1e-10)


def test_gd_approaches_flow_as_lr_shrinks():
    """Euler is first order: halving lr roughly halves the GD–flow gap at equal flow time."""
    V0, a0, bs = fig2_problem()
    loss = gradflow.LogisticTeacher(bs)
    T = 50.0
    flow = gradflow.simulate(loss, V0, a0, t1=T, ts=np.array([0.0, T]), rtol=1e-12, atol=1e-14)
    errs = []
    for lr in (0.2, 0.1, 0.05):
        steps = int(round(T / lr))
        gd = gradflow.descend(loss, V0, a0, lr=lr, steps=steps, record=np.array([steps]))
        errs.append(float(np.max(np.abs(np.asarray(gd.s[-1]) - np.asarray(flow.s[-1])))))
    ratios = np.array(errs[:-1]) / np.array(errs[1:])
    assert np.all((ratios > 1.7) & (ratios < 2.3)), (errs, ratios)


def test_divergent_gd_reports_nonfinite_and_keeps_last_finite_iterate():
    rng = np.random.RandomState(0)
    loss = gradflow.SquareLoss(rng.randn(3), design=rng.randn(3, 3), scale=1.0)
    traj = gradflow.descend(loss, rng.randn(3, 3), rng.randn(3), lr=1e3, steps=200, record=np.arange(0, 201, 20))
    assert traj.status == "nonfinite"
    assert not np.all(np.asarray(traj.valid))
    for name in ("V", "a", "s", "Gamma"):
        assert np.all(np.isfinite(np.asarray(getattr(traj, name)))), name
    assert 0 < int(traj.num_steps) < 200 and float(traj.t_end) == pytest.approx(1e3 * int(traj.num_steps))


def test_optax_optimizer_and_integer_inputs():
    V0 = np.array([[1, 0], [0, 1]])  # integers: cast, same result as floats
    a0 = np.array([0, 0])
    loss = gradflow.LogisticTeacher(np.array([1.0, -1.0]))
    t_int = gradflow.descend(loss, V0, a0, lr=0.01, steps=50, optimizer=optax.adam(0.01))
    t_flt = gradflow.descend(loss, V0.astype(float), a0.astype(float), lr=0.01, steps=50, optimizer=optax.adam(0.01))
    np.testing.assert_array_equal(t_int.V, t_flt.V)
    assert t_int.metadata["method"] == "optax" and float(t_int.loss[-1]) < float(t_int.loss[0])


@pytest.mark.bad_input
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(lr=0.0, steps=10), "lr: got 0.0"),
        (dict(lr=-1.0, steps=10), "lr: got -1.0"),
        (dict(lr=0.1, steps=0), "steps: got 0"),
        (dict(lr=0.1, steps=2.5), "steps: got 2.5"),
        (dict(lr=0.1, steps=10, record=[0, 5, 3]), "record: .*strictly increasing"),
        (dict(lr=0.1, steps=10, record=[0, 11]), r"record: .*\[0, steps = 10\]"),
        (dict(lr=0.1, steps=10, optimizer="adam"), "optimizer: got 'adam'"),
    ],
)
def test_descend_bad_arguments(kwargs, match):
    V0, a0, bs = fig2_problem()
    with pytest.raises(gradflow.GradflowValueError, match=match):
        gradflow.descend(gradflow.LogisticTeacher(bs), V0, a0, **kwargs)
