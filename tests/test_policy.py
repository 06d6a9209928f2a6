"""The phase policy of ``solver="auto"`` as an object (:class:`gradflow.AutoPolicy`) and the front
ends' shared options (:class:`gradflow._engine.settings.SolveOptions`): a variant is built and
passed, never patched; it reaches the engine, keys the compiled programs (a default run after a
variant is the default run again), is recorded in the metadata, and bad values are refused.
The default values' arguments and both-sides tests: ``tests/test_guards.py``."""

from __future__ import annotations

import dataclasses
import inspect

import jax
import numpy as np
import pytest

import gradflow
from gradflow._engine import _export
from gradflow._engine.policy import DEFAULT_POLICY, AutoPolicy
from gradflow._engine.settings import DEFAULTS, SolveOptions

QUAD = lambda p: 0.5 * (p["w"] - 1.0) ** 2
"""A gradient flow with a finite minimiser: stiff in log time once ``w`` has converged (the
log-time Jacobian is ``−(1 + t)``), so Dopri8 alone needs ``~t1/5.17`` steps to ``t1``."""


def _run(policy=None, max_steps=3000):
    return gradflow.integrate(QUAD, {"w": 0.0}, t1=1e6, ts=np.array([0.0, 1.0, 1e6]), rest_stop=False,
                              max_steps=max_steps, policy=policy)


def test_a_policy_variant_reaches_the_engine_and_keys_its_programs():
    """With the default policy the lane switches to the implicit phase and reaches ``t1 = 1e6`` in
    a few hundred steps; a policy whose switch-on threshold lies beyond any ``h·ρ`` Dopri8 can
    reach (``stiff_on·B = 5.17e6``) keeps it explicit, where the stability limit
    (``h ≤ 5.17/(1 + t)`` in log time) needs ``~2e5`` steps: it spends its 3000 and ends as
    ``max_steps`` near ``t ≈ 3000·5.17``. A default run after the variant is bit for bit the first
    default run (the variant's programs are keyed by its policy, not shared)."""
    first = _run()
    explicit = _run(AutoPolicy(stiff_on=1e6, stiff_off=0.25))
    again = _run()
    assert first.status == "ok" and int(first.num_steps) < 1000
    assert float(first.params["w"][-1]) == pytest.approx(1.0, abs=1e-9)
    assert explicit.status == "max_steps" and int(explicit.num_steps) == 3000
    assert 1e3 < float(explicit.t_end) < 3000 * 5.17 * 2
    assert int(again.num_steps) == int(first.num_steps)
    np.testing.assert_array_equal(np.asarray(again.params["w"]), np.asarray(first.params["w"]))
    # recorded: a run under another policy says so, a default one has no policy entry
    assert "policy" not in first.metadata
    assert explicit.metadata["policy"] == "AutoPolicy(stiff_on=1000000.0)"


def test_simulate_takes_the_policy_too():
    """``simulate`` passes ``policy`` to the engine as ``integrate`` does. The square-loss flow of a
    2 × 2 draw comes to rest (the rest stop) under both policies at the same state, within the
    tolerance; with the default it switches to the implicit phase once stiff, with a policy that
    never switches Dopri8 goes on at its stability limit and needs more steps to get there."""
    rng = np.random.RandomState(0)
    loss = gradflow.SquareLoss(np.array([1.0, -0.5]), design=np.eye(2), scale=1.0)
    kw = dict(t1=1e6, ts=np.array([0.0, 1e6]))
    V0, a0 = 0.1 * rng.randn(2, 2), np.zeros(2)
    default = gradflow.simulate(loss, V0, a0, **kw)
    never = gradflow.simulate(loss, V0, a0, policy=AutoPolicy(stiff_on=1e6), **kw)
    assert default.status == never.status == "ok"
    assert int(never.num_steps) > int(default.num_steps) + 20
    np.testing.assert_allclose(np.asarray(never.V[-1]), np.asarray(default.V[-1]), atol=1e-6)
    assert never.metadata["policy"] == "AutoPolicy(stiff_on=1000000.0)" and "policy" not in default.metadata


def test_the_policy_is_static_and_in_the_program_key():
    """The policy is a static field of the settings (not a traced leaf: no recompile on a new
    ``rtol``, a new program for a new policy), hashable, and its fields are in the text key of
    stored programs (two policies, two keys)."""
    s0, _ = SolveOptions().settings(1.0)
    s1, _ = SolveOptions(policy=AutoPolicy(explicit_round=32)).settings(1.0)
    leaves0, tree0 = jax.tree.flatten(s0)
    leaves1, tree1 = jax.tree.flatten(s1)
    assert len(leaves0) == len(leaves1) == 5  # taus, t1, rtol, atol, tau0
    assert tree0 != tree1 and hash(s0.policy) != hash(s1.policy)
    d = _export._Describer()
    text0, text1 = d.treedef(tree0), d.treedef(tree1)
    assert "explicit_round=int:64" in text0 and "explicit_round=int:32" in text1


