"""One provenance helper (``gradflow._provenance``) and the Sec. 4 run cache's provenance: the
figure data is keyed by a hash of the training code, each run says whether it was trained or
loaded and from where, and the committed runs under ``figures/transformer-runs`` are still found."""

from __future__ import annotations

import importlib
import os
import sys

import pytest

from gradflow import GradflowValueError, _provenance
from gradflow.app import cli
from gradflow.sims.sec4 import _figures, grids

train = importlib.import_module("gradflow.sims.sec4.train")  # the package's name `train` is the function


def test_source_hash_follows_the_source(tmp_path, monkeypatch):
    """Same source, same hash; one character changed, another hash (control); a module without a
    .py file is refused."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "prov_mod_a.py").write_text("X = 1\n")
    mod = importlib.import_module("prov_mod_a")
    first = _provenance.source_hash(mod)
    assert first == _provenance.source_hash("prov_mod_a") and len(first) == 12
    (tmp_path / "prov_mod_a.py").write_text("X = 2\n")
    assert _provenance.source_hash(mod) != first
    with pytest.raises(GradflowValueError, match=r"^source_hash: got module 'sys'"):
        _provenance.source_hash(sys)


def test_one_helper_gives_every_record_its_versions():
    from gradflow import _xarray
    from gradflow.attention import sweep
    from gradflow.sims import build

    v = _provenance.versions()
    assert _xarray.provenance()["version_gradflow"] == v["gradflow"] == sweep._versions()["version_gradflow"]
    assert build.provenance()["packages"]["gradflow"] == v["gradflow"]
    assert build.provenance()["git_revision"] == _provenance.git_revision()


def test_sec4_figures_are_keyed_by_the_training_code_not_a_version_number(monkeypatch):
    cfg = _figures.config(True, ("groups",))
    assert cfg["code_hash"] == train.code_hash() == _provenance.source_hash(*train.CODE_MODULES)
    monkeypatch.setattr(train, "code_hash", lambda: "0" * 12)  # control: other code, another key
    monkeypatch.setattr(_figures, "code_hash", train.code_hash)
    assert _figures.config(True, ("groups",))["code_hash"] != cfg["code_hash"]


def test_committed_runs_are_still_found_and_say_where_from(monkeypatch, tmp_path):
    """A paper-scale group run committed under figures/transformer-runs is found (run from the
    repository root) and reports ``loaded`` from that folder; with the committed folder pointed
    elsewhere (control) it is not found and nothing is trained."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    monkeypatch.chdir(root)
    monkeypatch.setenv("GRADFLOW_RUNS_CACHE", str(tmp_path / "cache"))
    cfg = grids.make_config("groups", "softmax", True, grids.group_runs(False, [0])[0])
    hit = grids.find_result(cfg, quick=False)
    assert hit is not None, "the committed run of softmax/groups/seed 0 is no longer found"
    path, res = hit
    assert os.path.commonpath([os.path.abspath(path), os.path.join(root, "figures", "transformer-runs")]) == \
        os.path.join(root, "figures", "transformer-runs")
    assert res["origin"]["how"] == "loaded" and res["origin"]["path"] == os.path.relpath(path)
    assert res["origin"]["path"].startswith(os.path.join("figures", "transformer-runs"))  # no machine's path
    assert "code_hash" in res["origin"]
    monkeypatch.setenv(grids.COMMITTED_RUNS_ENV, str(tmp_path / "nothing"))
    assert grids.find_result(cfg, quick=False) is None


def test_the_cli_says_loaded_or_trained_and_from_where():
    runs = [{"name": "a", "how": "loaded", "path": "/c/quick/a.npz"}, {"name": "b", "how": "loaded", "path": "/c/quick/b.npz"},
            {"name": "c", "how": "trained", "path": "/x/quick/c.npz"}]
    assert cli._how_computed(runs) == "loaded 2 runs from /c/quick; trained 1 run into /x/quick"
    assert cli._how_computed([]) == cli._how_computed(None) == "computed"  # control: a figure without runs
