"""Tests written for the survivors of the random mutation run (``tests/mutate_random.py``; the
report is in ``tests/MUTATION_RESULTS.md``). Each compares against something independent of the
mutated code: the documented defaults, a hand calculation, a closed form."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import pytest


def test_sweep_spec_defaults_are_the_cli_and_documented_defaults():
    """``SweepSpec()`` (the Python API) has the defaults ``gradflow sweep`` documents and its parser
    uses (docs/data.md, docs/getting-started.md: seeds 0:64, chunk 64, lanes 16, logistic, n 8,
    softmax, t1 1e12, rtol 1e-8, init scale 0.1, 50 points, solver auto, 16384 steps)."""
    from gradflow.app.cli import _parser
    from gradflow.attention.sweep import SweepSpec

    spec = SweepSpec()
    documented = dict(seed_start=0, seed_stop=64, chunk=64, lanes=16, loss=("logistic",), n=(8,),
                      normalization=("softmax",), t1=(1e12,), rtol=(1e-8,), init_scale=(0.1,), points=50,
                      solver="auto", max_steps=16384)
    assert {k: getattr(spec, k) for k in documented} == documented
    args = _parser().parse_args(["sweep", "out.zarr"])
    cli = dict(seed_start=args.seeds[0], seed_stop=args.seeds[1], chunk=args.chunk, lanes=args.lanes, loss=args.loss,
               n=args.n, normalization=args.normalization, t1=args.t1, rtol=args.rtol, init_scale=args.init_scale,
               points=args.points, solver=args.solver, max_steps=args.max_steps)
    assert cli == documented
    assert {f.name for f in dataclasses.fields(SweepSpec) if f.init} == set(documented)


@pytest.mark.parametrize("h_rho, cap", [(200.0, 10), (1e4, 12), (5e5, 2122), (3e7, 2122), (50.0, 100)])
def test_rkc_substeps_each_within_the_stability_interval_and_no_stage_more(h_rho, cap):
    """``chebyshev.stages_for`` with more than one substep (a stage cap the step outgrows): each of
    the ``k`` substeps of ``h·ρ/k`` lies inside the stability interval of its ``s`` stages, the
    damped RKC's ``β(s) ≈ (s² − 1)/1.54``, i.e. ``1.54·h·ρ/k ≤ s² − 1``, with ``s`` the fewest
    stages that do (``(s − 1)² − 1 < 1.54·h·ρ/k``) and ``k`` the fewest substeps within the cap
    (``1.54·h·ρ/(k − 1) > (cap − 1)² − 1``). Hand case (cap 10, h·ρ = 200): 308/80 → k = 4,
    77 → s = 9."""
    from gradflow._engine import chebyshev

    k, s = map(int, chebyshev.stages_for(h_rho, jnp.asarray(cap, jnp.int32)))
    if (h_rho, cap) == (200.0, 10):
        assert (k, s) == (4, 9)
    x = 1.54 * h_rho / k
    room = (cap - 1) ** 2 - 1
    assert x <= room and (k == 1 or 1.54 * h_rho / (k - 1) > room)
    assert 2 <= s <= cap
    assert x <= s * s - 1
    assert s == 2 or (s - 1) ** 2 - 1 <= x


def test_power_iteration_keeps_its_iterate_where_the_product_vanishes():
    """``chebyshev.spectral_radius`` returns the iterate ``v_k`` itself as the next warm start where
    ``J v_k = 0`` (its docstring), not the zero vector (from which no later step could find ``ρ``):
    on ``J = diag(0, 0, 3)`` from ``v0 = (3, 4, 0)/…`` (in the kernel), ``ρ = 0`` and the returned
    iterate is ``(0.6, 0.8, 0)``; a warm start from it on ``J = diag(1, 2, 3)`` then finds ``ρ``."""
    from gradflow._engine import chebyshev

    d0 = jnp.asarray([0.0, 0.0, 3.0])
    rho, v, _ = chebyshev.spectral_radius(lambda x: d0 * x, jnp.asarray([3.0, 4.0, 0.0]), 10)
    assert float(rho) == 0.0
    assert jnp.allclose(v, jnp.asarray([0.6, 0.8, 0.0]), rtol=0, atol=1e-15)
    d1 = jnp.asarray([1.0, 2.0, 3.0])
    rho1, _, _ = chebyshev.spectral_radius(lambda x: d1 * x, v, 200, tol=1e-12)
    assert float(rho1) > 1.5


def test_default_device_named_by_platform_is_that_platforms_first_device():
    """``jax.default_device("cpu")`` (a platform name, not a device) makes the engine's default device
    the platform's first local device, as JAX's own placement does (``batch._default_device``)."""
    import jax

    from gradflow._engine import batch

    with jax.default_device("cpu"):
        placed = jax.numpy.zeros(2).devices()
        assert batch._default_device() == jax.local_devices(backend="cpu")[0]
    assert placed == {jax.local_devices(backend="cpu")[0]}
    assert batch._default_device() == jax.local_devices()[0]


def test_rodas4_eigh_refines_each_stage_with_the_documented_three_sweeps():
    """The solver guide documents three Richardson sweeps per stage for ``rodas4-eigh`` (and the
    implicit phase of ``auto``): "three sweeps keep Rodas4's order 4 with an out-of-date"
    eigendecomposition. The table's solver runs exactly that many (``tests/test_stiff.py`` checks
    only that three or more keep the order; a fourth would cost a third more products per stage)."""
    from pathlib import Path

    from gradflow._engine import solvers

    guide = " ".join((Path(__file__).resolve().parents[1] / "docs" / "solvers.md").read_text().split()).lower()
    assert "three sweeps keep rodas4's order 4" in guide
    solver = solvers.make_solver(solvers.code_of("rodas4-eigh"), 1e-8, 1e-10)
    assert solver.linear.iterations == 3


def test_every_engine_program_of_a_single_run_compiles_with_the_fast_options():
    """A single run is compile-bound, so every engine program it runs is compiled with
    ``FAST_COMPILE`` (``_fastjit``'s rule, docs/solvers.md: a solve of fewer than ``UNROLL_LANES``
    lanes of fewer than ``UNROLL_STATE`` floats), never with XLA's default options; also the
    stiffness estimate and the stall probe, which only a stiff or a stalling flow runs. Here the
    gradient flow of ``L = −Σθ³/3`` (``θ' = θ²``, blow-up at ``t = 1/θ₀``) stalls at its wall, which
    runs the stall probe. (Kills the random mutant that inverted the stall probe's predicate.)"""
    import numpy as np

    import gradflow
    from gradflow._engine import _fastjit, _pinned
    from gradflow._engine import batch as _batch

    if _pinned.jaxlib.__version__ not in _pinned.TESTED_JAX:  # the installed jaxlib decides, not the value under test
        pytest.skip("no fast-compile options on an untested jaxlib (gradflow/_engine/_pinned.py)")
    programs = {"stall probe": _batch._stall_probe_jit, "stiffness": _batch._stiffness_jit}
    sizes = lambda: {k: (p.jitted._cache_size(), p.jitted_for(_fastjit.FAST_COMPILE)._cache_size())
                     for k, p in programs.items()}
    before = sizes()
    sol = gradflow.integrate(lambda th: -jnp.sum(th**3) / 3, jnp.asarray([1.0, 0.5, 0.25]), t1=10.0,
                             ts=np.asarray([0.0, 0.5, 10.0]))
    assert sol.status in ("stalled", "nonfinite") and 0.9 < float(sol.t_end) < 1.0 + 1e-6, (sol.status, sol.t_end)
    after = sizes()
    assert after["stall probe"][1] > before["stall probe"][1], (before, after)  # the probe ran, fast options
    for k in programs:
        assert after[k][0] == before[k][0], (k, before, after)  # never XLA's default options


def test_unrolled_dopri8_evaluates_the_field_as_often_as_diffrax_dopri8():
    """Dopri8 (14 stages) is "first same as last": after the first step each step reuses the field
    at the last stage and evaluates 13 new ones. ``UnrolledDopri8`` (gradflow's unrolled stages) must evaluate
    the field exactly as often as ``diffrax.Dopri8`` (the independent reference) over the same
    solve, with the same steps: counted at run time by a host callback in the field. (Kills the
    random mutant that marked every step as a first step: same results, one more gradient per
    step.)"""
    import diffrax
    import jax
    import numpy as np

    from gradflow._engine.erk import UnrolledDopri8

    calls = []

    def field(t, y, args):
        jax.debug.callback(lambda: calls.append(1))
        return -args * y + jnp.sin(t)

    def count(solver):
        calls.clear()
        sol = jax.jit(lambda y0: diffrax.diffeqsolve(
            diffrax.ODETerm(field), solver, 0.0, 5.0, None, y0, args=jnp.asarray([0.5, 3.0]),
            stepsize_controller=diffrax.PIDController(rtol=1e-9, atol=1e-11)))(jnp.ones(2))
        jax.effects_barrier()
        return len(calls), int(sol.stats["num_steps"]), int(sol.stats["num_rejected_steps"])

    ours, theirs = count(UnrolledDopri8()), count(diffrax.Dopri8())
    assert ours == theirs, (ours, theirs)
    n_calls, steps, _ = theirs  # diffrax's num_steps counts the rejected steps too
    # 13 per step and a few for the first step and the initial step size; without the reuse, 14 per step
    assert steps > 5 and 13 * steps <= n_calls <= 13 * steps + 3 < 14 * steps, theirs


@pytest.mark.parametrize("name", ["Settings", "Round", "SolveOptions", "AutoPolicy"])
def test_engine_settings_objects_are_immutable_and_keyword_only(name):
    """The engine's settings objects and the public ``AutoPolicy`` are immutable and keyword-only
    (``Settings``, ``AutoPolicy``: "every field by keyword"; ``SolveOptions``: "Keyword-only and
    immutable"; ``AutoPolicy`` is part of the key of compiled programs, so a policy changed after
    a program was compiled for it would be a silent error; ``Round`` is built the same way): a
    field cannot be assigned (``FrozenInstanceError``), a positional argument is a ``TypeError``, and
    every field is a keyword field. (Kills the random mutant that dropped ``frozen`` from
    ``Settings``.)"""
    import gradflow
    from gradflow._engine import settings

    cls = gradflow.AutoPolicy if name == "AutoPolicy" else getattr(settings, name)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    assert fields and all(f.kw_only for f in fields), [f.name for f in fields if not f.kw_only]
    with pytest.raises(TypeError, match="positional"):
        cls(*(None for _ in fields))
    obj = object.__new__(cls)  # no validation: only the class's own machinery is tested
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(obj, fields[0].name, None)


def test_a_tested_jax_turns_on_the_serialised_solves_and_the_fast_compile_options():
    """On a jax and jaxlib listed in ``TESTED_JAX`` (the versions they were tested on), the
    serialised solves (``EXPORT_ACTIVE``) and the fast-compile options (``FAST_COMPILE``) are on;
    the tests of both skip on an untested jax only, decided from the installed versions. (Kills the
    random mutant that turned the jaxlib test of ``EXPORT_ACTIVE`` around: every export test
    skipped.)"""
    import jax
    import jaxlib

    from gradflow._engine import _fastjit, _pinned

    if jax.__version__ not in _pinned.TESTED_JAX or jaxlib.__version__ not in _pinned.TESTED_JAX:
        pytest.skip(f"jax {jax.__version__} / jaxlib {jaxlib.__version__} untested")
    assert _pinned.EXPORT_ACTIVE
    assert _fastjit.FAST_COMPILE == (("xla_cpu_use_fusion_emitters", False),)
