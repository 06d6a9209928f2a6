"""`gradflow check`: table, --json, exit statuses."""

import json

from gradflow.app.cli import main


def test_unknown_id_exits_2(capsys):
    assert main(["check", "thm9.9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gradflow: error:")


def test_json_and_table(capsys):
    assert main(["check", "thm3.3b", "--trials", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in out] == ["thm3.3b"]
    assert set(out[0]) == {"id", "statement", "holds", "trials", "worst_margin", "control_holds", "details"}
    assert out[0]["holds"] is True and out[0]["control_holds"] is False
    assert main(["check", "thm3.3b", "--trials", "2"]) == 0
    table = capsys.readouterr().out
    assert "thm3.3b" in table and "worst margin" in table


def test_exit_1_when_a_check_fails_or_a_control_holds(monkeypatch, capsys):
    from gradflow import theory
    from gradflow.theory import CheckResult

    def fake(holds, control_holds):
        return lambda trials=16, seed=0: CheckResult(
            id="thm3.3b", statement="stub", holds=holds, trials=1, worst_margin=1.0 if holds else -1.0,
            control_holds=control_holds, details={},
        )

    for holds, control_holds, code in [(True, False, 0), (False, False, 1), (True, True, 1)]:
        monkeypatch.setitem(theory.registry.CHECKS, "thm3.3b", fake(holds, control_holds))
        assert main(["check", "thm3.3b", "--trials", "1", "--json"]) == code
        capsys.readouterr()


def test_deprecated_check_id_is_accepted_with_a_warning(monkeypatch, capsys):
    """``normalisations`` (the old spelling) still selects the ``normalizations`` check, with a
    DeprecationWarning, in the library and the CLI; the results and the listing carry the new id."""
    import pytest

    from gradflow import theory
    from gradflow.theory import CheckResult

    assert "normalizations" in theory.check_ids() and "normalisations" not in theory.check_ids()
    with pytest.warns(DeprecationWarning, match="'normalisations' is deprecated; use 'normalizations'"):
        assert theory.get_check("normalisations") is theory.CHECKS["normalizations"]
    with pytest.warns(DeprecationWarning):
        assert main(["check", "--list", "normalisations"]) == 0
    listing = capsys.readouterr().out
    assert listing.startswith("normalizations ") and "polarise" in listing
    stub = lambda trials=16, seed=0: CheckResult(  # noqa: E731 — the runner itself is tested in test_theory.py
        id="normalizations", statement="stub", holds=True, trials=1, worst_margin=1.0, control_holds=False, details={})
    monkeypatch.setitem(theory.registry.CHECKS, "normalizations", stub)
    with pytest.warns(DeprecationWarning):
        assert main(["check", "normalisations", "--trials", "1", "--json"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == ["normalizations"]
    # control: a new-spelling id raises no warning, and a misspelling that is no alias is refused
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        theory.get_check("normalizations")
    with pytest.raises(theory.registry.GradflowValueError, match="normalisation"):
        theory.get_check("normalisation")


def _stub(cid, holds=True, control_holds=False, statement="stub"):
    from gradflow.theory import CheckResult

    return lambda trials=16, seed=0: CheckResult(id=cid, statement=statement, holds=holds, trials=1,
                                                 worst_margin=1.0, control_holds=control_holds, details={})


def test_one_progress_line_per_check_as_it_finishes(monkeypatch, capsys):
    """``gradflow check`` prints on stderr, per check and in order, ``check i/n ID: verdict (s)``;
    the table on stdout is unchanged (control: without checks run, no progress line)."""
    import re

    from gradflow import theory

    monkeypatch.setitem(theory.registry.CHECKS, "thm3.3b", _stub("thm3.3b"))
    monkeypatch.setitem(theory.registry.CHECKS, "lemma3.5", _stub("lemma3.5", holds=False))
    assert main(["check", "thm3.3b", "lemma3.5", "--json"]) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 2, lines
    assert re.fullmatch(r"gradflow: check 1/2 thm3\.3b: holds \(\d+\.\d s\)", lines[0]), lines
    assert re.fullmatch(r"gradflow: check 2/2 lemma3\.5: FAILS \(\d+\.\d s\)", lines[1]), lines
    assert [r["id"] for r in json.loads(captured.out)] == ["thm3.3b", "lemma3.5"]
    assert main(["check", "--list"]) == 0 and "gradflow: check" not in capsys.readouterr().err


def test_long_statements_wrap_instead_of_being_cut(monkeypatch, capsys):
    from gradflow import theory
    from gradflow.app import cli

    words = " ".join(f"word{i}" for i in range(40))  # ~280 characters
    monkeypatch.setitem(theory.registry.CHECKS, "thm3.3b", _stub("thm3.3b", statement=words))
    assert main(["check", "thm3.3b"]) == 0
    table = capsys.readouterr().out
    assert "..." not in table and table.split() .count("word39") == 1
    assert [w for w in table.split() if w.startswith("word")] == words.split()  # every word, in order
    body = table.splitlines()[1:]
    assert len(body) > 3  # continuation lines
    start = table.splitlines()[0].index("statement")
    assert all(len(line[start:].split("  ")[0]) <= cli.STATEMENT_WIDTH for line in body)
    # control: a short statement stays on one line
    monkeypatch.setitem(theory.registry.CHECKS, "thm3.3b", _stub("thm3.3b", statement="short"))
    assert main(["check", "thm3.3b"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_exploratory_checks_are_reported_but_counted_only_when_named():
    """``mm.kq-nuclear`` (an open question beyond the paper) does not decide the exit status of
    ``reproduce`` or of ``check`` over all ids, but does when named. Controls: a failing paper
    check fails the run either way, and an exploratory check whose control holds is a defect."""
    from types import SimpleNamespace as R

    from gradflow.app import cli
    from gradflow.theory import EXPLORATORY

    assert EXPLORATORY == {"mm.kq-nuclear", "mm.kq-kkt", "mm.kq-kkt-rate", "mm.kq-aligned"}
    ok = R(id="thm3.2a", holds=True, control_holds=False)
    open_no = R(id="mm.kq-nuclear", holds=False, control_holds=False)
    assert cli._passed([ok, open_no]) and not cli._passed([ok, open_no], named=True)
    assert not cli._passed([R(id="thm3.2a", holds=False, control_holds=False), open_no])
    assert not cli._passed([ok, R(id="mm.kq-nuclear", holds=False, control_holds=True)])
