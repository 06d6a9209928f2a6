"""theory/: every check holds on its default experiment and fails on its negative control;
hand-made violating trajectories are reported as failing."""

import json

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow
from gradflow import theory
from gradflow.theory.experiments import logistic_trials

TRIALS = 2


class _Results(dict):
    """Check results computed on first use: a run that deselects a check's tests never pays for it."""

    def __missing__(self, cid):
        self[cid] = result = theory.run_check(cid, trials=TRIALS, seed=0)
        return result


@pytest.fixture(scope="module")
def results():
    return _Results()


REQUIRED = [
    "thm3.2a", "thm3.2b", "thm3.3a", "thm3.3b", "thm3.3c", "lem3.5a", "lem3.5b", "lemD.2",
    "inv.sum_a", "inv.v_perp", "replicator", "conditioning", "normalizations", "sinks",
]


MAX_MARGIN = ["mm.direction", "mm.regpath", "mm.value-softmax", "mm.kq-nuclear", "mm.kq-kkt", "mm.kq-kkt-rate", "mm.kq-aligned"]  # run in tests/test_theory_maxmargin.py and tests/test_kq_limits.py


def test_registry_lists_required_ids():
    assert theory.check_ids() == REQUIRED + MAX_MARGIN


SLOW_CHECKS = {"normalizations"}
"""Checks whose run takes a minute or more on 2 cores (14 flows of 7 maps): ``-m slow`` runs them."""


@pytest.mark.parametrize("cid", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_CHECKS else c for c in REQUIRED])
def test_check_holds_and_control_fails(results, cid):
    r = results[cid]
    assert r.holds, (cid, r.worst_margin, dict(r.details))
    assert r.worst_margin > 0
    assert not r.control_holds, (cid, dict(r.details)["control"])
    assert dict(r.details)["control"]["worst_margin"] != "inf"
    d = r.to_dict()
    assert set(d) == {"id", "statement", "holds", "trials", "worst_margin", "control_holds", "details"}
    json.dumps(d, allow_nan=False)


def test_result_is_immutable(results):
    r = results["thm3.2a"]
    with pytest.raises(Exception):
        r.holds = False
    with pytest.raises(TypeError):
        r.details["x"] = 1


def test_unknown_id_and_bad_trials():
    with pytest.raises(gradflow.GradflowValueError):
        theory.run_check("thm9.9")
    with pytest.raises(gradflow.GradflowValueError):
        theory.run_check("thm3.2a", trials=0)


def test_asymptotic_fits_reported(results):
    """The fitted rates against their derived values, at ~10× the spread measured on 16 trials
    (theory.polarisation's tolerances): Γ slope 1, loss exponent −1, 1 − s_0 ≈ C*/(log t − L_0)²."""
    fits = dict(results["thm3.3c"].details)["asymptotic_fits"]
    assert fits["window"] == [1e8, 1e12]
    for key, want, tol in [("dGamma_dlogt_normalized", 1, 1e-2), ("loss_loglog_slope", -1, 2e-3),
                           ("one_minus_s0_exponent", -2, 0.3), ("one_minus_s0_constant_ratio", 1, 0.1),
                           ("u0_vs_logt", 1, 0.05)]:
        for stat in ("min", "max"):
            assert abs(fits[key][stat] - want) < tol, (key, fits[key])


TIMED = ["thm3.2a", "thm3.2b", "thm3.3a", "thm3.3b", "lemD.2"]


@pytest.mark.parametrize("cid", TIMED)
def test_margins_are_over_the_whole_trajectory_with_their_time(results, cid):
    """Each trajectory check reports where its margin is worst, a saved time inside the run."""
    d = results[cid].to_dict()["details"]
    assert isinstance(d["worst_t"], float) and 0 < d["worst_t"] <= 1e12, d.get("worst_t")
    assert len(d["margin_t"]) == results[cid].trials


@pytest.mark.parametrize("cid", ["thm3.2a", "thm3.2b", "thm3.3b", "lemD.2"])
def test_controls_fail_late_as_well_as_early(results, cid):
    """A control must be violated late in its run, not only at the first save points."""
    c = results[cid].to_dict()["details"]["control"]
    assert c["latest_violation_t"] != "nan" and float(c["latest_violation_t"]) >= 1e4 * 0.99, c


