"""Every guard of the engine on both sides of its threshold, and every documented tolerance and
budget honoured in every phase.

A *guard* is a constant that decides a result: the rest stop, the quadrature growth guard, the
stiffness switch, the solver choice by state size and symmetry, the phases' step budgets, the inner
solves' tolerance, the RKC stage rule, the batch buckets. Each test puts one case just inside the
threshold and one just outside it, with the threshold written out here as a number (from the
documentation or a hand calculation, never read back from the engine), so that moving the constant
by a factor of a few fails the test (mutations in ``tests/mutate.py``, results in
``tests/MUTATION_RESULTS.md``). The table of thresholds and their tests: docs/solvers.md,
"Thresholds and their tests".

Then ``rtol`` and ``max_steps`` through each phase by name (``dopri8``, ``rodas4``,
``rodas4-eigh``, ``rodas4-krylov``, ``rkc``) on a quadratic whose flow has a closed form, and the
budget through ``solver="auto"`` spent in its implicit phase."""

from __future__ import annotations

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

import gradflow
from gradflow._engine.policy import DEFAULT_POLICY as POLICY
from gradflow._engine import batch, chebyshev, rosenbrock, stiff
from gradflow._engine import solve as _solve
from gradflow._engine.solvers import spec

# ---------------------------------------------------------------- the rest stop and its quadrature guard


def _at_rest(bound, *, rtol=1e-8, atol=1e-10, t=1000.0, growth=None):
    """:func:`gradflow._engine.solve.at_rest` on the 1-D flow ``f = −θ`` at flow time ``t``, with
    ``θ`` chosen so that the rest bound ``‖v‖_tol/κ`` is ``bound`` by hand: ``v = (1 + t)·θ``,
    ``κ = (1 + t) − 1 = t`` (``J = −1``), so ``(1 + t)·θ/(atol + rtol·θ) = bound·t`` gives
    ``θ = bound·t·atol/((1 + t) − bound·t·rtol)``. With ``growth``, one quadrature whose integrand
    is ``1`` here and ``growth`` where the linearisation says the flow ends."""
    theta = bound * t * atol / ((1 + t) - bound * t * rtol)
    p = jnp.asarray([theta])
    f = -p
    u = f / jnp.max(jnp.abs(f))
    ju = -u
    kw = {}
    if growth is not None:
        kw = dict(rates={"g": jnp.asarray(1.0)}, rates_at=lambda th: {"g": jnp.asarray(growth)})
    return bool(_solve.at_rest(jnp.log1p(t), p, f, u, ju, rtol, atol, **kw))


def test_rest_stop_fires_just_below_one_percent_of_the_tolerance_and_not_just_above():
    """The rest stop (docs: solver guide, "The rest stop"): at rest once the movement left, bounded
    through the linearisation, is below 1 % of the tolerance. Bounds of 0.7 % and 1.4 %, computed by
    hand: the first rests, the second does not (at two tolerances and two times)."""
    for rtol, atol, t in ((1e-8, 1e-10, 1e3), (1e-4, 1e-6, 1e8)):
        assert _at_rest(0.7e-2, rtol=rtol, atol=atol, t=t)
        assert not _at_rest(1.4e-2, rtol=rtol, atol=atol, t=t)


def test_quadrature_guard_allows_growth_below_twice_and_refuses_above():
    """The quadrature guard of the rest stop: a flow at rest (bound 0.5 %) still does not stop when an
    integrand would be more than 2 times larger (plus ``atol``) where the flow ends. 1.5 times: the
    stop fires; 2.6 times: it does not; unchanged: it fires (control)."""
    assert _at_rest(0.5e-2, growth=1.0)
    assert _at_rest(0.5e-2, growth=1.5)
    assert not _at_rest(0.5e-2, growth=2.6)
    assert not _at_rest(0.5e-2, growth=np.inf)


