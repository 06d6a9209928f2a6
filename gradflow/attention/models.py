"""Models: parameters ``(V, a)`` ↦ output ``β`` (paper Eq. 1 and its variants).

A model fixes how the two parameter blocks produce the attention weights ``s`` and the
output ``β``, and how the per-output loss is aggregated. The flow, the GD twin and the
metrics only use the methods below, so adding a model is one small class plus one
line in :data:`MODELS`.

* :class:`ValueSoftmax` (paper Eq. 1): ``V (d, n)``, ``a (n,)``, ``s = map(a)``, ``β = V s``.
* :class:`Tied` (appendix, massive activations): ``U (D, D)`` in place of ``V``, ``a (D,)``,
  ``α = map(U a)``, ``β = U α``.
* :class:`RowWise` (Sec. 4.1, sinks): ``V (d, T)``, logits ``A (T, T)``; row ``t`` has weights
  ``s_t = map(A[t])`` and output ``β_t = V s_t``; the loss is the mean over rows.
"""

from __future__ import annotations

import abc
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from . import maps as _maps
from .._errors import bad_arg
from .._validate import LOGITS_HINT, as_float_array, check_positive
from .losses import AbstractLoss

__all__ = ["AbstractModel", "ValueSoftmax", "Tied", "RowWise", "MODELS", "get_model", "prepare"]


def _as_float64(x):
    """The temperature as a float64 JAX scalar; a Python or NumPy number is copied to the device
    with ``jax.device_put`` (no compiled conversion, which a fresh process would compile first)."""
    if isinstance(x, (jax.Array, jax.core.Tracer)):
        return jnp.asarray(x, jnp.float64)
    return jax.device_put(np.asarray(x, dtype=jax.dtypes.canonicalize_dtype(jnp.float64)))


class AbstractModel(eqx.Module):
    """Shared behaviour. ``normalization`` is a name of :data:`gradflow.attention.maps.MAPS`;
    ``temperature`` divides the logits before the map.

    Abstract (equinox's abstract/final pattern): a model defines ``output`` and ``check_shapes``
    (and may override ``logits``, ``u``); the concrete models here are final in intent."""

    normalization: str = eqx.field(static=True, default="softmax")
    temperature: Float[Array, ""] = eqx.field(default=1.0, converter=lambda x: _as_float64(x))

    name = "abstract"

    def __check_init__(self):
        _maps.get_map(self.normalization)
        if not isinstance(self.temperature, jax.core.Tracer):
            if not (np.isfinite(np.asarray(self.temperature)) and float(self.temperature) > 0):  # on the host: no compiled check
                raise bad_arg("temperature", float(self.temperature), "a positive finite float")

    # --- what each model defines -------------------------------------------------
    def logits(self, V: ArrayLike, a: ArrayLike) -> ArrayLike:
        """The logits the map is applied to."""
        return a

    @abc.abstractmethod
    def output(self, V: ArrayLike, s: ArrayLike) -> ArrayLike:
        """``β`` from the value block and the weights."""

    @abc.abstractmethod
    def check_shapes(self, V: ArrayLike, a: ArrayLike, loss: AbstractLoss) -> None:
        """Raise :class:`gradflow.GradflowValueError` when ``V``, ``a`` do not fit the model and ``loss``."""

    def u(self, V: ArrayLike, teacher: ArrayLike) -> ArrayLike:
        """``u = Vᵀβ*`` (one entry per value column)."""
        return V.T @ teacher

    # --- derived -------------------------------------------------------------------
    def weights(self, V: ArrayLike, a: ArrayLike) -> Array:
        """Attention weights ``s = map(logits / T)``."""
        return _maps.apply_map(self.logits(V, a), self.normalization, self.temperature)

    def beta(self, V: ArrayLike, a: ArrayLike) -> Array:
        return self.output(V, self.weights(V, a))

    def loss(self, loss: AbstractLoss, V: ArrayLike, a: ArrayLike) -> Float[Array, ""]:
        """``L(V, a) = ℓ(β)`` (mean over rows for row-wise outputs)."""
        return self.loss_of_weights(loss, V, self.weights(V, a))

    def loss_of_weights(self, loss: AbstractLoss, V: ArrayLike, s: ArrayLike) -> Float[Array, ""]:
        """``ℓ(output(V, s))`` as a function of the value block and the weights ``s`` (mean over
        rows for row-wise outputs); :func:`gradflow.gradient_field` differentiates it in ``s``."""
        beta = self.output(V, s)
        if beta.ndim == 1:
            return loss(beta)
        return jnp.mean(jax.vmap(loss)(beta))

    def gamma(self, loss: AbstractLoss, V: ArrayLike, a: ArrayLike) -> Float[Array, ""]:
        """Polarisation rate ``γ`` (mean over rows for row-wise outputs)."""
        beta = self.beta(V, a)
        if beta.ndim == 1:
            return loss.gamma(beta)
        return jnp.mean(jax.vmap(loss.gamma)(beta))

    def entropy(self, V: ArrayLike, a: ArrayLike) -> Float[Array, ""]:
        """Entropy (nats) of the weights, from logits for softmax (exact at large logit gaps); mean over rows."""
        if self.normalization == "softmax":
            h = _maps.softmax_entropy(self.logits(V, a), self.temperature)
        else:
            h = _maps.weights_entropy(self.weights(V, a))
        return jnp.mean(h)