# ------------------------------------------------------------ hand-made violations


@pytest.fixture(scope="module")
def one_run():
    traj, losses, _ = logistic_trials(TRIALS, 0)[0]
    return traj[0], losses[0]


def test_crossed_order_is_reported(one_run):
    traj, _ = one_run
    assert theory.order_preserved(traj).holds
    order = np.argsort(-np.asarray(traj.u[0]))
    i, j = order[0], order[1]
    k = traj.t.shape[0] // 2
    u = np.asarray(traj.u).copy()
    u[k:, [i, j]] = u[k:, [j, i]]  # the top two tokens cross halfway
    bad = eqx.tree_at(lambda t: t.u, traj, jnp.asarray(u))
    v = theory.order_preserved(bad)
    assert not v.holds and v.worst_margin < 0
    assert not theory.repulsion(bad).holds


def test_shrinking_gap_is_reported(one_run):
    traj, _ = one_run
    assert theory.repulsion(traj).holds
    u = np.asarray(traj.u).copy()
    order = np.argsort(-u[0])
    u[-1, order[0]] = u[-2, order[0]] - 1e-6  # u_0 steps back at the end: a gap shrinks
    bad = eqx.tree_at(lambda t: t.u, traj, jnp.asarray(u))
    assert not theory.repulsion(bad).holds


def test_broken_bound_is_reported(one_run):
    traj, _ = one_run
    assert theory.ratio_bound(traj).holds
    bad = eqx.tree_at(lambda t: t.Gamma, traj, traj.Gamma * 1e6)  # Γ inflated: the bound is violated
    v = theory.ratio_bound(bad)
    assert not v.holds and v.worst_margin < 0


def test_flat_gamma_and_growing_loss_are_reported(one_run):
    traj, loss = one_run
    assert theory.gamma_log_growth(traj, loss).holds
    flat = eqx.tree_at(lambda t: t.Gamma, traj, jnp.minimum(traj.Gamma, 3.0))
    assert not theory.gamma_log_growth(flat, loss).holds
    assert theory.loss_vanishes(traj, loss).holds
    bump = eqx.tree_at(lambda t: t.loss, traj, traj.loss.at[-1].set(traj.loss[-2] * 1.01))
    assert not theory.loss_vanishes(bump, loss).holds


def test_broken_invariants_are_reported(one_run):
    traj, loss = one_run
    assert theory.sum_a_conserved(traj).holds
    assert not theory.sum_a_conserved(eqx.tree_at(lambda t: t.a, traj, traj.a.at[-1, 0].add(1e-3))).holds
    assert theory.v_perp_frozen(traj, loss).holds
    b = np.asarray(loss.beta_star)
    perp = np.linalg.svd(b[None, :])[2][-1]  # a unit vector orthogonal to β*
    moved = traj.V.at[-1].add(1e-3 * jnp.outer(perp, jnp.ones(traj.V.shape[-1])))
    assert not theory.v_perp_frozen(eqx.tree_at(lambda t: t.V, traj, moved), loss).holds
    assert theory.output_response(traj, loss).holds
    assert not theory.output_response(traj, loss, power=1).holds
    assert not theory.output_response_along(traj, loss, power=1).holds


def test_replicator_detects_a_perturbed_trajectory(one_run):
    traj, loss = one_run
    assert theory.replicator_agrees(traj, loss).holds
    bad = eqx.tree_at(lambda t: t.s, traj, traj.s.at[-1].set(jnp.roll(traj.s[-1], 1)))
    assert not theory.replicator_agrees(bad, loss).holds


def test_trend_and_tables_can_fail():
    flat = np.tile(np.linspace(0.1, 0.5, 5), (3, 1))
    assert theory.conditioning_trend(flat).holds
    assert not theory.conditioning_trend(flat[:, ::-1]).holds
    good = {"softmax": [0.99], "l1": [0.9], "l2": [1.0], "relu": [1.0], "sigmoid": [0.1], "sum": [0.2]}
    assert theory.normalization_verdict(good).holds
    assert not theory.normalization_verdict({**good, "sigmoid": [0.95]}).holds


