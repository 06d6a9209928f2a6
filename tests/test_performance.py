"""Engine properties behind the speed claims (speed itself is measured in ``benchmarks/``):
no recompilation across sweep points, rounds that release finished lanes, sharding that does
not change the numbers, and an implicit phase that finishes stiff square-loss flows."""

import json
import os
import subprocess
import sys

import equinox as eqx
import jax
import numpy as np
import pytest

import gradflow
from gradflow._engine.policy import DEFAULT_POLICY as POLICY
from gradflow._engine import batch as _batch, solve as _solve
from tests import reference as ref


def _draw(seed, n, B):
    rng = np.random.RandomState(seed)
    V0s = 0.1 * rng.randn(B, n, n)
    teachers = rng.randn(B, n)
    return V0s, np.zeros((B, n)), [gradflow.LogisticTeacher(b / np.linalg.norm(b)) for b in teachers]


def test_no_recompilation_across_tolerances_horizons_seeds_and_ts(monkeypatch):
    # shapes (B = 3, n = d = 3, 17 save points) used by no other test, so the first call traces
    counted = eqx.debug.assert_max_traces(_solve.solve_lane, max_traces=1)
    monkeypatch.setattr(_solve, "solve_lane", counted)
    settings = [
        dict(seed=0, t1=1e3, rtol=1e-8, atol=1e-10, ts=np.geomspace(1e-3, 1e3, 17)),
        dict(seed=1, t1=1e12, rtol=1e-10, atol=1e-12, ts=np.geomspace(1e-2, 1e12, 17)),
        dict(seed=2, t1=1e30, rtol=1e-6, atol=1e-9, ts=np.linspace(1.0, 1e30, 17)),
    ]
    for cfg in settings:
        V0s, a0s, losses = _draw(cfg["seed"], 3, 3)
        traj = gradflow.simulate_batch(losses, V0s, a0s, t1=cfg["t1"], ts=cfg["ts"], rtol=cfg["rtol"], atol=cfg["atol"])
        assert traj.ok
    assert eqx.debug.get_num_traces(counted) == 1
    # negative control: a new shape (18 save points) must trace again, and the counter says so
    with pytest.raises(RuntimeError, match="traced"):
        gradflow.simulate_batch(losses, V0s, a0s, t1=1e3, ts=np.geomspace(1e-3, 1e3, 18))