def test_stall_step_is_1024_ulps_of_the_end_log_time():
    """The status ``stalled``: a log-time step below ``1024·ε·max(1, τ1)`` (a step that moves the
    time by a few hundred ulps makes no progress): 6.3e-12 at ``t1 = 1e12`` (``τ1 = 27.6``), and
    ``1024·ε = 2.3e-13`` for any ``τ1 ≤ 1`` (2e-13 and 3e-13 on either side of it)."""
    eps = np.finfo(np.float64).eps
    assert float(_solve.stall_dtmin(jnp.log1p(1e12))) == pytest.approx(1024 * eps * np.log1p(1e12), rel=1e-12)
    assert 6.2e-12 < float(_solve.stall_dtmin(jnp.log1p(1e12))) < 6.4e-12
    assert 2e-13 < float(_solve.stall_dtmin(jnp.asarray(0.5))) < 3e-13


# ---------------------------------------------------------------- the stiffness switch


def test_dopri8_boundary_is_where_its_stability_function_meets_the_real_axis():
    """``DOPRI8_BOUNDARY``: the stability function ``R(z) = 1 + z·bᵀ(I − zA)⁻¹·1`` of diffrax's Dopri8
    tableau has ``|R(−x)| = 1`` at ``x ≈ 5.1666`` (found here by Brent's method): the constant is
    that root to 0.1 %; inside it (``x = 5.0``) a step damps, outside (``x = 5.4``) it amplifies."""
    tab = diffrax.Dopri8.tableau
    s = len(tab.b_sol)
    A = np.zeros((s, s))
    for i, row in enumerate(tab.a_lower):
        A[i + 1, :len(row)] = row
    b = np.asarray(tab.b_sol)
    R = lambda z: 1.0 + z * b @ np.linalg.solve(np.eye(s) - z * A, np.ones(s))  # noqa: E731
    assert abs(R(-5.0)) < 1 < abs(R(-5.4))
    root = scipy.optimize.brentq(lambda x: abs(R(-x)) - 1.0, 5.0, 5.4)
    assert root == pytest.approx(5.1666, abs=1e-3)
    assert POLICY.explicit_boundary == pytest.approx(root, rel=1e-3)


def _names(codes):
    return [spec(c).name for c in codes]


def test_explicit_lanes_switch_above_half_the_dopri8_boundary_only():
    """The switch to the implicit phase at ``h·ρ > 0.5 × 5.17 = 2.585`` (steps at half the
    stability boundary or more are stability-limited): ``h·ρ = 2.45`` stays explicit, ``2.75``
    switches (a 6 % margin each side)."""
    codes, _, now = stiff.phase_of_lanes("auto", np.zeros(2), 10_000, np.zeros(2, bool), np.array([2.45, 2.75]),
                                         np.zeros(2), 500)
    np.testing.assert_array_equal(now, [False, True])
    assert _names(codes) == ["dopri8", "rodas4-eigh"]


def test_implicit_lanes_switch_back_below_a_quarter_of_the_dopri8_boundary_only():
    """The switch back to explicit at ``h·ρ < 0.25 × 5.17 = 1.2925``: an implicit lane at
    ``h·ρ = 1.2`` goes back to Dopri8, one at ``1.4`` stays implicit (and between the two switches
    nothing moves: ``2.0`` keeps either phase)."""
    was = np.array([True, True, True, False])
    codes, _, now = stiff.phase_of_lanes("auto", np.zeros(4), 10_000, was, np.array([1.2, 1.4, 2.0, 2.0]),
                                         np.zeros(4), 500)
    np.testing.assert_array_equal(now, [False, True, True, False])
    assert _names(codes) == ["dopri8", "rodas4-eigh", "rodas4-eigh", "dopri8"]


