"""Serialised solves beside the persistent compilation cache: no tracing, lowering or compiling in a new process.

JAX's persistent compilation cache skips XLA's compilation in a new process, but not the
tracing and lowering of the Python program that precede it: a cold process making Fig. 2's data
with the cache hit spent 1.4–1.9 s tracing ``_fused_round`` (the solve, then by
``diffrax.diffeqsolve``, the events, the finish) and 0.3–0.5 s lowering it, against 0.2–0.3 s
loading its executable (measured by hand before the engine's own loop; a new process's time with
the cache hit today: ``benchmarks/RESULTS.md``, "Targets for cold start, per-call cost, batch and scale"). With the compilation cache on
(:func:`gradflow.enable_compilation_cache`), :func:`compiled` stores a solve in
``<cache folder>/gradflow-exported/`` twice: its traced program as a :class:`jax.export.Exported`
(``<name>-<key hash>``) and the executable compiled from that program
(``<name>-<key hash>.xla``, :mod:`jax.experimental.serialize_executable`). A later process loads
the executable (nothing traced, lowered or compiled); if that fails, it compiles the stored
program (nothing traced; the compilation itself comes from JAX's cache when it is there).

**The key** of an artefact is everything the traced program and its executable depend on,
written out as text (:func:`_key`): the function's name; the static part of the arguments (the
pytree structure with its node types and their static fields, every non-array leaf: solver name,
step budget, the :class:`~gradflow._engine.solve.Flow` and its functions, model and loss classes
with their static fields); the abstract arrays (shape, dtype, weak type); the XLA compiler
options (:data:`gradflow._engine._fastjit.FAST_COMPILE` or none); JAX's tracing context
and configuration; the backend, its version, the device kind, ``XLA_FLAGS`` and the CPU's model and
instruction-set flags; the versions of Python, NumPy, jax, jaxlib, equinox, diffrax, optimistix and
lineax; a hash of the source files of the ``gradflow`` package and of every module whose functions
or classes the key names; the engine's module-level constants (e.g.
:data:`gradflow._engine.batch.UNROLL_LANES`) and functions. A function or class is named by its
module and qualified name and must be importable under that name (no lambdas or local
functions), from ``gradflow`` or from a versioned library; anything else (a user's loss
function or model class, an object without a canonical text form) makes the call not
exportable: it is traced as usual. A file is named by the key's SHA-256 and holds the whole key,
compared on load, and a SHA-256 of its payload (a truncated or corrupted file is detected
before it is deserialised). Files are written atomically (a temporary file renamed into place).

**Fallback:** a jax not among those this was tested on (:data:`gradflow._engine._pinned.EXPORT_ACTIVE`), no cache folder, more than one device, a key that cannot be written, a missing,
unreadable or mismatching artefact, or a program that :func:`jax.export.export` refuses (e.g.
host callbacks): :func:`compiled` returns ``None`` and the caller traces the function itself.
A program that cannot be exported is remembered in the folder (a marker file) so that later
processes do not try again.

The process that writes an artefact compiles its executable from the function it traced (the
same module as the plain traced path) and stores that executable, so every process using the
folder runs the same executable, bitwise the same as the plain traced path's
(``tests/test_export.py``).

Loading an executable runs machine code from the cache folder, as JAX's own compilation cache
does: the folder must be as trusted as the code that imports gradflow."""

from __future__ import annotations

import ast
import dataclasses
import enum
import hashlib
import os
import sys
import tempfile
import threading
import types

import jax
import numpy as np

from . import _pinned

__all__ = ["FOLDER", "compiled", "clear", "folder", "register_output", "stats"]

FOLDER = "gradflow-exported"
"""Subfolder of JAX's compilation cache folder holding the serialised programs."""

_MAGIC = b"gradflow-exported 1\n"
_LIBRARIES = ("jax", "jaxlib", "numpy", "equinox", "diffrax", "optimistix", "lineax")
"""Libraries whose functions and classes a key may name: their versions are part of every key."""
_NAMED_OK = _LIBRARIES + ("gradflow", "builtins", "math", "operator", "functools", "contextlib", "dataclasses",
                          "enum", "typing", "collections", "abc")
