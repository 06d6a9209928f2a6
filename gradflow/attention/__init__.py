"""The paper's model: the value-softmax family ``L(V softmax(a))`` and its variants, as the
authors study it (paper Secs. 2–3 and Appendix D), on gradflow's generic flow engine.

- :mod:`~gradflow.attention.maps`: the maps ``a ↦ s`` (softmax, sparsemax, ...);
  :mod:`~gradflow.attention.losses`: the losses of ``β = V s`` (logistic teacher, square,
  soft-target cross-entropy); :mod:`~gradflow.attention.models`: value-softmax, tied, row-wise.
- :mod:`~gradflow.attention.flow`: the exact field (paper Eqs. 2–4) and its log-time form.
- :func:`simulate`, :func:`simulate_batch`: the flow, with ``Γ = ∫γ dt`` (paper Thm. 3.3), into a
  :class:`Trajectory`; :func:`descend`: gradient descent or any optax optimiser on the same model.
- :mod:`~gradflow.attention.maxmargin`: max-margin token selection (paper Sec. 3.2; the
  att-SVMs); :mod:`~gradflow.attention.sweep`: seeds × configurations into one zarr store;
  :mod:`~gradflow.attention.plot`: the standard panels.

Everything here imports the generic library (``gradflow``: the engine, :func:`gradflow.integrate`,
:class:`gradflow.Solution`), never the app (``gradflow.app``), the checks (``gradflow.theory``) or
the figures (``gradflow.sims``). ``gradflow`` re-exports the public names of the first two bullets.
``sweep``, ``plot`` and ``maxmargin`` load on first use (they import xarray, tqdm, matplotlib or
cvxpy).
"""

from . import maps
from .flow import flow_field, gradient_field
from .losses import AbstractLoss, LogisticTeacher, SoftTargetCrossEntropy, SquareLoss
from .maps import MAPS, apply_map
from .models import MODELS, AbstractModel, RowWise, Tied, ValueSoftmax, get_model
from ._simulate import simulate, simulate_batch, value_softmax_flow
from .trajectory import Trajectory, winners
from .._lazy import lazy_names as _lazy_names

_LAZY = {"descend": "._descend"}
"""Public names imported on first use (PEP 562): ``descend`` needs optax."""


__getattr__, __dir__ = _lazy_names(__name__, globals(), _LAZY)

__all__ = ["AbstractLoss", "AbstractModel", "LogisticTeacher", "MAPS", "MODELS", "RowWise", "SoftTargetCrossEntropy",
           "SquareLoss", "Tied", "Trajectory", "ValueSoftmax", "apply_map", "descend", "flow_field", "get_model",
           "gradient_field", "maps", "simulate", "simulate_batch", "value_softmax_flow", "winners"]
