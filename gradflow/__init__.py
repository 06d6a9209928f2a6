"""gradflow: gradient-flow dynamics of softmax attention in JAX, and of any JAX loss.

Three layers, each importing only the ones before it:

- ``gradflow`` itself, the library: the gradient flow of any JAX loss over any parameter pytree
  (:func:`integrate`, :func:`integrate_batch`, :func:`descend_params`, :class:`Solution`, the
  engine under ``gradflow._engine``);
- :mod:`gradflow.attention`, the paper's model (``simulate``, ``Trajectory``, the maps, losses and
  models, max-margin selection, sweeps, plots), whose public names are re-exported here;
- the app and the paper's checks and figures: ``gradflow.app`` (the ``gradflow`` command),
  ``gradflow.theory``, ``gradflow.sims`` (folders ``app/``, ``theory/``, ``sims/`` of the
  repository).

Importing gradflow enables JAX's float64 mode (``jax_enable_x64``): flows to ``t = 1e12``
and beyond need it. That is its only effect on the process: it installs no import hook and
leaves the garbage collector alone (the ``gradflow`` command, whose process is
its own, does more: :func:`gradflow.app.cli.main`). Public names are listed in ``__all__``.
"""

import jax

jax.config.update("jax_enable_x64", True)

# the generic library: any loss over any parameter pytree
from ._errors import GradflowValueError  # noqa: E402
from ._cache import enable_compilation_cache  # noqa: E402
from ._engine.policy import AutoPolicy  # noqa: E402
from ._engine.solvers import SOLVERS  # noqa: E402
from ._integrate import integrate, integrate_batch  # noqa: E402
from ._softmax import log_softmax, softmax  # noqa: E402
from ._status import STATUS  # noqa: E402
from .solution import Solution  # noqa: E402

# the paper's model (gradflow.attention), its public names re-exported
from . import attention  # noqa: E402
from .attention import maps  # noqa: E402
from .attention.flow import flow_field, gradient_field  # noqa: E402
from .attention.losses import AbstractLoss, LogisticTeacher, SoftTargetCrossEntropy, SquareLoss  # noqa: E402
from .attention.maps import MAPS, apply_map  # noqa: E402
from .attention.models import MODELS, AbstractModel, RowWise, Tied, ValueSoftmax, get_model  # noqa: E402
from .attention._simulate import simulate, simulate_batch  # noqa: E402
from .attention.trajectory import Trajectory, winners  # noqa: E402

from ._lazy import lazy_names as _lazy_names  # noqa: E402
from ._version import __version__  # noqa: E402

_LAZY = {"descend": ".attention._descend", "descend_params": "._descend"}
"""Public names imported on first use (PEP 562): ``descend`` needs optax, whose import costs
~0.15 s that a process only simulating does not pay (``tests/test_imports.py``)."""


__getattr__, __dir__ = _lazy_names(__name__, globals(), _LAZY)

__all__ = [
    "AbstractLoss",
    "AutoPolicy",
    "AbstractModel",
    "GradflowValueError",
    "LogisticTeacher",
    "MAPS",
    "MODELS",
    "RowWise",
    "SOLVERS",
    "STATUS",
    "SoftTargetCrossEntropy",
    "Solution",
    "SquareLoss",
    "Tied",
    "Trajectory",
    "ValueSoftmax",
    "apply_map",
    "attention",
    "descend",
    "descend_params",
    "enable_compilation_cache",
    "flow_field",
    "get_model",
    "gradient_field",
    "integrate",
    "integrate_batch",
    "log_softmax",
    "maps",
    "simulate",
    "simulate_batch",
    "softmax",
    "winners",
]