"""Top-level packages a key may name functions and classes of (the rest of the standard library
is versioned by Python's version)."""


stats = {"loaded": 0, "from_exported": 0, "stored": 0, "traced": 0}
"""What :func:`compiled` did in this process, once per program: ``loaded`` a stored executable;
compiled a stored exported program (``from_exported``: its executable was missing or unloadable);
``stored`` (traced, exported, compiled and written); ``traced`` (fallback: no folder, not keyable
or not exportable — the caller traces the function)."""


class NotExportable(Exception):
    """The call cannot be keyed or exported: trace it as usual."""


def folder() -> str | None:
    """Where artefacts go: ``<jax_compilation_cache_dir>/gradflow-exported``, or ``None`` when
    the persistent compilation cache is off or more than one device is visible (the artefacts
    are single-device programs)."""
    cache = jax.config.jax_compilation_cache_dir
    if not cache or not jax.config.jax_enable_compilation_cache or jax.device_count() != 1:
        return None
    return os.path.join(cache, FOLDER)


# ----------------------------------------------------------------------------- the key
_FILE_HASHES: dict = {}


def code_hash(source: str | bytes) -> str:
    """SHA-256 of a module's code: its syntax tree without docstrings and other bare string
    statements, which do nothing when run (``ast.dump``: comments,
    blank lines and formatting are not in it either), so that editing documentation does not
    invalidate stored programs while any change to what runs does. A text that does not parse is
    hashed as it is."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return hashlib.sha256(source if isinstance(source, bytes) else source.encode()).hexdigest()
    text = lambda st: isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) and isinstance(st.value.value, str)
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and any(text(st) for st in body):
                setattr(node, field, [st for st in body if not text(st)] or [ast.Pass()])
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()


def _file_hash(path: str) -> str:
    h = _FILE_HASHES.get(path)
    if h is None:
        with open(path, "rb") as f:
            h = _FILE_HASHES[path] = code_hash(f.read())
    return h


def _package_hash() -> str:
    """SHA-256 over the code of the ``.py`` files of the ``gradflow`` package folder (engine
    included; :func:`code_hash`: docstrings and comments do not count)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # gradflow/ (this file: gradflow/_engine/)
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                h.update(os.path.relpath(path, root).encode() + b"\0" + _file_hash(path).encode())
    return h.hexdigest()


def _versions() -> dict:
    out = {"python": sys.version, "platform": sys.platform}
    for name in _LIBRARIES:
        mod = sys.modules.get(name)
        if mod is None:
            __import__(name)
            mod = sys.modules[name]
        out[name] = str(getattr(mod, "__version__", None) or getattr(getattr(mod, "version", None), "__version__", ""))
    return out


