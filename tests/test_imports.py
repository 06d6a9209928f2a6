"""``import gradflow`` loads only what a flow needs (jax, equinox, diffrax and gradflow's engine):
plotting, optax, progress bars, xarray, the transformer code of the paper's Sec. 4 and the
test-only libraries load when first used. A cold process pays every import (the cold
start; measured in ``benchmarks/``)."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LAZY = ("matplotlib", "optax", "tqdm", "xarray", "gradflow.sims", "gradflow.sims.sec4", "hypothesis", "scipy",
        "gradflow.attention.plot", "gradflow.attention.sweep", "gradflow._descend", "gradflow.attention._descend",
        "gradflow.app", "gradflow.theory")

_SCRIPT = r"""
import json, sys
lazy = sys.argv[1].split(",")
import gradflow
after_import = {m: m in sys.modules for m in lazy}
gradflow.simulate  # the flow's entry point is there without further imports
descend = gradflow.descend  # first use: imports optax
after_descend = {m: m in sys.modules for m in ("optax", "gradflow.attention._descend", "matplotlib")}
import gradflow.attention.plot
after_plot = {m: m in sys.modules for m in ("matplotlib",)}  # still lazy: plot imports it when drawing
import numpy as np
traj = gradflow.simulate(gradflow.LogisticTeacher(np.ones(2)), 0.1 * np.eye(2), np.zeros(2), t1=10.0, ts=[0.0, 1.0, 10.0])
gradflow.attention.plot.trajectory(traj)
after_draw = {m: m in sys.modules for m in ("matplotlib",)}
import gradflow.attention.sweep
after_sweep = {m: m in sys.modules for m in ("tqdm",)}
print(json.dumps(dict(after_import=after_import, after_descend=after_descend, after_plot=after_plot, after_draw=after_draw,
                      after_sweep=after_sweep, descend_ok=descend is gradflow.attention._descend.descend)))
"""


def test_import_gradflow_loads_no_plotting_optax_tqdm_or_transformer_code():
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", _SCRIPT, ",".join(LAZY)], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    loaded = [m for m, present in res["after_import"].items() if present]
    assert not loaded, f"imported by `import gradflow`: {loaded}"
    # controls: the same check sees each of them once it is used
    assert res["after_descend"] == {"optax": True, "gradflow.attention._descend": True, "matplotlib": False}, res
    assert res["after_plot"] == {"matplotlib": False} and res["after_draw"] == {"matplotlib": True}, res
    assert res["after_sweep"] == {"tqdm": True}, res
    assert res["descend_ok"], res


_SIDE_EFFECTS = r"""
import gc, json, sys
before = {"meta_path": len(sys.meta_path), "threshold": gc.get_threshold(), "enabled": gc.isenabled()}
import jax
x64_before = jax.config.jax_enable_x64
import gradflow
after = {"meta_path": len(sys.meta_path), "threshold": gc.get_threshold(), "enabled": gc.isenabled()}
out = {"same": before == after, "frozen": gc.get_freeze_count(), "x64": [x64_before, jax.config.jax_enable_x64]}
if sys.argv[1] == "cli":
    import gradflow.app.cli
    gradflow.app.cli._own_process()  # what the command does first
    out["cli_frozen"] = gc.get_freeze_count()
print(json.dumps(out))
"""


def test_import_has_no_side_effect_but_float64_and_the_command_freezes_gc():
    """``import gradflow`` enables float64 and nothing else: no import hook added to
    ``sys.meta_path``, the garbage collector as it was (nothing frozen, same thresholds). The
    ``gradflow`` command's own process freezes the objects alive after start-up (controls: its
    freeze count is large, and ``GRADFLOW_GC_FREEZE=0`` turns that off)."""
    res = {}
    for flag in ("1", "0"):
        env = {**os.environ, "GRADFLOW_GC_FREEZE": flag, "JAX_ENABLE_X64": "0",
               "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
        out = subprocess.run([sys.executable, "-c", _SIDE_EFFECTS, "cli"], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        res[flag] = json.loads(out.stdout.strip().splitlines()[-1])
    for flag in ("1", "0"):
        assert res[flag]["same"] and res[flag]["frozen"] == 0 and res[flag]["x64"] == [False, True], res
    assert res["1"]["cli_frozen"] > 10_000 and res["0"]["cli_frozen"] == 0, res


def shadowed_submodules(package) -> list[str]:
    """Public names of ``package`` that are also the names of its submodules but bound to something
    else (a function re-exported over its own module: ``import package.name`` then gives the
    module, ``package.name`` the function, and documentation tools resolve the wrong one)."""
    import pkgutil

    subs = {m.name for m in pkgutil.iter_modules(package.__path__)}
    return sorted(n for n in getattr(package, "__all__", ()) if n in subs and
                  type(getattr(package, n, None)).__name__ != "module")


def test_no_public_name_shadows_a_submodule(tmp_path, monkeypatch):
    """The front ends live in private modules (``gradflow._integrate``, ``gradflow.attention._simulate``), so
    ``gradflow.integrate`` and ``gradflow.simulate`` are the functions and nothing else. Negative
    control: a package whose ``__init__`` re-exports ``run`` from its own submodule ``run`` is
    reported."""
    import gradflow

    assert shadowed_submodules(gradflow) == []
    pkg = tmp_path / "shadowpkg"
    pkg.mkdir()
    (pkg / "run.py").write_text("def run():\n    return 1\n")
    (pkg / "__init__.py").write_text("from .run import run\n__all__ = ['run']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    assert shadowed_submodules(importlib.import_module("shadowpkg")) == ["run"]
