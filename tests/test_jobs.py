"""Pieces of a command side by side in worker processes (``gradflow figures/reproduce --jobs``):
the same files as one process builds; every piece's result back; a failed piece or a dead worker
named while the running pieces finish; workers stopped with their parent (killed, or Ctrl-C); the
figures that share trained runs kept in one piece; check results that survive pickling."""

import json
import math
import os
import pickle
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from gradflow.app import _jobs, cli
from gradflow.sims.registry import FIGURES, SHARED_RUNS, figure_groups, figure_ids

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _die():
    """A piece whose worker dies without an answer (as one killed for memory)."""
    os.kill(os.getpid(), signal.SIGKILL)


def _pid_then_sleep(path):
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(120)


def test_figure_groups_keep_shared_runs_together_and_first():
    """The Sec. 4 ids (one trains the runs the next load) form one piece in registry order, ahead of
    the rest, each of which is a piece of its own; control: without them, every id is alone."""
    ids = figure_ids()
    groups = figure_groups(ids)
    shared = [i for i in ids if FIGURES[i].startswith(SHARED_RUNS)]
    assert shared == ["sinks-induction", "accuracy-induction", "flip-rate", "sparsity-heads", "attn-patterns"]
    assert groups[0] == shared and all(len(g) == 1 for g in groups[1:])
    assert sorted(i for g in groups for i in g) == sorted(ids)  # every id once
    assert figure_groups(["fig2", "kl"]) == [["fig2"], ["kl"]]
    assert figure_groups(["flip-rate", "fig2", "sinks-induction"]) == [["flip-rate", "sinks-induction"], ["fig2"]]


def test_run_pieces_returns_every_result():
    pieces = [(math.sqrt, (16.0,)), (math.factorial, (5,)), (abs, (-3,))]
    assert dict(_jobs.run_pieces(pieces, jobs=2, use_cache=False)) == {0: 4.0, 1: 120, 2: 3}
    with pytest.raises(ValueError, match="jobs"):
        list(_jobs.run_pieces(pieces, jobs=0, use_cache=False))


def test_a_failed_piece_is_named_and_the_running_ones_finish():
    """Piece 0 raises at once while piece 1 runs: piece 1's result still comes back, piece 2 is not
    started after the failure, and the call then raises :class:`PieceFailed` naming piece 0 with its
    exception. A worker that dies without an answer (piece 0 kills its own process) fails its piece
    the same way instead of hanging the call."""
    got = []
    with pytest.raises(_jobs.PieceFailed) as err:
        for item in _jobs.run_pieces([(math.sqrt, (-1.0,)), (time.sleep, (1.0,)), (abs, (-3,))], jobs=2, use_cache=False):
            got.append(item)
    assert got == [(1, None)] and list(err.value.failures) == [0]
    assert err.value.failures[0].startswith("ValueError: math domain error")
    start = time.perf_counter()
    with pytest.raises(_jobs.PieceFailed) as err:
        list(_jobs.run_pieces([(_die, ()), (abs, (-2,))], jobs=1, use_cache=False))
    assert "worker died" in err.value.failures[0] and time.perf_counter() - start < 60


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return any(line.split()[1] == "Z" for line in f if line.startswith("State:"))  # a zombie is dead
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers die with their parent through Linux's prctl")
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT])
def test_workers_stop_with_their_parent(tmp_path, how):
    """A parent killed outright (``SIGKILL``: it cannot stop its workers itself) or interrupted
    (``SIGINT``, Ctrl-C) leaves no worker computing on: the worker's process is gone within
    seconds, though its piece would sleep two minutes. Control: the worker is alive before."""
    pid_file = tmp_path / "pid"
    # Python's own Ctrl-C handler in the parent: a test runner's worker may pass on SIGINT ignored
    code = (f"import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            f"sys.path.insert(0, {ROOT!r}); from gradflow.app import _jobs; "
            f"from tests.test_jobs import _pid_then_sleep; list(_jobs.run_pieces([(_pid_then_sleep, ({str(pid_file)!r},))], 1, False))")
    parent = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert parent.poll() is None and time.time() < deadline, parent.communicate()
        time.sleep(0.1)
    worker = int(pid_file.read_text())
    assert not _gone(worker)
    parent.send_signal(how)
    parent.wait(timeout=30)
    deadline = time.time() + 20
    while not _gone(worker) and time.time() < deadline:
        time.sleep(0.1)
    assert _gone(worker)


def test_check_results_survive_pickling():
    """A worker hands its checks' results back pickled: the round trip gives equal results with
    read-only details (the frozen mapping itself cannot be pickled)."""
    from gradflow.theory import run_checks

    results = run_checks(["lem3.5b", "inv.v_perp"], trials=1)  # one draw each: what is pickled is the same kind
    back = pickle.loads(pickle.dumps(results))
    assert back == results and [r.to_dict() for r in back] == [r.to_dict() for r in results]
    with pytest.raises(TypeError):
        back[0].details["new"] = 1