class _Describer:
    """Canonical text of static values; collects the modules whose sources the key must hash."""

    def __init__(self):
        self.modules: set[str] = set()

    def named(self, obj, importable: bool = True) -> str:
        """``module:qualname`` of a function or class of gradflow or a versioned library,
        importable under that name (``importable=False``: a name without ``<locals>`` or
        ``<lambda>`` is enough, e.g. a function a decorator replaced by its wrapper)."""
        module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
        if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
            raise NotExportable(f"{obj!r} has no importable name")
        if module.split(".")[0] not in _NAMED_OK:
            raise NotExportable(f"{module}.{qualname} is not from gradflow or a versioned library")
        if module.split(".")[0] == "gradflow":
            self.modules.add(module)
        if not importable:
            return f"{module}:{qualname}"
        found = sys.modules.get(module)
        for part in qualname.split("."):
            found = getattr(found, part, None)
        if found is not obj:
            raise NotExportable(f"{module}.{qualname} is not importable under its name")
        return f"{module}:{qualname}"

    def __call__(self, x) -> str:
        d = self
        if x is None or isinstance(x, (bool, int, float, str, bytes)) and type(x) in (bool, int, float, str, bytes):
            return f"{type(x).__name__}:{x!r}"
        if isinstance(x, enum.Enum):
            return f"enum:{d.named(type(x))}.{x.name}"
        if type(x) in (tuple, list):
            return f"{type(x).__name__}(" + ",".join(d(v) for v in x) + ")"
        if type(x) is dict:
            return "dict(" + ",".join(f"{d(k)}={d(v)}" for k, v in x.items()) + ")"
        if type(x) in (frozenset, set):
            return f"{type(x).__name__}(" + ",".join(sorted(d(v) for v in x)) + ")"
        if isinstance(x, np.dtype):
            return f"dtype:{x.str}"
        if isinstance(x, (types.FunctionType, types.BuiltinFunctionType, type, np.ufunc)):
            return f"named:{d.named(x)}"
        if dataclasses.is_dataclass(x) and getattr(type(x), "__dataclass_params__").frozen:
            fields = ",".join(f"{f.name}={d(getattr(x, f.name))}" for f in dataclasses.fields(x))
            return f"dataclass:{d.named(type(x))}({fields})"
        if type(x).__module__.split(".")[0] in _NAMED_OK and not getattr(x, "__dict__", True) and \
                not getattr(type(x), "__slots__", ()):  # a stateless sentinel, e.g. equinox's MISSING
            return f"instance:{d.named(type(x))}"
        raise NotExportable(f"no canonical text for a {type(x).__name__}")

    def treedef(self, treedef) -> str:
        data = treedef.node_data()
        children = ",".join(self.treedef(c) for c in treedef.children())
        if data is None:
            return "*"
        nodetype, aux = data
        return f"{self(nodetype)}[{self(aux)}]({children})"


def _trace_context(d: _Describer) -> str:
    parts = []
    for item in _pinned.trace_context():
        if type(item).__name__ == "AxisEnv":  # the named axes in scope (none outside vmap/shard_map)
            sizes = tuple(sorted((str(k), v) for k, v in dict(item.axis_sizes).items()))
            names = (tuple(sorted(map(str, item.spmd_axis_names))),
                     tuple(sorted(map(str, item.explicit_mesh_axis_names))))
            parts.append("axes:" + d(sizes) + d(names))
        else:
            parts.append(d(item))
    return ";".join(parts)


def _engine_constants(d: _Describer) -> str:
    """Module-level constants (upper-case names) and functions of the engine's modules: changed
    at run time (a test, a user tuning ``UNROLL_LANES``), they change the key."""
    parts = []
    for name in sorted(m for m in sys.modules if m.startswith("gradflow._engine")):
        for attr, value in sorted(vars(sys.modules[name]).items()):
            if attr.startswith("__"):
                continue
            if attr.isupper() and isinstance(value, (bool, int, float, str, tuple, frozenset)):
                parts.append(f"{name}.{attr}={d(value)}")
            elif isinstance(value, types.FunctionType):
                parts.append(f"{name}.{attr}={d.named(value, importable=False)}")
    return ";".join(parts)


_MACHINE: list = []


def _backend_text() -> str:
    """The backend, its version, the device kind, ``XLA_FLAGS`` and (Linux) the CPU's model and
    instruction-set flags: a stored executable runs only where it was compiled."""
    if not _MACHINE:
        cpu = ""
        try:
            with open("/proc/cpuinfo") as f:
                lines = [ln for ln in f if ln.startswith(("model name", "flags"))]
            cpu = hashlib.sha256("".join(sorted(set(lines))).encode()).hexdigest()
        except OSError:
            import platform

            cpu = platform.processor() + platform.machine()
        device = jax.devices()[0]
        _MACHINE.append(f"{jax.default_backend()}:{device.client.platform_version}:{device.device_kind}:cpu={cpu}")
    return _MACHINE[0] + f":XLA_FLAGS={os.environ.get('XLA_FLAGS', '')}"


def _aval_text(x) -> str:
    aval = x.aval if hasattr(x, "aval") else jax.typeof(x)
    return f"{aval.dtype.name}{list(aval.shape)}{'w' if getattr(aval, 'weak_type', False) else ''}"