def test_implicit_solver_by_state_size_and_symmetry():
    """Which stiff solver a stiff lane runs: the eigendecomposition solver (``rodas4-eigh``) from
    128 parameters, from 2000 the stabilised explicit one (``rkc``) while its stages fit the cap
    and the Krylov one (``rodas4-krylov``) past it, all only for a symmetric Jacobian block
    (asymmetry at most 1e-8); ``rodas4`` otherwise. Each size threshold one below and at it; the
    asymmetry at half and twice its tolerance; without the stabilised solver (its threshold out
    of reach) the Krylov one from 2000."""
    def solver(size, asym, policy=POLICY):
        codes, _, _ = stiff.phase_of_lanes("auto", np.zeros(1), 10_000, np.ones(1, bool), np.array([10.0]),
                                           np.array([asym]), size, policy)
        return _names(codes)[0]

    assert solver(127, 0.0) == "rodas4" and solver(128, 0.0) == "rodas4-eigh"
    assert solver(1999, 0.0) == "rodas4-eigh" and solver(2000, 0.0) == "rkc"
    assert solver(500, 0.5e-8) == "rodas4-eigh" and solver(500, 2e-8) == "rodas4"
    assert solver(5000, 0.5e-8) == "rkc" and solver(5000, 2e-8) == "rodas4"
    no_rkc = POLICY.replace(stabilised_min_state=10**12)
    assert solver(1999, 0.0, no_rkc) == "rodas4-eigh" and solver(2000, 0.0, no_rkc) == "rodas4-krylov"


def test_stabilised_solver_until_its_stages_pass_the_cap():
    """A stiff gradient lane of 5000 parameters runs ``rkc`` while the stages its last round's
    ``h·ρ`` needs, ``1 + √(1 + 1.54·1.2·h·ρ)``, are at most the stage cap ``√(rtol/(10 ε))``
    (2,122 at rtol 1e-8, 212 at 1e-10), ``rodas4-krylov`` past it. Hand values: ``h·ρ`` just below
    and above ``((cap − 1)² − 1)/(1.54·1.2)``; the cap by hand from ``rtol``; a run's ``rtol``
    reaches the choice (the same ``h·ρ`` is inside the cap at 1e-8, outside at 1e-10); a lane
    that was on ``rodas4-krylov`` comes back below the cap."""
    eps = np.finfo(np.float64).eps

    def solver(h_rho, rtol=1e-8):
        codes, _, now = stiff.phase_of_lanes("auto", np.zeros(1), 10_000, np.ones(1, bool), np.array([h_rho]),
                                             np.zeros(1), 5000, POLICY, rtol)
        assert now[0]
        return _names(codes)[0]

    for rtol in (1e-8, 1e-10):
        cap = round(np.sqrt(rtol / (10 * eps)))
        assert int(chebyshev.stage_cap(rtol)) == cap and cap == {1e-8: 2122, 1e-10: 212}[rtol]
        edge = ((cap - 1) ** 2 - 1) / (1.54 * 1.2)
        assert solver(0.999 * edge, rtol) == "rkc" and solver(1.001 * edge, rtol) == "rodas4-krylov"
    assert solver(1e5, 1e-8) == "rkc" and solver(1e5, 1e-10) == "rodas4-krylov"
    assert solver(10.0) == "rkc"  # back from the Krylov phase: the same rule, no memory


def test_asymmetry_of_a_gradient_field_is_far_inside_its_tolerance_and_a_rotation_far_outside():
    """What the 1e-8 tolerance separates: the measured asymmetry (:func:`stiff.asymmetry`) of a
    gradient field (a quadratic's, 50 parameters) is round-off, below 1e-13; a field with an
    antisymmetric part of relative size 1e-5 measures above 1e-6."""
    rng = np.random.RandomState(3)
    M = rng.randn(50, 50)
    H = jnp.asarray(M @ M.T / 50 + np.eye(50))
    K = jnp.asarray(M - M.T)
    y = jnp.asarray(rng.randn(50))
    grad = lambda p: -(H @ p)  # noqa: E731
    rot = lambda p: -(H @ p) + 1e-5 * float(np.linalg.norm(H)) / float(jnp.linalg.norm(K)) * (K @ p)  # noqa: E731
    assert float(stiff.asymmetry(grad, y)) < 1e-13
    assert float(stiff.asymmetry(rot, y)) > 1e-6