def _check_value_softmax(model_name, V, a, loss, n_expected_a):
    if V.ndim != 2:
        raise bad_arg("V0.shape", tuple(V.shape), f"(d, n) for model {model_name!r}")
    if a.shape != (n_expected_a,):
        raise bad_arg("a0.shape", tuple(a.shape), f"({n_expected_a},) to match V0.shape = {tuple(V.shape)}")
    if V.shape[0] != loss.dim:
        raise bad_arg("V0.shape", tuple(V.shape), f"(d, n) with d = {loss.dim}, {loss.dim_origin}: V0 "
                      f"has d = {V.shape[0]} rows, so V0 or the loss is of the wrong size")


class ValueSoftmax(AbstractModel):
    """The value-softmax model ``β = V σ(a)`` (paper Eq. 1); ``V (d, n)``, ``a (n,)``."""

    name = "value-softmax"

    def output(self, V, s):
        return V @ s

    def check_shapes(self, V, a, loss):
        _check_value_softmax(self.name, V, a, loss, V.shape[1] if V.ndim == 2 else -1)


class Tied(AbstractModel):
    """The tied model ``α = σ(U a)``, ``β = U α`` (appendix, massive activations).

    ``U`` (passed as ``V0``) has shape ``(D, D)``; ``a`` has shape ``(D,)``."""

    name = "tied"

    def logits(self, V, a):
        return V @ a

    def output(self, V, s):
        return V @ s

    def check_shapes(self, V, a, loss):
        if V.ndim != 2 or V.shape[0] != V.shape[1]:
            raise bad_arg("V0.shape", tuple(V.shape), "a square (D, D) matrix U for model 'tied'")
        _check_value_softmax(self.name, V, a, loss, V.shape[1])


class RowWise(AbstractModel):
    """Row-wise attention ``β_t = V σ(A[t, :])`` (Sec. 4.1, attention sinks).

    ``V`` (passed as ``V0``) has shape ``(d, T)`` (column ``j`` is the value of token ``j``);
    the logits ``A`` (passed as ``a0``) have shape ``(T, T)``; ``β`` has shape ``(T, d)`` and the
    loss is the mean of the per-row losses."""

    name = "rowwise"

    def output(self, V, s):
        return s @ V.T

    def check_shapes(self, V, a, loss):
        if V.ndim != 2:
            raise bad_arg("V0.shape", tuple(V.shape), "(d, T) for model 'rowwise'")
        T = V.shape[1]
        if a.shape != (T, T):
            raise bad_arg("a0.shape", tuple(a.shape), f"({T}, {T}) (one row of logits per token) for model 'rowwise'")
        if V.shape[0] != loss.dim:
            raise bad_arg("V0.shape", tuple(V.shape), f"(d, T) with d = {loss.dim}, {loss.dim_origin}: V0 "
                      f"has d = {V.shape[0]} rows, so V0 or the loss is of the wrong size")


MODELS: dict[str, type[AbstractModel]] = {
    "value-softmax": ValueSoftmax,
    "tied": Tied,
    "rowwise": RowWise,
}
"""Registry of models by name."""


