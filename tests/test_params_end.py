"""``Solution.params_end``: the state a flow ended in, at ``t_end``, against the closed form of a
linear flow (``L = ½ Σ k_i p_i²``: ``p_i(t) = p_i(0) e^{-k_i t}``), with a resumed run and the
last saved point as controls."""

import jax
import jax.numpy as jnp
import numpy as np

import gradflow

K = np.array([1.0, 0.3, 0.05])
P0 = np.array([1.0, -2.0, 0.5])


def loss(p):
    return 0.5 * jnp.sum(jnp.asarray(K) * p["w"] ** 2)


def exact(t):
    return P0 * np.exp(-K * t)


def test_a_run_stopped_by_max_steps_hands_back_its_end_state_not_its_last_saved_one():
    sol = gradflow.integrate(loss, {"w": P0}, t1=1e6, ts=np.geomspace(1e-3, 1e6, 10), max_steps=12, rest_stop=False)
    assert sol.status == "max_steps"
    t_end = float(sol.t_end)
    assert 0 < t_end < 1e6
    np.testing.assert_allclose(np.asarray(sol.params_end["w"]), exact(t_end), rtol=1e-6, atol=1e-9)
    # control: the last valid save point lies before t_end and holds an earlier, different state
    valid = np.asarray(sol.valid)
    last = int(np.flatnonzero(valid)[-1])
    t_last = float(np.asarray(sol.t)[last])
    assert t_last < t_end
    w_last = np.asarray(sol.params["w"])[last]
    np.testing.assert_allclose(w_last, exact(t_last), rtol=1e-6, atol=1e-9)
    assert np.max(np.abs(w_last - exact(t_end))) > 1e-3
    # resuming from params_end continues the flow (autonomous): to t_end + 50 as the closed form says
    more = gradflow.integrate(loss, sol.params_end, t1=50.0, rest_stop=False)
    assert more.ok
    np.testing.assert_allclose(np.asarray(more.params_end["w"]), exact(t_end + 50.0), rtol=1e-6, atol=1e-9)


def test_a_finished_run_ends_in_its_last_saved_state():
    sol = gradflow.integrate(loss, {"w": P0}, t1=20.0, rest_stop=False)
    assert sol.ok and float(sol.t_end) == 20.0
    np.testing.assert_allclose(np.asarray(sol.params_end["w"]), np.asarray(sol.params["w"])[-1], rtol=1e-12, atol=0)
    np.testing.assert_allclose(np.asarray(sol.params_end["w"]), exact(20.0), rtol=1e-6, atol=1e-9)
    rest = gradflow.integrate(loss, {"w": P0}, t1=1e12)  # the rest stop fires: later points hold that state
    assert rest.ok and np.isfinite(float(rest.t_steady))
    np.testing.assert_array_equal(np.asarray(rest.params_end["w"]), np.asarray(rest.params["w"])[-1])


def test_a_batch_gives_every_lane_its_own_end_state():
    scales = np.array([1.0, 10.0, 100.0])  # stiffer lanes get less far in the same budget
    sol = gradflow.integrate_batch(lambda p, c: c * loss(p), {"w": np.tile(P0, (3, 1))}, t1=1e6,
                                   args=jnp.asarray(scales), args_batched=True, max_steps=12, rest_stop=False)
    assert sol.params_end["w"].shape == (3, 3)
    assert list(sol.status) == ["max_steps"] * 3 and len(set(np.asarray(sol.t_end).tolist())) == 3
    for i, c in enumerate(scales):
        t_end = float(sol.t_end[i])
        np.testing.assert_allclose(np.asarray(sol.params_end["w"][i]), P0 * np.exp(-c * K * t_end), rtol=1e-6, atol=1e-9)
    one = sol[1]  # a lane picked out keeps its own end state
    np.testing.assert_array_equal(np.asarray(one.params_end["w"]), np.asarray(sol.params_end["w"][1]))


def test_descent_has_no_end_state_field():
    gd = gradflow.descend_params(loss, {"w": P0}, lr=0.1, steps=10)
    assert gd.params_end is None
    assert jax.tree.leaves(gd.params)  # the recorded iterates are there as before


def test_a_value_softmax_run_keeps_its_end_state_too():
    """``Trajectory.V_end``, ``a_end`` of a run stopped by ``max_steps`` (Fig. 2's draws, the
    logistic teacher: ``simulate`` solves its exact rank-one reduction and expands ``V``) against
    SciPy DOP853 at rtol 1e-13 at ``t_end``; the last saved point as control; a resumed run."""
    from gradflow.sweep import fig2_init
    from tests import reference as ref

    V0, a0, bs = fig2_init()
    loss = gradflow.LogisticTeacher(bs)
    traj = gradflow.simulate(loss, V0, a0, t1=1e12, max_steps=20)
    assert traj.status == "max_steps"
    t_end = float(traj.t_end)
    V_ref, a_ref, _ = ref.integrate(V0, a0, ref.logistic_residual(bs), np.array([0.0, t_end]))
    np.testing.assert_allclose(np.asarray(traj.V_end), V_ref[-1], rtol=0, atol=2e-8)
    np.testing.assert_allclose(np.asarray(traj.a_end), a_ref[-1], rtol=0, atol=2e-8)
    last = int(np.flatnonzero(np.asarray(traj.valid))[-1])
    assert float(traj.t[last]) < t_end and np.max(np.abs(np.asarray(traj.a[last]) - a_ref[-1])) > 1e-3
    more = gradflow.simulate(loss, np.asarray(traj.V_end), np.asarray(traj.a_end), t1=10.0)
    _, a_more, _ = ref.integrate(V0, a0, ref.logistic_residual(bs), np.array([0.0, t_end + 10.0]))
    np.testing.assert_allclose(np.asarray(more.a_end), a_more[-1], rtol=0, atol=2e-8)
    ds = traj.to_xarray()
    assert ds.V_end.dims == ("dim", "token") and ds.a_end.dims == ("token",)
