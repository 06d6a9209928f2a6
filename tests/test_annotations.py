"""The test run checks gradflow's annotations at run time (jaxtyping + beartype, switched on by
``--jaxtyping-packages`` in pyproject.toml's pytest ``addopts``), in the engine and in the
subpackages ``gradflow.theory`` / ``gradflow.sims`` alike (a source checkout maps them from the
folders ``theory/`` and ``sims/``, see ``gradflow/_layout.py``)."""

import ast
import sys

import jax.numpy as jnp
import numpy as np
import pytest
from jaxtyping import TypeCheckError

import gradflow
import gradflow.attention.maps
import gradflow.sims
import gradflow.sims.sec4.kernels
import gradflow.theory
import gradflow.theory.registry


def test_every_gradflow_module_is_instrumented():
    """The import hook adds ``import jaxtyping`` to each module it instruments that holds more than
    a docstring (gradflow's modules only import names from jaxtyping, never the module itself).
    Control: a module outside the instrumented packages (the tests' own reference) is left as written."""
    from tests import reference

    def code(m):  # holds more than a docstring
        with open(m.__file__, encoding="utf-8") as f:
            body = ast.parse(f.read()).body
        return len(body) > (1 if body and isinstance(body[0], ast.Expr) else 0)

    mods = {name: m for name, m in sys.modules.items()
            if (name == "gradflow" or name.startswith("gradflow.")) and getattr(m, "__file__", None) and code(m)}
    for name in ("gradflow", "gradflow.attention.maps", "gradflow.theory", "gradflow.theory.registry",
                 "gradflow.sims", "gradflow.sims.sec4.kernels"):
        assert name in mods
    missing = [name for name, m in mods.items() if "jaxtyping" not in vars(m)]
    assert not missing, f"not instrumented: {missing}"
    assert "jaxtyping" not in vars(reference)


def test_engine_shape_mismatch_is_caught_and_matching_shapes_pass():
    """``softmax_vjp(s, g)`` annotates both as ``(..., n)``: a ``g`` of another ``n`` is refused
    by the checker (unchecked, broadcasting would fail later or not at all: (3,) against (1,)).
    Control: matching shapes pass and give the closed form ``s ⊙ (g − ⟨s, g⟩)``."""
    s = jnp.array([0.5, 0.3, 0.2])
    with pytest.raises(TypeCheckError, match="softmax_vjp"):
        gradflow.attention.maps.softmax_vjp(s, jnp.array([1.0]))
    with pytest.raises(TypeCheckError):  # an integer array where a float one is annotated
        gradflow.attention.maps.softmax_vjp(s, jnp.array([1, 2, 3]))
    g = jnp.array([1.0, -2.0, 0.5])
    want = np.asarray(s) * (np.asarray(g) - np.dot(s, g))
    np.testing.assert_allclose(np.asarray(gradflow.attention.maps.softmax_vjp(s, g)), want, rtol=1e-15)


def test_sims_shape_mismatch_is_caught_and_matching_shapes_pass():
    """``kernel_weights(q, k, …)`` annotates ``q (Tq, dh)``, ``k (Tk, dh)``: keys of another head
    size are refused. Control: matching sizes give rows that sum to 1 (softmax)."""
    q = jnp.ones((2, 3))
    with pytest.raises(TypeCheckError, match="kernel_weights"):
        gradflow.sims.sec4.kernels.kernel_weights(q, jnp.ones((4, 5)), "softmax", True)
    w = gradflow.sims.sec4.kernels.kernel_weights(q, jnp.ones((4, 3)), "softmax", True)
    np.testing.assert_allclose(np.asarray(w).sum(axis=1), 1.0, rtol=1e-15)


def test_theory_argument_type_is_caught_and_a_good_one_passes():
    """``get_check(check_id: str)``: an int is refused by the checker before the registry's own
    error (a GradflowValueError, which a user without the checker gets). Control: a registered id
    gives its runner."""
    with pytest.raises(TypeCheckError, match="get_check"):
        gradflow.theory.registry.get_check(3)
    assert gradflow.theory.get_check("thm3.3b") is gradflow.theory.CHECKS["thm3.3b"]


@pytest.mark.bad_input
def test_bad_input_marker_switches_the_checker_off():
    """Under ``bad_input`` (tests/conftest.py) a user's view: the library's own error, not the checker's."""
    with pytest.raises(gradflow.GradflowValueError, match="check id"):
        gradflow.theory.registry.get_check(3)
