"""The beyond-the-paper figures (long-horizon, gamma, bound, gd-vs-flow, sinks-rowwise): their data
claims against independent references, each with a negative control (the quick builds, with their
summaries against independent numbers: ``tests/test_figure_summaries.py``)."""

import numpy as np
import pytest

import gradflow
from gradflow.sims.beyond import bound
from gradflow.sims.beyond import gd_vs_flow
from gradflow.sims.beyond import long_horizon
from gradflow.sims.beyond._helpers import one_minus_top, sci
from gradflow.sims.draws import fig2_init
from gradflow.theory.experiments import lanes

from . import reference


# ----------------------------------------------------------------------------- helpers


def test_one_minus_top_matches_closed_form():
    L = np.array([0.0, 5.0, 40.0, 700.0])
    a = np.stack([L, np.zeros_like(L), np.zeros_like(L)], axis=1)
    expected = 2 * np.exp(-L) / (1 + 2 * np.exp(-L))  # hand calculation for logits (L, 0, 0)
    np.testing.assert_allclose(one_minus_top(a, 0), expected, rtol=1e-13)
    assert one_minus_top(a, 0)[-1] > 0  # no cancellation to 0 where 1 − s_0 < 1e-300


def test_local_exponent_recovers_powers_of_log():
    t = np.geomspace(1e3, 1e30, 400)
    te, ex = long_horizon.local_exponent(t, 3.0 / np.log(t) ** 2)
    np.testing.assert_allclose(ex, -2.0, atol=1e-3)
    _, ex1 = long_horizon.local_exponent(t, 1.0 / np.log(t))  # control: O(1/log t) is exponent −1, not −2
    assert np.all(np.abs(ex1 + 2.0) > 0.9)


def test_sci_labels():
    assert [sci(0.0), sci(1.0), sci(100.0), sci(1e4), sci(2e10)] == ["0", "1", "100", "10^{4}", "2\\cdot10^{10}"]


def test_sorted_delta_by_hand():
    order, delta, ctrl = bound.sorted_delta(np.array([0.3, 1.0, -0.2, 0.9]))
    assert list(order) == [1, 3, 0, 2]
    assert delta == pytest.approx(0.1) and ctrl == pytest.approx(0.2)


# ----------------------------------------------------------------------------- bound


@pytest.fixture(scope="module")
def fig2_flow():
    V0, a0, b = fig2_init()
    ts = np.concatenate([[0.0], np.geomspace(1e-3, 1e12, 200)])
    traj = gradflow.simulate(gradflow.LogisticTeacher(b), V0, a0, t1=1e12, ts=ts, rtol=1e-10, atol=1e-12)
    assert traj.ok
    return lanes(traj)[0]


def test_bound_data_respects_thm_3_3b_and_wrong_bound_is_violated(fig2_flow):
    lane = fig2_flow
    u0 = lane["u"][0]
    us = np.sort(u0)[::-1]
    delta_hand = float(np.min(us[:-1] - us[1:]))
    order, delta, delta_wrong = bound.sorted_delta(u0)
    assert delta == pytest.approx(delta_hand, rel=1e-15)
    n, top = u0.size, order[0]
    s, G = lane["s"], lane["Gamma"]
    others = np.delete(np.arange(n), top)
    ratios = s[:, others] / s[:, [top]]  # directly from the weights, not from the logits
    for d, must_hold in ((delta, True), (delta_wrong, False)):
        rhs = 1.0 / (1.0 + d / n * G)
        holds_direct = bool(np.all(ratios <= rhs[:, None] * (1 + 1e-12)))
        holds_figure = bool(np.all(bound.exponent_ratio(lane, d) >= 1.0))
        assert holds_direct == holds_figure == must_hold
        assert bool(np.all(bound.log_excess(lane, d)[lane["t"] > 0] <= 1e-12)) == must_hold


# ----------------------------------------------------------------------------- gd-vs-flow


def _heun_errors(V0, a0, residual, T, M, ks, V_ref, a_ref):
    """Control: Heun's method (2nd order) against the same flow; its fitted order is ≈ 2, not 1."""
    out = []
    for K in ks:
        V, a, h, err = V0.copy(), a0.copy(), T / K, 0.0
        for k in range(1, K + 1):
            dV1, da1, _ = reference.field(V, a, residual)
            dV2, da2, _ = reference.field(V + h * dV1, a + h * da1, residual)
            V, a = V + h / 2 * (dV1 + dV2), a + h / 2 * (da1 + da2)
            if k % (K // M) == 0:
                j = k // (K // M)
                err = max(err, float(np.sqrt(np.sum((V - V_ref[j]) ** 2) + np.sum((a - a_ref[j]) ** 2))))
        out.append(err)
    return np.asarray(out)


def test_gd_vs_flow_fitted_order_is_one_and_second_order_control_is_not():
    rng = np.random.RandomState(0)
    V0, a0 = 0.5 * rng.randn(3, 3), np.zeros(3)
    b = rng.randn(3)
    b /= np.linalg.norm(b)
    cfg = dict(T=10.0, M=5, ks=[20, 40, 80, 160], flow_rtol=1e-12, flow_atol=1e-14)
    e_theta, e_s, flow = gd_vs_flow._errors(gradflow.LogisticTeacher(b), V0, a0, cfg)
    t_cmp = cfg["T"] * np.arange(cfg["M"] + 1) / cfg["M"]
    V_ref, a_ref, _ = reference.integrate(V0, a0, reference.logistic_residual(b), t_cmp)
    # the figure's flow is the flow: it matches an independent SciPy DOP853 integration
    assert np.max(np.abs(np.asarray(flow.V) - V_ref)) < 1e-9 and np.max(np.abs(np.asarray(flow.a) - a_ref)) < 1e-9
    lrs = cfg["T"] / np.asarray(cfg["ks"], float)
    for e in (e_theta, e_s):
        assert 0.8 <= gd_vs_flow.fitted_order(lrs, e, np.inf) <= 1.2
    heun = _heun_errors(V0, a0, reference.logistic_residual(b), cfg["T"], cfg["M"], cfg["ks"], V_ref, a_ref)
    assert not 0.8 <= gd_vs_flow.fitted_order(lrs, heun, np.inf) <= 1.2
    assert gd_vs_flow.fitted_order(lrs, heun, np.inf) > 1.7
