"""Report helpers shared by the benchmark modules and ``benchmarks.pages``: a generated section of
a Markdown report, and the stiff family's ratio to SciPy LSODA at equal accuracy (no JAX, no
SciPy: the pages are regenerated from the JSON alone)."""

from __future__ import annotations


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
