"""Random mutation run: operator and constant mutations drawn at random, not from a hand-written list.

Unlike :mod:`tests.mutate` (mutations chosen by the test authors), this harness enumerates *every*
mutation site of the files in :data:`TARGETS` from their AST, draws a uniform random sample of
:data:`SAMPLE_SIZE` sites with the fixed seed :data:`SEED`, and runs each mutant against the tests
that execute its line (a line → tests map from one coverage run with per-test contexts), as mutmut
does. A mutant on a line no test executes is *not covered* (a survivor).

Mutation operators (one site = one node and one replacement):

* ``binop``: ``+``↔``-``, ``*``↔``/``, ``//``→``/``, ``%``→``//``, ``**``→``*``, ``&``↔``|``, ``^``→``|``,
  ``<<``↔``>>``, ``@``→``*`` (also in augmented assignments ``+=`` …);
* ``compare``: ``<``→``<=``, ``<=``→``<``, ``>``→``>=``, ``>=``→``>``, ``==``↔``!=``, ``is``↔``is not``,
  ``in``↔``not in`` (one comparator of a chain at a time);
* ``boolop``: ``and``↔``or``;
* ``not``: ``not x`` → ``x``; ``usub``: ``-x`` → ``x``; ``invert``: ``~x`` → ``x``;
* ``const``: ``True``↔``False``; an int ``c`` → ``c + 1`` (so ``0``→``1``, ``1``→``2``) and, for ``c == 1``,
  also ``1``→``0``; a float ``c`` → ``c * 2`` (``0.0``→``1.0``);
* ``return``: ``return <expr>`` → ``return None`` (not where the value is already ``None``).

Skipped: docstrings and every other string (no string mutations), f-strings, type annotations
(arguments, returns, annotated assignments' annotations), ``__all__``, ``warnings.warn``/logging/
``print`` calls, ``raise`` statements' arguments (error messages), and ``if TYPE_CHECKING:`` blocks.

Each mutant runs in a copy of the repository (the worktree is never written) with a fresh
``GRADFLOW_CACHE_DIR``/``XDG_CACHE_HOME``/``JAX_COMPILATION_CACHE_DIR`` per mutant and
``GRADFLOW_NO_CACHE=1``, ``PYTHONDONTWRITEBYTECODE=1`` (so no compiled program or bytecode from the
unmutated source can be served to it); the copy's file is restored in a ``finally``, and at the end
the copy and the worktree's targets are checked against ``git``'s unmutated text.

Rerun (CPU-heavy; about an hour on 2 cores)::

    # 1. the line -> tests map (one coverage run of the default selection; ~25 min on 2 cores)
    nice -n 10 python -m tests.mutate_random coverage          # writes .mutrand/.coverage, .mutrand/junit.xml
    # 2. list / draw the sample (cheap; writes tests/mutate_random_sample.json)
    python -m tests.mutate_random sites
    # 3. run the sampled mutants (results appended to .mutrand/results.jsonl, resumable; --cap N
    #    stops a mutant's run after N s as "stopped", --deadline HH:MM starts none after it)
    nice -n 10 python -m tests.mutate_random run [--only 3 17] [--cap 300] [--deadline 06:52]
    # survivors against every test file importing their module, or given files
    nice -n 10 python -m tests.mutate_random run --only 16 --files-importing --results .mutrand/wide.jsonl
    # the stored sample (drawn at its commit) on today's sources, with the covering tests computed
    # from that commit's coverage map (files moved since: MOVED); how each site was found is recorded
    nice -n 10 python -m tests.mutate_random run --from-sample --tests-from tests.json --only 29 30
    # 4. the table of results
    python -m tests.mutate_random report .mutrand/results.jsonl

Needs ``coverage`` and ``pytest-cov`` (``pip install coverage pytest-cov``) for step 1 only.

Retarget after files move (e.g. ``trajectory.py`` split into ``solution.py``): edit :data:`TARGETS`
(the single list of files/folders) and rerun steps 1-3; the sample is drawn anew (site indices refer to
the sorted site list of the current sources, so a moved file changes the sample: record the commit).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TARGETS = (
    "gradflow/_engine/",
    "gradflow/_integrate.py",
    "gradflow/solution.py",
    "gradflow/attention/trajectory.py",
    "gradflow/_xarray.py",
    "gradflow/attention/sweep.py",
)
"""The files (or folders: every ``*.py`` in them) mutated. The only place to retarget. (The run
reported in ``tests/MUTATION_RESULTS.md`` drew its sample at bb1dec4, when ``Solution`` and
``Trajectory`` were both in ``gradflow/trajectory.py`` and the sweep in ``gradflow/sweep.py``; after
a move the coverage run and the sample are redone: sample indices refer to the sources they were
drawn from.)"""

SEED = 51
"""Seed of the sample (the issue's number)."""

MOVED = {
    "gradflow/trajectory.py": ("gradflow/solution.py", "gradflow/attention/trajectory.py"),
    "gradflow/sweep.py": ("gradflow/attention/sweep.py",),
}
"""Where a file of the stored sample's commit lives now (``run --from-sample`` maps its sites here)."""
SAMPLE_SIZE = 100

WORK = ROOT / ".mutrand"
"""Coverage data, junit timings and results (not committed)."""
SAMPLE_FILE = ROOT / "tests" / "mutate_random_sample.json"


def target_files(root: Path = ROOT) -> list[str]:
    out = []
    for t in TARGETS:
        p = root / t
        if p.is_dir():
            out += sorted(str(f.relative_to(root)) for f in p.glob("*.py"))
        elif p.exists():
            out.append(t)
        else:
            raise SystemExit(f"target {t!r} not found: retarget TARGETS in {__file__}")
    return out


# ----------------------------------------------------------------------------------- sites

_BINOP_SWAP = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
    ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult, ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd,
    ast.BitXor: ast.BitOr, ast.LShift: ast.RShift, ast.RShift: ast.LShift, ast.MatMult: ast.Mult,
}
_CMP_SWAP = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In,
}
_LOG_CALLS = {"warn", "debug", "info", "warning", "error", "exception", "critical", "print"}


