"""``gradflow.integrate`` / ``integrate_batch`` / ``descend_params``: the flow of any loss over a
parameter pytree, against closed forms, SciPy at tight tolerance and the value-softmax front end;
bad input refused on the host."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import gradflow
from tests.test_simulate import fig2_problem

# --------------------------------------------------------------------------- closed form
Y, W0 = 2.0, 0.1


def _linear_net(p):
    return 0.5 * (Y - p["w2"] * p["w1"]) ** 2


def _x_closed(t, y=Y, w0=W0):
    """Balanced two-layer scalar linear net: ``x = w² = y / (1 + (y/w0² − 1) e^{−2yt})``
    (``dx/dt = 2x(y − x)``, logistic growth)."""
    return y / (1 + (y / w0**2 - 1) * np.exp(-2 * y * t))


def _loss_integral(x, y=Y, w0=W0):
    """``∫₀ᵗ L dt`` along that flow: with ``dt = dx / (2x(y − x))``, ``∫ ½(y − x)² dt = ∫ (y − x)/(4x) dx``."""
    x0 = w0**2
    return (y * np.log(x / x0) - (x - x0)) / 4


TS_LIN = np.concatenate([[0.0], np.geomspace(1e-2, 1e6, 33)])


@pytest.fixture(scope="module")
def linear_net():
    return gradflow.integrate(_linear_net, {"w1": W0, "w2": W0}, t1=1e6, ts=TS_LIN, rtol=1e-10, atol=1e-12,
                              observe={"product": lambda p: p["w1"] * p["w2"]}, quadratures={"L": _linear_net})


def test_linear_net_matches_closed_form_and_stops_at_rest(linear_net):
    sol = linear_net
    assert sol.status == "ok" and sol.ok and float(sol.t_end) == 1e6
    assert np.isfinite(float(sol.t_steady)) and float(sol.t_steady) < 1e6  # the steady stop fired
    assert bool(np.all(np.asarray(sol.valid)))
    x = _x_closed(TS_LIN)
    for leaf in ("w1", "w2"):
        # measured max relative error 4.2e-9 (rtol 1e-10; the logistic growth phase amplifies it)
        np.testing.assert_allclose(np.asarray(sol.params[leaf]) ** 2, x, rtol=4e-8, atol=0)
    np.testing.assert_allclose(sol.observed["product"], x, rtol=4e-8, atol=0)
    # measured: 2.1e-7 relative where L > 1e-10, 7e-10 absolute near rest
    np.testing.assert_allclose(sol.loss, 0.5 * (Y - x) ** 2, rtol=2e-6, atol=7e-9)
    # negative control: the closed form of a 1 % different start is far outside the tolerance
    assert np.max(np.abs(np.asarray(sol.params["w1"]) ** 2 / _x_closed(TS_LIN, w0=1.01 * W0) - 1)) > 1e-3


def test_quadrature_and_grad_norm_against_closed_form(linear_net):
    sol = linear_net
    want = _loss_integral(_x_closed(TS_LIN))
    # measured max relative error 1.3e-10
    np.testing.assert_allclose(sol.quadratures["L"], want, rtol=1.5e-9, atol=1e-14)
    x = _x_closed(TS_LIN)  # |∂L/∂w1| = |∂L/∂w2| = |y − x|·w, so ‖∇L‖ = √2·|y − x|·√x
    # measured max absolute error 4.3e-9 (the state error times the Hessian)
    np.testing.assert_allclose(sol.grad_norm, np.sqrt(2 * x) * np.abs(Y - x), rtol=0, atol=4e-8)
    # negative control: the integral from another start differs
    assert abs(float(sol.quadratures["L"][-1]) - _loss_integral(Y, w0=1.01 * W0)) > 1e-3


# --------------------------------------------------------------------------- SciPy reference
def _tanh_net_data():
    rng = np.random.RandomState(7)
    X, y, v = rng.randn(6, 2), rng.randn(6), np.array([1.0, -0.5, 0.8])
    params0 = {"W": 0.5 * rng.randn(3, 2), "b": 0.1 * rng.randn(3)}
    return params0, (X, y, v)


def _tanh_net_loss(p, args):
    X, y, v = args
    r = jnp.tanh(X @ p["W"].T + p["b"]) @ v - y
    return 0.5 * jnp.mean(r**2) + 0.05 * jnp.sum(p["W"] ** 4)


def _tanh_net_grad_numpy(W, b, X, y, v):
    """The gradient written by hand (independent of JAX's autodiff)."""
    h = np.tanh(X @ W.T + b)
    r = h @ v - y
    dz = np.outer(r / len(y), v) * (1 - h**2)
    return dz.T @ X + 0.2 * W**3, dz.sum(axis=0)


def test_pytree_model_matches_scipy_dop853_and_radau():
    params0, args = _tanh_net_data()
    ts = np.concatenate([[0.0], np.geomspace(1e-2, 50.0, 12)])
    sol = gradflow.integrate(_tanh_net_loss, params0, args=args, t1=50.0, ts=ts, rtol=1e-11, atol=1e-13,
                             rest_stop=False)
    assert sol.status == "ok" and sol.params["W"].shape == (13, 3, 2) and sol.params["b"].shape == (13, 3)

    def rhs(t, z):
        gW, gb = _tanh_net_grad_numpy(z[:6].reshape(3, 2), z[6:], *args)
        return -np.concatenate([gW.ravel(), gb])

    z0 = np.concatenate([params0["W"].ravel(), params0["b"]])
    got = np.concatenate([np.asarray(sol.params["W"]).reshape(13, 6), np.asarray(sol.params["b"])], axis=1)
    for method in ("DOP853", "Radau"):
        ref = solve_ivp(rhs, (0.0, 50.0), z0, method=method, t_eval=ts, rtol=1e-12, atol=1e-14)
        assert ref.success
        # measured max abs difference 2.5e-11 (DOP853 and Radau alike); states are O(1)
        np.testing.assert_allclose(got, ref.y.T, rtol=0, atol=2.5e-10)
    assert np.max(np.abs(got[-1] - z0)) > 0.1  # control: the flow did move the parameters
    L = [_tanh_net_loss({"W": W, "b": b}, args) for W, b in zip(sol.params["W"], sol.params["b"])]
    np.testing.assert_allclose(sol.loss, L, rtol=1e-13)


def test_batch_equals_single_lanes_with_batched_args():
    params0, (X, y, v) = _tanh_net_data()
    rng = np.random.RandomState(1)
    B = 3
    p0s = {"W": params0["W"] + 0.3 * rng.randn(B, 3, 2), "b": params0["b"] + 0.1 * rng.randn(B, 3)}
    ys = y + 0.5 * rng.randn(B, 6)
    args_b = (np.broadcast_to(X, (B,) + X.shape), ys, np.broadcast_to(v, (B, 3)))
    ts = np.geomspace(1e-2, 20.0, 7)
    kw = dict(t1=20.0, ts=ts, rest_stop=False, quadratures={"L": _tanh_net_loss})
    batch = gradflow.integrate_batch(_tanh_net_loss, p0s, args=args_b, args_batched=True, **kw)
    assert batch.status == ["ok"] * B and batch.params["W"].shape == (B, 7, 3, 2)
    for i in range(B):
        one = gradflow.integrate(_tanh_net_loss, {"W": p0s["W"][i], "b": p0s["b"][i]}, args=(X, ys[i], v), **kw)
        # a lone lane is not vmapped: last-digit differences, passed on by the adaptive steps,
        # grow to the tolerance (measured up to 8e-9 at rtol 1e-8)
        np.testing.assert_allclose(batch[i].params["W"], one.params["W"], rtol=0, atol=8e-8)
        np.testing.assert_allclose(batch[i].quadratures["L"], one.quadratures["L"], rtol=1e-7)
    # control: the lanes differ from each other by far more than that
    assert np.max(np.abs(np.asarray(batch.params["W"][0]) - np.asarray(batch.params["W"][1]))) > 1e-2
    # shared args: every lane sees the same data
    shared = gradflow.integrate_batch(_tanh_net_loss, p0s, args=(X, y, v), **kw)
    one = gradflow.integrate(_tanh_net_loss, {"W": p0s["W"][2], "b": p0s["b"][2]}, args=(X, y, v), **kw)
    np.testing.assert_allclose(shared[2].params["b"], one.params["b"], rtol=0, atol=8e-8)
    assert np.max(np.abs(np.asarray(shared[2].params["b"]) - np.asarray(batch[2].params["b"]))) > 1e-3


# --------------------------------------------------------------------------- the value-softmax family
def _value_softmax_logistic(p, bs):
    V, a = p
    return jnp.logaddexp(0.0, -jnp.dot(bs, V @ jax.nn.softmax(a)))


def test_simulate_equals_integrate_of_the_loss_written_by_hand():
    V0, a0, bs = fig2_problem()
    loss = gradflow.LogisticTeacher(bs)
    ts = np.concatenate([[0.0], np.geomspace(1e-2, 1e6, 20)])
    traj = gradflow.simulate(loss, V0, a0, t1=1e6, ts=ts, rtol=1e-10, atol=1e-12)
    gamma = lambda p, b: jax.nn.sigmoid(-jnp.dot(b, p[0] @ jax.nn.softmax(p[1])))
    sol = gradflow.integrate(_value_softmax_logistic, (V0, a0), args=jnp.asarray(bs), t1=1e6, ts=ts, rtol=1e-10,
                             atol=1e-12, rest_stop=False, quadratures={"Gamma": gamma})
    assert sol.status == traj.status == "ok"
    # plain autodiff of the softmax vs the exact centred derivative, both at rtol 1e-10:
    # measured 6.3e-10 (a), 9.9e-10 (V), 3.4e-10 relative (Γ), 1.7e-9 relative (loss)
    np.testing.assert_allclose(sol.params[1], traj.a, rtol=0, atol=6e-9)
    np.testing.assert_allclose(sol.params[0], traj.V, rtol=0, atol=1e-8)
    np.testing.assert_allclose(sol.quadratures["Gamma"], traj.Gamma, rtol=3.5e-9, atol=1e-15)
    np.testing.assert_allclose(sol.loss, traj.loss, rtol=1.7e-8)
    assert np.max(np.abs(np.asarray(traj.a[-1]) - a0)) > 1.0  # control: the logits moved


def test_integrate_with_the_exact_field_is_simulate():
    """With simulate's own field (``field=``) and Γ, integrate runs the same solve: same steps, same numbers."""
    V0, a0, bs = fig2_problem()
    loss = gradflow.LogisticTeacher(bs)
    model = gradflow.get_model("value-softmax")
    traj = gradflow.simulate(loss, V0, a0, t1=1e12)
    sol = gradflow.integrate(lambda p: model.loss(loss, *p), (V0, a0), t1=1e12, rest_stop=False,
                             field=lambda p: gradflow.gradient_field(model, loss, *p),
                             quadratures={"Gamma": lambda p: model.gamma(loss, *p)})
    assert int(sol.num_steps) == int(traj.num_steps) == 37
    np.testing.assert_array_equal(sol.params[1], traj.a)
    np.testing.assert_array_equal(sol.quadratures["Gamma"], traj.Gamma)


# --------------------------------------------------------------------------- descent
def test_descend_params_matches_a_numpy_gd_loop_and_descend():
    lr, steps = 0.05, 400
    sol = gradflow.descend_params(_linear_net, {"w1": 0.3, "w2": 0.2}, lr=lr, steps=steps, record=[0, 10, 400],
                                  quadratures={"L": _linear_net})
    w1, w2, Lsum = 0.3, 0.2, 0.0
    for _ in range(steps):
        r = Y - w1 * w2
        Lsum += lr * 0.5 * r * r
        w1, w2 = w1 + lr * r * w2, w2 + lr * r * w1
    assert sol.status == "ok" and list(np.asarray(sol.k)) == [0, 10, 400]
    np.testing.assert_allclose([sol.params["w1"][-1], sol.params["w2"][-1]], [w1, w2], rtol=1e-13)
    np.testing.assert_allclose(sol.quadratures["L"][-1], Lsum, rtol=1e-13)
    assert abs(float(sol.params["w1"][1]) - w1) > 1e-2  # control: iteration 10 is not the end
    # the value-softmax descend runs the same loop
    V0, a0, bs = fig2_problem()
    gd = gradflow.descend(gradflow.LogisticTeacher(bs), V0, a0, lr=0.1, steps=200, record=[0, 200])
    gp = gradflow.descend_params(_value_softmax_logistic, (V0, a0), args=jnp.asarray(bs), lr=0.1, steps=200,
                                 record=[0, 200])
    np.testing.assert_allclose(gp.params[1], gd.a, rtol=0, atol=1e-12)


def test_descend_params_time_and_divergence_by_hand():
    """GD on ``L = ½w²`` with ``lr = 3``: ``w_k = (−2)^k`` exactly (powers of two), finite up to
    ``k = 1023`` (2^1023 < float64 max < 2^1024); iteration 1024 overflows. So the run stops as
    ``nonfinite`` at ``k_end = 1023`` (``t_end = 3·1023``), the later record point holds that
    iterate with ``valid = False``, and ``t = lr·k`` at every record point. Negative control:
    ``lr = 0.5`` halves ``w`` each step and ends ``ok`` (at the last record point, k = 3)."""
    lr, rec = 3.0, [0, 1, 10, 1023, 2000]
    sol = gradflow.descend_params(lambda p: 0.5 * p["w"] ** 2, {"w": 1.0}, lr=lr, steps=2000, record=rec)
    np.testing.assert_array_equal(np.asarray(sol.t), lr * np.asarray(rec, float))
    assert sol.status == "nonfinite" and int(sol.num_steps) == 1023 and float(sol.t_end) == lr * 1023
    np.testing.assert_array_equal(np.asarray(sol.valid), [True, True, True, True, False])
    np.testing.assert_array_equal(np.asarray(sol.params["w"]), [1.0, -2.0, 1024.0, -(2.0**1023), -(2.0**1023)])
    ok = gradflow.descend_params(lambda p: 0.5 * p["w"] ** 2, {"w": 1.0}, lr=0.5, steps=2000, record=[0, 3])
    assert ok.status == "ok" and int(ok.num_steps) == 3 and float(ok.params["w"][-1]) == 0.125


# --------------------------------------------------------------------------- bad input
GOOD = {"w1": 0.1, "w2": 0.1}


def _nan_loss(p):
    return jnp.log(p["w1"] - 1.0)  # NaN at w1 = 0.1


def _inf_grad_loss(p):
    return jnp.sqrt(jnp.abs(p["w1"])) * 0 + jnp.sqrt(p["w2"] - 0.1)  # √0: gradient +inf


def _while_loss(p):  # reverse-mode differentiation of a while loop is not defined
    return jax.lax.while_loop(lambda c: c[1] < 3, lambda c: (c[0] * 1.1, c[1] + 1), (p["w1"] ** 2, 0))[0]


def _concrete_loss(p):
    return float(p["w1"]) ** 2  # concretises a tracer


BAD = [
    (dict(loss="not a function"), "loss"),
    (dict(loss=lambda p: jnp.stack([p["w1"], p["w2"]])), "loss: got a function returning shape \\(2,\\)"),
    (dict(loss=lambda p: jnp.int32(1)), "loss: got a function returning shape \\(\\), dtype int32"),
    (dict(loss=_concrete_loss), "loss: .*JAX-traceable"),
    (dict(loss=_while_loss), "loss: got <function _while_loss .*differentiable"),  # the user's function, not a wrapper
    (dict(loss=_nan_loss), "loss: got a loss of nan at params0"),
    (dict(loss=_inf_grad_loss), "loss: got a non-finite gradient at params0"),
    (dict(params0={}), "params0: got \\{\\}; expected a non-empty pytree"),
    (dict(params0={"w1": 1, "w2": 0.1}), "params0\\['w1'\\]: got 1; expected a float array"),
    (dict(params0={"w1": np.array([1, 2]), "w2": 0.1}), "params0\\['w1'\\]: .*dtype int64"),
    (dict(params0={"w1": np.array([1j]), "w2": 0.1}), "params0\\['w1'\\]: .*complex"),
    (dict(params0={"w1": np.array([np.nan]), "w2": 0.1}), "params0\\['w1'\\]: .*finite"),
    (dict(params0={"w1": np.zeros(0), "w2": 0.1}), "params0\\['w1'\\]: .*non-empty"),
    (dict(ts=[0.0, 2.0, 1.0]), "ts: .*strictly increasing"),
    (dict(ts=[0.0, 1.0, 20.0]), "ts: .*in \\[0, t1 = 10\\]"),
    (dict(solver="rk4"), "solver: got 'rk4'; expected one of"),
    (dict(t1=-1.0), "t1"),
    (dict(observe=[lambda p: p["w1"]]), "observe: .*a dict"),
    (dict(observe={3: lambda p: p["w1"]}), "observe: got 3; expected non-empty str names as keys"),
    (dict(quadratures={"": lambda p: p["w1"]}), "quadratures: got ''; expected non-empty str names as keys"),
    (dict(observe={"x": 3.0}), "observe\\['x'\\]: got 3.0; expected a function"),
    (dict(observe={"x": lambda p: p["nope"]}), "observe\\['x'\\]: .*KeyError"),
    (dict(observe={"x": lambda p: {"a": p["w1"]}}), "observe\\['x'\\]: .*one real numeric array"),
    (dict(observe={"x": lambda p: "text"}), "observe\\['x'\\]: .*one real numeric array"),
    (dict(quadratures={"q": lambda p: jnp.stack([p["w1"], p["w2"]])}), "quadratures\\['q'\\]: .*float scalar"),
    (dict(quadratures={"q": lambda p: p["w1"] > 0}), "quadratures\\['q'\\]: .*dtype bool"),
    (dict(quadratures={"q": lambda p, extra: p["w1"]}), "quadratures\\['q'\\]: .*TypeError"),
    (dict(field=lambda p: {"w1": p["w1"]}), "field: .*shaped like params0"),
]


@pytest.mark.bad_input
@pytest.mark.parametrize("bad, match", BAD, ids=[m.split(":")[0] + str(i) for i, (_, m) in enumerate(BAD)])
def test_bad_input_is_refused_before_tracing(bad, match):
    kw = dict(loss=_linear_net, params0=GOOD, t1=10.0)
    kw.update(bad)
    loss, params0 = kw.pop("loss"), kw.pop("params0")
    with pytest.raises(gradflow.GradflowValueError, match=match):
        gradflow.integrate(loss, params0, **kw)


def test_good_input_is_accepted_control():
    """The control of the bad-input table: the same call with good arguments runs."""
    sol = gradflow.integrate(_linear_net, GOOD, t1=10.0, ts=[0.0, 1.0, 10.0], observe={"x": lambda p: p["w1"]},
                             quadratures={"q": lambda p: p["w1"]})
    assert sol.ok and sol.observed["x"].shape == (3,)


def test_bad_batch_input():
    with pytest.raises(gradflow.GradflowValueError, match="params0s batch sizes"):
        gradflow.integrate_batch(_linear_net, {"w1": np.ones(2), "w2": np.ones(3)}, t1=1.0)
    with pytest.raises(gradflow.GradflowValueError, match="args: .*leading axis B = 2"):
        gradflow.integrate_batch(lambda p, a: jnp.sum((p - a) ** 2), np.ones((2, 3)), args=np.ones(3),
                                 args_batched=True, t1=1.0)
    with pytest.raises(gradflow.GradflowValueError, match="loss: got a loss of nan at params0s \\(lanes \\[1\\]\\)"):
        gradflow.integrate_batch(lambda p: jnp.log(p[0]), np.array([[1.0], [-1.0]]), t1=1.0)


# --------------------------------------------------------------------------- engine pieces
def test_status_enumeration_is_the_public_status_list():
    from gradflow._engine.solve import Status

    assert tuple(s.name for s in Status) == gradflow.STATUS == ("ok", "max_steps", "stalled", "nonfinite",
                                                                 "solver_failed")
    assert [int(s) for s in Status] == [0, 1, 2, 3, 4] and all(s.message for s in Status)



def test_metadata_records_the_phases_a_run_went_through():
    """``sol.metadata["phases"]``: the solvers the run's rounds ran, in the order first run. A
    non-stiff flow under ``auto`` stays in Dopri8; a solver by name runs only itself; under
    ``integrate_batch`` the phases of any lane. (That they are the rounds the engine ran, against
    a spy on its rounds, is tested in ``tests/test_stiff.py``.)"""
    import jax.numpy as jnp

    import gradflow

    loss = lambda p: 0.5 * jnp.sum(p["x"] ** 2)  # noqa: E731
    p0 = {"x": jnp.array([1.0, -2.0])}
    assert gradflow.integrate(loss, p0, t1=10.0).metadata["phases"] == "dopri8"
    assert gradflow.integrate(loss, p0, t1=10.0, solver="rkc").metadata["phases"] == "rkc"
    assert gradflow.integrate(loss, p0, t1=10.0, solver="rodas4").metadata["phases"] == "rodas4"
    batch = gradflow.integrate_batch(loss, {"x": jnp.ones((3, 2))}, t1=10.0, solver="dopri5")
    assert batch.metadata["phases"] == "dopri5"
