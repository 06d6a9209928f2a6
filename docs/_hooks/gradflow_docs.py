"""MkDocs hooks for gradflow's documentation site (``mkdocs.yml``: ``hooks:``).

- Bundles MathJax (``tex-svg.js``, self-contained SVG output) from the ``django-static-mathjax``
  package into the site, so equations render without network access.
- Adds the committed gallery (``figures/**.png``, ``*.gif``) under ``figures/`` so the Figures page
  (which includes ``figures/README.md``) shows the plots.
- ``<!-- include PATH [demote] -->`` on its own line includes a repository file (the gallery's and
  the benchmarks' reports), with the blank line before lists that Python-Markdown needs.
- Executes every ``examples/*.py`` (in a temporary folder, ``MPLBACKEND=Agg``) and generates one
  page per example with its source, its printed output and the PNGs it wrote; an example that
  fails (non-zero exit) fails the build. ``GRADFLOW_DOCS_SKIP_EXAMPLES=1`` skips the runs (pages
  then say so) for quick local previews.
- Drops the Sphinx role prefixes of the docstrings (``:func:``, ``:class:``, ``:data:``, …), which
  the Markdown rendering of mkdocstrings shows literally before the code span: ``:func:`x``` reads
  as ``x`` in code.
- Expands ``<!-- gradflow-api -->`` in ``api.md`` into one mkdocstrings block per name in
  ``gradflow.__all__`` (read from the source, not imported), so a public name added to the package
  appears in the reference without editing the page.
"""

from __future__ import annotations

import ast
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BUILD_DIR: str | None = None


def _mathjax_script() -> str:
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise PluginError("MathJax not found: install the docs extra (pip install -e '.[docs]'), "
                          "which brings django-static-mathjax")
    for base in spec.submodule_search_locations:
        path = os.path.join(base, "static", "mathjax", "es5", "tex-svg.js")
        if os.path.exists(path):
            return path
    raise PluginError("the installed 'mathjax' package has no static/mathjax/es5/tex-svg.js")


def _example_page(script: str, out_dir: str, run: dict | None) -> str:
    name = os.path.splitext(os.path.basename(script))[0]
    with open(script) as f:
        source = f.read()
    tree = ast.parse(source)
    doc = ast.get_docstring(tree) or name
    if ast.get_docstring(tree) is not None:  # the docstring is the page's text: show the code below it
        source = "\n".join(source.splitlines()[tree.body[0].end_lineno:]).lstrip("\n")
    title, _, rest = doc.partition("\n")
    lines = [f"# {title.strip()}", "", rest.strip(), "",
             f"Source: `examples/{name}.py` (run it with `python examples/{name}.py` from the repository root).", "",
             "```python", source.rstrip(), "```", ""]
    if run is None:
        lines += ["!!! note", "    Not executed in this build (`GRADFLOW_DOCS_SKIP_EXAMPLES=1`).", ""]
        return "\n".join(lines)
    lines += ["## Output", "", f"Executed when these pages were built ({run['seconds']:.1f} s):", "",
              "```text", run["stdout"].rstrip() or "(no output)", "```", ""]
    for png in run["pngs"]:
        lines += [f"![{png}]({name}/{png})", ""]
    return "\n".join(lines)


