"""The problems the benchmarks share (Fig. 2's draws, batches of them, the one-trajectory case and
the bare ``diffeqsolve`` floor), in one module that imports no benchmark, so that
``python -m benchmarks`` and ``benchmarks.costs`` both read them from here."""

from __future__ import annotations

import numpy as np

import gradflow
from gradflow.attention.sweep import fig2_init
from benchmarks import reference as ref

fig2_draws = fig2_init  # the paper's Fig. 2 draws (one copy: gradflow.attention.sweep.fig2_init)


def flow(loss, V0, a0, **kw):
    traj = gradflow.simulate(loss, V0, a0, **kw)
    np.asarray(traj.a)  # wait for the device
    return traj


def batch(losses, V0s, a0s, **kw):
    traj = gradflow.simulate_batch(losses, V0s, a0s, **kw)
    np.asarray(traj.a)
    return traj


BARE = "diffrax alone (floor)"


def bare_diffrax(loss, V0, a0, ts):
    """The floor under gradflow's solve: one jitted ``diffeqsolve`` of the same log-time field
    with the same solver and controller, saving at ``ts`` — no events, status, metrics, input
    checks or rounds (gradflow steps the same solver in its own loop, ``gradflow/_engine/loop.py``,
    which takes the same steps). Returns ``f(rtol, atol) -> (a at ts, steps)`` (blocks until done)."""
    import diffrax
    import jax

    from gradflow.attention.flow import log_time_field
    from gradflow.attention.models import get_model

    model = get_model("value-softmax", "softmax", 1.0)
    y0 = (jax.numpy.asarray(V0), jax.numpy.asarray(a0), jax.numpy.zeros(()))
    taus = jax.numpy.asarray(np.log1p(ts))

    @jax.jit
    def solve(rtol, atol):
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(lambda tau, y, args: log_time_field(tau, y, args)), diffrax.Dopri8(), t0=0.0,
            t1=taus[-1], dt0=None, y0=y0, args=(model, loss), saveat=diffrax.SaveAt(ts=taus),
            stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol), max_steps=16384)
        return sol.ys[1], sol.stats["num_steps"]

    def run(rtol, atol):
        a, steps = jax.block_until_ready(solve(rtol, atol))
        return np.asarray(a), int(steps)

    return run


def tolerance_case():
    """The accuracy-vs-time case of the tolerance benchmarks: Fig. 2's draws to t = 1e12 at 41 save
    times, the error of a solution against SciPy Radau at rtol 1e-13, and the bare diffrax solve.

    Returns ``(V0, a0, beta_star, ts, err, loss, bare)``: ``err(a)`` is the max abs error of the
    saved logits ``a`` (shape ``(41, n)``); ``bare(rtol, atol)`` the :func:`bare_diffrax` run."""
    V0, a0, bs = fig2_draws()
    ts = np.concatenate([[0.0], np.geomspace(1e-2, 1e12, 40)])
    _, a_ref, _ = ref.integrate(V0, a0, ref.logistic_residual(bs), ts, rtol=1e-13, atol=1e-15)
    err = lambda a: float(np.max(np.abs(np.asarray(a) - a_ref)))
    loss = gradflow.LogisticTeacher(bs)
    return V0, a0, bs, ts, err, loss, bare_diffrax(loss, V0, a0, ts)


def draws(seeds, n=8):
    V0s, losses = [], []
    for s in seeds:
        V0, a0, bs = fig2_draws(int(s), n)
        V0s.append(V0)
        losses.append(bs)
    return np.stack(V0s), np.zeros((len(seeds), n)), np.stack(losses)


TS_1E12 = np.geomspace(1e-2, 1e12, 50)
