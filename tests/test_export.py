"""Serialised solves beside the compilation cache (``gradflow._engine._export``): a new process
loads the stored program instead of tracing it, gets bitwise the traced path's result, and falls
back to tracing on a key miss or a damaged artefact."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from gradflow._engine import _pinned

from gradflow._engine import _export, _fastjit
from gradflow._engine import batch as _batch

# skipped only on an untested jax/jaxlib, decided from the installed versions (not from the flag
# under test, which a bug could turn off on a tested jax: the tests would then skip and pass)
_ON_TESTED_JAX = _pinned.jax.__version__ in _pinned.TESTED_JAX and _pinned.jaxlib.__version__ in _pinned.TESTED_JAX

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# argv: cache folder ("none": no cache), output .npz, then the runs as "n:solver" items
_SCRIPT = r"""
import json, sys
import numpy as np
import gradflow
from gradflow._engine import _export
if sys.argv[1] != "none":
    gradflow.enable_compilation_cache(sys.argv[1])
out = {}
for item in sys.argv[3:]:
    n, solver = item.split(":")
    n = int(n)
    rng = np.random.RandomState(n)
    beta = rng.randn(n)
    traj = gradflow.simulate(gradflow.LogisticTeacher(beta / np.linalg.norm(beta)), 0.1 * rng.randn(n, n), np.zeros(n),
                             t1=1e6, ts=np.geomspace(1e-3, 1e6, 9), rtol=1e-9, atol=1e-11, solver=solver)
    for name in ("V", "a", "Gamma", "s", "loss", "num_steps", "t_end"):
        out[f"{item}/{name}"] = np.asarray(getattr(traj, name))
np.savez(sys.argv[2], **out)
print(json.dumps(_export.stats))
"""


def _run(tmp_path, cache, tag, *items):
    env = {k: v for k, v in os.environ.items() if k not in ("GRADFLOW_NO_CACHE", "EQX_ON_ERROR")}
    path = tmp_path / f"{tag}.npz"
    out = subprocess.run([sys.executable, "-c", _SCRIPT, str(cache), str(path), *items], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    with np.load(path) as z:
        arrays = dict(z)
    return json.loads(out.stdout.strip().splitlines()[-1]), arrays


def _same_bits(x: dict, y: dict, item: str) -> bool:
    keys = [k for k in x if k.startswith(item + "/")]
    return bool(keys) and all(np.array_equal(x[k], y[k]) and x[k].dtype == y[k].dtype for k in keys)


def _stats(**counts):
    return {"loaded": 0, "from_exported": 0, "stored": 0, "traced": 0, **counts}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The results of a process without any cache (the traced path) for n = 3 and 4, shared by
    the tests of this file: nothing is stored, and both shapes are traced."""
    stats, ref = _run(tmp_path_factory.mktemp("reference"), "none", "ref", "3:dopri8", "4:dopri8")
    assert stats == _stats(traced=2), stats  # no cache: nothing stored
    return ref


@pytest.mark.skipif(not _ON_TESTED_JAX, reason="serialised solves are off on an untested jax (gradflow/_engine/_pinned.py)")
def test_new_process_loads_the_stored_solve_bitwise_and_falls_back_on_a_miss(tmp_path, reference):
    """Process 1 (empty cache) traces, exports, compiles and stores ``_fused_round`` (program and
    executable); process 2 loads the executable (no tracing, lowering or compilation) and gives
    bitwise the result of a process without any cache (the traced path); a new shape (n = 4)
    misses and is traced, stored and correct; without its executable the stored program is
    compiled again (no tracing), bitwise the same; a corrupted program file (one payload byte
    flipped) is detected, traced again and rewritten. (A new solver's miss, truncated files and
    another key's file: the in-process tests below.)"""
    cache, ref = tmp_path / "cache", reference

    stats1, first = _run(tmp_path, cache, "first", "3:dopri8")
    assert stats1 == _stats(stored=1), stats1
    stored = sorted(os.listdir(cache / _export.FOLDER))
    assert len(stored) == 2 and stored[0].startswith("fused_round-") and stored[1] == stored[0] + ".xla", stored

    stats2, second = _run(tmp_path, cache, "second", "3:dopri8", "4:dopri8")
    assert stats2 == _stats(loaded=1, stored=1), stats2
    for item in ("3:dopri8", "4:dopri8"):
        assert _same_bits(second, ref, item), item
    assert _same_bits(first, ref, "3:dopri8")
    assert len(os.listdir(cache / _export.FOLDER)) == 4

    program, executable = (cache / _export.FOLDER / name for name in stored)
    executable.unlink()
    stats3, third = _run(tmp_path, cache, "no-executable", "3:dopri8")
    assert stats3 == _stats(from_exported=1), stats3
    assert _same_bits(third, ref, "3:dopri8") and executable.exists()

    blob = bytearray(program.read_bytes())
    broken = blob.copy()
    broken[-100] ^= 0xFF
    program.write_bytes(bytes(broken))
    stats4, fourth = _run(tmp_path, cache, "flipped", "3:dopri8")
    assert stats4 == _stats(stored=1), stats4
    assert _same_bits(fourth, ref, "3:dopri8")
    assert program.read_bytes() == bytes(blob)  # rewritten whole (the exported program is deterministic)


