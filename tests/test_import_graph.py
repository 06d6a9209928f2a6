"""No import cycles among the project's modules (``gradflow/``, ``theory/``, ``sims/``, ``app/``,
``benchmarks/``): data flows one way (docs/index.md's layout; maps → field → solver → trajectory →
metrics → checks/figures), so no module imports, directly or through others, a module that imports
it. Imports inside functions count too: a lazy import that closes a cycle still ties two layers
together. The graph is built from the source with ``ast`` (nothing is imported), and a synthetic
package with a two-module cycle is the negative control."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# import name -> folder (theory/ and sims/ install as gradflow.theory and gradflow.sims)
PACKAGES = {"gradflow": ROOT / "gradflow", "gradflow.theory": ROOT / "theory", "gradflow.sims": ROOT / "sims",
            "gradflow.app": ROOT / "app", "benchmarks": ROOT / "benchmarks"}
# edges allowed for now, each with the reason; an entry whose edge is gone fails the test below
KNOWN: dict = {}


def modules(packages: dict[str, pathlib.Path]) -> dict[str, pathlib.Path]:
    """Every ``.py`` file under each folder, by its import name (``pkg/__init__.py`` is ``pkg``)."""
    out = {}
    for name, folder in packages.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if any(p.startswith(".") or p == "__pycache__" for p in parts):
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([name, *parts])] = path
    return out


def import_graph(packages: dict[str, pathlib.Path]) -> dict[str, set[str]]:
    """``module -> modules of the project it imports`` (anywhere in the file, relative imports
    resolved; ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to
    ``pkg``; a name outside the project is dropped)."""
    mods = modules(packages)
    aliases = {k.rpartition(".")[2]: k for k in packages if "." in k}  # `import theory` -> gradflow.theory

    def resolve(name: str) -> str | None:
        head, _, rest = name.partition(".")
        if head in aliases:
            name = aliases[head] + ("." + rest if rest else "")
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        here = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            else:
                continue
            for target in filter(None, map(resolve, names)):
                if target != mod:
                    graph[mod].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def _without(graph, edges):
    return {m: {t for t in ts if (m, t) not in edges} for m, ts in graph.items()}


def test_the_project_has_no_import_cycles():
    graph = import_graph(PACKAGES)
    assert len(graph) > 80 and "benchmarks.costs" in graph and "gradflow.sims.build" in graph  # it saw the project
    found = cycles(_without(graph, KNOWN))
    assert not found, "import cycles (each list imports itself through its members): " + "; ".join(
        " <-> ".join(c) for c in found)


def test_every_known_exception_still_exists():
    """An allowed edge that no longer exists is removed from ``KNOWN`` (so the exception list
    cannot hide a new cycle through an edge that was fixed)."""
    graph = import_graph(PACKAGES)
    stale = [edge for edge in KNOWN if edge[1] not in graph.get(edge[0], set())]
    assert not stale, f"remove from KNOWN, the import is gone: {stale}"


def _package(tmp_path, files: dict[str, str]) -> dict[str, pathlib.Path]:
    for rel, text in files.items():
        path = tmp_path / "pkg" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return {"pkg": tmp_path / "pkg"}


@pytest.mark.parametrize("a_text, b_text", [
    ("from . import b\n", "from .a import x\n"),                   # relative, at module level
    ("import pkg.b\n", "def f():\n    from pkg import a\n"),      # absolute, the second inside a function
    ("from pkg.sub import c\n", "import pkg.a\n"),                 # through a subpackage: a -> sub.c -> b -> a
])
def test_a_synthetic_cycle_is_detected(tmp_path, a_text, b_text):
    """Negative control: a package whose modules import each other is reported, whichever import
    form closes the cycle; the same package without one of the imports is not."""
    files = {"__init__.py": "", "a.py": a_text, "b.py": b_text, "sub/__init__.py": "", "sub/c.py": "from .. import b\n"}
    graph = import_graph(_package(tmp_path, files))
    found = cycles(graph)
    assert len(found) == 1 and {"pkg.a", "pkg.b"} <= set(found[0]), (graph, found)
    acyclic = import_graph(_package(tmp_path / "control", {**files, "b.py": "import os\n"}))
    assert cycles(acyclic) == [], acyclic