@dataclasses.dataclass(frozen=True)
class Site:
    file: str
    line: int
    col: int
    end_line: int
    end_col: int
    kind: str
    old: str
    """The source segment replaced."""
    new: str
    """Its replacement."""

    @property
    def key(self):
        return (self.file, self.line, self.col, self.end_line, self.end_col, self.kind, self.new)

    def describe(self) -> str:
        return f"{self.file}:{self.line} {self.kind}: {self.old!r} -> {self.new!r}"


def _parent_map(tree):
    parents = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    return parents


def _skipped_nodes(tree) -> set[int]:
    """ids of nodes whose subtrees are not mutated."""
    skip: set[int] = set()

    def mark(n):
        for m in ast.walk(n):
            skip.add(id(m))

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs + [node.args.vararg, node.args.kwarg]:
                if a is not None and a.annotation is not None:
                    mark(a.annotation)
            if node.returns is not None:
                mark(node.returns)
        elif isinstance(node, ast.AnnAssign):
            mark(node.annotation)
        elif isinstance(node, ast.Assign):
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                mark(node)
        elif isinstance(node, ast.JoinedStr):
            mark(node)
        elif isinstance(node, ast.Raise):
            mark(node)
        elif isinstance(node, ast.If):
            t = node.test
            if (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"):
                mark(node)
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in _LOG_CALLS:
                mark(node)
    return skip


def _unparse(node) -> str:
    return ast.unparse(node)


def _sites_of_file(rel: str, root: Path = ROOT) -> list[Site]:
    src = (root / rel).read_text()
    tree = ast.parse(src)
    skip = _skipped_nodes(tree)
    parents = _parent_map(tree)
    sites: list[Site] = []

    def seg(node):
        return ast.get_source_segment(src, node)

    def add(node, kind, new_text):
        old = seg(node)
        if old is None or old == new_text:
            return
        sites.append(Site(rel, node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, kind, old, new_text))

    def wrap(expr_node) -> str:
        return "(" + _unparse(expr_node) + ")"

    import copy

    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOP_SWAP:
            m = copy.deepcopy(node)
            m.op = _BINOP_SWAP[type(node.op)]()
            add(node, "binop", wrap(m))
        elif isinstance(node, ast.AugAssign) and type(node.op) in _BINOP_SWAP:
            m = copy.deepcopy(node)
            m.op = _BINOP_SWAP[type(node.op)]()
            add(node, "binop", _unparse(m))
        elif isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _CMP_SWAP:
                    m = copy.deepcopy(node)
                    m.ops[i] = _CMP_SWAP[type(op)]()
                    add(node, "compare", wrap(m))
        elif isinstance(node, ast.BoolOp):
            m = copy.deepcopy(node)
            m.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            add(node, "boolop", wrap(m))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub, ast.Invert)):
            kind = {ast.Not: "not", ast.USub: "usub", ast.Invert: "invert"}[type(node.op)]
            add(node, kind, wrap(node.operand))
        elif isinstance(node, ast.Constant):
            v = node.value
            # docstrings / strings / bytes / None / Ellipsis are never mutated
            if isinstance(v, bool):
                add(node, "const", repr(not v))
            elif isinstance(v, int):
                add(node, "const", repr(v + 1))
                if v == 1:
                    add(node, "const", "0")
            elif isinstance(v, float):
                add(node, "const", repr(v * 2 if v != 0.0 else 1.0))
        elif isinstance(node, ast.Return) and node.value is not None:
            if isinstance(node.value, ast.Constant) and node.value.value is None:
                continue
            sites.append(Site(rel, node.value.lineno, node.value.col_offset, node.value.end_lineno,
                              node.value.end_col_offset, "return", seg(node.value), "None"))
    del parents
    return sites


