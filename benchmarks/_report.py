"""Report helper shared by the benchmark modules: a generated section of a Markdown report."""

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
