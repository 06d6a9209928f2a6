"""One source for every measured number on the project's pages.

``python -m benchmarks.pages`` rewrites the generated blocks of ``README.md`` and ``docs/*.md``
from the measurements committed beside this file: ``RESULTS.json`` (``python -m benchmarks``),
``COSTS.json`` (``python -m benchmarks.costs``), ``COMMANDS.json`` (the wall times of the
project's commands, measured by hand) and, where present, the reports of :data:`OPTIONAL`. A block is the text between

    <!-- generated:NAME -->
    ...
    <!-- /generated -->

and ``NAME`` is one of :data:`BLOCKS`. ``--check`` writes nothing and exits 1 naming every page
whose committed text differs from what this script writes (``tests/test_pages.py`` runs it; no
benchmark runs there, only the regeneration). Pages are written atomically.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Callable

from ._report import equal_accuracy

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PAGES = ("README.md", "docs/getting-started.md", "docs/performance.md", "docs/solvers.md")
BLOCK = re.compile(r"<!-- generated:([a-z0-9-]+) -->\n(.*?)<!-- /generated -->", re.S)


class PagesError(ValueError):
    """A page's generated blocks cannot be rewritten (unknown name, unclosed or nested markers)."""


def load(folder: str = HERE) -> dict:
    """``{"results": RESULTS.json, "costs": COSTS.json, "commands": COMMANDS.json}`` from ``folder``."""
    out = {}
    for key, name in (("results", "RESULTS.json"), ("costs", "COSTS.json"), ("commands", "COMMANDS.json")):
        with open(os.path.join(folder, name)) as fh:
            out[key] = json.load(fh)
    for key, name in OPTIONAL:  # a row of the headline each, left out while the file is absent
        path = os.path.join(folder, name)
        if os.path.exists(path):
            with open(path) as fh:
                out[key] = json.load(fh)
    return out


OPTIONAL = (("first_call", "FIRST_CALL.json"), ("scale", "SCALE.json"), ("large", "LARGE_MODELS.json"))
"""Reports of their own benchmark modules (``python -m benchmarks.first_call``, ``python -m
benchmarks.stiff --scale …``, ``python -m benchmarks.large_models``) that the headline also reads."""


def _verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


# ----------------------------------------------------------------------------- blocks
def commands(d: dict) -> str:
    """The two commands (main job and tests), each with its measured wall time."""
    r, t = d["commands"]["reproduce"], d["commands"]["tests"]
    return (
        "```bash\n"
        f"# the main job: every theorem check and every figure, computed afresh into out/figures/\n"
        f"# ({r['minutes']} min with empty caches, {r['warm_minutes']} min with warm ones; {r['where']}; {r['measured']})\n"
        "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && gradflow reproduce\n"
        "```\n\n"
        "```bash\n"
        f"# the tests: {t['tests']} tests, slow ones excluded ({t['minutes']} min on {t['where']}, {t['measured']})\n"
        "python3 -m venv .venv && . .venv/bin/activate && pip install -e \".[test]\" && python -m pytest\n"
        "```\n")


def benchmark_commands(d: dict) -> str:
    """The benchmark commands with the full run's measured time."""
    b = d["commands"]["benchmarks"]
    return ("```bash\n"
            f"python -m benchmarks            # {b['minutes']} min on {b['where']}; writes RESULTS.md, COSTS.md (+ .json)\n"
            "python -m benchmarks --quick    # smoke run at small sizes (numbers meaningless)\n"
            "python -m benchmarks.pages      # rewrites the numbers on README.md and docs/ from the .json files\n"
            "```\n")


def _one_trajectory(res: dict) -> list[dict]:
    """Per rtol: gradflow's and the bare ``diffeqsolve``'s times and the cheapest SciPy LSODA run at
    least as accurate as gradflow."""
    rows = res["tolerances"]
    out = []
    for g in (r for r in rows if r["method"] == "gradflow (Dopri8)"):
        bare = next(r for r in rows if r["method"] == "diffrax alone (floor)" and r["rtol"] == g["rtol"])
        lsoda = [r for r in rows if r["method"] == "SciPy LSODA" and r["error"] <= g["error"]]
        best = min(lsoda, key=lambda r: r["time_s"])
        out.append(dict(rtol=g["rtol"], ratio=best["time_s"] / g["time_s"], bare_ratio=best["time_s"] / bare["time_s"],
                        overhead_ms=(g["time_s"] - bare["time_s"]) * 1e3))
    return out


