"""What ``gradflow.theory``, ``gradflow.sims`` and the benchmarks use from gradflow's private
modules, made public in one place (as ``equinox.internal`` serves diffrax).

Outside ``gradflow/`` nothing imports a ``gradflow._x`` module: it imports these names. They are
stable within a release but are not the user API (that is ``gradflow.__all__``) and may change
without a deprecation period.

- :func:`bad_arg`, :func:`describe`: build a :class:`gradflow.GradflowValueError` naming the
  argument, the value received and what is accepted.
- :func:`check_positive`, :func:`as_float_array`: the argument checks of gradflow's own functions.
- :func:`default_record`: the GD record grid (iteration ``0`` and about ``num`` log-spaced
  indices), the default of :func:`gradflow.descend` and the one copy the figures use.
- :func:`usable_cores`: the CPU cores this process may run on.
- ``engine_batch``, ``engine_solve``, ``engine_solvers``, ``engine_stiff``, ``engine_rosenbrock``, ``engine_loop``: the
  engine's solver modules (``ROUND_STEPS``, ``EXPLICIT_ROUND``, the solve loop and its ``diffeqsolve``
  reference, ...), for the benchmarks that time them; ``engine_fastjit``: its compiled-call
  wrapper (``FAST_COMPILE``, which ``benchmarks/first_call.py`` turns off for its baseline).
- :data:`DEFAULTS`: the front ends' shared defaults (:class:`gradflow._engine.settings.SolveOptions`),
  which the command line's options repeat.
- :func:`release_executables`: drop JAX's compiled executables once a process holds many memory
  mappings (the command's long runs).
- :func:`install_source_finder`: map ``gradflow.theory`` / ``gradflow.sims`` / ``gradflow.app`` onto
  the folders of a source checkout run without an install (the command, the tests and the
  benchmarks call it; ``import gradflow`` does not).
- :func:`git_revision`, :func:`versions`, :func:`source_hash`: the provenance a result records.
- :class:`ArgumentParser`: ``argparse`` with gradflow's one-line ``gradflow: error:`` usage errors.
"""

from ._cache import release_executables
from ._descend import default_record
from ._engine import _fastjit as engine_fastjit
from ._engine import batch as engine_batch, rosenbrock as engine_rosenbrock, solve as engine_solve, stiff as engine_stiff
from ._engine import loop as engine_loop, solvers as engine_solvers
from ._engine.settings import DEFAULTS
from ._errors import ArgumentParser, bad_arg, describe
from ._host import usable_cores
from ._layout import install_source_finder
from ._provenance import git_revision, source_hash, versions
from ._validate import as_float_array, check_positive

__all__ = ["ArgumentParser", "DEFAULTS", "as_float_array", "bad_arg", "git_revision", "install_source_finder",
           "release_executables", "source_hash", "versions", "check_positive", "default_record", "describe",
           "engine_batch", "engine_fastjit", "engine_loop", "engine_rosenbrock", "engine_solve", "engine_solvers",
           "engine_stiff", "usable_cores"]
