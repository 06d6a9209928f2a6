"""``filter_jit``: :func:`equinox.filter_jit`'s semantics with a cheaper call on repeated calls.

A single ``simulate`` of a small problem runs for 1–3 ms, and ``equinox.filter_jit`` spends about
0.1 ms per call on the host (binding the signature, partitioning the arguments into arrays and
static values twice, its error-handling wrapper) where a plain :func:`jax.jit` call with the same
arrays spends about 15 µs (best of 2000 calls with ``_fused_round``'s arguments, on the 2-core
development machine; ``benchmarks/COSTS.md``, "Per-call overhead", reports ``simulate``'s host
work). This wrapper partitions
the arguments once (array leaves are traced; every other leaf is static, hashed together with the
tree structure, as in equinox) and calls one :func:`jax.jit` whose compiled executables JAX keys
by that static part and the arrays' shapes and dtypes: JAX's own C++ dispatch on a cache hit,
:func:`jax.clear_caches` and the persistent compilation cache apply to it as to any ``jax.jit``
(the computation is named after the wrapped function, e.g. ``jit__fused_round``). The traced
program is the one ``equinox.filter_jit`` traces, so results are bitwise the same
(``tests/test_fastjit.py``). Non-array outputs are returned as static values, as in equinox.

``filter_jit(export=True)`` (the engine's ``_fused_round``): with the persistent compilation cache
on, a new process loads the compiled solve stored beside the cache instead of tracing it
(:mod:`gradflow._engine._export`).

``filter_jit(compile_fast=pred)``: calls for which ``pred(*args)`` is true are compiled with
:data:`FAST_COMPILE` (a second :func:`jax.jit` of the same traced function).

Not supported (not needed by the engine): keyword arguments, donation, equinox's rewriting of
runtime-error messages (a failed ``eqx.error_if`` in a user's function raises JAX's runtime error,
whose text includes the check's message).
"""

from __future__ import annotations

import equinox as eqx
import jax

from . import _export, _pinned

__all__ = ["FAST_COMPILE", "filter_jit"]

FAST_COMPILE = _pinned.fast_compile_options()
"""XLA compiler options (``(name, value)`` pairs, :func:`jax.jit`'s ``compiler_options``) of the
engine's programs whose compile outweighs their run: solves of fewer than
:data:`gradflow._engine.batch.UNROLL_LANES` lanes (one ``simulate`` or ``integrate``, a small
batch, the later rounds of a few lanes; :func:`gradflow._engine.batch._throughput_bound`).
``xla_cpu_use_fusion_emitters=False``: XLA:CPU generates its elementwise kernels with its older
emitters instead of its MLIR fusion emitters. ``()`` (XLA's defaults) on a jaxlib this was not
tested on (:func:`gradflow._engine._pinned.fast_compile_options`).

Results: those of XLA's defaults, bitwise for the explicit rounds and the stiffness detector
(checked on a value-softmax flow and a small stiff loss in ``tests/test_fastjit.py``, and on the
75-parameter deep linear net of ``benchmarks/first_call.py``); the LU solves of a Rodas4 round
can differ in their last bits, which the step-size control carries into differences within the
solve's tolerances (``tests/test_fastjit.py``). The choice is fixed by the lanes and the state
size, so a call gives the same bits every time.

The gain is measured in ``benchmarks/FIRST_CALL.md`` ("Where gradflow's first call goes", the
paragraph on XLA's default compiler options): the deep linear net's first call with these options
and with XLA's defaults, in fresh processes of one run, its XLA compile about a quarter shorter
with them and its warm call the same within noise.
During development (one process each way, not in ``benchmarks/``): batches of 128 and 1024 lanes
ran 10–70 % slower warm with these options (1024 seeds: 0.17 s with XLA's defaults, 0.20–0.29 s
with them), hence the lane limit. Other backends
ignore these CPU options. Read at each call: set to ``()`` before a program's first call, it
compiles with XLA's defaults (``benchmarks/first_call.py --default-options``)."""


