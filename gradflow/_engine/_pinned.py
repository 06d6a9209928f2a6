"""The workarounds that replace or reach into a library's private internals, in one module, each
guarded by the versions it was tested on and with a clean fallback. (Two read-only uses of
semi-public equinox/diffrax API stay where they are used: in :mod:`gradflow._engine.erk`,
``equinox.internal.unvmap_any``, as diffrax's own explicit solvers use it, and Dopri8's dense-output
coefficients, ``diffrax.Dopri8.interpolation_cls.eval_coeffs``; ``tests/test_erk.py`` checks the
unrolled solver against ``diffrax.Dopri8`` step by step, so a change there fails the tests.)

(Earlier, a swap of equinox's runtime check, ``cacheable``, was also here: the solves then
ran through ``diffrax.diffeqsolve``, whose ``eqx.error_if`` checks of the save times are host
callbacks, which keep JAX from writing a program to its persistent cache. The engine's own loop
(:mod:`gradflow._engine.loop`) has no such check, so its programs are cached as they are, and a
user's own ``eqx.error_if`` in a loss keeps its meaning inside a solve.)

- :func:`any_lane` (equinox): whether a predicate holds in any lane of an enclosing ``vmap``, as one
  unbatched bool (``equinox.internal.unvmap_any``), so that a ``lax.cond`` on it branches once for
  all lanes (:func:`gradflow._engine.rosenbrock.krylov_solve`'s GMRES fallback, the solve loop's
  ``t0 = t1`` fill). On an untested equinox it returns the predicate itself: same results, but
  under ``vmap`` the cond becomes a select that computes the branch for every lane.
- :func:`buffered_while_loop` (equinox): a while loop whose save buffers are written in place under
  ``vmap`` (``equinox.internal.while_loop(kind="lax", buffers=...)``, what diffrax's forward mode
  runs), for :mod:`gradflow._engine.loop`. On an untested equinox it returns ``None`` and the loop
  runs a plain ``lax.while_loop``: same results, but under ``vmap`` every step copies the whole
  save buffer of every lane.
- :func:`trace_context` and :func:`serialize_executable` (JAX): what the serialised solves of
  :mod:`gradflow._engine._export` need beyond JAX's public API (``jax._src.config.trace_context``
  for their key, ``jax.experimental.serialize_executable`` to store an executable). On a jax or
  jaxlib version not in :data:`TESTED_JAX`, or one without these, :data:`EXPORT_ACTIVE` is false
  and :func:`gradflow._engine._export.compiled` declines: every process traces its solves as usual
  (same results; a cold process pays the tracing).
- :data:`CACHE_WRITE_EVENT` (JAX): the name of the event by which JAX says it compiled an executable
  and wrote it to its persistent cache; :mod:`gradflow._engine._export` stores only such
  executables (if the name changes, nothing is stored: slower, never wrong).
- :func:`fast_compile_options` (XLA): the compiler options of the engine's compile-bound programs
  (``xla_cpu_use_fusion_emitters=False``, an XLA debug option, not a JAX API); on a jaxlib not in
  :data:`TESTED_JAX` none (``()``): XLA's defaults, the same results, a longer compile.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jaxlib

__all__ = ["TESTED_EQUINOX", "any_lane", "buffered_while_loop", "TESTED_JAX", "EXPORT_ACTIVE", "trace_context",
           "serialize_executable", "fast_compile_options"]

TESTED_EQUINOX = ("0.13.8",)
"""equinox versions on which :func:`any_lane` and :func:`buffered_while_loop` use equinox's internals
(``tests/test_loop.py`` checks the loop they serve against ``diffrax.diffeqsolve``)."""


try:
    from equinox.internal import unvmap_any as _unvmap_any
except ImportError:  # pragma: no cover - a future equinox without it
    _unvmap_any = None


def any_lane(pred):
    """``pred`` (a scalar bool, possibly batched by an enclosing ``vmap``) reduced over the lanes
    with ``equinox.internal.unvmap_any`` on a tested equinox (:data:`TESTED_EQUINOX`), else
    ``pred`` unchanged (see the module docstring)."""
    if _unvmap_any is None or eqx.__version__ not in TESTED_EQUINOX:
        return pred
    return _unvmap_any(pred)


try:
    from equinox.internal import while_loop as _eqx_while_loop
except ImportError:  # pragma: no cover - a future equinox without it
    _eqx_while_loop = None


def buffered_while_loop(cond, body, init, max_steps: int, buffers):
    """``equinox.internal.while_loop(cond, body, init, max_steps=max_steps, buffers=buffers,
    kind="lax")`` on a tested equinox (:data:`TESTED_EQUINOX`), else ``None`` (the caller runs a
    plain loop; see the module docstring)."""
    if _eqx_while_loop is None or eqx.__version__ not in TESTED_EQUINOX:
        return None
    return _eqx_while_loop(cond, body, init, max_steps=max_steps, buffers=buffers, kind="lax")


TESTED_JAX = ("0.10.2",)
"""jax (and jaxlib) versions the serialised solves were tested on (``tests/test_export.py``)."""


def _jax_internals():
    try:
        from jax._src import config
        from jax.experimental import serialize_executable as se

        ok = callable(getattr(config, "trace_context", None)) and callable(getattr(se, "serialize", None)) and \
            callable(getattr(se, "deserialize_and_load", None))
        return (config, se) if ok else None
    except ImportError:  # pragma: no cover - a future jax without these modules
        return None


_jax_modules = _jax_internals()

EXPORT_ACTIVE = _jax_modules is not None and jax.__version__ in TESTED_JAX and jaxlib.__version__ in TESTED_JAX
"""Whether :mod:`gradflow._engine._export` stores and loads serialised solves (a tested jax)."""


CACHE_WRITE_EVENT = "/jax/compilation_cache/cache_misses"
"""The :mod:`jax.monitoring` event JAX records, in the compiling thread, when it writes an
executable it has just compiled to its persistent cache (``jax._src.compilation_cache``, jax
0.10.2; gradflow's cache settings write every compilation). :mod:`gradflow._engine._export` stores
an executable only after seeing it: a renamed event stores nothing, which costs speed, not
correctness."""


def trace_context() -> tuple:
    """JAX's current tracing context (``jax._src.config.trace_context()``): the configuration a
    traced program depends on. Only called when :data:`EXPORT_ACTIVE`."""
    return _jax_modules[0].trace_context()


def serialize_executable():
    """The module ``jax.experimental.serialize_executable``. Only called when :data:`EXPORT_ACTIVE`."""
    return _jax_modules[1]


def fast_compile_options(jaxlib_version: str | None = None) -> tuple:
    """``(("xla_cpu_use_fusion_emitters", False),)`` on a tested jaxlib (:data:`TESTED_JAX`), else
    ``()``: XLA rejects a compiler option it does not know, and this one is an XLA:CPU debug
    option that a later XLA may rename or drop (:data:`gradflow._engine._fastjit.FAST_COMPILE`
    says what it buys). ``jaxlib_version``: default the installed one."""
    version = jaxlib.__version__ if jaxlib_version is None else jaxlib_version
    return (("xla_cpu_use_fusion_emitters", False),) if version in TESTED_JAX else ()
