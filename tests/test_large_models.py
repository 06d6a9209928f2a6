"""``benchmarks/large_models.py``: its quick mode end to end (every method on the deep linear net; every model in the slow run; in this
process), the choice of the reported checkpoint, and its report from given numbers. No speed is
asserted: the numbers come from ``python -m benchmarks.large_models``."""

import json
import math

import pytest

from benchmarks import large_models as lm

LABELS = {"gradflow": "gradflow `integrate` (auto)", "gradflow-loose": "gradflow `integrate` (auto, rtol 1e-06)",
          "gradflow-rkc": "gradflow `integrate` (`rkc`",
          "gd": "GD at its stability limit", "scipy": "SciPy "}


@pytest.mark.parametrize("models", [
    ("deep-linear",),
    pytest.param(None, marks=pytest.mark.slow, id="every-model"),  # ~60 s on 2 cores: every model's programs
])
def test_quick_mode_writes_every_model_and_method(tmp_path, models):
    """Every method on one model (the default run), or on every model (slow): the same code path per
    model, each model compiling its own programs."""
    out = tmp_path / "LARGE_MODELS.md"
    only = [] if models is None else [a for m in models for a in ("--only", m)]
    assert lm.main(["--quick", "--out", str(out), *only]) == 0  # not timed: no timed tests
    text = out.read_text()
    res = json.loads((tmp_path / "LARGE_MODELS.json").read_text())
    assert res["quick"] and res["budget_s"] == lm.QUICK_BUDGET
    rows = {(r["model"], r["method"]): r for r in res["rows"]}
    chosen = [m for m in lm.MODELS if models is None or m.name in models]
    assert set(rows) == {(m.name, k) for m in chosen for k in lm.METHODS}
    for (name, method), r in rows.items():
        line = [ln for ln in text.splitlines() if ln.startswith(f"| {name} |") and LABELS[method] in ln]
        assert len(line) == 1, (name, method, line)
        for key in ("t", "loss", "loss0", "wall_s"):
            assert math.isfinite(r[key]), (name, method, key, r[key])
        assert r["t"] >= 0 and r["count"] >= 1, r  # every method did some work, even after a compile past the budget
    for m in chosen:
        # the start loss, computed by each method on its own (gradflow: its first save point; GD: its
        # compiled loss; SciPy: a jitted loss of the raveled parameters), is one number
        l0 = [rows[m.name, k]["loss0"] for k in lm.METHODS]
        assert max(l0) - min(l0) <= 1e-12 * abs(l0[0]), (m.name, l0)
        for k in ("gradflow", "gradflow-loose", "gradflow-rkc"):
            g = rows[m.name, k]
            assert g["loss"] <= g["loss0"], g  # a gradient flow does not raise the loss
        assert rows[m.name, "gradflow-rkc"]["rtol"] == lm.RKC_RTOL
        assert rows[m.name, "gradflow-loose"]["rtol"] == lm.LOOSE_RTOL
        gd = rows[m.name, "gd"]
        # GD's flow time at every checkpoint is Σ lr·k over its accepted chunks so far (each chunk's lr
        # and iteration count recorded with it); the reported one is a checkpoint, and all chunks
        # together are the segments' Σ lr·k
        t, k0 = 0.0, 0
        for p in gd["points"][1:]:
            t += p["lr"] * (p["count"] - k0)
            k0 = p["count"]
            assert p["t"] == pytest.approx(t, rel=1e-12), (p, t)
        assert gd["t_all"] == pytest.approx(sum(lr * k for lr, k in gd["segments"]), rel=1e-12), gd
        assert gd["points"][-1]["count"] == sum(k for _, k in gd["segments"]), gd
        assert any(p["t"] == gd["t"] and p["count"] == gd["count"] for p in gd["points"]), gd
        assert gd["lr"] <= gd["lr0"] and gd["loss"] <= gd["loss0"], gd
    # the deep linear net's 48 parameters get the Hessian as SciPy's jac; the report names it
    assert rows["deep-linear", "scipy"]["jac"] == "Hessian" and "SciPy LSODA, jac: Hessian" in text


