"""The benchmark's smoke mode runs end to end and its report holds what the issue asks for."""

import json

import pytest

from benchmarks.__main__ import main


@pytest.mark.slow  # default run kept under ~15 min on 2 cores
def test_quick_benchmark_writes_the_report(tmp_path):
    out = tmp_path / "RESULTS.md"
    assert main(["--quick", "--out", str(out)]) == 0
    text = out.read_text()
    for heading in ("## Machine and versions", "## Targets against the GD loop and SciPy", "## Fig. 2 data", "## One trajectory to t = 1e12",
                    "seeds to t = 1e12", "## Scaling", "## Stiff flows", "## Kinked maps", "## `integrate` vs `simulate`", "## First call of a new model",
                    "## Large models: flow time reached in a fixed wall-clock budget", "Command: `python -m benchmarks --quick`"):
        assert heading in text, heading
    res = json.loads((tmp_path / "RESULTS.json").read_text())
    f2 = res["fig2"]
    # the persistent cache: the first cold process compiles and stores, the second compiles nothing
    # (it loads the stored solve programs from gradflow-exported/, which JAX does not count as cache
    # hits, and the rest from JAX's cache)
    assert f2["first_misses"] > 0 and f2["cached_misses"] == 0, f2
    # every method reaches the tight reference to within a few hundred times its tolerance (a timing
    # table of wrong answers would be worthless); the looser the tolerance, the larger the error
    rows = res["tolerances"]
    assert all(r["error"] < 300 * r["rtol"] for r in rows), rows
    g = [r for r in rows if r["method"].startswith("gradflow")]
    assert g[0]["error"] > g[-1]["error"], g
    assert res["seeds"]["ok"]
    # the stiff section: every gradflow run ok and as accurate as SciPy LSODA at the same tolerance
    # (within 100×), every kinked-map run reaches t1
    st = res["stiff"]
    for r in st["square"]:
        if r["method"].startswith("gradflow"):
            lsoda = next(x for x in st["square"] if x["kappa"] == r["kappa"] and x["method"] == "SciPy LSODA")
            assert r["status"] == "ok" and r["error"] < max(100 * lsoda["error"], 1e-7), (r, lsoda)
    assert all(r["status"] == "ok" for r in st["kinked"]), st["kinked"]


def test_bare_solver_verdict_follows_its_numbers():
    """The RESULTS.md sentence on the bare solver is generated from the measured ratios: with
    bare-diffrax ratios 10.1, 9.9, 10.3 it must say that two clear 10× and one does not."""
    from benchmarks.__main__ import bare_verdict

    best = {1e-8: 20.2e-3, 1e-10: 29.2e-3, 1e-11: 38.1e-3}
    bare = {1e-8: 2.0e-3, 1e-10: 2.95e-3, 1e-11: 3.7e-3}
    eq = {r: {"time_s": t} for r, t in best.items()}
    bare_rows = {r: {"time_s": t} for r, t in bare.items()}
    g_rows = {r: {"time_s": 1.5 * t} for r, t in bare.items()}
    text = bare_verdict(list(best), eq, g_rows, bare_rows)
    assert "At rtol 1e-11 (10.3×), 1e-08 (10.1×) the solver alone clears 10×" in text, text
    assert "At rtol 1e-10 (9.9×) the bare solver itself is below 10×" in text, text
    only_above = bare_verdict([1e-8], eq, g_rows, bare_rows)
    assert "below 10×, so no work" not in only_above and "clears 10×" in only_above


@pytest.mark.slow  # one batched compile: ~1 min on 2 cores
def test_gpu_script_quick_mode_runs_on_cpu(capsys):
    """``benchmarks/gpu.py --quick`` (the script for a session lent a GPU) runs on a CPU and
    prints its JSON: one row of 64 seeds, every lane ok, a positive time per trajectory."""
    import numpy as np

    from benchmarks import gpu

    assert gpu.main(["--quick"]) == 0
    res = json.loads(capsys.readouterr().out)
    (row,) = res["rows"]
    assert row["seeds"] == 64 and row["all_ok"] and row["per_trajectory_us"] > 0 and row["steps_max"] > 10, row
    assert res["platform"] == "cpu"
    V0s, a0s, bs = gpu.draws(5)
    np.testing.assert_allclose(np.linalg.norm(bs, axis=1), 1.0)
    assert V0s.shape == (5, 8, 8) and not a0s.any()


