"""The gradflow CLI: figures fig2 end to end (quick) into the git-ignored default folder, listing,
progress bars only on a terminal, summaries only with -v, help texts, one-line errors with exit 2."""

import json
import subprocess
import sys

import numpy as np
import pytest

from gradflow.app import cli


def test_fig2_quick_builds_four_files_and_caches(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no --out: the default folder out/figures/ under the working directory
    assert cli.main(["figures", "fig2", "--quick", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "out/figures/fig2.png" in out  # one line per figure, no summary without -v
    assert not (tmp_path / "figures").exists()
    tmp_path = tmp_path / "out" / "figures"
    for ext in ("png", "pdf", "npz", "json"):
        assert (tmp_path / f"fig2.{ext}").stat().st_size > 0
    record = json.loads((tmp_path / "fig2.json").read_text())
    assert record["seed"] == 123 and record["config"]["gd_steps"] == 20_000 and not record["cached"]
    assert record["summary"]["u_order_preserved"] and record["summary"]["s_order_preserved_t_gt_0"]
    assert record["summary"]["s_top_final"] > 0.99
    assert set(record["packages"]) >= {"jax", "diffrax", "optax", "numpy"} and record["git_revision"]
    with np.load(tmp_path / "fig2.npz") as z:
        assert all(np.all(np.isfinite(z[k])) for k in z.files if z[k].dtype.kind == "f")
        s = z["s"]
    # order of s is preserved for t > 0 (Thm 3.2a) in the plotted data, and s polarises
    order = np.argsort(-z_u0(tmp_path))
    assert np.all(np.diff(s[1:, order], axis=1) < 0) and s[-1].max() > 0.99
    assert cli.main(["figures", "fig2", "--quick", "--out", str(tmp_path), "--no-progress", "-v"]) == 0
    out = capsys.readouterr().out
    assert "re-plotted from cache" in out
    summary = json.loads(out.split("\n", 1)[1])  # -v: the summary follows as JSON
    assert summary == record["summary"]
    assert json.loads((tmp_path / "fig2.json").read_text())["cached"]


def z_u0(path):
    with np.load(path / "fig2.npz") as z:
        return z["u"][0]


def test_unknown_figure_id_is_one_line_exit_2():
    proc = subprocess.run([sys.executable, "-m", "gradflow.app.cli", "figures", "fig99"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "figure id: got 'fig99'; expected one of" in proc.stderr and "Traceback" not in proc.stderr


def test_list_prints_ids(capsys):
    assert cli.main(["figures", "--list"]) == 0
    assert "fig2" in capsys.readouterr().out


class _Stream:
    def __init__(self, tty):
        self.tty = tty

    def isatty(self):
        return self.tty

    def write(self, text):
        return len(text)

    def flush(self):
        pass


@pytest.mark.parametrize("tty, flag, expected", [(True, [], True), (False, [], False), (True, ["--no-progress"], False)])
def test_progress_bars_only_on_a_terminal(monkeypatch, tmp_path, tty, flag, expected):
    """Bars are drawn only when stderr is a terminal (a log gets no ``\\r`` redraws) and never with
    --no-progress: the flag the builder receives, for each of the three cases."""
    import gradflow.sims.build

    seen = []

    def fake_build(fig_id, out_dir, *, quick, force, progress):
        seen.append(progress)
        return {"cached": True, "summary": {}}

    monkeypatch.setattr(gradflow.sims.build, "build", fake_build)
    monkeypatch.setattr(sys, "stderr", _Stream(tty))
    assert cli.main(["figures", "fig2", "--out", str(tmp_path), "--no-cache", *flag]) == 0
    assert seen == [expected]


def test_check_list_prints_every_id_with_its_statement(capsys):
    from gradflow.theory import check_ids

    assert cli.main(["check", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == check_ids()
    assert any("Thm 3.3(b)" in line for line in lines if line.startswith("thm3.3b"))
    assert cli.main(["check", "thm9.9", "--list"]) == 2  # an unknown id is refused there too


def test_help_texts_agree_with_the_defaults(capsys):
    """The help states the real defaults: figures go to the git-ignored out/figures/, the sweep's
    seed range and chunk are those the parser uses."""
    parser = cli._parser()
    for argv in (["figures"], ["reproduce"]):
        assert parser.parse_args(argv).out == cli.DEFAULT_OUT == "out/figures"
    sweep = parser.parse_args(["sweep", "x"])
    with pytest.raises(SystemExit):
        cli.main(["sweep", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"default {sweep.seeds[0]}:{sweep.seeds[1]}" in text and f"default {sweep.chunk}" in text
    with pytest.raises(SystemExit):
        cli.main(["reproduce", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "SPEC" not in text and "days on 2 CPU cores" in text and "out/figures/" in text


def test_reproduce_refuses_an_existing_file_as_out_before_any_check(monkeypatch, tmp_path, capsys):
    """``--out FILE`` with FILE an existing file: exit 2 at once with one ``gradflow: error:`` line,
    no check run; control: a folder that does not exist yet gets past the check and the checks run."""
    from gradflow import theory

    calls = []
    monkeypatch.setattr(theory, "run_checks", lambda *a, **k: calls.append(a) or [])
    target = tmp_path / "results.txt"
    target.write_text("keep me")
    assert cli.main(["figures", "fig2", "--out", str(target / "sub"), "--no-cache"]) == 2
    assert "is a file, so the folder cannot be created" in capsys.readouterr().err
    monkeypatch.setattr(cli, "_cmd_figures", lambda args: 0)
    assert cli.main(["reproduce", "--out", str(target), "--no-cache", "--jobs", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gradflow: error: --out: got {str(target)!r}, an existing file; expected a folder (created if missing)"]
    assert calls == [] and target.read_text() == "keep me"
    assert cli.main(["reproduce", "--out", str(tmp_path / "new" / "folder"), "--no-cache", "--jobs", "1"]) == 0
    assert len(calls) == 1


def test_every_command_line_error_has_the_gradflow_prefix(capsys):
    """Usage errors of ``gradflow SUBCOMMAND`` and of the Sec. 4 grid runner start with
    ``gradflow: error:`` (argparse's default would be ``PROG SUBCOMMAND: error:``); exit status 2.
    Run in this process, where ``sys.argv[0]`` is pytest's: the prefix comes from the parsers
    naming their program themselves, as it must under ``python -m`` or the script entry."""
    from gradflow.sims.sec4 import grids

    for main, argv in ((cli.main, ["reproduce", "--bogus"]), (cli.main, ["check", "--trials", "0"]),
                       (grids.main, ["nogrid"])):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
        lines = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("gradflow: error: "), (argv, lines)
