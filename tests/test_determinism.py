"""Determinism: the same inputs and seed give bitwise-identical arrays on rerun."""

import numpy as np
import pytest

import gradflow
from gradflow import theory
from gradflow.theory import experiments as _sweeps
from tests.test_simulate import fig2_problem

FIELDS = ("t", "V", "a", "s", "loss", "Gamma", "entropy", "u", "valid", "num_steps", "status_code", "t_end")


def _same(x, y):
    for name in FIELDS:
        np.testing.assert_array_equal(np.asarray(getattr(x, name)), np.asarray(getattr(y, name)), err_msg=name)


def test_simulate_batch_and_descend_rerun_bitwise():
    V0, a0, bs = fig2_problem()
    loss = gradflow.LogisticTeacher(bs)
    _same(gradflow.simulate(loss, V0, a0, t1=1e6), gradflow.simulate(loss, V0.copy(), a0.copy(), t1=1e6))
    rng = np.random.RandomState(7)
    V0s = 0.1 * rng.randn(2, 8, 8)
    _same(*(gradflow.simulate_batch(loss, V0s, np.zeros((2, 8)), t1=1e6) for _ in range(2)))
    _same(*(gradflow.descend(loss, V0, a0, lr=0.1, steps=500) for _ in range(2)))
    # control: the comparison sees a change in the last bit of one input
    with pytest.raises(AssertionError):
        _same(gradflow.simulate(loss, V0, a0, t1=1e6), gradflow.simulate(loss, np.nextafter(V0, 1.0), a0, t1=1e6))


@pytest.mark.slow  # ~10 s of fresh sweeps (new batch shapes compile)
def test_theory_check_numbers_rerun_bitwise():
    """A check recomputed from scratch (its sweep caches cleared) reports identical numbers."""
    runs = []
    for _ in range(2):
        for name in dir(_sweeps):
            fn = getattr(_sweeps, name)
            if hasattr(fn, "cache_clear"):
                fn.cache_clear()
        runs.append(theory.run_check("thm3.3b", trials=2, seed=11).to_dict())
    assert runs[0] == runs[1]
    assert runs[0]["trials"] == 2 and isinstance(runs[0]["worst_margin"], float)