def _e(x: float) -> str:
    """``1e6`` rather than ``1e+06``."""
    mant, _, exp = f"{x:.0e}".partition("e")
    return f"{mant}e{int(exp)}"


def _span(values, fmt="{:.1f}") -> str:
    lo, hi = min(values), max(values)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}–{fmt.format(hi)}"


def headline(d: dict) -> str:
    """The headline table: each measured number with its target and verdict."""
    res, costs = d["results"], d["costs"]
    f2, m = res["fig2"], res["machine"]
    gd = f2["gd_s"]
    rows = []
    rows.append((f"Fig. 2's flow to t = 1e5, warm, vs the 1e6-iteration GD loop ({gd:.1f} s)",
                 f"{f2['warm_s'] * 1e3:.1f} ms, **{gd / f2['warm_s']:.0f}×** ({gd / f2['jit_gd_s']:.0f}× JIT vs Python × "
                 f"{f2['jit_gd_s'] / f2['warm_s']:.0f}× flow vs GD)", f"≥ 1000×: {_verdict(gd / f2['warm_s'] >= 1000)}"))
    hit, miss = f2["cold_cached_s"], f2["cold_nocache_s"]
    rows.append(("a new process making Fig. 2's data (import, then the solve)",
                 f"**{hit:.2f} s = {gd / hit:.1f}×** the GD loop with the compilation cache hit; {miss:.2f} s = "
                 f"{gd / miss:.1f}× without the cache",
                 f"≤ 2.5 s, ≥ 10×: {_verdict(hit <= 2.5 and gd / hit >= 10)} with the cache, "
                 f"{_verdict(miss <= 2.5 and gd / miss >= 10)} without"))
    one = _one_trajectory(res)
    rows.append(("one trajectory to 1e12 vs SciPy LSODA at equal accuracy (rtol 1e-8, 1e-10, 1e-11)",
                 f"**{_span([o['ratio'] for o in one])}×** (a bare `diffeqsolve` of the same field: "
                 f"{_span([o['bare_ratio'] for o in one])}×; gradflow's events, status, metrics and `Trajectory` add "
                 f"{_span([o['overhead_ms'] for o in one])} ms per call)",
                 f"≥ 10×: {_verdict(all(o['ratio'] >= 10 for o in one))}"))
    s, b = res["seeds"], costs["batch"]
    rows.append((f"{s['B']} seeds to 1e12, batched, warm",
                 f"**{s['batch_s']:.2f} s** on JAX's one CPU device, {s['scipy_extrapolated_s'] / s['batch_s']:.0f}× a SciPy "
                 f"DOP853 loop ({b['time_s']:.2f} s, {b['ratio_scipy']:.0f}×, in the costs run); **{b['per_core_s']:.2f} s** "
                 f"with one device per core (`JAX_NUM_CPU_DEVICES={b['cores']}`: {b['one_device_s'] / b['per_core_s']:.2f}× "
                 "in the same run)",
                 f"≤ 0.15 s: {_verdict(min(s['batch_s'], b['per_core_s']) <= 0.15)}"))
    it = res["integrate"]["rows"]
    rows.append(("`gradflow.integrate` (any loss) vs `simulate` on Fig. 2's problem",
                 f"the same solve through the generic front end {it['integrate (exact field)']['ratio']:.2f}× `simulate`'s "
                 f"time; a hand-written loss differentiated by `jax.grad` {it['integrate (autodiff)']['ratio']:.2f}×", "–"))
    sc = costs["scale"]
    n_run = sc["n_run"]
    rows.append((f"n = d = {sc['n']} tokens, one logistic-teacher run to 1e12",
                 f"**{n_run['warm_s']:.2f} s** warm ({n_run['first_s']:.1f} s with the compile), "
                 f"{sc['scipy_n_s'] / n_run['warm_s']:.0f}× SciPy DOP853",
                 f"≤ 2 s warm: {_verdict(n_run['warm_s'] <= 2)}"))
    st = res["stiff"]
    eq = {e["kappa"]: e for e in equal_accuracy(st["square"]) if e["method"] == "gradflow auto (rodas4-eigh)"}
    auto = [r for r in st["square"] if r["method"] == "gradflow auto (rodas4-eigh)"]
    ks = " / ".join(f"{r['kappa']:g}" for r in auto)
    ratios = [eq[r["kappa"]]["ratio"] for r in auto]
    below = [f"κ = {r['kappa']:g}" for r, q in zip(auto, ratios) if not (q and q >= 5)]
    rows.append((f"stiff square loss, d = {st['d']}, t1 = {_e(st['t1'])}, vs LSODA at equal accuracy",
                 f"κ = {ks}: {' / '.join(str(r['steps']) for r in auto)} steps, **"
                 + " / ".join(f"{q:.1f}" if q else "–" for q in ratios) + "×**",
                 f"≤ 400 steps: {_verdict(all(r['steps'] <= 400 for r in auto))}; ≥ 5×: "
                 + (_verdict(True) if not below else f"met except {', '.join(below)}" if len(below) < len(auto)
                    else _verdict(False))))
    rows += _first_call_rows(d) + _scale_rows(d) + _large_rows(d)
    head = (f"Measured by `python -m benchmarks` (revision {m.get('git revision', '?')}, {m.get('cores', '?')} cores, "
            f"load average {m.get('load average (1 min) at start', float('nan')):.1f} at start) and `python -m "
            f"benchmarks.costs` (load average {costs.get('load', float('nan')):.1f}); millisecond timings move by up to "
            "±40 % between runs of the same code on a shared machine, so read the ratios as ranges.\n\n"
            "| what | measured | target |\n|---|---|---|\n")
    return head + "".join(f"| {a} | {b} | {c} |\n" for a, b, c in rows)