def _key(fn, static, arrays, options: tuple = ()) -> str:
    """The text key of ``fn`` called with ``static`` (a :class:`gradflow._engine._fastjit._Static`)
    and ``arrays`` (traced values or arrays), compiled with the XLA ``options``.
    **Raises:** :class:`NotExportable`."""
    d = _Describer()
    parts = [
        "fn=" + d.named(fn, importable=False),
        "tree=" + d.treedef(static.treedef),
        "leaves=" + d(tuple(static.leaves)),
        "avals=" + ",".join(_aval_text(x) for x in arrays),
        "options=" + d(tuple(options)),
        "config=" + _trace_context(d),
        "engine=" + _engine_constants(d),
        "jax_config=" + d(tuple(sorted((k, v) for k, v in jax.config.values.items()
                                      if not any(w in k for w in ("cache", "log", "explain"))))),
        "backend=" + _backend_text(),
        "versions=" + d(_versions()),
        "gradflow=" + _package_hash(),
    ]
    sources = []
    for module in sorted(d.modules):
        path = getattr(sys.modules.get(module), "__file__", None)
        if not path:
            raise NotExportable(f"no source file for {module}")
        sources.append(f"{module}={_file_hash(path)}")
    parts.append("sources=" + ",".join(sources))
    return "\n".join(parts)


# ----------------------------------------------------------------------------- output pytrees
_REGISTERED: set = set()


def register_output(cls) -> None:
    """Let :mod:`jax.export` serialise ``cls``, an :class:`equinox.Module` without static fields,
    as a node of an exported program's output (the default node data, i.e. every field a child)."""
    if cls in _REGISTERED:
        return
    blank = object.__new__(cls)
    for f in dataclasses.fields(cls):
        object.__setattr__(blank, f.name, None)
    default_aux = jax.tree_util.tree_structure(blank).node_data()[1]

    def serialize(aux) -> bytes:
        if len(aux) != len(default_aux) or any(a is not b for a, b in zip(aux, default_aux)):
            raise NotExportable(f"{cls.__qualname__} with non-default node data")
        return b""

    def deserialize(data: bytes):
        if data != b"":
            raise ValueError(f"unexpected node data for {cls.__qualname__}")
        return default_aux

    jax.export.register_pytree_node_serialization(
        cls, serialized_name=f"{cls.__module__}.{cls.__qualname__}", serialize_auxdata=serialize,
        deserialize_auxdata=deserialize)
    _REGISTERED.add(cls)


# ----------------------------------------------------------------------------- the store
_MARK_UNEXPORTABLE = b"unexportable\n"
_EXECUTABLE = ".xla"
"""Suffix of the file holding an artefact's compiled executable (beside its exported program)."""


def _path(where: str, fn, key: str) -> str:
    return os.path.join(where, f"{fn.__name__.strip('_')}-{hashlib.sha256(key.encode()).hexdigest()}")


def _frame(key: str, payload: bytes) -> bytes:
    return _MAGIC + key.encode() + b"\n" + hashlib.sha256(payload).hexdigest().encode() + payload


def _read_payload(path: str, key: str):
    """The payload of an intact file of this key, ``False`` for an unexportable marker, or
    ``None`` (no file, or one that is not a complete artefact of this key)."""
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError:
        return None
    if blob == _MARK_UNEXPORTABLE + key.encode():
        return False
    head = _MAGIC + key.encode() + b"\n"
    if not blob.startswith(head) or len(blob) < len(head) + 64:
        return None
    digest, payload = blob[len(head): len(head) + 64], blob[len(head) + 64:]
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        return None
    return payload


def _read(path: str, key: str):
    """The stored :class:`jax.export.Exported`, ``False`` for an unexportable marker, or ``None``."""
    payload = _read_payload(path, key)
    return payload if payload in (None, False) else jax.export.deserialize(bytearray(payload))