def get_model(model, normalization: str = "softmax", temperature=1.0) -> AbstractModel:
    """Build a model from a name in :data:`MODELS` (or pass an :class:`AbstractModel` through).

    **Raises:** :class:`gradflow.GradflowValueError` for an unknown model or normalisation
    name, or a temperature that is not positive and finite.
    """
    if isinstance(model, AbstractModel):
        return model
    try:
        cls = MODELS[model]
    except (KeyError, TypeError):
        raise bad_arg("model", model, f"one of {sorted(MODELS)}") from None
    _maps.get_map(normalization)
    temperature = check_positive("temperature", temperature)
    return _build(cls, normalization, temperature, bool(jax.config.jax_enable_x64))


@functools.lru_cache(maxsize=64)
def _build(cls, normalization: str, temperature: float, x64: bool) -> AbstractModel:
    """One immutable instance per setting (and float mode): building a model converts and checks
    its temperature on the device (~0.2 ms, paid by every ``simulate`` call otherwise). Built
    eagerly even when first asked for inside a ``jax.jit`` trace, so no tracer is cached."""
    with jax.ensure_compile_time_eval():
        return cls(normalization=normalization, temperature=temperature)


def prepare(loss, V0, a0, model, normalization, temperature, batch: bool):
    """Validate ``loss``, the model settings and the initial arrays of one run (or a batch).

    Returns ``(model, V0, a0)`` with the arrays as float64 NumPy arrays (JAX tracers stay tracers).

    **Raises:** :class:`gradflow.GradflowValueError` for a loss that is not a gradflow loss,
    unknown model/normalisation names, a bad temperature, non-numeric or non-finite arrays,
    shapes that do not fit the model and loss, and initial logits where the map is undefined.
    """
    if not isinstance(loss, AbstractLoss):
        raise bad_arg("loss", loss, "a gradflow loss (LogisticTeacher, SquareLoss, SoftTargetCrossEntropy)")
    mdl = get_model(model, normalization, temperature)
    v_name, a_name = ("V0s", "a0s") if batch else ("V0", "a0")
    V0 = as_float_array(v_name, V0, host=True)
    a0 = as_float_array(a_name, a0, accepted=LOGITS_HINT, host=True)
    if batch:
        if V0.ndim < 1 or a0.ndim < 1 or V0.shape[0] != a0.shape[0]:
            raise bad_arg("V0s/a0s", (tuple(V0.shape), tuple(a0.shape)), "arrays with the same leading batch size B ≥ 1")
        if V0.ndim != 3:
            raise bad_arg("V0s.shape", tuple(V0.shape), "(B, d, n): one (d, n) value block per lane")
        type(mdl).check_shapes(mdl, V0[0], a0[0], loss)
    else:  # called through the class: equinox builds a bound-method module per attribute access (~40 µs)
        type(mdl).check_shapes(mdl, V0, a0, loss)
    if not _total(mdl) and not bool(_weights_finite(mdl, V0, a0, batch)):
        raise bad_arg(
            a_name,
            np.asarray(a0),
            f"logits where the {mdl.normalization!r} map is defined (its denominator is 0 here; "
            "softmax, sigmoid, elu and linear are defined for every finite logit at temperature 1)",
        )
    return mdl, V0, a0


TOTAL_MAPS = frozenset({"softmax", "sigmoid", "elu", "linear"})
"""Maps whose weights are finite for every finite logit vector at temperature 1 (softmax is
computed shifted by its maximum). Not ``sigmoid-norm`` or ``elu-norm``: their terms underflow
to 0 for logits below about −745, and the denominator with them; not ``sparsemax``: above
about 2⁵³ its support test rounds to false everywhere and the threshold divides by 0."""


def _total(model) -> bool:
    """Whether finite initial logits are enough for finite weights (skips a compiled check,
    which costs a dispatch and a device sync per run): the model's logits are ``a`` itself and its weights the map's (not overridden),
    the map is in :data:`TOTAL_MAPS` and the temperature is 1 (``a / T`` can overflow)."""
    return (type(model).logits is AbstractModel.logits and type(model).weights is AbstractModel.weights
            and model.normalization in TOTAL_MAPS and float(model.temperature) == 1.0)


@eqx.filter_jit
def _weights_finite(model, V, a, batch):
    finite = lambda V_, a_: jnp.all(jnp.isfinite(model.weights(V_, a_)))
    return jnp.all(jax.vmap(finite)(V, a)) if batch else finite(V, a)
