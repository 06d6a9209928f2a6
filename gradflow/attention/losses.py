"""Losses ``ℓ(β)`` of the model output ``β`` (paper Eqs. 5 and 8, and the appendix variants).

Each loss is an immutable pytree (``equinox.Module``) that is called on one output vector
``β`` of shape ``(d,)`` and returns a scalar. ``r = −∇_β ℓ`` comes from autodiff.

Each loss also defines the **polarisation rate** ``γ(β)`` whose time integral is the
polarisation coefficient ``Γ(t) = ∫₀ᵗ γ dt`` (paper Thm. 3.3):

* :class:`LogisticTeacher`: ``γ = 1/(1 + exp⟨β*, β⟩)`` so that ``r = γ β*`` (paper Eq. 5).
* :class:`SquareLoss` without a design: ``γ = ⟨r, β*⟩ / ‖β*‖²`` with ``r = 2·scale·(β* − β)``;
  for ``scale = ½`` and rank-one ``V = β* uᵀ/‖β*‖²`` this is Lemma 3.5's
  ``γ = 1 − ⟨u, s⟩/‖β*‖²``.
* :class:`SquareLoss` with a design and :class:`SoftTargetCrossEntropy` have no teacher
  direction; there ``γ = ‖r‖₂`` (the residual force).
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._errors import bad_arg
from .._softmax import log_softmax
from .._validate import as_float_array, check_positive

__all__ = ["AbstractLoss", "LogisticTeacher", "SquareLoss", "SoftTargetCrossEntropy", "as_float_array"]


class AbstractLoss(eqx.Module):
    """A loss ``ℓ(β)`` on a single output ``β`` of shape ``(d,)``.

    Abstract (equinox's abstract/final pattern): a loss defines ``__call__`` and ``dim``; the
    concrete losses here are not meant to be subclassed further (subclass this class instead)."""

    @abc.abstractmethod
    def __call__(self, beta: Float[Array, " d"]) -> Float[Array, ""]:
        """``ℓ(β)``, a scalar."""

    @property
    def teacher(self) -> Float[Array, " d"] | None:
        """Teacher direction ``β*`` (``None`` if the loss has none)."""
        return None

    @property
    @abc.abstractmethod
    def dim(self) -> int:
        """The output dimension ``d`` the loss accepts."""

    @property
    def dim_origin(self) -> str:
        """Which argument of the loss sets :attr:`dim`, with its shape, for error messages (e.g.
        ``"the length of LogisticTeacher.beta_star (shape (4,))"``)."""
        return f"the output dimension of {type(self).__name__}"

    @property
    def has_finite_minimiser(self) -> bool:
        """Whether ``L(V, a) = ℓ(β(V, a))`` can come to rest at finite parameters (a finite
        minimiser of ``ℓ`` that the model reaches). ``True`` by default (square loss,
        soft-target cross-entropy); ``False`` for losses like the logistic teacher, whose flow
        runs off to infinity (the loss → 0 only as the margin grows without bound, paper Thm. 3.3). The flow of a loss with
        a finite minimiser stops at rest (``traj.t_steady``) and ``solver="auto"`` prepares for
        its stiff late phase."""
        return True

    def residual(self, beta: Float[Array, " d"]) -> Float[Array, " d"]:
        """``r = −∇_β ℓ(β)`` (autodiff)."""
        return -jax.grad(self.__call__)(beta)

    def gamma(self, beta: Float[Array, " d"]) -> Float[Array, ""]:
        """Polarisation rate ``γ(β)`` (module docstring); ``Γ = ∫ γ dt``."""
        r = self.residual(beta)
        return jnp.sqrt(jnp.sum(r * r))


class LogisticTeacher(AbstractLoss):
    """Logistic loss against one fixed teacher: ``ℓ(β) = log(1 + exp(−⟨β*, β⟩))`` (paper Eq. 5).

    **Arguments:** ``beta_star`` the teacher ``β*``, shape ``(d,)``, finite, not all zero
    (cast to float64).

    Evaluated as ``logaddexp(0, −m)`` with margin ``m = ⟨β*, β⟩``, so it is finite for any
    margin. ``γ = σ(−m)`` and ``r = −∇ℓ = γ β*``.

    **Raises:** :class:`gradflow.GradflowValueError` for a non-finite, zero or non-vector ``β*``.

    >>> import gradflow, jax.numpy as jnp
    >>> loss = gradflow.LogisticTeacher(jnp.array([1.0, 0.0]))
    >>> float(loss(jnp.zeros(2)))  # log 2
    0.6931471805599453
    """

    beta_star: Float[Array, " d"]

    def __init__(self, beta_star):
        self.beta_star = as_float_array("beta_star", beta_star, ndim=1)

    def __check_init__(self):
        if not isinstance(self.beta_star, jax.core.Tracer) and not np.any(np.asarray(self.beta_star) != 0):
            raise bad_arg("beta_star", np.asarray(self.beta_star), "a non-zero teacher vector")

    def __call__(self, beta):
        return jnp.logaddexp(0.0, -jnp.dot(self.beta_star, beta))

    @property
    def teacher(self):
        return self.beta_star

    @property
    def has_finite_minimiser(self) -> bool:
        return False  # ℓ > 0 everywhere, → 0 only as the margin ⟨β*, β⟩ → ∞

    @property
    def dim(self) -> int:
        return self.beta_star.shape[0]

    @property
    def dim_origin(self) -> str:
        return f"the length of the loss's beta_star (LogisticTeacher.beta_star has shape {tuple(self.beta_star.shape)})"

    def gamma(self, beta):
        return jax.nn.sigmoid(-jnp.dot(self.beta_star, beta))


class SquareLoss(AbstractLoss):
    """Square loss ``ℓ(β) = scale·‖target − design·β‖²`` (paper Eq. 8 and the design variant).

    **Arguments:**

    - ``target``: shape ``(m,)`` (``(d,)`` without a design), finite.
    - ``design``: optional ``X`` of shape ``(m, d)``; ``None`` means the identity (``m = d``).
    - ``scale``: positive float, default ``0.5`` (paper Eq. 8). The authors' conditioning
      code uses no ½, i.e. ``scale = 1``.

    Without a design the teacher is ``β* = target`` and ``γ = ⟨r, β*⟩/‖β*‖²``; with a design
    there is no teacher and ``γ = ‖r‖``.

    **Raises:** :class:`gradflow.GradflowValueError` for non-finite arrays, inconsistent
    shapes or ``scale ≤ 0``.
    """

    target: Float[Array, " m"]
    design: Float[Array, "m d"] | None
    scale: float = eqx.field(static=True)

    def __init__(self, target, design=None, scale: float = 0.5):
        self.target = as_float_array("target", target, ndim=1)
        self.design = None if design is None else as_float_array("design", design, ndim=2)
        self.scale = check_positive("scale", scale)
        if self.design is None and not isinstance(self.target, jax.core.Tracer) and not np.any(np.asarray(self.target) != 0):
            raise bad_arg("target", np.asarray(self.target), "a non-zero target (it is the teacher direction β* without a design)")
        if self.design is not None and self.design.shape[0] != self.target.shape[0]:
            raise bad_arg(
                "design.shape", tuple(self.design.shape), f"(m, d) with m = len(target) = {self.target.shape[0]}"
            )

    def __call__(self, beta):
        pred = beta if self.design is None else self.design @ beta
        res = self.target - pred
        return self.scale * jnp.sum(res * res)

    @property
    def teacher(self):
        return self.target if self.design is None else None

    @property
    def dim(self) -> int:
        return self.target.shape[0] if self.design is None else self.design.shape[1]

    @property
    def dim_origin(self) -> str:
        if self.design is None:
            return f"the length of the loss's target, the teacher beta_star (SquareLoss.target has shape {tuple(self.target.shape)})"
        return f"the columns of the loss's design (SquareLoss.design has shape {tuple(self.design.shape)})"

    def gamma(self, beta):
        if self.design is None:
            r = 2.0 * self.scale * (self.target - beta)
            return jnp.dot(r, self.target) / jnp.dot(self.target, self.target)
        return super().gamma(beta)


class SoftTargetCrossEntropy(AbstractLoss):
    """Cross-entropy against soft targets: ``ℓ(β) = −Σ_k p*_k log softmax(β)_k``.

    Here ``β = V s ∈ R^k`` are class logits (the appendix "KL" experiment, ``V`` of shape
    ``(k, n)``). ``γ = ‖r‖ = ‖p* − softmax(β)‖``.

    **Arguments:** ``p_star`` shape ``(k,)``, non-negative, summing to 1 (to 1e-8 absolute).

    **Raises:** :class:`gradflow.GradflowValueError` otherwise.
    """

    p_star: Float[Array, " k"]

    def __init__(self, p_star):
        self.p_star = as_float_array("p_star", p_star, ndim=1)
        if not isinstance(self.p_star, jax.core.Tracer):
            p = np.asarray(self.p_star)
            if np.any(p < 0) or abs(p.sum() - 1.0) > 1e-8:
                raise bad_arg("p_star", p, "probabilities: non-negative entries summing to 1")

    def __call__(self, beta):
        return -jnp.sum(self.p_star * log_softmax(beta))  # the centred derivative: exact at large gaps

    @property
    def dim(self) -> int:
        return self.p_star.shape[0]

    @property
    def dim_origin(self) -> str:
        return f"the length of the loss's p_star (SoftTargetCrossEntropy.p_star has shape {tuple(self.p_star.shape)})"