def all_sites(root: Path = ROOT) -> list[Site]:
    sites = []
    for rel in target_files(root):
        sites += _sites_of_file(rel, root)
    sites = sorted(set(sites), key=lambda s: s.key)
    return sites


def draw(sites: list[Site], n: int = SAMPLE_SIZE, seed: int = SEED) -> list[int]:
    """Indices into ``sites`` (sorted by file, position, kind, replacement): a uniform sample without
    replacement, in drawing order."""
    return random.Random(seed).sample(range(len(sites)), min(n, len(sites)))


def apply(src: str, s: Site) -> str:
    """The source with site ``s`` replaced; the line count is kept (newlines go inside the new
    parentheses) so that later lines keep their numbers."""
    lines = src.splitlines(keepends=True)
    offs = [0]
    for ln in lines:
        offs.append(offs[-1] + len(ln.encode()))
    b = src.encode()
    start = offs[s.line - 1] + s.col
    end = offs[s.end_line - 1] + s.end_col
    old = b[start:end].decode()
    if old != s.old:
        raise ValueError(f"site text changed: {s.describe()} (found {old!r})")
    new = s.new
    extra = s.end_line - s.line
    if extra:
        if new.endswith(")") and new.startswith("("):
            new = new[:-1] + "\n" * extra + ")"
        else:
            new = "(" + new + "\n" * extra + ")"
    out = (b[:start] + new.encode() + b[end:]).decode()
    ast.parse(out)  # must still be Python
    return out


# --------------------------------------------------------------------------- coverage map

def coverage_map(data_file: Path = WORK / ".coverage") -> dict[str, dict[int, set[str]]]:
    """file (relative) -> line -> set of test node ids that executed it."""
    import coverage

    data = coverage.CoverageData(basename=str(data_file))
    data.read()
    out: dict[str, dict[int, set[str]]] = {}
    for f in data.measured_files():
        rel = os.path.relpath(f, ROOT) if os.path.isabs(f) else f
        i = rel.find("gradflow/")
        rel = rel[i:] if i >= 0 else rel
        by_line = data.contexts_by_lineno(f)
        out[rel] = {ln: {c.rsplit("|", 1)[0] for c in ctx if c} for ln, ctx in by_line.items()}
    return out


