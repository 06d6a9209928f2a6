"""``AbstractLoss`` / ``AbstractModel`` declare what a subclass must define (equinox's abstract
pattern, ``abc.abstractmethod``): a subclass missing one cannot be built, one that defines them all
can and runs (control)."""

import jax.numpy as jnp
import numpy as np
import pytest

import gradflow


class _NoDim(gradflow.AbstractLoss):
    def __call__(self, beta):
        return jnp.sum(beta**2)


class _Quadratic(_NoDim):
    @property
    def dim(self) -> int:
        return 3


class _NoShapes(gradflow.AbstractModel):
    def output(self, V, s):
        return V @ s


def test_incomplete_subclasses_cannot_be_built():
    for cls, missing in [(gradflow.AbstractLoss, "__call__, dim"), (_NoDim, "dim"),
                         (gradflow.AbstractModel, "check_shapes, output"), (_NoShapes, "check_shapes")]:
        with pytest.raises(TypeError, match=f"abstract method.*{missing}"):
            cls()


def test_complete_subclass_runs():
    loss = _Quadratic()
    assert loss.dim == 3 and float(loss(jnp.ones(3))) == 3.0
    np.testing.assert_allclose(np.asarray(loss.residual(jnp.ones(3))), -2.0 * np.ones(3))  # −∇‖β‖² = −2β