def _write(path: str, data: bytes) -> None:
    """Write atomically: a temporary file in the same folder, renamed into place."""
    where = os.path.dirname(path)
    os.makedirs(where, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=where, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


_LOADED: dict = {}
"""This process's programs by ``(fn, static part, abstract arrays)``: a callable of the flat
arrays, or ``None`` (not exportable: the caller traces). Emptied by :func:`clear`."""


def clear() -> None:
    """Forget this process's loaded programs (with :func:`jax.clear_caches`, see
    :func:`gradflow._cache.release_executables`)."""
    _LOADED.clear()


def compiled(fn, static, arrays, options: tuple = ()):
    """``fn(*static.combine(arrays))`` as a compiled program of the flat ``arrays`` (concrete
    arrays), or ``None``: the caller traces ``fn`` with :func:`jax.jit` as usual. ``options``:
    XLA compiler options as ``(name, value)`` pairs (part of the key;
    :data:`gradflow._engine._fastjit.FAST_COMPILE`).

    In order: this process's program for these static settings and abstract arrays; the
    executable stored for the key (deserialised and loaded: no tracing, lowering or compilation);
    the stored exported program (lowered and compiled, i.e. loaded from JAX's compilation
    cache if it is there; no tracing), its executable then stored; else ``fn`` traced, exported,
    compiled and both stored. A program that cannot be exported gives ``None``."""
    if any(isinstance(x, jax.core.Tracer) for x in arrays):
        return None  # called inside a transformation: an executable takes concrete arrays only
    avals = tuple((x.shape, x.dtype, getattr(x, "weak_type", False)) for x in arrays)
    memo = (fn, static, avals, options)
    try:
        return _LOADED[memo]
    except KeyError:
        pass
    run = _compiled(fn, static, arrays, options)
    if len(_LOADED) >= 256:
        _LOADED.clear()
    _LOADED[memo] = run
    return run


def _compiled(fn, static, arrays, options):
    where = folder()
    if where is None or not _pinned.EXPORT_ACTIVE:
        return _count("traced", None)
    try:
        key = _key(fn, static, arrays, options)
    except NotExportable:
        return _count("traced", None)
    path = _path(where, fn, key)
    try:
        exported = _read(path, key)
    except Exception:  # noqa: BLE001 - a stale or damaged artefact: export it again
        exported = None
    if exported is False:
        return _count("traced", None)
    if exported is not None and _matches(exported, arrays):
        try:
            payload = _read_payload(path + _EXECUTABLE, key)
            if payload:
                return _count("loaded", _bind(exported, _load_executable(payload, exported)))
        except Exception:  # noqa: BLE001 - e.g. an executable this jaxlib cannot load: compile it again
            pass
        return _count("from_exported", _compile_and_store(exported, path, key, options=options))  # None: trace
    try:
        exported, jitted, specs = _export(fn, static, arrays, options)
    except Exception:  # noqa: BLE001 - not exportable (host callbacks, output pytrees, ...): remember it
        try:
            _write(path, _MARK_UNEXPORTABLE + key.encode())
        except OSError:
            pass
        return _count("traced", None)
    try:
        payload = bytes(exported.serialize())
        again = jax.export.deserialize(bytearray(payload))  # the same program every later process loads
    except Exception:  # noqa: BLE001 - e.g. flatbuffers missing: trace as usual, store nothing
        return _count("traced", None)
    try:
        _write(path, _frame(key, payload))
    except OSError:
        pass  # a read-only folder: use the program, store nothing
    # the executable is compiled from the traced function itself (its trace is reused), not from
    # the exported program: the same module as the plain traced path, and no lowering of
    # ``call_exported`` (which imports SciPy for its LAPACK set-up: loaded early, it changes which
    # BLAS libraries ``threadpoolctl`` limits in later stiff solves of this process)
    return _count("stored", _compile_and_store(again, path, key, jitted.lower(*specs)))


def _count(what: str, run):
    stats[what if run is not None else "traced"] += 1
    return run


def _flat_call(exported):
    def flat(*xs):
        return jax.tree.leaves(exported.call(*xs))

    flat.__name__ = flat.__qualname__ = exported.fun_name  # the compiled module keeps the function's name
    return flat


_writes = threading.local()


def _on_event(event: str, **kwargs) -> None:
    if event == _pinned.CACHE_WRITE_EVENT:
        _writes.count = getattr(_writes, "count", 0) + 1


jax.monitoring.register_event_listener(_on_event)


def _compile_fresh(lowered):
    """``lowered.compile()`` and whether XLA compiled it here: only when this thread saw JAX write
    the new executable to its persistent cache (:data:`gradflow._engine._pinned.CACHE_WRITE_EVENT`,
    recorded in the compiling thread). An executable from the cache, or no such evidence (an
    untested JAX, listeners cleared), counts as not compiled here."""
    before = getattr(_writes, "count", 0)
    program = lowered.compile()
    return program, getattr(_writes, "count", 0) > before


def _compile_and_store(exported, path: str, key: str, lowered=None, options: tuple = ()):
    """Compile ``lowered`` (default: ``exported`` lowered; JAX's compilation cache applies),
    store its executable (when it can be serialised, and only when XLA compiled it in this
    process) and return the callable (``None`` if it does not compile).

    An executable that came from JAX's persistent compilation cache is never stored (only one
    that :func:`_compile_fresh` saw compiled here is): with jaxlib 0.10.2 on CPU, serialising it
    again gives an executable without its compiled kernels, which fails when run in a later
    process (``NOT_FOUND: Function ... not found``; seen when two ``gradflow reproduce`` workers
    compiled the same program; ``tests/test_export.py``). Without the stored executable, a later
    process compiles the stored program, which JAX's cache then serves."""
    try:
        if lowered is None:
            specs = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type) for a in exported.in_avals]
            lowered = jax.jit(_flat_call(exported), compiler_options=dict(options) or None).lower(*specs)
        program, fresh = _compile_fresh(lowered)
    except Exception:  # noqa: BLE001 - e.g. a program this backend cannot run: the caller traces
        return None
    try:
        if fresh:
            payload, in_tree, out_tree = _pinned.serialize_executable().serialize(program)
            if in_tree == _trees(exported)[0] and out_tree in (exported.out_tree, _trees(exported)[1]):
                _write(path + _EXECUTABLE, _frame(key, payload))
    except Exception:  # noqa: BLE001 - not serialisable, or a read-only folder: nothing stored
        pass
    if program.out_tree == exported.out_tree:
        return lambda arrays: program(*arrays)
    return _bind(exported, program)