def junit_times(path: Path = WORK / "junit.xml") -> tuple[dict[str, float], set[str]]:
    """test node id -> seconds, and the node ids that failed/errored at baseline."""
    import xml.etree.ElementTree as ET

    times, bad = {}, set()
    for tc in ET.parse(path).getroot().iter("testcase"):
        cls, name = tc.get("classname", ""), tc.get("name", "")
        parts = cls.split(".")
        # classname "tests.test_x" or "tests.test_x.TestClass"
        mod = []
        for i, p in enumerate(parts):
            mod.append(p)
            if p.startswith("test_"):
                rest = parts[i + 1:]
                break
        else:
            rest = []
        nodeid = "/".join(mod) + ".py::" + "::".join(rest + [name])
        times[nodeid] = times.get(nodeid, 0.0) + float(tc.get("time", 0) or 0)
        if tc.find("failure") is not None or tc.find("error") is not None:
            bad.add(nodeid)
    return times, bad


_INDEX: dict = {}


def _name_index(root: Path = ROOT):
    """(file -> parsed tree, name -> [(file, line)] of every load of that name or attribute, file ->
    line ranges of function and lambda bodies), over the target files (cached)."""
    if not _INDEX:
        trees, uses, bodies = {}, {}, {}
        for rel in target_files(root):
            tree = trees[rel] = ast.parse((root / rel).read_text())
            bodies[rel] = []
            for node in ast.walk(tree):
                name = node.id if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) else \
                    node.attr if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) else None
                if name:
                    uses.setdefault(name, []).append((rel, node.lineno))
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    bodies[rel].append((node.body[0].lineno, node.end_lineno, node))
                elif isinstance(node, ast.Lambda):
                    bodies[rel].append((node.body.lineno, node.body.end_lineno, node))
        _INDEX.update(trees=trees, uses=uses, bodies=bodies)
    return _INDEX["trees"], _INDEX["uses"], _INDEX["bodies"]


def _lines_tests(cmap, rel, first, last):
    lines = cmap.get(rel, {})
    out = set()
    for ln in range(first, last + 1):
        out |= lines.get(ln, set())
    return {t for t in out if t}


def _outermost_body(rel, line):
    """The outermost function (or lambda) whose body holds ``line``, or ``None`` (import-time code:
    module level, class bodies, decorators, defaults)."""
    hits = [(lo, hi, n) for lo, hi, n in _name_index()[2][rel] if lo <= line <= hi]
    return min(hits, key=lambda h: h[0])[2] if hits else None


def _users_tests(cmap, names, rel, lo, hi, seen):
    """Tests executing the uses (in the target files, outside ``rel`` lines lo..hi) of ``names``;
    a use that is itself import-time code is followed to what it defines."""
    out = set()
    for name in names:
        for urel, uline in _name_index()[1].get(name, ()):
            if urel == rel and lo <= uline <= hi:
                continue
            got = _lines_tests(cmap, urel, uline, uline)
            if not got:
                body = _outermost_body(urel, uline)
                if body is None:
                    got = _import_time_tests(cmap, urel, uline, seen)
                elif isinstance(body, (ast.FunctionDef, ast.AsyncFunctionDef)) and (urel, body.name) not in seen:
                    seen.add((urel, body.name))  # a function run only at import (e.g. a tableau's builder)
                    got = _users_tests(cmap, {body.name}, urel, body.lineno, body.end_lineno, seen)
            out |= got
    return out


def _import_time_tests(cmap, rel, line, seen) -> set[str]:
    """Tests for import-time code (module level, class bodies, decorators, defaults: gradflow's
    modules are imported before coverage starts, so these lines carry no test): in a ``def`` header
    (decorators, defaults), the tests executing the function's body; in a class body, those
    executing the class's lines; else (or if none) the tests executing the lines that use the names
    the statement binds (:func:`_users_tests`)."""
    if (rel, line) in seen:
        return set()
    seen.add((rel, line))
    trees = _name_index()[0]
    body, chain = trees[rel].body, []
    while True:
        stmt = next((b for b in body if b.lineno <= line <= b.end_lineno
                     or any(d.lineno <= line <= d.end_lineno for d in getattr(b, "decorator_list", ()))), None)
        if stmt is None:
            break
        chain.append(stmt)
        if isinstance(stmt, ast.ClassDef):
            body = stmt.body
            continue
        break
    if not chain:
        return set()
    node = chain[-1]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        got = _lines_tests(cmap, rel, node.body[0].lineno, node.end_lineno)
        if got:
            return got
        return _users_tests(cmap, {node.name}, rel, node.lineno, node.end_lineno, seen)
    if len(chain) > 1:  # a class body statement (a field's default, a class constant)
        cls = chain[-2]
        got = _lines_tests(cmap, rel, cls.body[0].lineno, cls.end_lineno)
        names = {cls.name}
    else:
        got = set()
        names = set()
    for t in ast.walk(node):
        if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store):
            names.add(t.id)
        elif isinstance(t, ast.alias):
            names.add((t.asname or t.name).split(".")[0])
    return got | _users_tests(cmap, names, rel, node.lineno, node.end_lineno, seen)


