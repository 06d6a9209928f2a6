"""``benchmarks/first_call.py``: its report from given numbers, and its measurement in-process, where
gradflow's final state is checked against an independent reference (SciPy Radau at rtol 1e-12 on
the same field). No timing is asserted: the numbers come from ``python -m benchmarks.first_call``."""

import json

import numpy as np
import pytest

from benchmarks import first_call as fc


def _row(problem, first, lsoda, main=False):
    fn = lambda name, total: dict(function=name, trace=0.1 * total, lower=0.1 * total, compile=0.8 * total,
                                  compiles=1, total=total)
    scipy = [dict(method=m, total_s=t, jit_s=0.5 * t, success=True, message="", nfev=100, njev=3, nlu=3, error=1e-9)
             for m, t in (("LSODA", lsoda), ("BDF", 2 * lsoda), ("Radau", 3 * lsoda))]
    return dict(problem=problem, label="a test row", main=main, t1=1e6, states=75, rtol=1e-8, atol=1e-10,
                import_s=2.0, jax_init_s=0.2, first_s=first, warm_s=0.3, warm_repeats=3, status="ok", steps=800,
                t_steady=170.0, rounds=["dopri8, 64 steps (fused)", "rodas4, 512 steps (fused)"],
                first_error=3e-10, warm_same_as_first=True,
                first_breakdown=dict(trace=0.1 * first, lower=0.05 * first, compile=0.8 * first),
                functions=[fn("_fused_round [dopri8]", 0.4 * first), fn("_fused_round [rodas4]", 0.5 * first),
                           fn("convert_element_type", 0.001)],
                scipy=scipy, reference=dict(method="SciPy Radau"), ablation=None, cache={})


@pytest.mark.parametrize("first, lsoda, met", [(2.5, 1.0, ("met", "met")), (11.1, 0.5, ("missed", "missed")),
                                               (2.9, 0.5, ("met", "missed"))])
def test_report_from_given_numbers(tmp_path, first, lsoda, met):
    res = dict(quick=False, measured="now", load_average=1.0, cores=2,
               rows=[_row("deep-linear-75", first, lsoda, main=True), _row("scalar-2", 1.0, 0.2)])
    out = tmp_path / "FIRST_CALL.md"
    text = fc.write(res, str(out), "python -m benchmarks.first_call")
    assert out.read_text() == text and json.loads((tmp_path / "FIRST_CALL.json").read_text()) == res
    table = [line for line in text.splitlines() if line.startswith("| deep-linear-75")]
    assert len(table) == 1 and f"| {first:.2f} |" in table[0] and f"| {first / lsoda:.1f}× |" in table[0], table
    assert "`_fused_round [rodas4]`" in text and "1 others" in text
    assert "deep-linear-75 (800 steps in 2 round(s)): 2 solve program(s) (dopri8, rodas4)" in text
    line = next(line for line in text.splitlines() if line.startswith("**Targets**"))
    assert f"≤ 3 s: {met[0]}" in line and f"LSODA's total: {met[1]}" in line, line
    # the section in RESULTS.md goes before the stiff section and replaces itself on a second run
    md = "# R\n\n## A\n\nx\n\n## Stiff flows\n\ny\n"
    once = fc.insert(md, fc.section(res, "python -m benchmarks"))
    assert once.index("## First call of a new model") < once.index("## Stiff flows")
    assert fc.insert(once, fc.section(res, "python -m benchmarks")) == once


def test_scalar_row_in_process_agrees_with_the_reference():
    """The two-parameter row measured in this process: gradflow's and LSODA's ``θ(t1)`` within
    their tolerance of SciPy Radau at rtol 1e-12; the breakdown names the fused round program of
    Dopri8, and the run (28 steps) never compiled the stiffness detector."""
    res = fc.measure("scalar-2", warm_repeats=1, scipy_methods=("LSODA",))
    assert res["status"] == "ok" and res["warm_same_as_first"]
    assert res["first_error"] < 1e-6 and res["scipy"][0]["error"] < 1e-6, res
    assert res["rounds"] == ["dopri8, 64 steps (fused)"], res["rounds"]
    names = [f["function"] for f in res["functions"]]
    assert "_fused_round [dopri8]" in names and "_stiffness_jit" not in names, names


@pytest.mark.slow  # the deep linear net's first call compiles three solver programs: ~1 min on 2 cores
def test_deep_linear_row_in_process_agrees_with_the_reference():
    res = fc.measure("deep-linear-75", warm_repeats=1, scipy_methods=("LSODA",))
    assert res["states"] == 75 and res["status"] == "ok"
    assert res["first_error"] < 1e-6 and res["scipy"][0]["error"] < 1e-6, res
    assert np.isfinite(res["t_steady"])