@pytest.mark.skipif(not _ON_TESTED_JAX, reason="serialised solves are off on an untested jax (gradflow/_engine/_pinned.py)")
def test_an_executable_from_jaxs_cache_is_not_stored_again(tmp_path, reference):
    """jaxlib 0.10.2 on CPU: an executable that came from JAX's persistent compilation cache,
    serialised again, has lost its kernels (running it in a later process fails with ``NOT_FOUND:
    Function ... not found``; two ``gradflow reproduce`` workers compiling the same solve stored
    such files). Process 1 stores the solve; its artefacts are removed, JAX's cache kept; process 2
    traces again and its compile comes from JAX's cache: it stores the program but no executable;
    process 3 compiles the stored program afresh and stores that executable; process 4 loads it.
    Every process gives bitwise the result of a process without any cache. (Before the fix,
    process 2 stored the kernel-less executable and process 3 failed.)"""
    import shutil

    cache, ref = tmp_path / "cache", reference
    _run(tmp_path, cache, "first", "3:dopri8")
    shutil.rmtree(cache / _export.FOLDER)
    stats2, second = _run(tmp_path, cache, "second", "3:dopri8")
    assert stats2 == _stats(stored=1), stats2
    names = os.listdir(cache / _export.FOLDER)
    assert len(names) == 1 and not names[0].endswith(".xla"), names  # the program only
    stats3, third = _run(tmp_path, cache, "third", "3:dopri8")
    assert stats3 == _stats(from_exported=1), stats3
    assert sorted(os.listdir(cache / _export.FOLDER)) == [names[0], names[0] + ".xla"]
    stats4, fourth = _run(tmp_path, cache, "fourth", "3:dopri8")
    assert stats4 == _stats(loaded=1), stats4
    for run in (second, third, fourth):
        assert _same_bits(run, ref, "3:dopri8")


def test_damaged_or_foreign_artefacts_are_not_loaded(tmp_path):
    """``_read`` returns the program of an intact file of its key only: a truncated file, a flipped
    byte, another key's file (a hash collision of file names) and garbage give ``None``; the
    intact file (the control) gives the program, which computes the function."""
    import jax
    import jax.numpy as jnp

    exported = jax.export.export(jax.jit(jnp.sin))(jax.ShapeDtypeStruct((3,), jnp.float64))
    payload = bytes(exported.serialize())
    key = "fn=test\nkey"
    path = str(tmp_path / "artefact")
    import hashlib

    blob = _export._MAGIC + key.encode() + b"\n" + hashlib.sha256(payload).hexdigest().encode() + payload
    _export._write(path, blob)
    loaded = _export._read(path, key)
    x = np.array([0.1, 0.2, 0.3])
    assert np.array_equal(np.asarray(loaded.call(x)), np.sin(x))
    assert _export._read(path, key + "!") is None
    flipped = bytearray(blob)
    flipped[-5] ^= 1
    for bad in (blob[: len(blob) - 7], bytes(flipped), b"garbage"):
        _export._write(path, bad)
        assert _export._read(path, key) is None
    assert _export._read(str(tmp_path / "absent"), key) is None
    _export._write(path, _export._MARK_UNEXPORTABLE + key.encode())
    assert _export._read(path, key) is False


class _S:
    """Helper: the static part of a call as ``_fastjit`` partitions it."""

    @staticmethod
    def of(*args):
        return _fastjit._partition(args)