@pytest.mark.slow  # default run kept under ~15 min on 2 cores
def test_one_slow_lane_does_not_hold_the_batch(monkeypatch):
    """Rounds of R steps: lanes that finish within R steps stop there (same steps and numbers as
    one round of ``max_steps``, the old behaviour), and only the lanes that needed more than R
    steps go on. In a compile-bound batch (fewer than ``UNROLL_LANES`` lanes) they go on through
    the first round's program, the two slow lanes padded to all eight rows (one compiled program
    for both rounds); in a throughput-bound one (control: ``UNROLL_LANES`` lowered to 4) the
    second round computes the two slow lanes alone. Both agree with the one-round run, the slow
    lanes with a single run."""
    from gradflow._engine import _fastjit

    rng = np.random.RandomState(0)
    n = 4
    V0s, a0s = np.stack([s * rng.randn(n, n) for s in [30.0, 100.0, 30.0, 0.1, 100.0, 30.0, 0.1, 100.0]]), np.zeros((8, n))
    bs = rng.randn(n)
    loss = gradflow.LogisticTeacher(bs / np.linalg.norm(bs))
    calls = []
    fused, round_ = _batch._fused_round, _batch._round
    monkeypatch.setattr(_batch, "_fused_round", lambda *a: calls.append(("fused", sorted(set(np.asarray(a[6]).tolist()))))
                        or fused(*a))
    monkeypatch.setattr(_batch, "_round", lambda *a: calls.append(("round", sorted(np.asarray(a[3]).tolist()))) or round_(*a))
    # the one-round run first: all eight lanes for every step
    whole = gradflow.simulate_batch(loss, V0s, a0s, t1=1e12)
    assert calls == [("fused", list(range(8)))] and whole.ok
    steps_whole = np.asarray(whole.num_steps)
    R = int(np.sort(steps_whole)[-3])  # two lanes need more than R steps
    slow = steps_whole > R
    assert slow.sum() == 2, steps_whole
    monkeypatch.setattr(_batch, "ROUND_STEPS", R)
    calls.clear()
    programs = fused.jitted_for(_fastjit.FAST_COMPILE)._cache_size
    before = programs()
    traj = gradflow.simulate_batch(loss, V0s, a0s, t1=1e12)
    assert traj.ok and calls == [("fused", list(range(8))), ("fused", np.flatnonzero(slow).tolist())], calls
    assert programs() == before + 1  # both rounds through one program (its round length R is new)
    steps = np.asarray(traj.num_steps)
    np.testing.assert_array_equal(steps[~slow], steps_whole[~slow])
    np.testing.assert_array_equal(traj.a[~slow], whole.a[~slow])
    assert np.all(steps[slow] > R)
    np.testing.assert_allclose(traj.a[slow], whole.a[slow], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(traj.V[slow], whole.V[slow], rtol=1e-6, atol=1e-6)
    i = int(np.flatnonzero(slow)[0])
    single = gradflow.simulate(loss, V0s[i], a0s[i], t1=1e12)
    np.testing.assert_allclose(single.a, traj[i].a, rtol=1e-6, atol=1e-6)
    # control: a throughput-bound batch computes the slow lanes alone in its second round
    monkeypatch.setattr(_batch, "UNROLL_LANES", 4)
    calls.clear()
    bound = gradflow.simulate_batch(loss, V0s, a0s, t1=1e12)
    assert bound.ok and calls[0] == ("fused", list(range(8))) and ("round", np.flatnonzero(slow).tolist()) in calls, calls
    np.testing.assert_allclose(bound.a, whole.a, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_stiff_square_design_kappa50_finishes_and_matches_radau():
    """κ = 50, d = 6: the stiffness detector switches to the implicit phase, which must finish
    (an earlier implicit phase rejected half its steps and stalled near t ≈ 1.7e3) and agree
    with SciPy's Radau."""
    rng = np.random.RandomState(123)
    d = 6
    W, a = 1e-5 * rng.randn(d, d), 1e-3 * rng.randn(d)
    U, _, Vt = np.linalg.svd(rng.randn(d, d))
    X, y = U @ np.diag(np.linspace(1, 1 / 50, d)) @ Vt, rng.randn(d)
    ts = np.concatenate([[0.0], np.geomspace(1.0, 1e5, 16)])
    traj = gradflow.simulate(gradflow.SquareLoss(y, design=X, scale=1.0), W, a, t1=1e5, ts=ts, rtol=1e-10, atol=1e-12)
    assert traj.status == "ok" and traj.metadata["solver"] == "auto"
    assert int(traj.num_steps) > POLICY.explicit_round  # past the first explicit round: the implicit phase ran
    Vr, ar, _ = ref.integrate(W, a, ref.square_residual(y, X, 1.0), ts, rtol=1e-11, atol=1e-13, method="Radau")
    sr = np.array([ref.softmax(x) for x in ar])
    np.testing.assert_allclose(traj.s, sr, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(traj.V, Vr, rtol=1e-6, atol=1e-8)
    assert float(traj.loss[-1]) < 1e-12  # at the minimiser


_SHARD_SCRIPT = r"""
import json, sys, jax, numpy as np
import gradflow
sys.path.insert(0, ".")
from tests.test_performance import _draw
V0s, a0s, losses = _draw(5, 4, 6)                 # 6 lanes: padded to 8 over 4 devices
V0s[0] *= 1e5                                     # one lane goes on to later rounds (and the detector)
ts = np.geomspace(1e-2, 1e12, 12)
many = gradflow.simulate_batch(losses, V0s, a0s, t1=1e12, ts=ts)
one = gradflow.simulate_batch(losses, V0s, a0s, t1=1e12, ts=ts, devices=jax.devices()[:1])
V0s[2] += 1.0                                     # control: a perturbed lane must show up (next to lane 0's scale)
moved = gradflow.simulate_batch(losses, V0s, a0s, t1=1e12, ts=ts)
rel = lambda x, y: float(np.max(np.abs(np.asarray(x.V) - np.asarray(y.V))) / np.max(np.abs(np.asarray(y.V))))
print(json.dumps(dict(devices=jax.device_count(), sharded_over=len(many.V.sharding.device_set),
    one_over=len(one.V.sharding.device_set), diff=rel(many, one), diff_control=rel(moved, one),
    steps_many=np.asarray(many.num_steps).tolist(), steps_one=np.asarray(one.num_steps).tolist(),
    ok=bool(many.ok and one.ok and moved.ok))))
"""


@pytest.mark.slow  # default run kept under ~15 min on 2 cores
def test_sweep_on_simulated_devices_equals_one_device():
    """4 simulated CPU devices (the flag must precede the import of jax: a subprocess)."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_NUM_CPU_DEVICES"}  # it would override XLA_FLAGS
    env.update(XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", _SHARD_SCRIPT], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["devices"] == 4 and res["sharded_over"] == 4 and res["one_over"] == 1 and res["ok"], res
    assert res["steps_many"] == res["steps_one"], res
    assert max(res["steps_many"]) > POLICY.explicit_round >= min(res["steps_many"]), res  # later rounds sharded too
    # kernels compiled for 2 lanes per device round differently from 6 lanes on one device, and
    # adaptive steps pass last-digit differences on: equal far inside the tolerance (rtol 1e-8)
    assert res["diff"] <= 1e-8, res
    assert res["diff_control"] > 1e-7, res


_CACHE_SCRIPT = r"""
import os, sys
import numpy as np
import gradflow
from gradflow._engine import loop
if sys.argv[2] == "control":  # the solve by diffrax.diffeqsolve, whose save-time checks are host callbacks
    loop.solve = loop.by_diffeqsolve
gradflow.enable_compilation_cache(sys.argv[1])
rng = np.random.RandomState(0)
traj = gradflow.simulate(gradflow.LogisticTeacher(rng.randn(3)), 0.1 * rng.randn(3, 3), np.zeros(3), t1=1e6,
                         ts=np.geomspace(1e-3, 1e6, 13))
assert traj.ok
print(" ".join(sorted(os.listdir(sys.argv[1]))))
"""


def test_solve_is_written_to_the_persistent_compilation_cache(tmp_path):
    """JAX never caches a computation with host callbacks. The engine's solve loop has none, so
    the fused round is written to the cache; the control runs the same solve by
    ``diffrax.diffeqsolve``, which checks its save times with ``eqx.error_if`` (a host callback),
    and its round is not written. (That a second process then loads it is measured in
    ``benchmarks/``: cache hits of the second cold run.)"""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k not in ("GRADFLOW_NO_CACHE", "EQX_ON_ERROR")}
    listed = {}
    for mode in ("loop", "control"):
        folder = tmp_path / mode
        out = subprocess.run([sys.executable, "-c", _CACHE_SCRIPT, str(folder), mode], cwd=root, env=env,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        listed[mode] = out.stdout.split()
    assert any(name.startswith("jit__fused_round") for name in listed["loop"]), listed
    assert not any(name.startswith("jit__fused_round") for name in listed["control"]), listed


@pytest.mark.slow  # default run kept under ~15 min on 2 cores
def test_first_round_in_chunks_equals_one_solve(monkeypatch):
    """More lanes than one solve takes: the first round runs in chunks (the last one padded),
    whose results are concatenated, and lanes still running continue in later rounds. Same
    statuses, steps and numbers as all lanes in one solve (control: a lane order swap is seen)."""
    rng = np.random.RandomState(3)
    n = 4
    V0s = np.stack([s * rng.randn(n, n) for s in [0.1, 100.0, 0.1, 30.0, 0.1]])
    a0s = np.zeros((5, n))
    losses = [gradflow.LogisticTeacher(b / np.linalg.norm(b)) for b in rng.randn(5, n)]
    ts = np.geomspace(1e-2, 1e10, 11)
    whole = gradflow.simulate_batch(losses, V0s, a0s, t1=1e10, ts=ts)
    monkeypatch.setattr(_batch, "LANES_PER_SOLVE", 2)
    monkeypatch.setattr(_batch, "ROUND_STEPS", int(np.sort(np.asarray(whole.num_steps))[-2]) - 1)
    chunked = gradflow.simulate_batch(losses, V0s, a0s, t1=1e10, ts=ts)
    assert chunked.status == whole.status == ["ok"] * 5
    assert chunked.V.shape == whole.V.shape == (5, 11, n, n)
    slow = np.asarray(whole.num_steps) > _batch.ROUND_STEPS
    assert 1 <= slow.sum() < 5  # some lanes (not all) went on to a second round
    np.testing.assert_array_equal(np.asarray(chunked.num_steps)[~slow], np.asarray(whole.num_steps)[~slow])
    np.testing.assert_allclose(chunked.a, whole.a, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(chunked.Gamma, whole.Gamma, rtol=1e-6)
    assert np.max(np.abs(np.asarray(chunked.a)[[1, 0]] - np.asarray(whole.a)[[0, 1]])) > 1e-3  # control


def test_first_round_chunks_concatenated_equal_one_solve(monkeypatch):
    """The fast path: every lane finishes in its chunk's first round (chunks of 2, the last one
    padded) and the chunk results are concatenated; equal to one solve of all lanes."""
    rng = np.random.RandomState(4)
    V0s, a0s, losses = 0.1 * rng.randn(5, 3, 3), np.zeros((5, 3)), [gradflow.LogisticTeacher(b) for b in rng.randn(5, 3)]
    whole = gradflow.simulate_batch(losses, V0s, a0s, t1=1e8, ts=np.geomspace(1e-2, 1e8, 9))
    monkeypatch.setattr(_batch, "LANES_PER_SOLVE", 2)
    calls = []
    first = _batch._fused_round
    monkeypatch.setattr(_batch, "_fused_round", lambda *a, **k: calls.append(jax.tree.leaves(a[2])[0].shape[0]) or first(*a, **k))
    chunked = gradflow.simulate_batch(losses, V0s, a0s, t1=1e8, ts=np.geomspace(1e-2, 1e8, 9))
    assert calls == [2, 2, 1] and chunked.status == whole.status == ["ok"] * 5
    np.testing.assert_array_equal(np.asarray(chunked.num_steps), np.asarray(whole.num_steps))
    # lane 4 runs alone (no vmap): last-digit differences, passed on by the adaptive steps
    np.testing.assert_allclose(chunked.V, whole.V, rtol=1e-7, atol=1e-12)
    assert not np.allclose(np.asarray(chunked.V)[[1, 0]], np.asarray(whole.V)[[0, 1]])  # control: order matters


def test_a_users_equinox_check_in_the_loss_still_raises():
    """A user's ``eqx.error_if`` in the loss keeps its meaning inside a solve (the engine's
    programs need no swap of equinox's check to be cached): a check that fails during the solve
    raises with its message. Control: the same check that never fails lets the run end ``ok``."""
    import jax.numpy as jnp

    def loss(w, bound):
        w = eqx.error_if(w, jnp.max(jnp.abs(w)) > bound, "the weights left the box")
        return 0.5 * jnp.sum((w - 3.0) ** 2)

    assert gradflow.integrate(loss, np.zeros(2), t1=10.0, args=10.0).status == "ok"
    with pytest.raises(Exception, match="the weights left the box"):
        gradflow.integrate(loss, np.zeros(2), t1=10.0, args=1.0)


def test_batch_whose_lanes_finish_in_different_rounds_equals_single_runs(monkeypatch):
    """One chunk of lanes (the first round fused with the finish for all of them), of which some
    finish in the first round and one goes on to later rounds: the result is the later rounds'
    finish, not the first round's (a lane's state, steps and status equal its single run's);
    each single run is the independent reference. A batch this small is compile-bound: its later
    rounds run the slow lane padded to all three rows through the fused program, never a program
    for fewer lanes. The same batch made throughput-bound (``UNROLL_LANES = 2``) runs its later
    rounds on a bucket of the slow lane instead, after which the fused first round's result is
    stale: it must equal the single runs too. Control: the slow lane did go on."""
    calls, fused, round_ = [], _batch._fused_round, _batch._round
    monkeypatch.setattr(_batch, "_fused_round", lambda *a: calls.append(np.asarray(a[6]).tolist()) or fused(*a))
    monkeypatch.setattr(_batch, "_round", lambda *a: calls.append("round") or round_(*a))
    rng = np.random.RandomState(3)
    n = 4
    V0s = np.stack([s * rng.randn(n, n) for s in [0.1, 1e4, 0.01]])  # the large V0 takes 71 steps, the others < 40
    a0s = np.zeros((3, n))
    betas = [b / np.linalg.norm(b) for b in rng.randn(3, n)]
    ts = np.geomspace(1e-2, 1e10, 11)
    batch = gradflow.simulate_batch([gradflow.LogisticTeacher(b) for b in betas], V0s, a0s, t1=1e10, ts=ts)
    calls, batch_calls = [], calls  # the single runs below call it too
    singles = [gradflow.simulate(gradflow.LogisticTeacher(b), V0, a0, t1=1e10, ts=ts) for b, V0, a0 in zip(betas, V0s, a0s)]
    steps = np.asarray(batch.num_steps)
    assert steps.max() > POLICY.explicit_round >= steps.min()  # control: lanes finish in different rounds
    slow = int(np.argmax(steps))
    assert batch_calls[0] == [0, 1, 2] and len(batch_calls) > 1 and all(c == [slow] * 3 for c in batch_calls[1:]), batch_calls
    assert batch.status == [s.status for s in singles] == ["ok"] * 3
    # a lane in a vmapped solve and the same lane alone differ in the last digits, which the
    # adaptive steps pass on: a step more or less
    np.testing.assert_allclose(steps, [int(s.num_steps) for s in singles], atol=2)
    np.testing.assert_allclose(batch.a, np.stack([s.a for s in singles]), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(batch.Gamma, np.stack([s.Gamma for s in singles]), rtol=1e-7)
    monkeypatch.setattr(_batch, "UNROLL_LANES", 2)
    calls.clear()
    bound = gradflow.simulate_batch([gradflow.LogisticTeacher(b) for b in betas], V0s, a0s, t1=1e10, ts=ts)
    assert "round" in calls and bound.status == ["ok"] * 3, calls
    np.testing.assert_allclose(np.asarray(bound.num_steps), steps, atol=2)
    np.testing.assert_allclose(bound.a, np.stack([s.a for s in singles]), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(bound.Gamma, np.stack([s.Gamma for s in singles]), rtol=1e-7)


def test_fixed_width_gives_a_lane_the_same_bits_whichever_lanes_share_its_batch(monkeypatch):
    """A stiff lane (a quadratic with curvatures up to 1e5: ``auto`` goes implicit after its
    first explicit round) batched with a mild lane (which ends in the first round, so the stiff
    lane's implicit rounds would run alone) and with another stiff lane (implicit rounds 2 lanes
    wide). With ``fixed_width`` every round is 2 rows wide and the stiff lane's state is bit for
    bit the same in both batches; control: without it, its implicit rounds run 1 lane (no vmap)
    in one batch and 2 in the other, and its bits differ (within the tolerance)."""
    import jax.numpy as jnp

    from gradflow._engine.solvers import spec

    widths = []
    real = _batch._solve_jit
    monkeypatch.setattr(_batch, "_solve_jit", lambda *a: widths.append(
        (a[5].solver, jax.tree.leaves(a[2])[0].shape[0])) or real(*a))
    loss = lambda p, lam: 0.5 * jnp.sum(lam * (p - 1.0) ** 2) + 2.5e-4 * jnp.sum(p ** 4)  # noqa: E731
    curv = {"stiff": [1.0, 3e3, 1e5], "stiff2": [2.0, 1e4, 5e4], "mild": [1.0, 1.0, 1.0]}

    def lane0(names, fixed_width):
        widths.clear()
        sol = gradflow.integrate_batch(loss, jnp.full((2, 3), 0.5), t1=30.0, ts=np.geomspace(1e-2, 30.0, 4),
                                       args=jnp.asarray([curv[k] for k in names]), args_batched=True,
                                       fixed_width=fixed_width)
        assert sol.status == ["ok", "ok"]
        return np.asarray(jax.tree.leaves(sol.params)[0])[0], int(np.asarray(sol.num_steps)[0]), list(widths)

    implicit = lambda ws: {w for code, w in ws if spec(code).implicit}  # noqa: E731
    (x, steps_x, _), (y, steps_y, _) = lane0(["stiff", "mild"], True), lane0(["stiff", "stiff2"], True)
    assert steps_x == steps_y > POLICY.explicit_round
    np.testing.assert_array_equal(x, y)
    (u, _, wu), (v, _, wv) = lane0(["stiff", "mild"], False), lane0(["stiff", "stiff2"], False)
    assert implicit(wu) == {1} and implicit(wv) == {2}, (wu, wv)  # traced here: programs not compiled above
    assert not np.array_equal(u, v)
    np.testing.assert_allclose(u, v, rtol=1e-6)


def test_the_field_is_traced_once_per_program_with_the_same_results(monkeypatch):
    """A single stiff ``integrate`` with a quadrature (Dopri8 and Rodas4 rounds, the detector)
    traces the user's loss and integrand a few times each: every site evaluates them through
    ``solve.call_user``, a nested jit whose trace all sites and programs reuse. The same run
    with them called directly at every site (the control) traces them many more times, and
    gives bitwise the same save points and end state (XLA inlines the nested call)."""
    from gradflow._engine.solvers import spec

    loss_traces, rate_traces, solvers = [], [], []
    lam = jax.numpy.asarray([1e-2, 1.0, 1e2, 3e1, 0.3])

    def loss(w):  # a loss (and shapes) that no other test compiles
        loss_traces.append(1)
        return 0.5 * jax.numpy.sum(lam * w ** 2) + 0.1 * jax.numpy.sum(w ** 4)

    def speed(w):
        rate_traces.append(1)
        return jax.numpy.sum(jax.numpy.abs(w))

    fused = _batch._fused_round
    monkeypatch.setattr(_batch, "_fused_round", lambda *a: solvers.append(spec(a[5].solver).name) or fused(*a))
    w0 = np.asarray([1.0, -0.5, 0.3, 0.2, 0.1])
    ts = np.geomspace(1e-3, 1e6, 9)
    run = lambda: gradflow.integrate(loss, w0, t1=1e6, ts=ts, quadratures={"speed": speed})
    nested = run()
    counts_nested = len(loss_traces), len(rate_traces)
    assert nested.status == "ok" and {"dopri8", "rodas4"} <= set(solvers), solvers
    del loss_traces[:], rate_traces[:]
    monkeypatch.setattr(_solve, "call_user", lambda fn, params, args: fn(params, args))
    jax.clear_caches()
    try:
        direct = run()
    finally:
        jax.clear_caches()
    counts_direct = len(loss_traces), len(rate_traces)
    assert direct.status == "ok"
    assert counts_nested[0] <= 7 and counts_nested[1] <= 6, counts_nested  # measured: 6 and 5
    assert counts_direct[0] >= 3 * counts_nested[0] and counts_direct[1] >= 3 * counts_nested[1], counts_direct  # 25, 28
    for x, y in zip(jax.tree.leaves(nested), jax.tree.leaves(direct)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