def _run_example(script: str, work: str) -> dict:
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, script], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise PluginError(f"example {os.path.basename(script)} failed (exit {proc.returncode}):\n"
                          f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    pngs = sorted(os.path.relpath(p, work) for p in glob.glob(os.path.join(work, "**", "*.png"), recursive=True))
    return {"stdout": proc.stdout, "seconds": seconds, "pngs": pngs}


def on_files(files, config):
    global _BUILD_DIR
    # MathJax, bundled
    files.append(File.generated(config, "javascripts/mathjax/tex-svg.js", abs_src_path=_mathjax_script()))
    # the committed gallery
    for path in sorted(glob.glob(os.path.join(ROOT, "figures", "**", "*.*"), recursive=True)):
        if os.path.splitext(path)[1] not in (".png", ".gif"):
            continue
        uri = "figures/" + os.path.relpath(path, os.path.join(ROOT, "figures")).replace(os.sep, "/")
        if files.get_file_from_path(uri) is None:
            files.append(File.generated(config, uri, abs_src_path=path))
    # executed examples
    _BUILD_DIR = tempfile.mkdtemp(prefix="gradflow-docs-")
    skip = os.environ.get("GRADFLOW_DOCS_SKIP_EXAMPLES") == "1"
    for script in sorted(glob.glob(os.path.join(ROOT, "examples", "*.py"))):
        name = os.path.splitext(os.path.basename(script))[0]
        work = os.path.join(_BUILD_DIR, name)
        os.makedirs(work)
        run = None if skip else _run_example(script, work)
        files.append(File.generated(config, f"examples/{name}.md", content=_example_page(script, work, run)))
        for png in (run or {}).get("pngs", []):
            files.append(File.generated(config, f"examples/{name}/{png}", abs_src_path=os.path.join(work, png)))
    return files


def _public_names() -> list[str]:
    with open(os.path.join(ROOT, "gradflow", "__init__.py")) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return [ast.literal_eval(elt) for elt in node.value.elts]
    raise PluginError("gradflow/__init__.py has no __all__")


def _lazy_names() -> dict[str, str]:
    """``gradflow._LAZY``: public names imported on first use, mapped to their defining module."""
    with open(os.path.join(ROOT, "gradflow", "__init__.py")) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_LAZY" for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


_MODULES = {"maps", "attention"}  # public names that are modules: documented on their own (or through their names)


_INCLUDE = re.compile(r"^<!-- include (\S+)( demote)? -->$", re.MULTILINE)


def _include(match) -> str:
    """The text of a repository file for ``<!-- include PATH [demote] -->``: a blank line is put
    before a list that follows a paragraph line (GitHub renders such lists, Python-Markdown does
    not); ``demote`` moves every heading one level down."""
    with open(os.path.join(ROOT, match.group(1))) as f:
        lines = f.read().splitlines()
    out, fenced = [], False
    for line in lines:
        if line.startswith("```"):
            fenced = not fenced
        if not fenced:
            if match.group(2) and line.startswith("#"):
                line = "#" + line
            if line.startswith("- ") and out and out[-1].strip() and not out[-1].startswith(("- ", " ", "|")):
                out.append("")
        out.append(line)
    return "\n".join(out)


def on_page_markdown(markdown, page, config, files):
    markdown = _INCLUDE.sub(_include, markdown)
    if "<!-- gradflow-api -->" not in markdown:
        return markdown
    blocks = []
    for name in sorted(_public_names(), key=str.lower):
        if name in _MODULES:
            continue
        lazy = _lazy_names().get(name)
        if lazy:  # imported on first use (PEP 562): documented from the module that defines it
            blocks += [f"::: gradflow{lazy}.{name}", "    options:", "      show_root_full_path: false", ""]
        else:
            blocks += [f"::: gradflow.{name}", ""]
    return markdown.replace("<!-- gradflow-api -->", "\n".join(blocks))


_ROLE = re.compile(r":(?:func|class|data|mod|meth|attr|obj|exc|const|py:\w+):(?=<code>)")


def strip_roles(html: str) -> str:
    """``html`` without the Sphinx role prefixes in front of code spans (``:func:<code>x</code>``
    becomes ``<code>x</code>``); text that is not followed by a code span is left alone."""
    return _ROLE.sub("", html)


def on_page_content(html, page, config, files):
    return strip_roles(html)


def on_post_build(config):
    if _BUILD_DIR and os.path.isdir(_BUILD_DIR):
        shutil.rmtree(_BUILD_DIR, ignore_errors=True)
