"""The scripts in ``examples/`` run to completion (each asserts its own results). CI runs them
when it builds the docs (``mkdocs build --strict`` executes every example); here they are slow
tests: ``python -m pytest -m slow tests/test_examples.py``."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def test_there_are_examples():
    assert {p.stem for p in EXAMPLES} >= {"quickstart", "own_check", "sweep_xarray", "own_model", "max_margin", "transformer_sinks"}


@pytest.mark.slow
@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs(script, tmp_path):
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert list((tmp_path / "out" / "examples").glob("*.png")) or script.stem == "own_check"