_is_array = eqx.is_array  # what equinox traces: JAX and NumPy arrays, NumPy scalars


class _Static:
    """The static part of a pytree: its structure and its non-array leaves (``None`` where an array
    goes). Hashable and compared by value; the key of a compiled executable."""

    __slots__ = ("treedef", "leaves", "_hash")

    def __init__(self, treedef, leaves: tuple):
        self.treedef, self.leaves = treedef, leaves
        self._hash = hash((treedef, leaves))

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return type(other) is _Static and self._hash == other._hash and self.treedef == other.treedef and \
            self.leaves == other.leaves

    def combine(self, arrays):
        it = iter(arrays)
        return jax.tree.unflatten(self.treedef, [next(it) if leaf is None else leaf for leaf in self.leaves])


def _partition(tree):
    leaves, treedef = jax.tree.flatten(tree)
    arrays = [x for x in leaves if _is_array(x)]
    return arrays, _Static(treedef, tuple(None if _is_array(x) else x for x in leaves))


@jax.tree_util.register_static
class _Out:
    """The static part of a traced function's output, carried through :func:`jax.jit` as a pytree
    node without children."""

    __slots__ = ("static",)

    def __init__(self, static: _Static):
        self.static = static

    def __hash__(self):
        return hash(self.static)

    def __eq__(self, other):
        return type(other) is _Out and self.static == other.static


def filter_jit(fn=None, *, export: bool = False, compile_fast=None):
    """``fn`` compiled with :func:`jax.jit`, array leaves of its positional arguments traced and
    every other leaf static (as :func:`equinox.filter_jit`); returns ``fn``'s output pytree.

    ``export``: with the persistent compilation cache on, the traced program is stored as a
    serialised :class:`jax.export.Exported` and its executable beside the cache, and a new
    process loads them instead of tracing, lowering and compiling ``fn``
    (:func:`gradflow._engine._export.compiled`; any miss or failure traces ``fn`` as usual).
    Its output pytree's :class:`equinox.Module` nodes must be registered with
    :func:`gradflow._engine._export.register_output`.

    ``compile_fast``: a predicate of the call's arguments; where it is true the program is
    compiled with :data:`FAST_COMPILE` (default ``None``: never)."""
    if fn is None:
        return lambda f: filter_jit(f, export=export, compile_fast=compile_fast)

    def traced(static: _Static, arrays):
        out = fn(*static.combine(arrays))
        out_arrays, out_static = _partition(out)
        return out_arrays, _Out(out_static)

    traced.__name__, traced.__qualname__ = fn.__name__, getattr(fn, "__qualname__", fn.__name__)
    traced.__module__, traced.__doc__ = fn.__module__, fn.__doc__
    jitted = jax.jit(traced, static_argnums=0)
    with_options = {(): jitted}

    def jitted_for(options: tuple):
        """The :func:`jax.jit` of ``fn`` compiled with the XLA ``options`` (one per options)."""
        j = with_options.get(options)
        if j is None:
            j = with_options[options] = jax.jit(traced, static_argnums=0, compiler_options=dict(options))
        return j

    def call(*args):
        arrays, static = _partition(args)
        # compiler options apply to a top-level program only (JAX refuses them on a nested jit)
        fast = compile_fast is not None and compile_fast(*args) and not any(
            isinstance(x, jax.core.Tracer) for x in arrays)
        options = FAST_COMPILE if fast else ()  # read at each call: a benchmark may set it to ()
        if export:
            program = _export.compiled(fn, static, arrays, options)
            if program is not None:
                return program(arrays)
        out_arrays, out = jitted_for(options)(static, arrays)  # () gives ``jitted`` itself
        return out.static.combine(out_arrays)

    call.__name__, call.__qualname__, call.__doc__, call.__wrapped__ = traced.__name__, traced.__qualname__, fn.__doc__, fn
    call.__module__ = fn.__module__
    call.jitted, call.jitted_for = jitted, jitted_for
    return call