def _first_call_rows(d: dict) -> list[tuple[str, str, str]]:
    """The first call of a new model (``FIRST_CALL.json``): its main row against SciPy LSODA."""
    fc = d.get("first_call")
    main = next((r for r in fc["rows"] if r.get("main")), None) if fc else None
    if main is None:
        return []
    lsoda = next((s["total_s"] for s in main["scipy"] if s["method"] == "LSODA"), None)
    if lsoda is None:
        return []
    first = main["first_s"]
    return [(f"a new model's first call: {main['label']} ({main['states']} parameters), `integrate` to "
             f"t1 = {_e(main['t1'])} in a fresh process (`python -m benchmarks.first_call`, {fc['measured']})",
             f"**{first:.1f} s** (warm {main['warm_s']:.2f} s), SciPy LSODA {lsoda:.2f} s with its jit: "
             f"**{first / lsoda:.1f}×**",
             f"≤ 3 s: {_verdict(first <= 3)}; ≤ 3× LSODA: {_verdict(first / lsoda <= 3)}")]


def _scale_rows(d: dict) -> list[tuple[str, str, str]]:
    """Stiff flows without a dense factorisation (``SCALE.json``): the Krylov path's warm time,
    memory and cost exponent, against the targets at d = 64 and d = 128."""
    rows = [r for r in d.get("scale") or [] if r["solver"] == "rodas4-krylov" and r["status"] == "ok"]
    by_d = {r["d"]: r for r in rows}
    if 64 not in by_d or 128 not in by_d or 20 not in by_d:
        return []
    a, b = by_d[20], by_d[128]
    import math

    slope = math.log(b["warm_s"] / a["warm_s"]) / math.log(b["n"] / a["n"])
    ok = by_d[64]["warm_s"] <= 5 and b["warm_s"] <= 60 and b["rss_mib"] <= 1024 and slope <= 1.5
    return [(f"stiff square loss κ = 5, t1 = 1e6, without a dense factorisation (`rodas4-krylov`), "
             f"{by_d[64]['n']} and {b['n']} states",
             f"warm **{by_d[64]['warm_s']:.2f} s** and **{b['warm_s']:.2f} s**, {b['rss_mib']:.0f} MiB above import at "
             f"{b['n']} states; warm time ∝ n^{slope:.2f} from {a['n']} states",
             f"≤ 5 s, ≤ 60 s, ≤ 1 GiB, exponent ≤ 1.5: {_verdict(ok)}")]