def test_each_phase_round_is_its_length_or_the_budget_left():
    """The steps a lane may take in its next round: 64 explicit (Dopri8, then the detector), 64 in
    ``rodas4-eigh`` (one eigendecomposition a round), the whole budget left in ``rodas4`` and
    ``rodas4-krylov``; never more than the budget left (``max_steps − num_steps``: 10 or 0 here)."""
    def left(stiff_, size, num_steps, max_steps=1000):
        _, left_, _ = stiff.phase_of_lanes("auto", np.array([num_steps]), max_steps, np.array([stiff_]),
                                           np.array([10.0 if stiff_ else 0.1]), np.zeros(1), size)
        return int(left_[0])

    assert left(False, 500, 0) == 64 and left(True, 500, 0) == 64
    assert left(True, 8, 0) == 1000 and left(True, 5000, 0) == 1000
    for stiff_, size in ((False, 500), (True, 500), (True, 8), (True, 5000)):
        assert left(stiff_, size, 990) == 10 and left(stiff_, size, 1000) == 0 and left(stiff_, size, 1200) == 0
    # a named solver: the budget left, whatever the phase arguments
    _, left_, _ = stiff.phase_of_lanes("rodas4-eigh", np.array([100, 1000]), 1000)
    np.testing.assert_array_equal(left_, [900, 0])


# ---------------------------------------------------------------- the inner solves of rodas4-krylov


def test_krylov_stage_solves_stop_at_one_percent_of_the_step_tolerance():
    """``rodas4-krylov``'s stage systems ``(I − hγJ)x = hγr`` are solved to 1 % of the step
    controller's tolerance, component by component: on a diagonal Hessian with eigenvalues from 1 to
    1e4 (300 parameters: conjugate gradients converge slowly, tens to a thousand iterations), the
    residual computed here is at most 1 % of ``atol + rtol·|y0|`` in every component (inside), and
    its largest component above 0.4 % (the solve does not run on far past what is asked)."""
    rtol, n = 1e-8, 300
    lam = np.geomspace(1.0, 1e4, n)
    f = lambda t, x: -jnp.asarray(lam) * x  # noqa: E731
    y0 = np.linspace(1.0, 2.0, n)
    r = np.random.RandomState(0).randn(n)
    atol = 1e-3 * rtol
    kr = rosenbrock.Krylov(rtol, atol)
    stage = jax.jit(lambda h, y, r_: kr.prepare(f, 0.0, h, 0.25, y, n, kr.init(f, 0.0, 1.0, y, n))[0](r_)[0])
    for h in (1.0, 100.0):
        x = np.asarray(stage(h, jnp.asarray(y0), jnp.asarray(r)))
        hg = 0.25 * h
        res = hg * r - (x + hg * lam * x)
        ratio = np.abs(res) / (atol + rtol * np.abs(y0))
        assert ratio.max() <= 1e-2 and ratio.max() > 0.4e-2, (h, ratio.max())


def test_held_inverse_is_rebuilt_after_32_steps_on_one_matrix():
    """``ros34pw2``'s ``W⁻¹`` (``HeldInverse``) serves at most 32 accepted steps at a held step
    size (``MAX_AGE``, docs/solvers.md's threshold table): with a matrix 31 steps old it is reused
    (inside: the stale matrix passed in comes back, age 32), with one 32 steps old it is rebuilt from
    the Jacobian (outside: ``(I/(hγ) − J)⁻¹`` computed here by hand, age 0); a changed step size
    rebuilds it at any age (the control)."""
    lam = jnp.asarray([1.0, 3.0, 10.0])
    f = lambda t, x: -lam * x  # noqa: E731
    h, gamma, y = 0.5, 0.25, jnp.ones(3)
    stale = 7.0 * jnp.eye(3)
    fresh = np.linalg.inv(np.eye(3) / (h * gamma) + np.diag(np.asarray(lam)))
    held = rosenbrock.HeldInverse()
    one = jax.jit(lambda age, h_w: held.prepare(f, 0.0, h, gamma, y, 3, (stale, h_w, age))[1])
    for age, h_w, rebuilt in ((31, h, False), (32, h, True), (3, 2 * h, True)):
        inv_w, h_new, age_new = one(jnp.asarray(age, jnp.int32), jnp.asarray(h_w))
        np.testing.assert_allclose(np.asarray(inv_w), fresh if rebuilt else np.asarray(stale), rtol=1e-12)
        assert (int(age_new), float(h_new)) == ((0, h) if rebuilt else (age + 1, h)), (age, h_w)


