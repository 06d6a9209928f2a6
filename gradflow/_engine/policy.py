"""The phase policy of ``solver="auto"`` as one object: :class:`AutoPolicy`.

Its fields are every threshold and choice that decides which solver a lane of ``auto`` runs in
each round (:func:`gradflow._engine.stiff.phase_of_lanes`). It is immutable and keyword-only; a
run holds it in its :class:`gradflow._engine.settings.Settings`, where it is static: part of the
key of every compiled program (and of the programs stored beside the compilation cache), so two
policies never share a program. Variants are built, never patched:
``AutoPolicy(stiff_on=0.8)`` or ``DEFAULT_POLICY.replace(krylov_min_state=0)``.

The argument for each default value is in docs/solvers.md ("The auto policy") and in the field's
description below; docs/solvers.md, "Thresholds and their tests", lists the test of each.
"""

from __future__ import annotations

import dataclasses

from .._errors import bad_arg
from .solvers import SOLVER_TABLE, spec

__all__ = ["AutoPolicy", "DEFAULT_POLICY"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class AutoPolicy:
    """Which solver each unfinished lane of ``solver="auto"`` runs next (every field by keyword).

    A lane starts on ``explicit`` in rounds of ``explicit_round`` steps. After each unfinished
    round the engine measures ``h·ρ`` (the round's mean log-time step times the spectral radius of
    the log-time Jacobian at its end, by ``power_iterations`` Jacobian–vector products) and the
    asymmetry of the Jacobian's parameter block. An explicit lane with
    ``h·ρ > stiff_on·explicit_boundary`` (its steps are stability-limited) switches to the implicit
    phase; an implicit lane with ``h·ρ < stiff_off·explicit_boundary`` switches back (hysteresis:
    ``stiff_off < stiff_on``). The implicit solver: for a gradient flow (asymmetry at most
    ``symmetry_tol``) of at least ``eigen_min_state`` parameters per lane ``implicit``, replaced by
    ``krylov`` from ``krylov_min_state`` parameters on; otherwise ``fallback``. A gradient flow of
    at least ``stabilised_min_state`` parameters runs the stabilised explicit ``stabilised``
    instead while the stages its steps need stay within its stage cap (below). Implicit rounds run
    with ``blas_threads`` BLAS threads.

    **Fields** (defaults; units):

    - ``explicit`` (``"dopri8"``): the explicit solver, a non-implicit name of
      :data:`gradflow._engine.solvers.SOLVER_TABLE`.
    - ``explicit_boundary`` (``5.17``, dimensionless): where ``explicit``'s stability region meets
      the negative real axis (Dopri8: ``|R(−x)| = 1`` at ``x ≈ 5.167``, from diffrax's tableau;
      ``tests/test_guards.py`` recomputes it).
    - ``explicit_round`` (``64`` steps): steps per explicit round; stiffness is measured after each.
    - ``stiff_on`` (``0.5``) and ``stiff_off`` (``0.25``): the switching thresholds, fractions of
      ``explicit_boundary``; ``0 < stiff_off < stiff_on``.
    - ``power_iterations`` (``12``): Jacobian–vector products per estimate of ``ρ``.
    - ``implicit`` (``"rodas4-eigh"``): the implicit solver for gradient flows of at least
      ``eigen_min_state`` and fewer than ``krylov_min_state`` parameters (measured against
      ROS34PW2 and Rodas4 with LU on the conditioning draws at ``d = 20``:
      ``benchmarks/RESULTS.md``, "Stiff flows"; the choice's notes in ``benchmarks/STIFF_d20.md``).
    - ``krylov`` (``"rodas4-krylov"``): the implicit solver for gradient flows of at least
      ``krylov_min_state`` (``2000``) parameters: no ``n × n`` matrix (``benchmarks/SCALE.md``;
      the threshold keeps the paper's ``d = 20`` conditioning draws, 421 states, on the dense path
      their committed figures were computed with).
    - ``fallback`` (``"rodas4"``): the implicit solver for fields that are not gradient flows and
      for states under ``eigen_min_state`` (``128``) parameters, where a factorisation per step
      costs little.
    - ``stabilised`` (``"rkc"``): the stabilised explicit solver for stiff gradient flows of at
      least ``stabilised_min_state`` (``2000``) parameters, chosen over ``krylov`` while the stage
      number ``s = 1 + √(1 + 1.54·1.2·h·ρ)`` at the lane's last round (its mean step ``h``, ``ρ``
      at its end) is at most the stage cap ``√(rtol/(10 ε))`` (2,122 at ``rtol = 1e-8``;
      :func:`gradflow._engine.chebyshev.stage_cap`); past it, ``krylov``. The argument (docs/solvers.md,
      "The auto policy"): inside the cap a step of RKC costs ``s ∝ √(h·ρ)`` gradients and no
      Hessian–vector product, a Krylov Rodas4 step of the same ``h`` six conjugate-gradient solves
      of ``∝ √(h·ρ)`` Hessian–vector products each (about three gradients apiece); past the cap
      RKC's cost per step grows like ``h·ρ`` (substeps), the Krylov method's still like ``√(h·ρ)``.
      The same threshold sends a Krylov lane back: its steps are longer than RKC's (fourth order), so
      a Krylov round whose ``s`` is inside the cap is one RKC takes at no more stages.
    - ``stabilised_min_state`` (``2000``): the fewest parameters per lane for ``stabilised``
      (the Krylov threshold: below it the dense ``implicit`` solver's eigendecomposition per round
      is cheap, ``benchmarks/SCALE.md``).
    - ``symmetry_tol`` (``1e-8``): the largest relative asymmetry ``‖(P − Pᵀ)v‖/‖Pv‖`` of a
      gradient flow (round-off gives ``≲ 1e-13``; a generic non-gradient field order one).
    - ``blas_threads`` (``1``): BLAS/LAPACK threads while an implicit round runs
      (:func:`gradflow._engine.stiff.blas_threads`).

    **Raises:** :class:`gradflow.GradflowValueError` for a solver name not in the table or of the
    wrong kind (an implicit ``explicit`` or ``stabilised``, an explicit ``implicit``/``krylov``/``fallback``, a
    ``fallback`` for gradient flows only), thresholds outside ``0 < stiff_off < stiff_on``, a
    non-positive boundary, round, iteration count, thread count or tolerance, or negative state
    sizes."""

    explicit: str = "dopri8"
    explicit_boundary: float = 5.17
    explicit_round: int = 64
    stiff_on: float = 0.5
    stiff_off: float = 0.25
    power_iterations: int = 12
    implicit: str = "rodas4-eigh"
    krylov: str = "rodas4-krylov"
    krylov_min_state: int = 2000
    fallback: str = "rodas4"
    eigen_min_state: int = 128
    stabilised: str = "rkc"
    stabilised_min_state: int = 2000
    symmetry_tol: float = 1e-8
    blas_threads: int = 1

    def __post_init__(self):
        names = [s.name for s in SOLVER_TABLE]
        for field, implicit in (("explicit", False), ("implicit", True), ("krylov", True), ("fallback", True),
                                ("stabilised", False)):
            name = getattr(self, field)
            if name not in names or spec(name).implicit != implicit:
                kind = "an implicit" if implicit else "an explicit"
                ok = [n for n in names if spec(n).implicit == implicit]
                raise bad_arg(f"AutoPolicy {field}", name, f"{kind} solver, one of {ok}")
        if spec(self.fallback).gradient_only:
            raise bad_arg("AutoPolicy fallback", self.fallback,
                          "a solver for any field (not one for gradient flows only), e.g. 'rodas4'")
        for field in ("explicit_boundary", "symmetry_tol"):
            value = getattr(self, field)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise bad_arg(f"AutoPolicy {field}", value, "a positive number")
        if not (isinstance(self.stiff_on, (int, float)) and isinstance(self.stiff_off, (int, float))
                and 0 < self.stiff_off < self.stiff_on):
            raise bad_arg("AutoPolicy stiff_on/stiff_off", (self.stiff_on, self.stiff_off),
                          "two numbers with 0 < stiff_off < stiff_on (hysteresis)")
        for field, low in (("explicit_round", 1), ("power_iterations", 1), ("blas_threads", 1),
                           ("krylov_min_state", 0), ("eigen_min_state", 0), ("stabilised_min_state", 0)):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise bad_arg(f"AutoPolicy {field}", value, f"an integer ≥ {low}")

    def replace(self, **changes) -> AutoPolicy:
        """A copy with ``changes`` (keyword arguments, as the fields), checked as a new policy."""
        return dataclasses.replace(self, **changes)


DEFAULT_POLICY = AutoPolicy()
"""The policy of ``solver="auto"`` unless a run is given another."""
