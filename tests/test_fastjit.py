"""``gradflow._engine._fastjit.filter_jit`` (the engine's cheap-per-call ``equinox.filter_jit``):
the same partition into traced arrays and static values, the same results, bitwise, in the engine."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradflow
from gradflow._engine import _fastjit, batch as _batch


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
    """The fused first round through ``_fastjit`` and through ``equinox.filter_jit`` of the same
    function: every array of the result equal bitwise. Control: another tolerance differs."""
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
