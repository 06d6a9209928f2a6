"""Report helpers shared by the benchmark modules and ``benchmarks.pages``: a generated section of
a Markdown report, a standalone report written atomically, the machine's CPU and revision, and the
stiff family's ratio to SciPy LSODA at equal accuracy (no JAX, no SciPy: the pages are regenerated
from the JSON alone)."""

from __future__ import annotations

import json
import os
import sys
import platform
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_and_revision() -> tuple[str, str]:
    """The CPU's model name (``/proc/cpuinfo``, else :func:`platform.processor`) and the checkout's
    short git revision (``"unknown"`` outside a git checkout)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return cpu, rev or "unknown"


def section(begin: str, end: str, heading: str, body: str) -> str:
    """A ``RESULTS.md`` section: ``## heading`` and ``body`` between the markers ``begin`` … ``end``
    (replaced in place by later runs, :func:`insert`)."""
    return f"{begin}\n## {heading}\n\n{body}{end}\n"


def insert(md: str, text: str, begin: str, end: str) -> str:
    """``md`` with the section ``text`` (:func:`section`) replaced, or put before "Stiff flows"."""
    return put_section(md, text, begin, end, md.find("\n## Stiff flows"))


def write_report(out: str, title: str, body: str, res: dict, default=str) -> str:
    """Write ``# title`` and ``body`` to ``out`` and ``res`` as JSON beside it (``.json``), each
    atomically (:func:`gradflow.io.atomic_write`); ``default`` serialises what JSON cannot.
    Returns the Markdown written."""
    from gradflow.io import atomic_write

    text = f"# {title}\n\n{body}"
    atomic_write(out, lambda f: f.write(text.encode()))
    atomic_write(os.path.splitext(out)[0] + ".json", lambda f: f.write(json.dumps(res, indent=1, default=default).encode()))
    return text


def command(prog: str, quick: bool = False, **repeated) -> str:
    """The command line a report records: ``python -m PROG`` with ``--quick`` if asked and one
    ``--NAME VALUE`` per value of each ``repeated`` option (a list, or ``None``: not given)."""
    cmd = f"python -m {prog}" + (" --quick" if quick else "")
    for name, values in repeated.items():
        cmd += "".join(f" --{name.replace('_', '-')} {v}" for v in values or ())
    return cmd


def published(text: str, out: str, who: str) -> int:
    """Print the report ``text`` and say on stderr that ``who`` wrote it to ``out``; exit status 0."""
    print(text)
    print(f"{who}: wrote {out}", file=sys.stderr)
    return 0


def put_section(md: str, text: str, begin: str, end: str, anchor: int) -> str:
    """``md`` with the section between the markers ``begin`` … ``end`` (and its newline) replaced by
    ``text``; without that section, ``text`` goes before the line that starts after ``md[anchor]``
    (a newline, e.g. ``md.find("\\n## Stiff flows")``), or at the end if ``anchor < 0``."""
    if begin in md and end in md:
        start, stop = md.index(begin), md.index(end) + len(end) + 1
        return md[:start] + text + md[stop:]
    if anchor < 0:
        return md.rstrip("\n") + "\n\n" + text
    return md[:anchor + 1] + text + "\n" + md[anchor + 1:]


def equal_accuracy(rows) -> list[dict]:
    """Per (κ, gradflow row): the cheapest SciPy LSODA run (one BLAS thread, any tolerance) whose
    error is at most gradflow's, and the time ratio; ``lsoda = None`` if no LSODA run got there."""
    out = []
    for g in (r for r in rows if r["method"].startswith("gradflow")):
        cands = [r for r in rows if r["kappa"] == g["kappa"] and r["method"].startswith("SciPy LSODA")
                 and "default" not in r["method"] and r["error"] <= g["error"]]
        best = min(cands, key=lambda r: r["time_s"]) if cands else None
        out.append(dict(kappa=g["kappa"], method=g["method"], lsoda=best and best["method"],
                        ratio=best and best["time_s"] / g["time_s"]))
    return out
