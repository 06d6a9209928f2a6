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
    # the rest stop fires: later points hold that state, and the quadratures go on to t1 (∫ 1 dt = t)
    rest = gradflow.integrate(loss, {"w": P0}, t1=1e12, quadratures={"t": lambda p: 1.0 + 0.0 * p["w"][0]})
    assert rest.ok and float(rest.t_steady) < 1e4
    np.testing.assert_array_equal(np.asarray(rest.params_end["w"]), np.asarray(rest.params["w"])[-1])
    np.testing.assert_allclose(float(rest.quadratures_end["t"]), float(rest.t_end), rtol=1e-12)
    np.testing.assert_allclose(float(rest.quadratures_end["t"]), float(rest.quadratures["t"][-1]), rtol=1e-15)


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


def test_a_value_softmax_run_keeps_its_end_state_too(monkeypatch):
    """``Trajectory.V_end``, ``a_end``, ``Gamma_end`` of a run stopped by ``max_steps`` (Fig. 2's
    draws, the logistic teacher), with ``simulate`` solving the full state and, forced, its exact
    rank-one reduction (``V_end`` expanded from it), against SciPy DOP853 at rtol 1e-13 at
    ``t_end``; the last saved point as control; a resumed run, its Γ continued by ``Gamma_end``."""
    import sys

    from gradflow.attention.sweep import fig2_init
    from tests import reference as ref

    V0, a0, bs = fig2_init()
    loss = gradflow.LogisticTeacher(bs)
    full = gradflow.simulate(loss, V0, a0, t1=1e12, max_steps=20)
    monkeypatch.setattr(sys.modules["gradflow.attention._simulate"], "REDUCE_MIN_SIZE", 0)
    red = gradflow.simulate(loss, V0, a0, t1=1e12, max_steps=20)
    assert "state" not in full.metadata and red.metadata["state"].startswith("rank-one")
    for traj in (full, red):
        assert traj.status == "max_steps"
        t_end = float(traj.t_end)
        V_ref, a_ref, G_ref = ref.integrate(V0, a0, ref.logistic_residual(bs), np.array([0.0, t_end]))
        assert traj.V_end.shape == V0.shape and traj.a_end.shape == a0.shape
        np.testing.assert_allclose(np.asarray(traj.V_end), V_ref[-1], rtol=0, atol=2e-8)
        np.testing.assert_allclose(np.asarray(traj.a_end), a_ref[-1], rtol=0, atol=2e-8)
        np.testing.assert_allclose(float(traj.Gamma_end), G_ref[-1], rtol=1e-7)
        last = int(np.flatnonzero(np.asarray(traj.valid))[-1])
        assert float(traj.t[last]) < t_end and np.max(np.abs(np.asarray(traj.a[last]) - a_ref[-1])) > 1e-3
        assert np.max(np.abs(np.asarray(traj.V[last]) - V_ref[-1])) > 1e-4
    more = gradflow.simulate(loss, np.asarray(full.V_end), np.asarray(full.a_end), t1=10.0)
    t_end = float(full.t_end)
    _, a_more, G_more = ref.integrate(V0, a0, ref.logistic_residual(bs), np.array([0.0, t_end + 10.0]))
    np.testing.assert_allclose(np.asarray(more.a_end), a_more[-1], rtol=0, atol=2e-8)
    np.testing.assert_allclose(float(full.Gamma_end) + float(more.Gamma_end), G_more[-1], rtol=1e-7)
    ds = full.to_xarray()
    assert ds.V_end.dims == ("dim", "token") and ds.a_end.dims == ("token",) and ds.Gamma_end.dims == ()


def test_end_states_survive_later_rounds_padding_and_files(tmp_path):
    """Lanes that end in later rounds of a batch (B = 4, two lanes finished in the first round of
    512 steps, two stopped by max_steps in the second; padded rows in between) against the closed
    form; a batch's xarray; a file without the end state (written before they existed) loads
    with ``None``; GD has none."""
    scales = np.array([1.0, 0.3, 30.0, 100.0])  # the stiffer lanes need more than 512 Tsit5 steps
    sol = gradflow.integrate_batch(lambda p, c: c * loss(p), {"w": np.tile(P0, (4, 1))}, t1=1e3,
                                   args=jnp.asarray(scales), args_batched=True, solver="tsit5", max_steps=700,
                                   rest_stop=False)
    status = list(sol.status)
    assert status[:2] == ["ok", "ok"] and status[2:] == ["max_steps", "max_steps"], status
    assert np.all(np.asarray(sol.num_steps)[2:] > 512)  # the stopped lanes went on to a second round
    for i, c in enumerate(scales):
        t_end = float(sol.t_end[i])
        np.testing.assert_allclose(np.asarray(sol.params_end["w"][i]), P0 * np.exp(-c * K * t_end), rtol=1e-6,
                                   atol=1e-9)
    V0, a0 = np.eye(3)[:2] * 0.5, np.zeros(3)
    bs = np.array([1.0, -0.5])
    batch = gradflow.simulate_batch([gradflow.LogisticTeacher(bs)] * 2, np.stack([V0, V0]), np.stack([a0, a0]),
                                    t1=1e6, max_steps=10)
    ds = batch.to_xarray()
    assert ds.V_end.dims == ("run", "dim", "token") and ds.a_end.dims == ("run", "token")
    traj = batch[0]
    path = tmp_path / "old.npz"
    traj.save(path)
    with np.load(path) as z:  # as written before the end state existed
        old = {k: z[k] for k in z.files if k not in ("V_end", "a_end", "Gamma_end")}
    np.savez(path, **old)
    back = gradflow.Trajectory.load(path)
    assert back.V_end is None and back.a_end is None and back.Gamma_end is None
    assert "V_end" not in back.to_xarray()
    gd = gradflow.descend(gradflow.LogisticTeacher(bs), V0, a0, lr=0.1, steps=10)
    assert gd.V_end is None and gd.a_end is None
