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
- The engine, by name, for the benchmarks that time its parts: :class:`Settings`, :class:`Round`,
  :class:`Flow`, :class:`FlowArgs`, :func:`log_time_rhs` (the log-time field), :func:`phase_of_lanes`
  (the auto policy's choice per lane), :func:`solver_entry` (a row of the solver table),
  :func:`solve_round` and :func:`stiffness_round` (the compiled round and stiffness detector),
  :func:`diffeqsolve_round` (a round by ``diffrax.diffeqsolve``), :func:`Rodas4`,
  :func:`Ros34pw2`, :func:`KrylovRodas4`, :func:`blas_threads`, :data:`DEFAULT_POLICY`.
- :func:`engine_knobs`, :func:`engine_knob`, :data:`KNOBS`: the engine's tuning knobs (round
  length, lanes per solve, unrolled stages, XLA options, ...) set for a block of code and
  restored, and read; :func:`observe_rounds`: see (time, count, replay) every round the engine
  runs. Benchmarks use these instead of assigning the engine's private attributes.
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
from ._engine.batch import _solve_jit as solve_round, _stiffness_jit as stiffness_round
from ._engine.loop import by_diffeqsolve as diffeqsolve_round
from ._engine.policy import DEFAULT_POLICY
from ._engine.rosenbrock import KrylovRodas4, Rodas4, Ros34pw2
from ._engine.settings import DEFAULTS, Round, Settings
from ._engine.solve import Flow, FlowArgs, _log_time_rhs as log_time_rhs
from ._engine.solvers import spec as solver_entry
from ._engine.stiff import blas_threads, phase_of_lanes
from ._engine.tuning import KNOBS, engine_knobs, observe_rounds
from ._errors import ArgumentParser, bad_arg, describe
from ._host import usable_cores
from ._layout import install_source_finder
from ._provenance import git_revision, source_hash, versions
from ._validate import as_float_array, check_positive


def engine_knob(name: str):
    """The current value of the engine knob ``name`` (:data:`KNOBS`)."""
    return getattr(*KNOBS[name])


__all__ = ["ArgumentParser", "DEFAULTS", "DEFAULT_POLICY", "Flow", "FlowArgs", "KNOBS", "KrylovRodas4", "Rodas4",
           "Ros34pw2", "Round", "Settings", "as_float_array", "bad_arg", "blas_threads", "check_positive",
           "default_record", "describe", "diffeqsolve_round", "engine_knob", "engine_knobs", "git_revision",
           "install_source_finder", "log_time_rhs", "observe_rounds", "phase_of_lanes", "release_executables",
           "solve_round", "solver_entry", "source_hash", "stiffness_round", "usable_cores", "versions"]