def tests_for(s: Site, cmap, bad=frozenset()) -> set[str]:
    """The tests executing the site's lines; for import-time code, :func:`_import_time_tests`; for the
    body of a function run only at import time, the tests of its users. Empty: not covered."""
    out = _lines_tests(cmap, s.file, s.line, s.end_line)
    if not out:
        body = _outermost_body(s.file, s.line)
        if body is None:
            out = _import_time_tests(cmap, s.file, s.line, set())
        elif isinstance(body, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _lines_tests(
                cmap, s.file, body.body[0].lineno, body.end_lineno):
            # a function none of whose lines a test runs: one called at import time has users there
            import_uses = [(u, ln) for u, ln in _name_index()[1].get(body.name, ()) if _outermost_body(u, ln) is None]
            out = set()
            for u, ln in import_uses:
                out |= _import_time_tests(cmap, u, ln, set())
    return {t for t in out if t not in bad}


# ------------------------------------------------------------------------------ the stored sample on moved sources

def _enclosing_def(tree, line):
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= node.end_lineno:
            if best is None or node.lineno > best.lineno:
                best = node
    return best


def remap(entry: dict, commit: str, root: Path = ROOT) -> tuple[Site | None, str]:
    """The site of a stored sample ``entry`` (drawn at ``commit``) in today's sources, and how it was
    found. Same file (or its new home, :data:`MOVED`), same kind, old text, replacement, column and
    whole source line; among several such lines, the one whose +-5 neighbouring lines agree most
    with the old file's. A ``return`` whose expression has changed maps to the only ``return`` of
    the same function (noted as such). ``None``: the site is gone."""
    old_src = subprocess.run(["git", "-C", str(root), "show", f"{commit}:{entry['file']}"],
                             capture_output=True, text=True, check=True).stdout.splitlines()
    line = old_src[entry["line"] - 1]
    ctx = old_src[max(0, entry["line"] - 6): entry["line"] + 5]
    best, best_score = None, -1
    for rel in MOVED.get(entry["file"], (entry["file"],)):
        src = (root / rel).read_text().splitlines()
        for c in _sites_of_file(rel, root):
            if (c.kind, c.old, c.new, c.col) == (entry["kind"], entry["old"], entry["new"], entry["col"]) \
                    and src[c.line - 1] == line:
                score = sum(ln in ctx for ln in src[max(0, c.line - 6): c.line + 5])
                if score > best_score:
                    best, best_score = c, score
    if best is not None:
        return best, "same text" if (best.file, best.line) == (entry["file"], entry["line"]) else \
            f"same text, now {best.file}:{best.line}"
    if entry["kind"] == "return":
        fn = _enclosing_def(ast.parse("\n".join(old_src)), entry["line"])
        for rel in MOVED.get(entry["file"], (entry["file"],)):
            tree = ast.parse((root / rel).read_text())
            defs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and fn is not None and n.name == fn.name]
            rets = [c for c in _sites_of_file(rel, root) if c.kind == "return"
                    and any(d.lineno <= c.line <= d.end_lineno for d in defs)]
            if len(rets) == 1:
                return rets[0], f"the only return of {fn.name}() (its expression changed), now {rel}:{rets[0].line}"
    return None, "gone"


# ------------------------------------------------------------------------------ pytest plugin
# Loaded in the mutant's pytest (-p tests.mutate_random): keeps the collected items whose node id
# is listed in $MUTRAND_SELECT (one per line), files ordered by their tests' baseline time.