# ---------------------------------------------------------------- RKC's stage rule and power iteration


def test_rkc_stage_number_covers_1_2_times_the_spectral_radius_and_no_more():
    """RKC's stages from ``1.2·h·ρ`` (``rkc.f``'s safety factor on the power iteration's ``ρ``):
    one step of ``h = 1`` on ``dθ/dt = −diag(λ)θ`` with ``ρ = 1100`` (the other eigenvalues at most
    10: the power iteration finds ``ρ`` to 1e-9) takes ``s = 1 + ⌊√(1 + 1.54·1320)⌋ = 46`` stages:
    ``1.2·h·ρ`` inside ``(s² − 1)/1.54`` and outside ``((s − 1)² − 1)/1.54`` (no stage more than the
    rule asks)."""
    lam = jnp.asarray(np.concatenate([np.geomspace(0.1, 10.0, 7), [1100.0]]))
    term = diffrax.ODETerm(lambda t, y, args: -lam * y)
    solver = chebyshev.RKC(1e-8)
    y0 = jnp.ones(8)
    st = solver.init(term, 0.0, 1.0, y0, None)
    _, _, _, st, result = jax.jit(lambda y, s: solver.step(term, 0.0, 1.0, y, None, s, False))(y0, st)
    assert float(st.rho) == pytest.approx(1100.0, rel=1e-9)
    s = int(st.most)
    assert s == 46 and int(st.substeps) == 1
    assert (s - 1) ** 2 - 1 < 1.54 * 1.2 * 1100.0 <= s ** 2 - 1


def test_power_iteration_stops_at_the_first_change_of_at_most_one_percent():
    """RKC's power iteration (:func:`chebyshev.spectral_radius`) stops once its estimate changes by at
    most 1 % between two iterations: on a diagonal matrix with 100 eigenvalues evenly spread over
    ``(0, 1]``, from the all-ones vector, it stops at the same iteration as the rule replayed here in
    NumPy (the 8th), whose previous change was above 1 % (at 0.33 % or 3 % it would stop at the 13th
    or the 5th)."""
    d = np.linspace(0.01, 1.0, 100)
    rho, _, its = chebyshev.spectral_radius(lambda v: jnp.asarray(d) * v, jnp.ones(100), 60)
    v, prev, changes = np.ones(100) / 10.0, -1.0, []
    for k in range(60):
        w = d * v
        est = np.linalg.norm(w)
        v = w / est
        changes.append(abs(est - prev) / est)
        prev = est
        if k >= 1 and changes[-1] <= 0.01:
            break
    assert int(its) == k + 1 == 8, (int(its), k + 1)
    assert changes[-1] <= 0.01 < changes[-2]
    assert float(rho) == pytest.approx(est, rel=1e-12)


# ---------------------------------------------------------------- batch buckets


def test_throughput_bound_from_64_lanes_or_2_to_18_floats_per_lane():
    """A solve runs unrolled Dopri8 with XLA's default options from 64 lanes, or from ``2**18``
    floats per lane (one below each: the compile-bound programs)."""
    tb = batch._throughput_bound
    assert not tb((np.zeros((63, 3)),)) and tb((np.zeros((64, 3)),))
    assert not tb((np.zeros((1, 2**18 - 1)),)) and tb((np.zeros((1, 2**18)),))
    assert not tb((np.zeros((2, 2**17)), np.zeros((2, 2**17 - 1)))) and tb((np.zeros((2, 2**17)), np.zeros((2, 2**17))))


def test_buckets_are_powers_of_two_rounded_to_the_devices():
    """Pending lanes of a later round are computed in a bucket: the next power of two (at most the
    batch), rounded up to a multiple of the device count; the whole batch in its first round."""
    assert [batch._bucket(k, 256, 1) for k in (1, 2, 3, 5, 64, 65, 255, 256)] == [1, 2, 4, 8, 64, 128, 256, 256]
    assert batch._bucket(5, 6, 1) == 6 and batch._bucket(3, 8, 2) == 4 and batch._bucket(1, 8, 3) == 3
    assert batch._bucket(3, 8, 1, pad_all=True) == 8