@pytest.mark.slow  # ~25 s on 2 cores; the default run's other tests here run pieces in worker processes,
# and .ci/run's `gradflow figures --quick` builds every figure with the default --jobs (2 there)
def test_figures_in_parallel_equal_one_process(tmp_path, monkeypatch, capfd):
    """Two cheap figures built by two worker processes (``--jobs 2``: the parallel path was taken)
    give the data, summaries and lines that this process alone gives (``--jobs 1``: the control,
    no worker)."""
    ids = ["softmax-temperature", "it-animal"]
    calls = []
    real = cli._in_parallel
    monkeypatch.setattr(cli, "_in_parallel", lambda args, pieces: calls.append(len(pieces)) or real(args, pieces))
    runs = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"jobs{jobs}"
        assert cli.main(["figures", *ids, "--quick", "--no-cache", "--no-progress", "--jobs", jobs, "--out", str(out)]) == 0
        # the workers write to the inherited file descriptors (capfd, not capsys, sees them)
        assert sorted(line.split(":")[0] for line in capfd.readouterr().out.splitlines()) == sorted(ids)
        assert calls == ([] if jobs == "1" else [2])
        runs[jobs] = out
    for fig_id in ids:
        one, two = (np.load(runs[j] / f"{fig_id}.npz") for j in ("1", "2"))
        assert sorted(one.files) == sorted(two.files)
        for key in one.files:
            np.testing.assert_array_equal(one[key], two[key])
        summary = lambda j: json.loads((runs[j] / f"{fig_id}.json").read_text())["summary"]
        assert summary("1") == summary("2")
        assert (runs["2"] / f"{fig_id}.png").stat().st_size > 0


def _result(check_id, holds, control_holds=False):
    from gradflow.theory import CheckResult

    return CheckResult(id=check_id, statement="s", holds=holds, trials=1, worst_margin=1.0 if holds else -1.0,
                       control_holds=control_holds)


def test_parallel_reproduce_prints_the_table_and_names_a_failed_figure(monkeypatch, tmp_path, capsys):
    """The parallel ``reproduce`` in this process with the pieces' results given (the workers are
    tested above): the check table and the summary come from piece 0's results and the exit status
    is 0 when every check holds, 1 when one fails (the control); a figure piece that fails is named
    in a ``gradflow: error:`` line and makes the exit status 1 while the checks' table and summary
    are still printed."""
    outcome = {}

    def fake(args, pieces):
        assert pieces[0][0] is cli._run_all_checks and len(pieces) == 1 + len(figure_groups(figure_ids()))
        yield 0, outcome["checks"]
        if "fail" in outcome:
            raise _jobs.PieceFailed({2: "ValueError: bad figure\n  traceback line"})

    monkeypatch.setattr(cli, "_in_parallel", fake)
    argv = ["reproduce", "--out", str(tmp_path), "--no-cache", "--jobs", "2"]
    for checks, fail, status in (([_result("thm3.2a", True)], False, 0), ([_result("thm3.2a", False)], False, 1),
                                 ([_result("thm3.2a", True)], True, 1)):
        outcome.clear()
        outcome["checks"] = checks
        if fail:
            outcome["fail"] = True
        assert cli.main(argv) == status
        captured = capsys.readouterr()
        assert captured.out.splitlines()[0].startswith("id ") and "reproduce: " in captured.out.splitlines()[-1]
        if fail:
            second = cli._figure_pieces(cli._parser().parse_args(argv), figure_ids())[1][1][0]
            assert f"gradflow: error: figure(s) {', '.join(second)} failed: ValueError: bad figure" in captured.err


def test_jobs_option_is_checked_and_defaults_to_the_cores(capsys):
    parser = cli._parser()
    assert parser.parse_args(["figures"]).jobs is None
    assert cli._jobs(parser.parse_args(["figures"]), 100) == _jobs.default_jobs() <= 8
    assert cli._jobs(parser.parse_args(["figures", "--jobs", "3"]), 2) == 2  # at most one per piece
    for command in ("figures", "reproduce"):
        with pytest.raises(SystemExit) as err:
            cli.main([command, "--jobs", "0"])
        assert err.value.code == 2 and "expected an integer ≥ 1" in capsys.readouterr().err


def test_a_figure_registered_at_run_time_is_built_in_this_process(monkeypatch):
    """A worker (a fresh interpreter) would not know a figure registered at run time: then
    ``--jobs`` is 1 whatever was asked; control: the stock registry gets the workers asked for."""
    args = cli._parser().parse_args(["figures", "--jobs", "2"])
    assert cli._jobs(args, 5) == 2
    monkeypatch.setitem(FIGURES, "my-figure", "my_module")
    assert cli._jobs(args, 5) == 1
