"""Bad input to simulate and the losses: a GradflowValueError naming argument, value and what is accepted."""

import numpy as np
import pytest

import gradflow
from tests.test_simulate import fig2_problem

V0, A0, BS = fig2_problem()
LOSS = gradflow.LogisticTeacher(BS)


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        ((LOSS, V0[:, :5], A0), dict(t1=1.0), r"a0.shape: got \(8,\); expected \(5,\)"),
        ((LOSS, V0[:5], A0), dict(t1=1.0), r"V0.shape: got \(5, 8\); expected \(d, n\) with d = 8"),
        ((LOSS, np.where(np.eye(8) > 0, np.nan, V0), A0), dict(t1=1.0), "V0: got .*finite values"),
        ((LOSS, V0, np.full(8, np.inf)), dict(t1=1.0), "a0: got .*finite values"),
        ((LOSS, V0, A0), dict(t1=0.0), "t1: got 0.0; expected a positive finite number"),
        ((LOSS, V0, A0), dict(t1=-5.0), "t1: got -5.0"),
        ((LOSS, V0, A0), dict(t1=float("inf")), "t1: got inf"),
        ((LOSS, V0, A0), dict(t1=10.0, ts=[0.0, 5.0, 2.0]), "ts: .*strictly increasing"),
        ((LOSS, V0, A0), dict(t1=10.0, ts=[0.0, 20.0]), r"ts: .*\[0, t1 = 10\]"),
        ((LOSS, V0, A0), dict(t1=10.0, ts=[-1.0, 2.0]), r"ts: .*\[0, t1 = 10\]"),
        ((LOSS, V0, A0), dict(t1=10.0, rtol=0.0), "rtol: got 0.0"),
        ((LOSS, V0, A0), dict(t1=10.0, atol=-1e-9), "atol: got -1e-09"),
        ((LOSS, V0, A0), dict(t1=10.0, solver="rk4"), "solver: got 'rk4'; expected one of"),
        ((LOSS, V0, A0), dict(t1=10.0, normalization="softplus"), "normalization: got 'softplus'"),
        ((LOSS, V0, A0), dict(t1=10.0, model="mlp"), "model: got 'mlp'"),
        ((LOSS, V0, A0), dict(t1=10.0, temperature=0.0), "temperature: got 0.0"),
        (("logistic", V0, A0), dict(t1=10.0), "loss: got 'logistic'; expected a gradflow loss"),
        ((LOSS, V0, A0.reshape(2, 4)), dict(t1=10.0, model="rowwise"), r"a0.shape: got \(2, 4\)"),
        ((LOSS, V0, A0), dict(t1=10.0, ts=["a", "b"]), "ts: got .*1-D array of flow times"),
        ((LOSS, V0, A0), dict(t1=10.0, max_steps=2.7), "max_steps: got 2.7; expected a positive integer"),
        ((LOSS, V0, A0), dict(t1=True), "t1: got True"),
    ],
)
def test_simulate_bad_arguments(args, kwargs, match):
    with pytest.raises(gradflow.GradflowValueError, match=match):
        gradflow.simulate(*args, **kwargs)


def test_loss_constructors_validate():
    with pytest.raises(gradflow.GradflowValueError, match="beta_star: .*non-zero"):
        gradflow.LogisticTeacher(np.zeros(3))
    with pytest.raises(gradflow.GradflowValueError, match="beta_star: got .*finite"):
        gradflow.LogisticTeacher([1.0, np.nan])
    with pytest.raises(gradflow.GradflowValueError, match=r"beta_star.shape: got \(2, 2\)"):
        gradflow.LogisticTeacher(np.ones((2, 2)))
    with pytest.raises(gradflow.GradflowValueError, match=r"design.shape: got \(3, 2\)"):
        gradflow.SquareLoss(np.ones(4), design=np.ones((3, 2)))
    with pytest.raises(gradflow.GradflowValueError, match="target: .*non-zero target"):
        gradflow.SquareLoss(np.zeros(4))
    with pytest.raises(gradflow.GradflowValueError, match="scale: got -1"):
        gradflow.SquareLoss(np.ones(4), scale=-1)
    with pytest.raises(gradflow.GradflowValueError, match="p_star: .*probabilities"):
        gradflow.SoftTargetCrossEntropy([0.5, 0.6])
    with pytest.raises(gradflow.GradflowValueError, match="beta_star: got .*real numeric"):
        gradflow.LogisticTeacher(["a", "b"])


def test_integer_inputs_give_identical_results():
    V = np.array([[1, -1, 0], [0, 2, 1]])
    a = np.array([0, 0, 0])
    loss = gradflow.LogisticTeacher(np.array([1, 2]))
    t_int = gradflow.simulate(loss, V, a, t1=100.0)
    t_flt = gradflow.simulate(gradflow.LogisticTeacher(np.array([1.0, 2.0])), V.astype(float), a.astype(float), t1=100.0)
    np.testing.assert_array_equal(t_int.s, t_flt.s)


def test_reruns_are_bitwise_identical():
    a = gradflow.simulate(LOSS, V0, A0, t1=1e6)
    b = gradflow.simulate(LOSS, V0, A0, t1=1e6)
    np.testing.assert_array_equal(a.V, b.V)
    np.testing.assert_array_equal(a.Gamma, b.Gamma)


def test_batch_arguments_validate():
    with pytest.raises(gradflow.GradflowValueError, match="V0s/a0s: .*batch size B ≥ 1"):
        gradflow.simulate_batch(LOSS, np.zeros((0, 8, 8)), np.zeros((0, 8)), t1=1.0)
    losses = [gradflow.LogisticTeacher(np.ones(8)), gradflow.LogisticTeacher(np.ones(4))]
    with pytest.raises(gradflow.GradflowValueError, match="loss: .*equal array shapes"):
        gradflow.simulate_batch(losses, np.zeros((2, 8, 8)), np.zeros((2, 8)), t1=1.0)
