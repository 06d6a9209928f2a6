"""Stiffness detection and the implicit phase of ``solver="auto"`` (issue 14): against SciPy's
Radau at tight tolerance, the detector against known spectra, and negative controls."""

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow
from gradflow._engine import stiff
from tests import reference as ref

from gradflow._engine.solve import Status as S_status

simulate_mod = importlib.import_module("gradflow.simulate")

BOUNDARY_ON = stiff.STIFF_ON * stiff.DOPRI8_BOUNDARY


def _square_draw(kappa, d, seed=123):
    """The paper's conditioning draw (Figs. 3/12) at size ``d``."""
    from gradflow.sims.draws import conditioning_init

    W0, a0, X, y = conditioning_init(kappa, seed, d)
    return W0, a0, X, y, gradflow.SquareLoss(y, design=X, scale=1.0)


def test_auto_on_a_stiff_flow_matches_radau_in_few_steps():
    """κ = 20, d = 4, t1 = 1e5, rtol 1e-8: ``auto`` detects stiffness and finishes in the
    implicit phase in a few hundred steps, agreeing with SciPy Radau (rtol 1e-12); Dopri8 alone
    (the negative control) is stability-limited: 2000 steps do not get it to t1."""
    W0, a0, X, y, loss = _square_draw(20, 4)
    ts = np.concatenate([[0.0], np.geomspace(1.0, 1e5, 11)])
    traj = gradflow.simulate(loss, W0, a0, t1=1e5, ts=ts, rtol=1e-8, atol=1e-10)
    assert traj.status == "ok" and traj.metadata["solver"] == "auto-stiff"
    Vr, ar, _ = ref.integrate(W0, a0, ref.square_residual(y, X, 1.0), ts, rtol=1e-12, atol=1e-14, method="Radau")
    np.testing.assert_allclose(traj.a, ar, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(traj.V, Vr, rtol=1e-5, atol=1e-7)
    assert int(traj.num_steps) < 400, int(traj.num_steps)
    explicit = gradflow.simulate(loss, W0, a0, t1=1e5, ts=ts, rtol=1e-8, atol=1e-10, solver="dopri8", max_steps=2000)
    assert explicit.status == "max_steps" and float(explicit.t_end) < 1e5


def test_rodas4_alone_matches_radau():
    """The implicit solver on its own (``solver="rodas4"``) from t = 0, against Radau."""
    W0, a0, X, y, loss = _square_draw(5, 3)
    ts = np.concatenate([[0.0], np.geomspace(0.1, 1e4, 9)])
    traj = gradflow.simulate(loss, W0, a0, t1=1e4, ts=ts, rtol=1e-10, atol=1e-12, solver="rodas4")
    assert traj.status == "ok"
    Vr, ar, _ = ref.integrate(W0, a0, ref.square_residual(y, X, 1.0), ts, rtol=1e-12, atol=1e-14, method="Radau")
    np.testing.assert_allclose(traj.a, ar, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(traj.V, Vr, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("rho", [1.0, 100.0])
def test_stiffness_ratio_is_step_times_spectral_radius(rho):
    """A linear field with eigenvalues ``−1, −ρ/10, −ρ`` (and a pytree state): ``h·ρ`` exactly."""
    lam = jnp.array([-1.0, -rho / 10, -rho])
    field = lambda y: {"u": lam[:2] * y["u"], "w": lam[2:] * y["w"]}
    y = {"u": jnp.ones(2), "w": jnp.ones(1)}
    assert float(stiff.stiffness_ratio(field, y, 0.01)) == pytest.approx(0.01 * rho, rel=1e-6)


def test_phase_policy_switches_with_hysteresis():
    on, off = stiff.STIFF_ON * stiff.DOPRI8_BOUNDARY, stiff.STIFF_OFF * stiff.DOPRI8_BOUNDARY
    mid = 0.5 * (on + off)
    was = np.array([False, False, False, True, True, True])
    h_rho = np.array([1.01 * on, mid, np.nan, mid, 0.99 * off, np.nan])
    solvers, left, now = stiff.phase_of_lanes(stiff.AUTO_STIFF, np.zeros(6), 10_000, was, h_rho)
    np.testing.assert_array_equal(now, [True, False, False, True, False, True])
    assert list(solvers) == ["rodas4", "dopri8", "dopri8", "rodas4", "dopri8", "rodas4"]
    assert left[1] == stiff.EXPLICIT_ROUND and left[0] == 10_000
    # a named solver never switches (negative control)
    solvers, _, now = stiff.phase_of_lanes("dopri8", np.zeros(6), 10_000, was, h_rho)
    assert set(solvers) == {"dopri8"} and not now.any()


def _h_rho_at_end(loss, V0, a0, t1, steps):
    """``h·ρ`` (:func:`stiff.stiffness_ratio`) after one Dopri8 solve of at most ``steps`` steps
    from t = 0 (the engine's own solve), and the solve's state."""
    from gradflow._engine import solve as S
    from gradflow.models import prepare

    mdl, V, a = prepare(loss, V0, a0, "value-softmax", "softmax", 1.0, batch=False)
    flow = simulate_mod.value_softmax_flow(loss)
    y0 = ((V, a), {"Gamma": jnp.zeros((), V.dtype)})
    taus = jnp.asarray([0.0, np.log1p(t1)])
    out = S.solve_lane(flow, (mdl, loss), y0, jnp.zeros(()), taus, jnp.asarray(1e-8), jnp.asarray(1e-10), "dopri8", steps)
    tau = out.tau_end
    field = lambda z: S._log_time_rhs(tau, z, (flow, (mdl, loss), 1e-8, 1e-10))
    return float(stiff.stiffness_ratio(field, out.y_end, tau / out.num_steps)), out


def test_detector_fires_on_the_stiff_flow_and_never_on_the_logistic_teacher():
    """After the first explicit round (64 Dopri8 steps) the κ = 20 flow is stability-limited
    (``h·ρ`` above the switching threshold); the logistic teacher of Fig. 2 (negative control),
    integrated to t = 1e12, stays far below it at its end and at intermediate times."""
    W0, a0, _, _, loss = _square_draw(20, 4)
    h_rho, out = _h_rho_at_end(loss, W0, a0, 1e5, stiff.EXPLICIT_ROUND)
    assert int(out.code) == int(S_status.max_steps)  # the round ended unfinished
    assert float(out.tau_end) < np.log1p(1e5) and h_rho > BOUNDARY_ON, h_rho
    assert float(out.h_rho) == pytest.approx(h_rho, rel=1e-9)  # what the engine reports to the phase policy
    rng = np.random.RandomState(123)
    V0, a0 = 0.1 * rng.randn(8, 8), 0.0 * rng.randn(8)
    bs = rng.randn(8)
    teacher = gradflow.LogisticTeacher(bs / np.linalg.norm(bs))
    for t1 in (1e2, 1e6, 1e12):
        h_rho, out = _h_rho_at_end(teacher, V0, a0, t1, 16384)
        assert float(out.tau_end) == pytest.approx(np.log1p(t1)) and h_rho < 0.5 * BOUNDARY_ON, (t1, h_rho)