def _targets_inputs(cold_hit, overhead_ms, batch_s, n_warm):
    res = {"machine": {"git revision": "abc1234", "load average (1 min) at start": 0.5},
           "fig2": {"gd_s": 30.0, "cold_cached_s": cold_hit, "cold_nocache_s": 9.0},
           "tolerances": [{"method": m, "rtol": 1e-8, "time_s": t} for m, t in
                          (("gradflow (Dopri8)", 2e-3 + overhead_ms * 1e-3), ("diffrax alone (floor)", 2e-3))]}
    perf = {"load": 0.7,
            "per_call": [{"rtol": 1e-8, "overhead_ms": overhead_ms, "ratio_lsoda": 30.0 / (2 + overhead_ms),
                          "ratio_lsoda_bare": 15.0}],
            "batch": {"time_s": batch_s, "us_per_lane_step": 3.0, "floor_us_per_lane_step": 1.5, "floor_s": 0.07,
                      "ratio_scipy": 250.0},
            "scale": {"n": 1024, "seeds": 4096, "scipy_n_s": 20.0,
                      "n_run": {"warm_s": n_warm, "first_s": 8.0, "peak_mib": 1200, "base_mib": 900, "state": "full"},
                      "seeds_run": {"warm_s": 2.0, "peak_mib": 1300, "base_mib": 900}}}
    return res, perf


def test_cost_targets_table_follows_the_numbers():
    """Each verdict of ``benchmarks/targets.py`` flips at its bound (cold start 2.5 s, overhead
    0.3 ms, 1024 seeds 0.15 s, n = 1024 warm 2 s), and writing the table twice replaces it."""
    from benchmarks import targets

    def row(text, start):
        return next(line for line in text.splitlines() if line.startswith("| " + start))

    good = targets.table(*_targets_inputs(2.4, 0.2, 0.14, 1.9))
    bad = targets.table(*_targets_inputs(2.6, 0.4, 0.16, 2.1))
    for start in ("cold start", "per call", "1024 seeds", "n = d = 1024"):
        assert row(good, start).split("|")[-2].strip().startswith("met"), row(good, start)
        assert row(bad, start).split("|")[-2].strip().startswith("**missed**"), row(bad, start)
    # the one-trajectory verdict reads the ratio to LSODA: 30 ms over 2.2 ms is 13.6×, met
    assert "1e-08 met" in row(good, "one trajectory")
    assert "1e-08 met" in row(targets.table(*_targets_inputs(2.4, 0.2, 0.14, 1.9)), "one trajectory")
    res, perf = _targets_inputs(2.4, 0.2, 0.14, 1.9)
    perf["per_call"][0]["ratio_lsoda"] = 9.9
    assert "1e-08 **missed**" in row(targets.table(res, perf), "one trajectory")
    # 1024 seeds with one device per core: a verdict of its own beside the default one-device run's
    res, perf = _targets_inputs(2.4, 0.2, 0.16, 1.9)
    perf["batch"].update(per_core_s=0.12, one_device_s=0.2, cores=2)
    verdicts = row(targets.table(res, perf), "1024 seeds").split("|")[-2].strip()
    assert verdicts == "**missed** (one device) / met (one per core)", verdicts
    perf["batch"].update(per_core_s=0.16)
    assert row(targets.table(res, perf), "1024 seeds").split("|")[-2].strip().endswith("**missed** (one per core)")
    md = "# r\n\n## Targets against the GD loop and SciPy\n\n### Where a target is missed, and why\n\n- x\n\n## Fig. 2 data\n"
    once = targets.insert(md, good)
    twice = targets.insert(once, bad)
    assert once.index(targets.BEGIN) < once.index("## Fig. 2 data") and once.count(targets.BEGIN) == 1
    assert twice.count(targets.BEGIN) == 1 and "**missed**" in twice and twice.endswith("## Fig. 2 data\n")


def test_a_run_without_the_large_models_keeps_their_section(tmp_path):
    """``--large-budget 0`` does not measure the large models: the section of the report already
    there (Markdown, and its JSON entry if the old JSON has one) is carried into the new one
    unchanged. Control: with no section in the old report, nothing is added."""
    from benchmarks import large_models
    from benchmarks.__main__ import _carry_large_models

    out = tmp_path / "RESULTS.md"
    kept = f"{large_models.BEGIN}\n## Large models\n\nCommand: ..., revision abc1234.\n{large_models.END}\n"
    out.write_text("# old\n\n" + kept + "\n## Stiff flows\n\nold\n")
    (tmp_path / "RESULTS.json").write_text(json.dumps({"large_models": {"rows": [1, 2]}}))
    new = "# new\n\nnumbers\n\n## Stiff flows\n\nnew\n"
    text, res = _carry_large_models(str(out), new, {"fig2": {}})
    assert kept in text and text.startswith("# new") and text.endswith("new\n")
    assert res["large_models"] == {"rows": [1, 2]} and res["large_models_carried_over"] is True and "fig2" in res
    (tmp_path / "RESULTS.json").write_text(json.dumps({}))  # the section's JSON kept elsewhere (LARGE_MODELS.json)
    text, res = _carry_large_models(str(out), new, {"fig2": {}})
    assert kept in text and res == {"fig2": {}, "large_models_carried_over": True}
    out.write_text("# old without the section\n")
    assert _carry_large_models(str(out), new, {"fig2": {}}) == (new, {"fig2": {}})