def _large_rows(d: dict) -> list[tuple[str, str, str]]:
    """Large users' models (``LARGE_MODELS.json``): flow time gradflow reached in the budget
    against GD at its stability limit, per model."""
    lg = d.get("large")
    if not lg or lg.get("quick"):
        return []
    by = {(r["model"], r["method"]): r for r in lg["rows"]}
    parts = []
    for model in dict.fromkeys(r["model"] for r in lg["rows"]):
        g, gd = by.get((model, "gradflow")), by.get((model, "gd"))
        if not g or not gd:
            continue
        reached = (f"at rest from t = {g['t_rest']:.3g} (in {g['wall_s']:.0f} s)" if g.get("status") == "at rest"
                   else f"t = {g['t']:.3g}")
        loose = by.get((model, "gradflow-loose"))
        if loose and loose.get("status") != "at rest":
            reached += (f", auto at rtol {loose.get('rtol', 1e-6):g} t = {loose['t']:.3g} "
                        f"(**{loose['t'] / gd['t']:.2g}×** GD's)")
        rkc = by.get((model, "gradflow-rkc"))
        if rkc:
            reached += (f", `rkc` (rtol {rkc.get('rtol', 1e-4):g}) t = {rkc['t']:.3g} "
                        f"(**{rkc['t'] / gd['t']:.2g}×** GD's)")
        parts.append(f"{model} ({g['n']:,}): gradflow {reached}, GD t = {gd['t']:.3g}")
    dates = sorted({r.get("measured", lg["measured"]) for r in lg["rows"]})
    when = dates[0] if len(dates) == 1 else f"rows measured {dates[0]} to {dates[-1]}"
    return [(f"large users' models, flow time reached in {lg['budget_s']:.0f} s per method (`python -m "
             f"benchmarks.large_models`, {when})", "; ".join(parts), "–")]


def large_models(d: dict) -> str:
    """Every row of ``LARGE_MODELS.json`` in a sentence each, and its accuracy measurement: what a
    user of a large model can expect from each method."""
    lg = d.get("large")
    if not lg or lg.get("quick"):
        return "No full-budget run of `python -m benchmarks.large_models` is committed.\n"
    from benchmarks.large_models import LOOSE_RTOL

    names = {"gradflow": "`integrate` (auto, rtol 1e-8)", "gradflow-loose": f"`integrate` (auto, rtol {LOOSE_RTOL:g})",
             "gd": "GD at its stability limit"}
    out = []
    for model in dict.fromkeys(r["model"] for r in lg["rows"]):
        rows = [r for r in lg["rows"] if r["model"] == model]
        parts = []
        for r in rows:
            name = names.get(r["method"], f"`integrate` (`rkc`, rtol {r.get('rtol', 1e-4):g})"
                             if r["method"] == "gradflow-rkc" else f"SciPy {r.get('method_name', r['method'])}")
            reached = (f"at rest from t = {r['t_rest']:.3g}" if r.get("status") == "at rest" and r.get("t_rest")
                       else f"t = {r['t']:.3g}")
            when = r.get("measured", lg["measured"])
            load = r.get("load_before")
            parts.append(f"{name} {reached} in {r['wall_s']:.0f} s ({when}"
                         + (f", load average {load:.1f}" if load is not None else "") + ")")
        out.append(f"- **{model}** ({rows[0]['n']:,} parameters): " + "; ".join(parts) + ".")
    text = (f"`python -m benchmarks.large_models` ({lg['budget_s']:.0f} s of wall clock per method, compilation "
            "included, 2 cores; `benchmarks/LARGE_MODELS.md`):\n\n" + "\n".join(out) + "\n")
    if lg.get("accuracy"):
        from benchmarks.large_models import accuracy_text

        text += "\n" + accuracy_text(lg["accuracy"], lg["rows"]) + "\n"
    return text


