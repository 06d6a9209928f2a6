"""Kinked maps under ``solver="auto"``: the L1 map's flow slides along its kinks
(Filippov) to ``t1`` and agrees with gradient descent to first order in the step size."""

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
        errs.append(float(np.max(np.abs(np.asarray(gd.a[-1]) - np.asarray(flow.a[-1])))))
    assert errs[1] < 2e-3 and errs[0] / errs[1] == pytest.approx(2.0, rel=0.1), errs