def pytest_collection_modifyitems(session, config, items):
    sel = os.environ.get("MUTRAND_SELECT")
    if not sel:
        return
    wanted = [ln for ln in Path(sel).read_text().splitlines() if ln]
    order = {t: i for i, t in enumerate(wanted)}
    keep = [it for it in items if it.nodeid in order]
    files = {}
    for it in keep:
        f = it.nodeid.split("::")[0]
        files.setdefault(f, order[it.nodeid])
    keep.sort(key=lambda it: (files[it.nodeid.split("::")[0]], items.index(it)))
    deselected = [it for it in items if it.nodeid not in order]
    config.hook.pytest_deselected(items=deselected)
    items[:] = keep
    Path(sel + ".found").write_text(str(len(keep)))


# ------------------------------------------------------------------------------ running

def _copy_repo(dst: Path) -> None:
    ignore = shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache", "*.pyc", ".hypothesis", ".venv*", ".mutrand")
    shutil.copytree(ROOT, dst, ignore=ignore, dirs_exist_ok=True)


def _git_text(rel: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), "show", f"HEAD:{rel}"], capture_output=True, text=True, check=True).stdout


def run_mutant(s: Site, work: Path, tests: list[str], times: dict[str, float], files_only: list[str] | None = None,
               timeout: float | None = None, cap: float | None = None) -> dict:
    """Run the tests against mutant ``s`` in the copy ``work``. ``timeout`` (default 3x the tests'
    baseline seconds + 60) ends a run counted as *timeout* (a kill, reported apart); ``cap`` (a
    session's time limit) ends one earlier, counted as *stopped*: neither killed nor survived."""
    path = work / s.file
    original = path.read_text()
    mutated = apply(original, s)
    base_t = sum(times.get(t, 1.0) for t in tests) if files_only is None else None
    if timeout is None:
        timeout = 3 * (base_t or 600.0) + 60.0
    capped = cap is not None and cap < timeout
    limit = min(timeout, cap) if cap is not None else timeout
    with tempfile.TemporaryDirectory(prefix="mutrand-cache-") as cache:
        env = {**os.environ, "PYTHONPATH": str(work), "PYTHONDONTWRITEBYTECODE": "1",
               "GRADFLOW_CACHE_DIR": os.path.join(cache, "gradflow"), "GRADFLOW_NO_CACHE": "1",
               "XDG_CACHE_HOME": os.path.join(cache, "xdg"), "JAX_COMPILATION_CACHE_DIR": os.path.join(cache, "jax")}
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
               "-p", "no:cov", "-o", "addopts=", "--jaxtyping-packages=gradflow,beartype.beartype(conf=beartype.BeartypeConf(is_pep484_tower=True))",
               "-m", "not slow"]
        if files_only is None:
            sel = Path(cache) / "select.txt"
            # files in order of their covering tests' total baseline time (cheapest first), tests in file order
            per_file: dict[str, float] = {}
            for t in tests:
                per_file[t.split("::")[0]] = per_file.get(t.split("::")[0], 0.0) + times.get(t, 1.0)
            ordered = sorted(tests, key=lambda t: (per_file[t.split("::")[0]], t.split("::")[0]))
            sel.write_text("\n".join(ordered) + "\n")
            env["MUTRAND_SELECT"] = str(sel)
            files = sorted(per_file, key=per_file.get)
            parallel = len(files) > 1 and (base_t or 0) > 90
            cmd += ["-p", "tests.mutate_random"]
        else:
            files = files_only
            parallel = True
        cmd += (["-n", "2", "--dist", "loadfile"] if parallel else ["-n", "0"]) + files
        t0 = time.perf_counter()
        out, rc = "", None
        try:
            path.write_text(mutated)
            proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=limit,
                                  start_new_session=True)
            out, rc = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as e:
            out, rc = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""), "timeout"
        finally:
            path.write_text(original)
        found = None
        if files_only is None:
            try:
                found = int((Path(str(sel) + ".found")).read_text())
            except OSError:
                pass
    seconds = time.perf_counter() - t0
    import re

    hit = re.search(r"^(FAILED|ERROR) (\S+)", out, re.M)
    if rc == "timeout":
        status = "stopped (cap)" if capped else "timeout"
    elif rc == 0:
        status = "survived"
    elif rc in (1, 2, 3):  # test failed / interrupted (collection or import error under the mutant) / internal error
        status = "killed"
    else:  # 4 usage error, 5 no tests: a harness problem, not a kill
        status = f"harness error (pytest exit {rc})"
    return dict(status=status, rc=rc, test=hit.group(2) if hit else "", seconds=round(seconds, 1),
                n_tests=len(tests), selected=found, baseline_s=round(base_t, 1) if base_t is not None else None,
                timeout_s=round(timeout), tail=out[-1500:] if status != "survived" else "")