class _Stop(Exception):
    pass


def _first_round(monkeypatch, B, max_steps):
    """``(lanes, steps, cap)`` of the first solve call of :func:`gradflow.integrate_batch` for ``B``
    lanes (the call itself replaced: nothing is compiled)."""
    seen = []

    def fused(flow, fargs, params, state, settings, rnd, idx, dest):
        seen.append((jax.tree.leaves(params)[0].shape[0], int(rnd.steps), rnd.cap))
        raise _Stop

    monkeypatch.setattr(batch, "_start", lambda *a, **k: None)
    monkeypatch.setattr(batch, "_fused_round", fused)
    with pytest.raises(_Stop):
        gradflow.integrate_batch(lambda p: 0.5 * jnp.sum(p * p), np.ones((B, 1)), t1=1.0, solver="dopri8",
                                 max_steps=max_steps, devices=jax.local_devices()[:1])
    return seen[0]


def test_one_solve_holds_at_most_256_lanes_and_one_round_at_most_512_steps(monkeypatch):
    """Batches run in solves of at most 256 lanes per device (256 lanes: one solve; 257: a first
    solve of 256) and in rounds of at most 512 steps (``max_steps`` 511: a round of 511; 513: of
    512; the solve loop's static bound 512 either way)."""
    assert _first_round(monkeypatch, 256, 16384) == (256, 512, 512)
    assert _first_round(monkeypatch, 257, 16384)[0] == 256
    assert _first_round(monkeypatch, 3, 511) == (3, 511, 512)
    assert _first_round(monkeypatch, 3, 513) == (3, 512, 512)


# ---------------------------------------------------------------- tolerances and budgets in every phase

PHASES = ["dopri8", "rodas4", "rodas4-eigh", "rodas4-krylov", "rkc"]
LAM = np.geomspace(0.1, 10.0, 8)
TH0 = np.linspace(1.0, 2.0, 8)
TS = np.array([0.0, 0.1, 0.3, 1.0, 3.0])


def _quadratic(solver, rtol, max_steps=16384):
    """The gradient flow of ``½ Σ λ_i θ_i²`` (λ from 0.1 to 10) to ``t = 3`` by ``solver``, and its
    largest error against the closed form ``θ_i(t) = θ_i(0)·e^{−λ_i t}`` over the save points."""
    loss = lambda p: 0.5 * jnp.sum(jnp.asarray(LAM) * p * p)  # noqa: E731
    sol = gradflow.integrate(loss, jnp.asarray(TH0), t1=3.0, ts=TS, rtol=rtol, atol=1e-12, solver=solver,
                             rest_stop=False, max_steps=max_steps)
    exact = TH0[None] * np.exp(-TS[:, None] * LAM[None])
    return sol, float(np.max(np.abs(np.asarray(sol.params) - exact)))


# rtol loose, the largest error allowed at rtol 1e-9 (measured: dopri8 6e-8, the Rodas4 phases 1e-10, rkc 6e-7)
_LOOSE = {"dopri8": 1e-3, "rodas4": 1e-4, "rodas4-eigh": 1e-4, "rodas4-krylov": 1e-4, "rkc": 1e-4}
_TIGHT_ERR = {"dopri8": 1e-6, "rodas4": 1e-9, "rodas4-eigh": 1e-9, "rodas4-krylov": 1e-9, "rkc": 1e-5}


@pytest.mark.parametrize("solver", PHASES)
def test_rtol_reaches_every_phase(solver):
    """``rtol`` reaches each phase run by name: the error against the closed form shrinks at least
    30-fold from a loose ``rtol`` to 1e-9 and is then within a bound of the method (order 8 for
    Dopri8, 4 for the Rodas4 phases, 2 for RKC), and the solve takes more steps."""
    loose, err_loose = _quadratic(solver, _LOOSE[solver])
    tight, err_tight = _quadratic(solver, 1e-9)
    assert loose.status == "ok" and tight.status == "ok"
    assert err_tight < _TIGHT_ERR[solver] and err_loose > 30 * err_tight, (err_loose, err_tight)
    assert int(tight.num_steps) > int(loose.num_steps)