def _trees(exported):
    """The calling convention of a stored executable: ``((x_1, ..., x_n), {})`` in, the flat list
    of the output's leaves out (in ``jax.tree.leaves`` order, unflattened by :func:`_bind`)."""
    n_in, n_out = len(exported.in_avals), len(exported.out_avals)
    return jax.tree.structure((tuple(range(n_in)), {})), jax.tree.structure(list(range(n_out)))


def _load_executable(payload: bytes, exported):
    in_tree, out_tree = _trees(exported)
    return _pinned.serialize_executable().deserialize_and_load(payload, in_tree, out_tree)


def _bind(exported, program):
    """The callable of flat arrays returning the exported function's output pytree."""
    out_tree = exported.out_tree

    def run(arrays):
        return out_tree.unflatten(program(*arrays))

    return run


def _matches(exported, arrays) -> bool:
    return len(exported.in_avals) == len(arrays) and all(
        a.shape == tuple(x.shape) and a.dtype == x.dtype for a, x in zip(exported.in_avals, arrays))


def _export(fn, static, arrays, options: tuple = ()):
    def flat(*xs):
        out = fn(*static.combine(xs))
        if not all(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(out)):
            raise NotExportable("an output leaf is not an array")
        return out

    flat.__name__ = flat.__qualname__ = fn.__name__  # the compiled module is named after ``fn``
    specs = [jax.ShapeDtypeStruct(x.shape, x.dtype, weak_type=getattr(x, "weak_type", False)) for x in arrays]
    jitted = jax.jit(flat, compiler_options=dict(options) or None)
    return jax.export.export(jitted, platforms=(jax.default_backend(),))(*specs), jitted, specs
