"""Pieces of a command side by side in worker processes (``gradflow figures/reproduce --jobs``):
the same files as one process builds, every piece's result back, a piece's error raised in the
parent, the figures that share trained runs kept in one piece, check results that survive pickling."""

import json
import math
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from gradflow import _jobs, cli
from gradflow.sims.registry import FIGURES, SHARED_RUNS, figure_groups, figure_ids


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


def test_run_pieces_returns_every_result_and_raises_a_pieces_error():
    """Results come back with their piece's index (in any order); a piece that raises makes the
    call raise the same exception type in the parent (the other workers are terminated)."""
    pieces = [(math.sqrt, (16.0,)), (math.factorial, (5,)), (abs, (-3,))]
    got = dict(_jobs.run_pieces(pieces, jobs=2, use_cache=False))
    assert got == {0: 4.0, 1: 120, 2: 3}
    with pytest.raises(ValueError):
        list(_jobs.run_pieces([(abs, (1,)), (math.sqrt, (-1.0,))], jobs=2, use_cache=False))
    with pytest.raises(ValueError, match="jobs"):
        list(_jobs.run_pieces(pieces, jobs=0, use_cache=False))


def test_check_results_survive_pickling():
    """A worker hands its checks' results back pickled: the round trip gives equal results with
    read-only details (the frozen mapping itself cannot be pickled)."""
    from gradflow.theory import run_checks

    results = run_checks(["lem3.5b", "inv.v_perp"], trials=2)
    back = pickle.loads(pickle.dumps(results))
    assert back == results and [r.to_dict() for r in back] == [r.to_dict() for r in results]
    with pytest.raises(TypeError):
        back[0].details["new"] = 1


def test_figures_in_parallel_equal_one_process(tmp_path):
    """Two cheap figures built by two worker processes (``--jobs 2``) give the data, summaries and
    lines that one process gives (``--jobs 1``)."""
    ids = ["softmax-temperature", "it-animal"]
    runs = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"jobs{jobs}"
        proc = subprocess.run([sys.executable, "-m", "gradflow.cli", "figures", *ids, "--quick", "--no-cache",
                               "--no-progress", "--jobs", jobs, "--out", str(out)],
                              capture_output=True, text=True, timeout=600, env=dict(os.environ, PYTHONWARNINGS="ignore"))
        assert proc.returncode == 0, proc.stderr
        lines = sorted(line.split(":")[0] for line in proc.stdout.splitlines())
        assert lines == sorted(ids)
        runs[jobs] = out
    for fig_id in ids:
        one, two = (np.load(runs[j] / f"{fig_id}.npz") for j in ("1", "2"))
        assert sorted(one.files) == sorted(two.files)
        for key in one.files:
            np.testing.assert_array_equal(one[key], two[key])
        summary = lambda j: json.loads((runs[j] / f"{fig_id}.json").read_text())["summary"]
        assert summary("1") == summary("2")
        assert (runs["2"] / f"{fig_id}.png").stat().st_size > 0


def test_jobs_option_is_checked_and_defaults_to_the_cores(capsys):
    parser = cli._parser()
    assert parser.parse_args(["figures"]).jobs is None and cli._jobs(parser.parse_args(["figures"]), 100) == \
        _jobs.default_jobs()
    assert cli._jobs(parser.parse_args(["figures", "--jobs", "3"]), 2) == 2  # at most one per piece
    for command in ("figures", "reproduce"):
        with pytest.raises(SystemExit) as err:
            cli.main([command, "--jobs", "0"])
        assert err.value.code == 2 and "expected an integer ≥ 1" in capsys.readouterr().err
