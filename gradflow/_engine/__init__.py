"""The engine: the gradient flow of any loss over any parameter pytree (knows no model).

``solve``: one log-time diffrax solve, its events and :class:`Status`; ``batch``: rounds of
unfinished lanes, buckets and sharding; ``stiff``: which solver each lane runs per round;
``_eqx_compat``: version-guarded workarounds for library internals. Front ends:
:mod:`gradflow.integrate` (any loss) and :mod:`gradflow.simulate` (the value-softmax family).
"""

from .batch import Finished, run  # noqa: F401
from .solve import SOLVERS, Flow, Status, default_ts, log_taus, resolve_solver  # noqa: F401