@pytest.fixture(scope="module")
def square_run():
    rng = np.random.RandomState(4)
    b = rng.randn(5)
    loss = gradflow.SquareLoss(b / np.linalg.norm(b))
    traj = gradflow.simulate(loss, np.zeros((5, 5)), 0.1 * rng.randn(5), t1=1e4)
    return traj, loss


def test_rank_one_and_partial_polarisation_violations_are_reported(square_run):
    traj, loss = square_run
    assert theory.rank_one(traj, loss).holds
    perp = np.linalg.svd(np.asarray(loss.target)[None, :])[2][-1]
    leaked = traj.V.at[-1].add(1e-3 * jnp.outer(perp, jnp.ones(5)))  # V leaves span{β*} at the end
    assert not theory.rank_one(eqx.tree_at(lambda t: t.V, traj, leaked), loss).holds
    with pytest.raises(gradflow.GradflowValueError, match="scale 0.5 and no design"):
        theory.rank_one(traj, gradflow.SquareLoss(loss.target, scale=1.0))
    assert theory.partial_polarisation(traj).holds
    one_hot = jnp.zeros_like(traj.s).at[:, 0].set(1.0)  # s one-hot: polarisation is not partial
    assert not theory.partial_polarisation(eqx.tree_at(lambda t: t.s, traj, one_hot)).holds
    rising = eqx.tree_at(lambda t: t.Gamma, traj, traj.Gamma * (1 + traj.t / traj.t[-1]))  # Γ still growing
    assert not theory.partial_polarisation(rising).holds
    falling = eqx.tree_at(lambda t: t.Gamma, traj, traj.Gamma * (1 - 0.5 * traj.t / traj.t[-1]))
    assert not theory.partial_polarisation(falling).holds


def test_sink_violation_is_reported():
    rng = np.random.RandomState(5)
    V0, b = rng.randn(4, 5), rng.randn(4)
    traj = gradflow.simulate(gradflow.LogisticTeacher(b), V0, np.zeros((5, 5)), t1=1e8, model="rowwise")
    assert theory.sink_verdict(traj).holds
    top = int(np.argmax(np.asarray(traj.u[0])))
    other = (top + 1) % 5
    s = np.asarray(traj.s).copy()
    s[-1, 2] = 0.0
    s[-1, 2, other] = 1.0  # row 2 ends on another token
    v = theory.sink_verdict(eqx.tree_at(lambda t: t.s, traj, jnp.asarray(s)))
    assert not v.holds and v.worst_margin < 0


def test_wrong_exponent_and_small_gamma_are_reported(one_run):
    traj, loss = one_run
    assert theory.gamma_log_growth(traj, loss).holds
    assert not theory.gamma_log_growth(traj, loss, exponent=-1.0).holds  # 1 − s_0 = Θ(1/log t): wrong
    half = eqx.tree_at(lambda t: t.Gamma, traj, 0.5 * traj.Gamma)  # a Γ integrand halved
    v = theory.gamma_log_growth(half, loss)
    assert not v.holds and v.details["sub_margins"][0]["gamma_slope"] < 0


def test_trajectory_not_integrated_along_the_field_is_reported(one_run):
    """Lemma D.2 along the saved states: a trajectory whose time labels are off by 5 % (as an
    engine with a wrong time map would give) or whose states are perturbed fails."""
    traj, loss = one_run
    v = theory.output_response_along(traj, loss)
    assert v.holds and v.details["max_rel_err_fd"][0] < theory.invariants.LEMD2_FD_TOL / 3
    stretched = eqx.tree_at(lambda t: t.t, traj, traj.t * 1.05)
    assert not theory.output_response_along(stretched, loss).holds
    k = traj.t.shape[0] // 2
    bumped = eqx.tree_at(lambda t: t.V, traj, traj.V.at[k].multiply(1.001))
    w = theory.output_response_along(bumped, loss)
    assert not w.holds and abs(np.log10(w.details["worst_t"] / float(traj.t[k]))) < 0.1
