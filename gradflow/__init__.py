"""gradflow: gradient-flow dynamics of softmax attention in JAX.

Importing gradflow enables JAX's float64 mode (``jax_enable_x64``): flows to ``t = 1e12``
and beyond need it (SPEC §9). Public names are listed in ``__all__``.
"""

import jax

jax.config.update("jax_enable_x64", True)

from . import maps  # noqa: E402
from ._errors import GradflowValueError  # noqa: E402
from ._cache import enable_compilation_cache  # noqa: E402
from ._descend import descend  # noqa: E402
from .flow import flow_field, gradient_field  # noqa: E402
from .losses import AbstractLoss, LogisticTeacher, SoftTargetCrossEntropy, SquareLoss  # noqa: E402
from .maps import MAPS, apply_map  # noqa: E402
from .models import MODELS, AbstractModel, RowWise, Tied, ValueSoftmax, get_model  # noqa: E402
from ._simulate import SOLVERS, simulate, simulate_batch  # noqa: E402
from ._softmax import log_softmax, softmax  # noqa: E402
from .trajectory import STATUS, Trajectory, winners  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "AbstractLoss",
    "AbstractModel",
    "GradflowValueError",
    "LogisticTeacher",
    "MAPS",
    "MODELS",
    "RowWise",
    "SOLVERS",
    "STATUS",
    "SoftTargetCrossEntropy",
    "SquareLoss",
    "Tied",
    "Trajectory",
    "ValueSoftmax",
    "apply_map",
    "descend",
    "enable_compilation_cache",
    "flow_field",
    "get_model",
    "log_softmax",
    "gradient_field",
    "maps",
    "simulate",
    "simulate_batch",
    "softmax",
    "winners",
]
