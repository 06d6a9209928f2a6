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
