"""`gradflow check`: table, --json, exit statuses."""

import json

from gradflow.cli import main


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