def stiff(d: dict) -> str:
    """The stiff family's steps and its ratio to SciPy LSODA at equal accuracy, one sentence."""
    st = d["results"]["stiff"]
    eq = equal_accuracy(st["square"])
    by = lambda name: [r for r in st["square"] if r["method"] == f"gradflow auto ({name})"]
    auto = by("rodas4-eigh")
    ratio = {e["kappa"]: e["ratio"] for e in eq if e["method"] == "gradflow auto (rodas4-eigh)"}
    ks = ", ".join(f"{r['kappa']:g}" for r in auto)
    return (f"Measured on the conditioning draws of Figs. 3/12 (d = {st['d']}, {st['d'] ** 2 + st['d'] + 1} states, "
            f"`t1 = {_e(st['t1'])}`, rtol 1e-8; `python -m benchmarks`, section \"Stiff flows\"): κ = {ks} take "
            f"{', '.join(str(r['steps']) for r in auto)} steps with `rodas4-eigh` as the implicit phase "
            f"(ROS34PW2 with the eigendecomposition alone: {', '.join(str(r['steps']) for r in by('ros34pw2-eigh'))}; "
            f"Rodas4 with an LU factorisation per step: {', '.join(str(r['steps']) for r in by('rodas4'))}) and ran "
            + ", ".join(f"{ratio[r['kappa']]:.1f}" if ratio[r["kappa"]] else "–" for r in auto)
            + "× faster than SciPy LSODA at equal or smaller error (the cheapest LSODA run, rtol 1e-8 to 1e-10, "
            "whose error is at most gradflow's), warm, on a shared 2-core machine.\n")


BLOCKS: dict[str, Callable[[dict], str]] = {
    "commands": commands, "benchmark-commands": benchmark_commands, "headline": headline, "stiff": stiff,
    "large-models": large_models,
}


def render(text: str, data: dict, page: str = "<page>") -> str:
    """``text`` with every generated block rewritten from ``data`` (see :func:`load`).

    Raises:
        PagesError: a block names no entry of :data:`BLOCKS`, or a marker is left unclosed or nested.
    """
    def one(match):
        name = match.group(1)
        if name not in BLOCKS:
            raise PagesError(f"{page}: generated:{name}: no such block; expected one of {sorted(BLOCKS)}")
        if "<!-- generated:" in match.group(2):
            raise PagesError(f"{page}: generated:{name}: a block opens inside it before its <!-- /generated -->")
        return f"<!-- generated:{name} -->\n{BLOCKS[name](data)}<!-- /generated -->"

    out = BLOCK.sub(one, text)
    if out.count("<!-- generated:") != out.count("<!-- /generated -->"):
        raise PagesError(f"{page}: a <!-- generated:NAME --> marker without its <!-- /generated --> (or the reverse)")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.pages", description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a committed page differs")
    p.add_argument("--root", default=ROOT, help="repository root (default: this checkout)")
    args = p.parse_args(argv)
    data = load(os.path.join(args.root, "benchmarks"))
    stale = []
    for page in PAGES:
        path = os.path.join(args.root, page)
        with open(path) as fh:
            text = fh.read()
        new = render(text, data, page)
        if new == text:
            continue
        stale.append(page)
        if not args.check:
            tmp = f"{path}.tmp{os.getpid()}"
            with open(tmp, "w") as fh:
                fh.write(new)
            os.replace(tmp, path)
    verb = (("differ" if len(stale) > 1 else "differs") + " from what python -m benchmarks.pages writes"
            if args.check else "rewritten")
    print(f"benchmarks.pages: {', '.join(stale) if stale else 'no page'} {verb}", file=sys.stderr)
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    raise SystemExit(main())
