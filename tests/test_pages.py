"""The front door: every measured number on README.md and the docs comes from the committed
benchmark JSON through ``python -m benchmarks.pages`` (no benchmark runs here, only the
regeneration), the README stays short and its links resolve, and CI runs the README's test
command."""

from __future__ import annotations

import json
import pathlib
import re
import shutil

import pytest

from benchmarks import pages

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _copy(tmp_path) -> pathlib.Path:
    for page in pages.PAGES:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / page, tmp_path / page)
    (tmp_path / "benchmarks").mkdir(exist_ok=True)
    for name in ("RESULTS.json", "COSTS.json", "COMMANDS.json", *(n for _, n in pages.OPTIONAL)):
        if (ROOT / "benchmarks" / name).exists():
            shutil.copy(ROOT / "benchmarks" / name, tmp_path / "benchmarks" / name)
    return tmp_path


def test_committed_pages_are_what_the_generator_writes():
    data = pages.load()
    stale = [p for p in pages.PAGES if pages.render((ROOT / p).read_text(), data, p) != (ROOT / p).read_text()]
    assert not stale, f"run python -m benchmarks.pages: {stale} differ from the benchmark JSON"
    assert pages.main(["--check"]) == 0


def test_a_hand_edited_number_is_caught_and_rewritten(tmp_path):
    """Control: a number changed inside a generated block (or in the JSON) makes ``--check`` fail;
    running the script puts the JSON's number back."""
    root = _copy(tmp_path)
    readme = root / "README.md"
    cmds = root / "benchmarks" / "COMMANDS.json"
    tests = json.loads(cmds.read_text())["tests"]
    count = f"{tests['tests']} tests"
    edited = readme.read_text().replace(count, f"{tests['tests'] + 9} tests", 1)
    assert edited != readme.read_text()
    readme.write_text(edited)
    assert pages.main(["--check", "--root", str(root)]) == 1
    assert pages.main(["--root", str(root)]) == 0 and count in readme.read_text()
    assert pages.main(["--check", "--root", str(root)]) == 0
    minutes = f'"minutes": {tests["minutes"]}'
    assert minutes in cmds.read_text()
    cmds.write_text(cmds.read_text().replace(minutes, f'"minutes": {tests["minutes"] + 1}'))
    assert pages.main(["--check", "--root", str(root)]) == 1


def test_every_block_is_used_and_every_number_of_the_commands_is_in_one_place():
    used = {m for p in pages.PAGES for m in re.findall(r"<!-- generated:([a-z0-9-]+) -->", (ROOT / p).read_text())}
    assert used == set(pages.BLOCKS)
    # no page states the command times outside the generated blocks (they once contradicted each other)
    for p in pages.PAGES:
        outside = pages.BLOCK.sub("", (ROOT / p).read_text())
        assert not re.search(r"\b\d+ (min|minutes)\b.*\b(cores|CPU)", outside), (p, re.findall(r".*\d+ min.*", outside))


@pytest.mark.bad_input
@pytest.mark.parametrize("text, match", [
    ("<!-- generated:nope -->\nx\n<!-- /generated -->\n", r"generated:nope: no such block"),
    ("<!-- generated:commands -->\nx\n", r"without its <!-- /generated -->"),
    ("<!-- generated:commands -->\n<!-- generated:stiff -->\n<!-- /generated -->\n", r"opens inside it"),
])
def test_malformed_blocks_are_refused(text, match):
    with pytest.raises(pages.PagesError, match=match):
        pages.render(text, pages.load(), "page.md")


def test_readme_is_short_and_its_links_resolve():
    lines = README.splitlines()
    assert len(lines) <= 100, len(lines)
    links = re.findall(r"\]\(([^)#]+)\)", README)
    assert len(links) >= 10
    missing = [link for link in links if not link.startswith("http") and not (ROOT / link).exists()]
    assert not missing, missing


def test_ci_runs_the_readme_test_command():
    """``.ci/run`` calls the test command the README gives (its last ``&&`` step), as its own line."""
    block = re.search(r"# the tests:.*\n(.*)\n", README).group(1)
    command = block.split("&&")[-1].strip()
    assert command == "python -m pytest"
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert command in ci
    # control: a CI script that runs only part of the suite does not pass the same check
    assert command not in [line.replace("python -m pytest", "python -m pytest tests/test_cli.py") for line in ci]