def _row(method, points, budget=10.0, **kw):
    base = dict(model="m", label="a model", description="a test model", n=5000, method=method, budget_s=budget,
                status="budget spent", loss0=2.0, points=points, compile_first_s=1.0, compile_s=1.0)
    if method == "gd":
        base.update(lr0=0.5, lambda0=3.8, lr=0.25, lowered=1, halvings=0, segments=[[0.25, 40]])
    if method == "gradflow":
        base.update(calls=[dict(status="ok")], t_rest=None)
    return lm.summarise({**base, **kw})


def test_the_reported_checkpoint_is_the_last_within_the_budget():
    pts = [dict(wall_s=w, t=t, loss=l, count=c) for w, t, l, c in
           ((2.0, 0.0, 2.0, 0), (6.0, 3.0, 1.0, 20), (9.5, 10.0, 0.5, 40), (12.0, 30.0, 0.1, 60))]
    r = _row("gd", pts)
    assert (r["t"], r["loss"], r["count"], r["wall_s"], r["over_budget"]) == (10.0, 0.5, 40, 9.5, False)
    assert (r["t_all"], r["wall_all_s"]) == (30.0, 12.0)
    # a compile longer than the budget: the first checkpoint with work done is shown, flagged
    late = [dict(wall_s=w, t=t, loss=l, count=c) for w, t, l, c in ((8.0, 0.0, 2.0, 0), (14.0, 1.0, 1.5, 3))]
    r = _row("scipy", late)
    assert (r["t"], r["count"], r["over_budget"]) == (1.0, 3, True)


def test_report_from_given_numbers(tmp_path):
    pts = lambda *p: [dict(wall_s=w, t=t, loss=l, count=c) for w, t, l, c in p]  # noqa: E731
    rows = [_row("gradflow", pts((5.0, 1.0, 1.0, 5), (9.0, lm.T_MAX, 1e-20, 900)), t_rest=1234.0),
            _row("gd", pts((1.0, 0.0, 2.0, 0), (9.9, 10.0, 0.5, 40))),
            _row("scipy", pts((1.0, 0.0, 2.0, 0), (9.0, 4.0, 0.8, 70)), method_name="DOP853", jac=None,
                 why="LSODA n/a at n = 5,000: a test reason")]
    res = dict(budget_s=10.0, quick=False, isolated=True, rows=rows, measured="now", load_start=1.0, load_end=2.0,
               elapsed_s=40.0, machine=dict(cpu="a CPU", cores=2, platform="p", git_revision="abc1234"))
    text = lm.write(res, str(tmp_path / "L.md"), "python -m benchmarks.large_models --budget 10")
    assert json.loads((tmp_path / "L.json").read_text()) == res
    assert "the full-budget run is `python -m benchmarks.large_models --budget 600`" in text
    g = next(ln for ln in text.splitlines() if "gradflow `integrate`" in ln)
    # at rest: t is the horizon, no ratio to GD's t; the loss fell below 1e-12 × the start at its second checkpoint
    assert "1e+12 (at rest from t = 1.23e+03)" in g and "| – (at rest) |" in g and "| 9.0 (1e+12) |" in g, g
    d = next(ln for ln in text.splitlines() if "GD at its stability limit" in ln)
    assert "| 1× |" in d and "| not within the budget |" in d, d
    s = next(ln for ln in text.splitlines() if "SciPy DOP853" in ln)
    assert "a test reason" in s and "| 0.4× |" in s, s
    md = "# R\n\n## A\n\nx\n\n## Stiff flows\n\ny\n"
    once = lm.insert(md, lm.section(res, "python -m benchmarks"))
    assert once.index("## Large models") < once.index("## Stiff flows")
    assert lm.insert(once, lm.section(res, "python -m benchmarks")) == once