def importing_test_files(module_file: str) -> list[str]:
    """Test files of the default run that import the module of ``module_file`` (by name)."""
    mod = module_file[:-3].replace("/", ".")
    if mod.endswith(".__init__"):
        mod = mod[: -len(".__init__")]
    short = mod.rsplit(".", 1)[-1]
    out = []
    for f in sorted((ROOT / "tests").glob("test_*.py")):
        txt = f.read_text()
        if mod in txt or f"import {short}" in txt or f"from gradflow import {short}" in txt:
            out.append(str(f.relative_to(ROOT)))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.mutate_random", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("coverage", help="the line -> tests map: one coverage run of the default selection")
    sub.add_parser("sites", help="enumerate the sites, draw the sample, write tests/mutate_random_sample.json")
    r = sub.add_parser("run", help="run the sampled mutants (resumable: skips those in .mutrand/results.jsonl)")
    r.add_argument("--only", nargs="*", type=int, help="sample positions (0-based) to run")
    r.add_argument("--files-importing", action="store_true",
                   help="run against every default test file importing the mutated module (for survivors)")
    r.add_argument("--files", nargs="*", help="run against these test files (e.g. all of tests/)")
    r.add_argument("--results", default=str(WORK / "results.jsonl"))
    r.add_argument("--deadline", help="HH:MM UTC: start no mutant after it")
    r.add_argument("--from-sample", action="store_true",
                   help="take the sites from tests/mutate_random_sample.json (drawn at its commit) mapped onto "
                        "today's sources (remap), instead of drawing anew")
    r.add_argument("--tests-from", metavar="JSON",
                   help="each position's covering tests from this file ({pos: [node ids]}; e.g. computed from the "
                        "coverage map of the sample's commit) instead of the coverage map in .mutrand")
    r.add_argument("--timeout", type=float,
                   help="seconds: a run longer than this counts as a kill by timeout (default: 3x the covering "
                        "tests' baseline + 60 s; 3600 s with --files)")
    r.add_argument("--cap", type=float, help="seconds: stop a mutant's run after this (status 'stopped (cap)', unresolved)")
    rep = sub.add_parser("report", help="a markdown table of a results file (the last row per sample position)")
    rep.add_argument("results", nargs="*", default=[str(WORK / "results.jsonl")], help="results files (later rows win)")
    args = p.parse_args(argv)
    WORK.mkdir(exist_ok=True)

    if args.cmd == "coverage":
        rc_file = WORK / "covrc"
        rc_file.write_text("[run]\ninclude =\n" + "".join(
            f"    */{t}*.py\n" if t.endswith("/") else f"    */{t}\n" for t in TARGETS) + "relative_files = true\n")
        cmd = [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "--cov",
               f"--cov-config={rc_file}", "--cov-context=test", "--cov-report=", "-n", "2", "--dist", "loadfile",
               "-q", f"--junitxml={WORK / 'junit.xml'}"]
        env = {**os.environ, "COVERAGE_FILE": str(WORK / ".coverage")}
        return subprocess.run(cmd, cwd=ROOT, env=env).returncode

    if args.cmd == "report":
        rows = {}
        for path in args.results:
            for ln in Path(path).read_text().splitlines():
                row = json.loads(ln)
                rows[row["pos"]] = row
        counts: dict[str, int] = {}
        print("| # | site | status | tests | first failing test | s |")
        print("|---|---|---|---|---|---|")
        for pos in sorted(rows):
            r = rows[pos]
            counts[r["status"]] = counts.get(r["status"], 0) + 1
            site = r["site"].replace("|", "\\|")
            print(f"| {pos} | `{site}` | {r['status']} | {r['n_tests']} | {r['test']} | {r['seconds']:.0f} |")
        print()
        print(", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) + f" (of {len(rows)} run)")
        return 0

    if args.cmd == "run" and args.from_sample:
        stored = json.loads(SAMPLE_FILE.read_text())
        sites, sample, how = [], [], {}
        for e in stored["sample"]:
            site, note = remap(e, stored["commit"])
            how[e["pos"]] = note
            sample.append(len(sites))
            sites.append(site)
    else:
        sites = all_sites()
        sample = draw(sites)
        how = {}
    if args.cmd == "sites":
        per_file: dict[str, int] = {}
        per_kind: dict[str, int] = {}
        for s in sites:
            per_file[s.file] = per_file.get(s.file, 0) + 1
            per_kind[s.kind] = per_kind.get(s.kind, 0) + 1
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        SAMPLE_FILE.write_text(json.dumps(dict(
            commit=commit, seed=SEED, targets=TARGETS, n_sites=len(sites), sites_per_file=per_file,
            sites_per_kind=per_kind, sample=[dict(pos=i, index=j, **dataclasses.asdict(sites[j])) for i, j in enumerate(sample)],
        ), indent=1) + "\n")
        print(f"{len(sites)} sites in {len(per_file)} files; sample of {len(sample)} (seed {SEED}) -> {SAMPLE_FILE}")
        for k, v in sorted(per_kind.items()):
            print(f"  {k:8s} {v}")
        return 0

    # run
    given = None
    if args.tests_from:
        given = {int(k): v for k, v in json.loads(Path(args.tests_from).read_text()).items()}
        cmap = {}
    else:
        cmap = coverage_map()
    times, bad = junit_times()
    results = Path(args.results)
    done = set()
    if results.exists():
        for ln in results.read_text().splitlines():
            done.add(json.loads(ln)["pos"])
    positions = args.only if args.only is not None else list(range(len(sample)))
    with tempfile.TemporaryDirectory(prefix="mutrand-") as tmp:
        work = Path(tmp) / "repo"
        _copy_repo(work)
        try:
            for pos in positions:
                if pos in done and args.only is None:
                    continue
                if args.deadline and time.strftime("%H:%M", time.gmtime()) >= args.deadline:
                    print(f"deadline {args.deadline} reached; stopping", file=sys.stderr)
                    break
                s = sites[sample[pos]]
                if s is None:
                    row = dict(pos=pos, index=sample[pos], site="(gone)", status="site gone", rc=None, test="",
                               seconds=0.0, n_tests=0, mapped=how.get(pos))
                    with results.open("a") as f:
                        f.write(json.dumps(row) + "\n")
                    continue
                if args.files or args.files_importing:
                    files = args.files or importing_test_files(s.file)
                    row = run_mutant(s, work, [], times, files_only=files, timeout=args.timeout or 3600)
                    row["files"] = files
                else:
                    tests = sorted(tests_for(s, cmap, bad)) if given is None else \
                        [t for t in given.get(pos, []) if (ROOT / t.split("::")[0]).exists()]
                    if not tests:
                        row = dict(status="not covered", rc=None, test="", seconds=0.0, n_tests=0)
                    else:
                        row = run_mutant(s, work, tests, times, timeout=args.timeout, cap=args.cap)
                row = dict(pos=pos, index=sample[pos], site=s.describe(), **row)
                if pos in how:
                    row["mapped"] = how[pos]
                with results.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                print(f"[{pos}] {row['status']:9s} {row['seconds']:7.1f}s n={row['n_tests']} {s.describe()} {row['test']}",
                      file=sys.stderr, flush=True)
        finally:
            bad_copy = [f for f in target_files(work) if (work / f).read_text() != (ROOT / f).read_text()]
            if bad_copy:
                print(f"HARNESS ERROR: copy not restored: {bad_copy}", file=sys.stderr)
    diff = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", "--", *target_files()])
    if diff.returncode != 0:
        print("HARNESS ERROR: git diff of the target files is not empty", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