@pytest.mark.parametrize("solver", PHASES)
def test_max_steps_is_honoured_in_every_phase(solver):
    """``max_steps`` reaches each phase run by name: with a budget of 5 steps (each phase needs more
    than 20 at rtol 1e-9) the run ends ``max_steps`` after exactly 5 steps, short of ``t1``, its
    state on the closed form at ``t_end`` (to the loose accuracy of 5 steps)."""
    sol, _ = _quadratic(solver, 1e-9, max_steps=5)
    assert sol.status == "max_steps" and int(sol.num_steps) == 5, (sol.status, int(sol.num_steps))
    t_end = float(sol.t_end)
    assert 0.0 < t_end < 3.0
    np.testing.assert_allclose(np.asarray(sol.params_end), TH0 * np.exp(-t_end * LAM), rtol=1e-2)


def test_auto_spends_its_budget_in_the_implicit_phase(monkeypatch):
    """``max_steps`` through ``solver="auto"`` when the budget runs out in the implicit phase: a stiff
    quadratic of 128 parameters (λ from 1 to 100, ``t1 = 1e6``, rest stop off) takes its 64 explicit
    steps, switches to ``rodas4-eigh`` (rounds of 64) and, with ``max_steps = 70``, ends
    ``max_steps`` after exactly 70 steps (6 implicit), short of ``t1``, its state on the closed
    form."""
    lam = np.geomspace(1.0, 100.0, 128)
    th0 = np.linspace(1.0, 2.0, 128)
    loss = lambda p: 0.5 * jnp.sum(jnp.asarray(lam) * p * p)  # noqa: E731
    rounds = []
    phase = stiff.phase_of_lanes

    def spy(*a, **k):
        out = phase(*a, **k)
        rounds.append((_names(out[0]), [int(x) for x in out[1]]))
        return out

    monkeypatch.setattr(stiff, "phase_of_lanes", spy)
    ts = np.array([0.0, 1.0, 1e6])
    sol = gradflow.integrate(loss, jnp.asarray(th0), t1=1e6, ts=ts, rest_stop=False, max_steps=70)
    assert rounds[:2] == [(["dopri8"], [64]), (["rodas4-eigh"], [6])], rounds
    assert sol.status == "max_steps" and int(sol.num_steps) == 70
    t_end = float(sol.t_end)
    assert 0.0 < t_end < 1e6
    np.testing.assert_allclose(np.asarray(sol.params_end), th0 * np.exp(-t_end * lam), rtol=1e-5, atol=1e-12)


def test_krylov_inner_solves_follow_rtol():
    """The Krylov phase's inner solves are tied to the run's ``rtol`` (1 % of the step tolerance),
    not to a fixed one: at ``rtol`` 1e-4 and 1e-11, ``rodas4-krylov`` takes the steps of ``rodas4``
    (exact LU solves) and its save points agree with it to 1 % of ``rtol·max|θ|`` (measured: 5e-9 and
    7e-15; inner solves fixed at the default 1e-8 give 4e-12 at rtol 1e-11)."""
    for rtol in (1e-4, 1e-11):
        dense, _ = _quadratic("rodas4", rtol)
        krylov, _ = _quadratic("rodas4-krylov", rtol)
        assert int(krylov.num_steps) == int(dense.num_steps)
        diff = np.max(np.abs(np.asarray(krylov.params) - np.asarray(dense.params)))
        assert diff <= 1e-2 * rtol * TH0.max(), (rtol, diff)


def test_the_threshold_table_cites_tests_that_exist():
    """Every test the solver guide's "Thresholds and their tests" names is defined in the file it
    names (``tests/test_guards.py`` when none)."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1]
    text = (root / "docs" / "solvers.md").read_text()
    section = text.split("## Thresholds and their tests", 1)[1].split("\n## ", 1)[0]
    cited = re.findall(r"`(?:(tests/[\w/]+\.py)::)?(test_\w+)`", section)
    assert len(cited) >= 20
    for path, name in cited:
        source = (root / (path or "tests/test_guards.py")).read_text()
        assert re.search(rf"^def {name}\(", source, re.M), (path, name)
