"""``gradflow._engine.erk.UnrolledDopri8`` (the batched solves' Dopri8) against diffrax's own
``Dopri8``, an independent implementation of the same tableau: one step's solution, error
estimate, FSAL field and dense output agree to round-off, and a whole vmapped solve takes the
same answer as the closed form and diffrax's Dopri8. Negative control: the same one-step comparison
against diffrax's ``Dopri5`` (another method) fails."""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradflow._engine.erk import UnrolledDopri8


def _field(t, y, args):
    """A nonlinear, time-dependent field on a pytree state (a matrix and a vector)."""
    M, v = y
    return (-jnp.sin(t) * M + jnp.outer(v, v), -v * jnp.tanh(jnp.sum(M)) + jnp.cos(t))


def _one_step(solver):
    term = diffrax.ODETerm(_field)
    y0 = (jnp.asarray([[0.3, -0.2], [0.1, 0.5]]), jnp.asarray([0.7, -0.4]))
    t0, t1 = 0.2, 0.45
    state = solver.init(term, t0, t1, y0, None)
    y1, err, dense, state, _ = solver.step(term, t0, t1, y0, None, state, False)
    # second step: the FSAL field carried from the first is used
    y2, err2, dense2, _, _ = solver.step(term, t1, 0.8, y1, None, state, False)
    interp = solver.interpolation_cls(t0=t1, t1=0.8, **dense2)
    mids = [interp.evaluate(t) for t in (0.5, 0.61, 0.79)]
    return jax.tree.leaves((y1, err, y2, err2, state[1], mids))


@pytest.mark.parametrize("other, agrees", [(diffrax.Dopri8(), True), (diffrax.Dopri5(), False)])
def test_one_step_matches_diffrax_dopri8(other, agrees):
    ours = _one_step(UnrolledDopri8())
    theirs = _one_step(other)
    close = all(np.allclose(a, b, rtol=1e-13, atol=1e-15) for a, b in zip(ours, theirs))
    assert close == agrees


def test_vmapped_solve_matches_closed_form_and_dopri8():
    """``dy/dt = λ y`` per lane (closed form ``y0 e^{λ t}``), saved at ts, under vmap."""
    lam = jnp.asarray([-1.0, -0.3, 0.5, -2.0])
    ts = jnp.linspace(0.0, 3.0, 7)

    def solve(solver, l):
        sol = diffrax.diffeqsolve(diffrax.ODETerm(lambda t, y, a: a * y), solver, 0.0, 3.0, None, jnp.ones(2),
                                  args=l, saveat=diffrax.SaveAt(ts=ts),
                                  stepsize_controller=diffrax.PIDController(rtol=1e-10, atol=1e-12))
        return sol.ys, sol.stats["num_steps"]

    ys, steps = jax.jit(jax.vmap(lambda l: solve(UnrolledDopri8(), l)))(lam)
    ys_d, steps_d = jax.jit(jax.vmap(lambda l: solve(diffrax.Dopri8(), l)))(lam)
    exact = np.exp(np.asarray(lam)[:, None] * np.asarray(ts)[None, :])[..., None] * np.ones(2)
    np.testing.assert_allclose(ys, exact, rtol=1e-7)  # global error of a 1e-10 local tolerance
    # this easy problem's error estimates are near round-off, so a last-digit difference can
    # move one step (as batched vs unbatched diffrax also does); the answers agree far inside rtol
    assert np.all(np.abs(np.asarray(steps) - np.asarray(steps_d)) <= 1)
    np.testing.assert_allclose(ys, ys_d, rtol=1e-8)  # dense output (7th order) between few, long steps


@pytest.mark.slow  # default run kept under ~15 min on 2 cores
def test_engine_with_unrolled_stages_matches_single_runs(monkeypatch):
    """The engine's batched path with the unrolled stages (forced at 3 lanes) against single
    runs (diffrax's own Dopri8, no vmap), as ``tests/test_simulate.py`` checks the default path."""
    import gradflow
    from gradflow._engine import batch

    monkeypatch.setattr(batch, "UNROLL_LANES", 2)
    rng = np.random.RandomState(11)
    V0s, a0s = 0.1 * rng.randn(3, 4, 4), np.zeros((3, 4))
    losses = [gradflow.LogisticTeacher(rng.randn(4)) for _ in range(3)]
    ts = np.concatenate([[0.0], np.geomspace(1e-2, 1e9, 17)])  # a shape no other test compiles
    out = gradflow.simulate_batch(losses, V0s, a0s, t1=1e9, ts=ts)
    assert out.status == ["ok"] * 3
    for i in range(3):
        single = gradflow.simulate(losses[i], V0s[i], a0s[i], t1=1e9, ts=ts)
        # the two step sequences differ (round-off at accept/reject borders), so the lanes agree
        # to the solver's tolerance (rtol 1e-8 on the state), not to round-off
        np.testing.assert_allclose(out[i].s, single.s, rtol=0, atol=1e-8)
        np.testing.assert_allclose(out[i].Gamma, single.Gamma, rtol=1e-7)