_OPTIONS = (("xla_cpu_use_fusion_emitters", False),)
"""XLA options as the engine passes them (``_fastjit.FAST_COMPILE`` on a tested jaxlib), spelled
out so that these tests do not depend on the installed jaxlib."""


def _simulate_key(**changes):
    import jax.numpy as jnp

    from gradflow.attention.losses import LogisticTeacher
    from gradflow.attention.models import prepare
    from gradflow.attention import value_softmax_flow

    loss = LogisticTeacher(np.ones(3) / np.sqrt(3))
    mdl, V0, a0 = prepare(loss, np.zeros((3, 3)), np.zeros(3), "value-softmax", "softmax", 1.0, batch=False)
    from gradflow._engine.settings import Round, Settings
    from gradflow._engine.solvers import code_of

    args = dict(flow=value_softmax_flow(loss), fargs=(mdl, loss), params0=(V0[None], a0[None]), taus=jnp.zeros(10),
                t1=np.asarray(1e6), rtol=np.asarray(1e-8), atol=np.asarray(1e-10), solver="dopri8", steps=64, cap=512,
                batched=False, keep=9, lane=0)
    options = changes.pop("options", ())
    args.update(changes)
    code = code_of(args["solver"]) if isinstance(args["solver"], str) else args["solver"]
    settings = Settings(taus=args["taus"], t1=args["t1"], rtol=args["rtol"], atol=args["atol"], solver="auto",
                        max_steps=16384, keep=args["keep"], args_batched=args["batched"], lane=args["lane"])
    arrays, static = _S.of(args["flow"], args["fargs"], args["params0"], settings, Round.of(code, args["steps"], args["cap"]))
    return _export._key(_batch._fused_round.__wrapped__, static, arrays, options)


def test_key_names_every_static_setting_and_refuses_what_it_cannot_name(monkeypatch):
    """The key changes with the solver, the longest round (diffrax's ``max_steps``), the number of
    save points, the shapes, the XLA compiler options and an engine constant changed at run time; it does not change with
    array values (traced: the save times, tolerances and a round's step budget);
    a lambda, a local function or a user's class in the static part is not exportable."""
    base = _simulate_key()
    assert base == _simulate_key()  # deterministic
    import jax.numpy as jnp

    assert _simulate_key(taus=jnp.ones(10), rtol=np.asarray(1e-3), steps=512) == base  # values are traced, not keyed
    for change in (dict(solver="tsit5"), dict(cap=256), dict(keep=8), dict(taus=jnp.zeros(11)),
                   dict(params0=(np.zeros((1, 3, 4)), np.zeros((1, 4)))), dict(options=_OPTIONS)):
        assert _simulate_key(**change) != base, change
    monkeypatch.setattr(_batch, "UNROLL_LANES", 1)
    assert _simulate_key() != base
    monkeypatch.undo()
    assert _simulate_key() == base

    from gradflow._engine.solve import Flow

    def local_field(p, a):
        return p

    for flow in (Flow(field=lambda p, a: p), Flow(field=local_field)):
        with pytest.raises(_export.NotExportable):
            _simulate_key(flow=flow)

    class UserThing:  # a user's class as a static leaf: its code is not hashed, so never keyed
        pass

    with pytest.raises(_export.NotExportable):
        _simulate_key(fargs=(UserThing,))


def test_this_process_keeps_one_program_per_compiler_options(monkeypatch):
    """``compiled`` remembers a program per function, static part, abstract arrays and XLA options:
    the same call with the other options gets its own program (not the one compiled for the first),
    and each is reused on a repeated call. (Negative control: the mutation
    ``export_memo_options_ignored`` of ``tests/mutate.py``, the memo without the options, fails it.)"""
    made = []

    def fake(fn, static, arrays, options):
        made.append(options)
        return ("program", options)

    monkeypatch.setattr(_export, "_compiled", fake)
    monkeypatch.setattr(_export, "_LOADED", {})
    arrays = [np.zeros(3)]
    plain = _export.compiled(test_this_process_keeps_one_program_per_compiler_options, "static", arrays, ())
    fast = _export.compiled(test_this_process_keeps_one_program_per_compiler_options, "static", arrays, _OPTIONS)
    assert plain == ("program", ()) and fast == ("program", _OPTIONS)
    assert _export.compiled(test_this_process_keeps_one_program_per_compiler_options, "static", arrays, ()) is plain
    assert made == [(), _OPTIONS]
