"""The figure registry (``gradflow.sims.registry``) writes each id once: every registered id
resolves to a figure of that id, every figure defined under ``sims/`` is registered exactly once,
and an unknown or mis-registered id fails (negative controls)."""

from __future__ import annotations

import importlib
import json
import os
import pkgutil

import pytest

import gradflow
import gradflow.sims
from gradflow.sims import registry
from gradflow.sims.build import Figure


def _figures_defined() -> dict[str, list[str]]:
    """``{"module:attr": ...}`` of every Figure object defined at module level under gradflow.sims."""
    found = []
    for info in pkgutil.walk_packages(gradflow.sims.__path__, "gradflow.sims."):
        mod = importlib.import_module(info.name)
        for attr, value in vars(mod).items():
            if isinstance(value, Figure):
                found.append(f"{info.name.removeprefix('gradflow.sims.')}:{attr}")
    return found


def test_every_registered_id_resolves_to_its_figure():
    for fig_id in registry.figure_ids():
        fig = registry.get_figure(fig_id)
        assert isinstance(fig, Figure) and fig.id == fig_id and fig.title
        cfg = fig.config(True)
        json.dumps(cfg, default=str)  # the config is the cache key: JSON-serialisable
        assert callable(fig.compute) and callable(fig.plot)


def test_every_figure_is_registered_once():
    defined = sorted(_figures_defined())
    registered = sorted(t if ":" in t else t + ":FIGURE" for t in registry.FIGURES.values())
    assert defined == registered
    assert len(set(registered)) == len(registered)


def test_unknown_and_misregistered_ids_fail(monkeypatch):
    with pytest.raises(gradflow.GradflowValueError, match=r"^figure id: got 'fig99'; expected one of \['fig2'"):
        registry.get_figure("fig99")
    monkeypatch.setitem(registry.FIGURES, "broken", "paper.fig2:NOT_THERE")
    with pytest.raises(AttributeError, match="NOT_THERE"):
        registry.get_figure("broken")
    monkeypatch.setitem(registry.FIGURES, "orphan", "paper.nope")
    with pytest.raises(ModuleNotFoundError):
        registry.get_figure("orphan")


def test_registry_check_sees_an_unregistered_figure(monkeypatch):
    """Control for the once-check: a figure left out of the registry makes the two lists differ."""
    monkeypatch.delitem(registry.FIGURES, "kl")
    registered = sorted(t if ":" in t else t + ":FIGURE" for t in registry.FIGURES.values())
    assert sorted(_figures_defined()) != registered


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _same(a, b, rtol=1e-12) -> bool:
    """``a == b`` for JSON values, floats within ``rtol``: a summary recomputed from the same data
    under another numpy or BLAS build can differ in the last bit (seen: 0.9990028165197253 vs
    0.9990028165197251 after a numpy upgrade)."""
    if isinstance(a, float) or isinstance(b, float):
        return (isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool)
                and not isinstance(b, bool) and abs(a - b) <= rtol * max(abs(a), abs(b)))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], rtol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y, rtol) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def test_same_summary_tolerates_the_last_bit_only():
    """:func:`_same` against hand-made values: the last bit passes, anything larger, a changed key,
    string, length or None does not."""
    x = 0.9990028165197253
    assert _same({"a": [x, 1, "s", None]}, {"a": [0.9990028165197251, 1, "s", None]})
    for other in ({"a": [x * (1 + 1e-9), 1, "s", None]}, {"a": [x, 2, "s", None]}, {"a": [x, 1, "t", None]},
                  {"a": [x, 1, "s"]}, {"b": [x, 1, "s", None]}, {"a": [x, 1, "s", 0.0]}, {"a": [None, 1, "s", None]}):
        assert not _same({"a": [x, 1, "s", None]}, other), other


def test_committed_gallery_is_current_and_replots_to_its_summaries(monkeypatch, tmp_path):
    """Every committed paper-scale figure (``figures/ID.npz``) was made from today's config (its
    stored hash), and today's summary code gives the committed ``figures/ID.json`` summary from
    that data. A change to a figure's config or summary needs the gallery rebuilt:
    ``GRADFLOW_SEC4_TRAIN=0 gradflow figures ID --out figures`` (re-plots when only the summary
    changed; the Sec. 4 ids read the committed runs). Control: a perturbed config is stale."""
    from gradflow.sims.build import _json_default, _load_cached

    monkeypatch.chdir(ROOT)  # the Sec. 4 configs list the committed runs under ./figures/transformer-runs
    monkeypatch.setenv("GRADFLOW_SEC4_TRAIN", "0")
    # only the committed runs count: runs trained on this machine (the run cache) are not in the gallery
    monkeypatch.setenv("GRADFLOW_RUNS_CACHE", str(tmp_path / "no-runs"))
    folder = os.path.join(ROOT, "figures")
    checked = 0
    for fid in registry.figure_ids():
        fig = registry.get_figure(fid)
        cfg = fig.config(False)
        data = _load_cached(fig, cfg, folder)
        assert data is not None, f"figures/{fid}.npz was not made from today's config: rebuild it"
        with open(os.path.join(folder, f"{fid}.json")) as f:
            committed = json.load(f)["summary"]
        today = json.loads(json.dumps(fig.summary(data, cfg) if fig.summary else {}, default=_json_default))
        assert _same(today, committed), (fid, {k for k in set(today) | set(committed)
                                               if not _same(today.get(k), committed.get(k))})
        checked += 1
        if fid == "fig2":  # control: the same data under another config is not taken as current
            assert _load_cached(fig, {**cfg, "seed": cfg["seed"] + 1}, folder) is None
    assert checked == len(registry.figure_ids()) == 24