def test_the_source_hash_ignores_documentation_only():
    """Stored programs are keyed by gradflow's code without its docstrings and comments: editing
    documentation keeps the key; changing a constant or an operator changes it (controls)."""
    a = 'def f(x):\n    """Doc."""\n    return x + 1  # note\nX = 1\n"""About X."""\n'
    b = 'def f(x):\n    """Other doc, longer."""\n\n    return x + 1\nX = 1\n'
    assert _export.code_hash(a) == _export.code_hash(b)
    assert _export.code_hash(a) != _export.code_hash(a.replace("x + 1", "x + 2"))
    assert _export.code_hash(a) != _export.code_hash(a.replace("X = 1", "X = 2"))
    assert _export.code_hash(a) != _export.code_hash(a.replace("x + 1", "x - 1"))


def test_each_shared_default_is_written_once():
    """The four front ends take ``ts``, ``rtol``, ``atol``, ``solver``, ``max_steps`` and ``policy``
    defaults from :data:`DEFAULTS` (and ``integrate`` also ``rest_stop``): the same objects, so a
    default changed there changes every front end."""
    fronts = (gradflow.integrate, gradflow.integrate_batch, gradflow.simulate, gradflow.simulate_batch)
    for fn in fronts:
        params = inspect.signature(fn).parameters
        for name in ("ts", "rtol", "atol", "solver", "max_steps", "policy"):
            assert params[name].default is getattr(DEFAULTS, name), (fn.__name__, name)
            assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, (fn.__name__, name)
    for fn in fronts[:2]:
        assert inspect.signature(fn).parameters["rest_stop"].default is DEFAULTS.rest_stop
    assert DEFAULTS.atol is None and DEFAULTS.rtol == 1e-8  # atol = rtol/100 everywhere
    s, _ = SolveOptions(rtol=1e-6).settings(1.0)
    assert float(s.atol) == pytest.approx(1e-8)


def test_replace_builds_a_checked_variant():
    p = DEFAULT_POLICY.replace(krylov_min_state=0)
    assert p.krylov_min_state == 0 and DEFAULT_POLICY.krylov_min_state == 2000  # the default unchanged
    with pytest.raises(gradflow.GradflowValueError, match="stiff_off < stiff_on"):
        DEFAULT_POLICY.replace(stiff_off=0.6)
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_POLICY.stiff_on = 0.7  # immutable


@pytest.mark.bad_input
@pytest.mark.parametrize("kw, match", [
    (dict(explicit="rodas4"), r"^AutoPolicy explicit: got 'rodas4'; expected an explicit solver"),
    (dict(implicit="dopri8"), r"^AutoPolicy implicit: got 'dopri8'; expected an implicit solver"),
    (dict(krylov="cg"), r"^AutoPolicy krylov: got 'cg'; expected an implicit solver"),
    (dict(fallback="rodas4-eigh"), r"^AutoPolicy fallback: got 'rodas4-eigh'; expected a solver for any field"),
    (dict(stiff_on=0.1), r"^AutoPolicy stiff_on/stiff_off: got \(0.1, 0.25\); expected two numbers with 0 < stiff_off"),
    (dict(stiff_off=-1.0), r"^AutoPolicy stiff_on/stiff_off"),
    (dict(explicit_boundary=0.0), r"^AutoPolicy explicit_boundary: got 0.0; expected a positive number"),
    (dict(symmetry_tol=float("nan")), r"^AutoPolicy symmetry_tol: got nan; expected a positive number"),
    (dict(explicit_round=0), r"^AutoPolicy explicit_round: got 0; expected an integer ≥ 1"),
    (dict(power_iterations=2.5), r"^AutoPolicy power_iterations: got 2.5; expected an integer ≥ 1"),
    (dict(krylov_min_state=-1), r"^AutoPolicy krylov_min_state: got -1; expected an integer ≥ 0"),
    (dict(stabilised="rodas4-krylov"), r"^AutoPolicy stabilised: got 'rodas4-krylov'; expected an explicit solver"),
    (dict(stabilised="rock2"), r"^AutoPolicy stabilised: got 'rock2'; expected an explicit solver"),
    (dict(stabilised_min_state=-1), r"^AutoPolicy stabilised_min_state: got -1; expected an integer ≥ 0"),
    (dict(blas_threads=True), r"^AutoPolicy blas_threads: got True; expected an integer ≥ 1"),
])
def test_bad_policies_are_refused(kw, match):
    with pytest.raises(gradflow.GradflowValueError, match=match):
        AutoPolicy(**kw)


@pytest.mark.bad_input
def test_a_policy_must_be_an_auto_policy():
    with pytest.raises(gradflow.GradflowValueError, match=r"^policy: got \{'stiff_on': 0.7\}; expected a gradflow.AutoPolicy"):
        gradflow.simulate(gradflow.LogisticTeacher(np.ones(2)), np.eye(2), np.zeros(2), t1=1.0, policy={"stiff_on": 0.7})
