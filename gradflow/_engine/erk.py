"""Explicit Runge–Kutta steps with their stages unrolled (a faster step for batched solves).

diffrax runs the stages of an explicit Runge–Kutta step in a loop over a stage buffer
``ks`` of shape ``(stages, *y)`` and forms each stage's input as a matrix–vector product of a
tableau row with the whole buffer. Under ``vmap`` the lane axis of that buffer comes first, so
every stage transposes the whole buffer (``(lanes, stages, *y) → (stages, lanes·|y|)``) before
the product: for the Dopri8 solves of :func:`gradflow.simulate_batch` (13 stages, tens of
floats per lane) these copies, not the field, took most of a step.

:class:`UnrolledDopri8` is diffrax's :class:`diffrax.Dopri8` (same tableau, error estimate,
FSAL state, dense output) with the stage loop written out in Python: each stage input is a
sum of the earlier stages with their (non-zero) tableau coefficients, which XLA fuses into one
elementwise kernel. The arithmetic is that of ``Dopri8`` up to the order of summation
(round-off), so steps and results agree with ``Dopri8`` to round-off
(``tests/test_erk.py``). Only ODE terms (``diffrax.ODETerm``, as the engine uses) are
supported; anything else falls back to diffrax's own step.
"""

from __future__ import annotations

from typing import ClassVar

import diffrax
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["UnrolledDopri8"]


def _combination(y0, coeffs, ks):
    """``y0 + Σ_j coeffs[j]·ks[j]`` over the non-zero coefficients (pytrees like ``y0``)."""
    terms = [(float(c), k) for c, k in zip(coeffs, ks) if c != 0]

    def leaf(y, *kl):
        out = y
        for (c, _), k in zip(terms, kl):
            out = out + jnp.asarray(c, y.dtype) * k
        return out

    return jax.tree.map(leaf, y0, *[k for _, k in terms])


def _dot(coeffs, ks):
    """``Σ_j coeffs[j]·ks[j]`` over the non-zero coefficients."""
    terms = [(float(c), k) for c, k in zip(coeffs, ks) if c != 0]

    def leaf(*kl):
        out = None
        for (c, _), k in zip(terms, kl):
            term = jnp.asarray(c, k.dtype) * k
            out = term if out is None else out + term
        return out

    return jax.tree.map(leaf, *[k for _, k in terms])


def _is_plain_ode(terms) -> bool:
    """Whether ``terms`` is an ODE term (diffrax wraps the user's term in its private ``WrapTerm``)."""
    inner = getattr(terms, "term", terms)
    return type(inner) is diffrax.ODETerm


_DOPRI8_EVAL = np.asarray(diffrax.Dopri8.interpolation_cls.eval_coeffs, np.float64)


class _UnrolledDopri8Interpolation(diffrax.AbstractLocalInterpolation):
    """Dopri8's 7th-order dense output (diffrax's ``_Dopri8Interpolation``: the same
    polynomials ``eval_coeffs``) with the stages kept as a tuple and the sum written out over
    the stages with a non-zero polynomial (under ``vmap`` the product of a per-lane coefficient
    vector with a stacked stage buffer is a batched matrix product, with a transpose per save
    point)."""

    t0: object
    t1: object
    y0: object
    k: tuple  # the 14 stages ``k_j = h·f_j``, each shaped like ``y0``

    def __init__(self, *, t0, t1, y0, y1, k):
        del y1  # the interface of diffrax's interpolations
        self.t0, self.t1, self.y0, self.k = t0, t1, y0, k

    def evaluate(self, t0, t1=None, left: bool = True):
        del left
        if t1 is not None:
            return jax.tree.map(lambda a, b: a - b, self.evaluate(t1), self.evaluate(t0))
        same = self.t0 == self.t1  # as diffrax's linear_rescale: 0 on an empty interval
        t = jnp.where(same, 0, t0 - self.t0) / jnp.where(same, 1, self.t1 - self.t0)
        coeffs = []
        for row in _DOPRI8_EVAL:
            if not np.any(row):
                coeffs.append(0.0)
                continue
            acc = jnp.asarray(row[0], t.dtype)
            for c in row[1:]:
                acc = acc * t + c  # Horner, as jnp.polyval
            coeffs.append(acc * t)
        return _weighted(self.y0, coeffs, self.k)


def _weighted(y0, coeffs, ks):
    """``y0 + Σ_j coeffs[j]·ks[j]`` with traced scalar ``coeffs`` (``0.0`` entries skipped)."""
    terms = [(c, k) for c, k in zip(coeffs, ks) if not (isinstance(c, float) and c == 0.0)]

    def leaf(y, *kl):
        out = y
        for (c, _), k in zip(terms, kl):
            out = out + c.astype(y.dtype) * k
        return out

    return jax.tree.map(leaf, y0, *[k for _, k in terms])


class UnrolledDopri8(diffrax.Dopri8):
    """:class:`diffrax.Dopri8` with the stage loop unrolled (see the module docstring).

    ``benchmarks/COSTS.md``, "Batch throughput" (1024 lanes of Fig. 2's problem), times it
    against ``diffrax.Dopri8``'s stage loop in one run: faster per batched solve, a longer first
    compile (13 traced field evaluations instead of one). A variant with its own ``fori_loop`` over stages and a fused
    multiply-reduce per stage (one traced field) was no faster than diffrax's loop."""

    interpolation_cls: ClassVar = _UnrolledDopri8Interpolation

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        if not _is_plain_ode(terms):  # pragma: no cover - the engine only passes ODE terms
            return super().step(terms, t0, t1, y0, args, solver_state, made_jump)
        tab = self.tableau
        first_step, f0_stored = solver_state
        control = terms.contr(t0, t1)
        dt = jnp.asarray(t1) - jnp.asarray(t0)
        # As diffrax: the stored FSAL field is reused except on the first step or after a jump
        # (then every lane evaluates it: the predicate is taken over all lanes).
        f0 = jax.lax.cond(eqxi.unvmap_any(first_step | made_jump),
                          lambda: terms.vf(t0, y0, args), lambda: f0_stored)
        ks = [terms.prod(f0, control)]
        yi, fi = y0, f0
        for a_row, c in zip(tab.a_lower, tab.c):
            yi = _combination(y0, a_row, ks)
            ti = t1 if c == 1 else t0 + jnp.asarray(c, dt.dtype) * dt  # no round-off at the end point
            fi = terms.vf(ti, yi, args)
            ks.append(terms.prod(fi, control))
        # Dopri8 is "same stage as last": its last stage is evaluated at y1 (the solution).
        assert tab.ssal and tab.fsal
        y1, f1 = yi, fi
        y_error = _dot(tab.b_error, ks)
        dense_info = dict(y0=y0, y1=y1, k=tuple(ks))
        return y1, y_error, dense_info, (jnp.array(False), f1), diffrax.RESULTS.successful

