"""The rank-one reduction of the logistic-teacher flow (``gradflow.simulate`` for large ``V``).

Independent reference: the same flow solved on the full state ``(V, a)`` at tight tolerance
(and, through the existing suite, SciPy). Control: the comparison fails for a wrong direction
of the reduction, so agreement is not automatic.
"""

import sys

import numpy as np

import gradflow

simulate_module = sys.modules["gradflow.attention._simulate"]

FIELDS = ("V", "a", "Gamma", "s", "loss", "u", "entropy")


def _problem(d=5, n=7, seed=1):
    rng = np.random.RandomState(seed)
    return 0.3 * rng.randn(d, n), rng.randn(n), rng.randn(d)


TS = np.concatenate([[0.0], np.geomspace(1e-2, 1e12, 30)])


def _run(loss, V0, a0, **kw):
    return gradflow.simulate(loss, V0, a0, t1=1e12, ts=TS, rtol=1e-11, atol=1e-13, **kw)


def test_reduced_flow_matches_the_full_state_flow_to_1e12(monkeypatch):
    V0, a0, beta_star = _problem()
    loss = gradflow.LogisticTeacher(beta_star)
    full = _run(loss, V0, a0)
    monkeypatch.setattr(simulate_module, "REDUCE_MIN_SIZE", 0)
    red = _run(loss, V0, a0)
    assert "state" not in full.metadata and red.metadata["state"].startswith("rank-one")
    assert full.status == red.status == "ok"
    for k in FIELDS:
        x, y = np.asarray(getattr(full, k)), np.asarray(getattr(red, k))
        assert x.shape == y.shape, k
        np.testing.assert_allclose(y, x, rtol=1e-7, atol=1e-8, err_msg=k)
    # V moved (the comparison is not of two constant blocks) and only along β*
    moved = np.asarray(red.V[-1]) - V0
    assert np.abs(moved).max() > 1e-2
    bhat = beta_star / np.linalg.norm(beta_star)
    np.testing.assert_allclose(moved - np.outer(bhat, bhat @ moved), 0.0, atol=1e-12)


def test_a_wrong_reduction_direction_is_caught(monkeypatch):
    """Control: expanding along another direction than β* breaks the agreement above."""
    V0, a0, beta_star = _problem()
    loss = gradflow.LogisticTeacher(beta_star)
    full = _run(loss, V0, a0)
    right = simulate_module._teacher_reduction

    def wrong(loss_, V0_):
        red, v0, expand = right(loss_, V0_)
        other = np.roll(np.asarray(loss_.beta_star), 1)
        other = other / np.linalg.norm(other)
        return red, v0, lambda v: expand(v) + (other - np.asarray(loss_.beta_star) / np.linalg.norm(
            np.asarray(loss_.beta_star)))[None, :, None] * (v - v0[None])

    monkeypatch.setattr(simulate_module, "REDUCE_MIN_SIZE", 0)
    monkeypatch.setattr(simulate_module, "_teacher_reduction", wrong)
    red = _run(loss, V0, a0)
    assert np.abs(np.asarray(red.V) - np.asarray(full.V)).max() > 1e-3


def test_reduction_applies_only_to_large_value_softmax_logistic_runs(monkeypatch):
    monkeypatch.setattr(simulate_module, "REDUCE_MIN_SIZE", 35)
    reducible = simulate_module._reducible
    V0, a0, beta_star = _problem(5, 7)
    teacher = gradflow.LogisticTeacher(beta_star)

    def model(name, V, a):
        return gradflow.attention.models.prepare(teacher, V, a, name, "softmax", 1.0, batch=False)[0]

    vs = model("value-softmax", V0, a0)
    assert reducible(vs, teacher, V0)                                   # 35 entries
    assert not reducible(vs, teacher, V0[:, :6])                        # 30 entries
    assert not reducible(vs, gradflow.SquareLoss(np.ones(5)), V0)       # not a teacher loss
    assert not reducible(vs, teacher, V0[:1])                           # d = 1: already reduced
    U0 = 0.3 * np.random.RandomState(2).randn(6, 6)
    tied = gradflow.attention.models.prepare(gradflow.LogisticTeacher(np.ones(6)), U0, np.zeros(6), "tied", "softmax", 1.0,
                                   batch=False)[0]
    assert not reducible(tied, gradflow.LogisticTeacher(np.ones(6)), U0)  # not the value-softmax model
