"""The engine: the gradient flow of any loss over any parameter pytree (knows no model).

``settings``: what a run is asked for (:class:`~gradflow._engine.settings.Settings`, keyword-only);
``solvers``: every solver in one table, by name and integer code; ``solve``: one log-time solve,
its events (the rest stop) and statuses; ``loop``: the while loop that steps diffrax's solvers and
controllers (``diffeqsolve``'s steps, in a program that compiles faster); ``batch``: rounds of unfinished lanes, buckets
and sharding; ``stiff``: which solver each lane of ``auto`` runs per round; ``rosenbrock``: the
tableau-driven Rosenbrock methods; ``_pinned``: every use of a library's internals, version-guarded.
Front ends: :func:`gradflow.integrate` (any loss) and :func:`gradflow.simulate` (the value-softmax
family).
"""

from .batch import Finished, run  # noqa: F401
from .settings import Settings, check_settings, default_ts, log_taus  # noqa: F401
from .solve import Flow, Status  # noqa: F401
from .solvers import SOLVERS, resolve_solver  # noqa: F401