def test_merge_keeps_the_rows_not_rerun_with_their_dates(tmp_path):
    """``--method`` reruns some rows: the JSON's other rows are kept, each dated (an older row gets
    its file's date), in models × methods order, and the report names the date of a row measured at
    another time. Control: a rerun row replaces its old one (no duplicate)."""
    old = dict(measured="2026-12-05 01:15 UTC", rows=[
        dict(model="transformer", method="gd", t=3.8e4), dict(model="transformer", method="gradflow", t=918.0),
        dict(model="mlp", method="gd", t=1.6e5)])
    path = tmp_path / "L.json"
    path.write_text(json.dumps(old))
    new = dict(measured="2026-12-07 02:00 UTC", rows=[
        dict(model="transformer", method="gradflow-rkc", t=5e4, measured="2026-12-07 02:00 UTC"),
        dict(model="transformer", method="gd", t=3.9e4, measured="2026-12-07 02:10 UTC")])
    res = lm.merge_rows(str(path), new)
    got = [(r["model"], r["method"], r["t"], r["measured"]) for r in res["rows"]]
    assert got == [("mlp", "gd", 1.6e5, "2026-12-05 01:15 UTC"),
                   ("transformer", "gradflow", 918.0, "2026-12-05 01:15 UTC"),
                   ("transformer", "gradflow-rkc", 5e4, "2026-12-07 02:00 UTC"),
                   ("transformer", "gd", 3.9e4, "2026-12-07 02:10 UTC")], got
    assert lm.merge_rows(str(tmp_path / "none.json"), new) is new


def test_accuracy_text_labels_the_extrapolation():
    row = dict(method="gradflow-rkc", solver="rkc", rtol=1e-4, atol=1e-6, wall_s=10.0, status="ok", steps=50,
               err=[0.0, 1e-6, 2e-4], eta_match=2e-3, gd_iterations_match=5e4, gd_wall_match_s=250.0)
    acc = dict(model="transformer", t1=100.0, ts=[0.0, 1.0, 100.0], ref_wall_s=100.0, ref_status="ok", rows=[row],
               gd=[dict(eta=0.1, iterations=1000, wall_s=5.0, err=1e-2), dict(eta=0.05, iterations=2000, wall_s=10.0,
                                                                           err=5e-3)],
               gd_slope=0.1)
    text = lm.accuracy_text(acc)
    assert "0.0002 at t = 100" in text and "η ≈ 0.002" in text and "**extrapolated**" in text
    assert "`rkc`, rtol 0.0001" in text and "50 steps" in text
    # with the benchmark's rows: GD at the matching η to the row's t (2e4 / 2e-3 = 1e7 iterations,
    # 250 s per 100 of t → 5e4 s ≈ 14 h), unstable once λ_max > 2/η = 1000
    text = lm.accuracy_text(acc, [dict(model="transformer", method="gradflow-rkc", t=2e4)])
    assert "to the row's t = 2e+04: 1e+07 iterations, about 14 h" in text and "λ_max > 1e+03" in text


def test_accuracy_rows_use_the_rows_own_settings():
    """The accuracy check measures the loose rows at the settings their chains run with."""
    rows = dict(lm.ACCURACY_ROWS)
    assert rows["gradflow-loose"] == dict(solver="auto", rtol=lm.LOOSE_RTOL, atol=lm.LOOSE_RTOL / 100)
    assert rows["gradflow-rkc"] == dict(solver="rkc", rtol=lm.RKC_RTOL, atol=lm.RKC_RTOL / 100)


@pytest.mark.slow  # a fresh process (imports, compiles): ~20 s on 2 cores
def test_a_run_in_a_fresh_process_reports_its_checkpoints():
    r = lm.run_child("deep-linear", "scipy", budget=1.0, quick=True)
    assert r["method"] == "scipy" and r["n"] == 48 and r["count"] >= 1 and math.isfinite(r["loss"]), r
    assert r["points"][0]["t"] == 0.0
