"""The engine's tuning knobs and round observers (``gradflow.internal.engine_knobs``,
``observe_rounds``), through which the benchmarks change how a run executes instead of assigning
the engine's private attributes: set inside the block, restored after it (also after an error),
checked; an observer sees every round and changes nothing."""

from __future__ import annotations

import diffrax
import numpy as np
import pytest

import gradflow
from gradflow.internal import KNOBS, engine_knob, engine_knobs, observe_rounds, solver_entry
from gradflow._engine import solvers
from gradflow._engine.erk import UnrolledDopri8

QUAD = lambda p: 0.5 * (p["w"] - 1.0) ** 2


def test_knobs_are_set_in_the_block_and_restored_after_it():
    before = {name: engine_knob(name) for name in KNOBS}
    with engine_knobs(round_steps=64, lanes_per_solve=8, unrolled_dopri8=False, fast_compile=()):
        assert engine_knob("round_steps") == 64 and engine_knob("lanes_per_solve") == 8
        assert engine_knob("fast_compile") == ()
        assert type(solvers.make_solver(solvers.code_of("dopri8"), batched=True)) is diffrax.Dopri8
    assert {name: engine_knob(name) for name in KNOBS} == before
    assert type(solvers.make_solver(solvers.code_of("dopri8"), batched=True)) is UnrolledDopri8  # control
    with pytest.raises(RuntimeError), engine_knobs(round_steps=8):
        raise RuntimeError("inside")
    assert engine_knob("round_steps") == before["round_steps"]


@pytest.mark.bad_input
@pytest.mark.parametrize("kw, match", [
    (dict(round_step=64), r"^engine knob: got 'round_step'; expected one of"),
    (dict(round_steps=-1), r"^round_steps: got -1; expected an integer ≥ 0"),
    (dict(unrolled_dopri8=1), r"^unrolled_dopri8: got 1; expected True or False"),
    (dict(fast_compile=None), r"^fast_compile: got None; expected a tuple"),
])
def test_bad_knobs_are_refused(kw, match):
    with pytest.raises(gradflow.GradflowValueError, match=match):
        with engine_knobs(**kw):
            pass


def test_an_observer_sees_every_round_and_changes_nothing():
    """A flow at rest long before ``t1 = 1e6`` with the rest stop off takes a first explicit round
    and then implicit ones: the observer sees each (its solver and length), the result is the
    unobserved one bit for bit, and with rounds of at most 64 steps (the ``round_steps`` knob) the
    same flow takes more rounds and agrees within the tolerance."""
    run = lambda: gradflow.integrate(QUAD, {"w": 0.0}, t1=1e6, ts=np.array([0.0, 1.0, 1e6]), rest_stop=False)
    plain = run()
    seen = []

    def observer(kind, rnd, call):
        seen.append((kind, solver_entry(rnd.solver).name, int(rnd.steps)))
        return call()

    with observe_rounds(observer):
        observed = run()
    assert len(seen) >= 2 and seen[0][1] == "dopri8" and any(name != "dopri8" for _, name, _ in seen), seen
    assert int(observed.num_steps) == int(plain.num_steps)
    np.testing.assert_array_equal(np.asarray(observed.params["w"]), np.asarray(plain.params["w"]))
    short = []
    with engine_knobs(round_steps=8), observe_rounds(lambda kind, rnd, call: short.append(int(rnd.steps)) or call()):
        capped = run()
    assert max(short) <= 8 and len(short) > len(seen)
    np.testing.assert_allclose(np.asarray(capped.params["w"]), np.asarray(plain.params["w"]), atol=1e-7)
