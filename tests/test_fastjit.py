"""``gradflow._engine._fastjit.filter_jit`` (the engine's cheap-per-call ``equinox.filter_jit``):
the same partition into traced arrays and static values, the same results, bitwise, in the engine."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow
from gradflow._engine import _fastjit, _pinned, batch as _batch


def _fn(mode, x, scale, items):
    """Static: ``mode`` (str), ``scale`` (Python float), the ints in ``items``; traced: arrays."""
    calls.append(mode)
    y = x * scale if mode == "mul" else x + scale
    return {"y": y, "n": items["n"], "z": items["z"] * 2, "tag": mode + "!", "none": None}


calls = []


def test_filter_jit_matches_equinox_and_retraces_only_on_static_changes():
    fast, ref = _fastjit.filter_jit(_fn), eqx.filter_jit(_fn)
    x, z = np.arange(3.0), jnp.ones(2)
    calls.clear()
    out = fast("mul", x, 2.0, {"n": 3, "z": z})
    again = fast("mul", x + 1, 2.0, {"n": 3, "z": z})  # new array values: no new trace
    assert calls == ["mul"]
    expected = ref("mul", x, 2.0, {"n": 3, "z": z})
    assert out["n"] == expected["n"] == 3 and out["tag"] == expected["tag"] == "mul!" and out["none"] is None
    assert isinstance(out["y"], jax.Array)
    np.testing.assert_array_equal(out["y"], expected["y"])
    np.testing.assert_array_equal(again["y"], (x + 1) * 2)
    # controls: a changed static value (the str, the float, an int leaf) traces again and changes the result
    calls.clear()
    assert np.array_equal(fast("add", x, 2.0, {"n": 3, "z": z})["y"], x + 2)
    assert np.array_equal(fast("mul", x, 3.0, {"n": 3, "z": z})["y"], x * 3)
    assert fast("mul", x, 2.0, {"n": 4, "z": z})["n"] == 4
    assert calls == ["add", "mul", "mul"]
    # a new shape traces again, as jax.jit does
    calls.clear()
    fast("mul", np.arange(4.0), 2.0, {"n": 3, "z": z})
    assert calls == ["mul"]


def test_engine_fused_round_bitwise_equal_to_equinox_filter_jit(monkeypatch):
    """The fused first round of a single value-softmax flow through ``_fastjit`` (compiled with
    ``FAST_COMPILE``: one lane) and through ``equinox.filter_jit`` of the same function (XLA's
    default options): every array of the result equal bitwise. Control: another tolerance differs."""
    rng = np.random.RandomState(7)
    loss, V0, a0 = gradflow.LogisticTeacher(rng.randn(3)), 0.1 * rng.randn(3, 3), np.zeros(3)
    ts = np.geomspace(1e-2, 1e7, 7)  # a shape no other test compiles
    fast = gradflow.simulate(loss, V0, a0, t1=1e7, ts=ts)
    monkeypatch.setattr(_batch, "_fused_round", eqx.filter_jit(_batch._fused_round.__wrapped__))
    ref = gradflow.simulate(loss, V0, a0, t1=1e7, ts=ts)
    assert fast.status == ref.status == "ok" and fast.meta == ref.meta
    assert jax.tree.structure(fast) == jax.tree.structure(ref)
    for x, y in zip(jax.tree.leaves(fast), jax.tree.leaves(ref)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    other = gradflow.simulate(loss, V0, a0, t1=1e7, ts=ts, rtol=1e-6)
    with pytest.raises(AssertionError):
        np.testing.assert_array_equal(np.asarray(other.a), np.asarray(fast.a))


def _stiff_loss(w):
    """An ill-conditioned loss (curvatures 1e-2 … 1e2): ``auto`` turns implicit on it."""
    lam = jnp.asarray([1e-2, 1.0, 1e2, 3e1])
    return 0.5 * jnp.sum(lam * w ** 2) + 0.1 * jnp.sum(w ** 4)


_NEEDS_FAST_COMPILE = pytest.mark.skipif(  # from the installed jaxlib, not from the value under test
    _pinned.jaxlib.__version__ not in _pinned.TESTED_JAX, reason="no fast-compile options on an untested jaxlib (gradflow/_engine/_pinned.py)")


def test_no_compile_options_on_an_untested_jaxlib():
    """The XLA option is an XLA:CPU debug option: on a jaxlib not in ``TESTED_JAX`` there are
    none (XLA's defaults), on a tested one exactly the one option."""
    from gradflow._engine import _pinned

    assert _pinned.fast_compile_options("0.0.1") == ()
    assert _pinned.fast_compile_options(_pinned.TESTED_JAX[0]) == (("xla_cpu_use_fusion_emitters", False),)
    assert _fastjit.FAST_COMPILE == _pinned.fast_compile_options()


@_NEEDS_FAST_COMPILE
def test_throughput_bound_picks_the_compile_options(monkeypatch):
    """Solves of fewer than ``UNROLL_LANES`` lanes with fewer than ``UNROLL_STATE`` floats per lane
    compile with ``FAST_COMPILE``; the others (unrolled Dopri8, throughput-bound) with XLA's
    defaults: a batch made throughput-bound (``UNROLL_LANES`` lowered to 2) compiles its round with
    the default options only, while a single run of the same flow compiles with ``FAST_COMPILE``
    only (the control)."""
    tb = _batch._throughput_bound
    assert not tb((np.zeros((1, 3)), {"q": np.zeros((1,))}))
    assert not tb((np.zeros((_batch.UNROLL_LANES - 1, 3)),))
    assert tb((np.zeros((_batch.UNROLL_LANES, 3)),))
    assert tb((np.zeros((1, _batch.UNROLL_STATE)),))

    fused = _batch._fused_round
    sizes = lambda: (fused.jitted._cache_size(), fused.jitted_for(_fastjit.FAST_COMPILE)._cache_size())
    rng = np.random.RandomState(11)
    V0s, a0s = 0.1 * rng.randn(2, 2, 2), np.zeros((2, 2))
    losses = [gradflow.LogisticTeacher(rng.randn(2)) for _ in range(2)]
    ts = np.geomspace(1e-2, 1e5, 5)  # a shape no other test compiles
    before = sizes()
    gradflow.simulate(losses[0], V0s[0], a0s[0], t1=1e5, ts=ts)
    one = sizes()
    assert one[0] == before[0] and one[1] > before[1]  # a single run: FAST_COMPILE only
    monkeypatch.setattr(_batch, "UNROLL_LANES", 2)
    gradflow.simulate_batch(losses, V0s, a0s, t1=1e5, ts=ts)
    two = sizes()
    assert two[0] > one[0] and two[1] == one[1]  # a throughput-bound batch: XLA's defaults only


def _within_tolerance(a, b, rtol=1e-8, atol=1e-10) -> bool:
    """Float arrays within ``atol + rtol·|b|`` of each other (the solve's default tolerances; NaN
    where the other is NaN), the rest equal."""
    a, b = np.asarray(a), np.asarray(b)
    if not np.issubdtype(a.dtype, np.floating):
        return np.array_equal(a, b)
    with np.errstate(invalid="ignore"):
        return bool(np.all((a == b) | (np.isnan(a) & np.isnan(b)) | (np.abs(a - b) <= atol + rtol * np.abs(b))))


@_NEEDS_FAST_COMPILE
def test_fast_compile_options_compute_the_same_within_tolerance(monkeypatch):
    """Every engine program of a single stiff ``integrate`` (its Dopri8 and Rodas4 rounds, the
    stiffness detector) replayed with XLA's default options and with ``FAST_COMPILE``: the Dopri8
    round and the detector bitwise the same; the LU-based Rodas4 round differs in the last bits of
    its LU solves, which the step-size control carries into where the rest stop fires (measured:
    log time 8.04537476 against 8.04537477), within the solve's tolerances (rtol 1e-8, atol 1e-10).
    The run itself compiled with ``FAST_COMPILE`` only (one lane). Control: a start moved by 1e-7
    is told apart by the same comparison."""
    from gradflow._engine.solvers import spec

    seen, fns = [], [_batch._fused_round, _batch._stiffness_jit]
    for orig in fns:

        def record(*args, _orig=orig):
            seen.append((_orig, args))
            return _orig(*args)

        monkeypatch.setattr(_batch, orig.__name__, record)
    sizes = lambda: [(f.jitted._cache_size(), f.jitted_for(_fastjit.FAST_COMPILE)._cache_size()) for f in fns]
    before = sizes()
    sol = gradflow.integrate(_stiff_loss, jnp.asarray([1.0, -0.5, 0.3, 0.2]), t1=1e6)
    assert sol.status == "ok"
    for (d0, f0), (d1, f1) in zip(before, sizes()):
        assert d1 == d0 and f1 > f0  # the run compiled with FAST_COMPILE, never with the defaults
    names = [spec(args[5].solver).name if fn is fns[0] else "detector" for fn, args in seen]
    assert {"dopri8", "rodas4", "detector"} <= set(names)

    def replay(fn, args, fast: bool):
        arrays, static = _fastjit._partition(args)
        return fn.jitted_for(_fastjit.FAST_COMPILE if fast else ())(static, arrays)[0]

    for (fn, args), name in zip(seen, names):
        default, fast = replay(fn, args, False), replay(fn, args, True)
        assert len(default) == len(fast)
        if name == "rodas4":
            assert all(_within_tolerance(x, y) for x, y in zip(fast, default)), name
        else:
            assert all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(fast, default)), name
    # control: a start moved by 1e-7 is told apart by the same comparison
    fn, args = seen[names.index("rodas4")]
    state = args[3]
    moved = eqx.tree_at(lambda st: st.y_end, state, jax.tree.map(lambda x: x * (1 + 1e-7), state.y_end))
    out = replay(fn, args[:3] + (moved,) + args[4:], True)
    assert not all(_within_tolerance(x, y) for x, y in zip(out, replay(fn, args, False)))
