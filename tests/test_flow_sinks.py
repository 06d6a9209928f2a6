"""The ``flow-sinks`` figure's three trainings of the Sec. 4 transformer (sims/beyond/flow_sinks.py).

The flow is checked against SciPy's ``solve_ivp`` (DOP853 at tight tolerance) on the same loss,
flattened with ``ravel_pytree`` (an integrator that shares nothing with gradflow's engine); GD
against the same SciPy flow (its error shrinks like ``lr``); a negative control shows the
comparison separates a different loss. The figure's JSON fields are checked on hand-made data
(fast) and on the real quick build (slow).
"""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from scipy.integrate import solve_ivp

from gradflow.sims.beyond import flow_sinks as fs
from gradflow.sims.sec4.train import induction_config

TS = np.array([0.0, 0.1, 0.3, 1.0])


def _tiny(aux_weight: float = 0.2):
    """A 1-layer, 1-head, d_model-4 softmax induction transformer (vocab 12: 24 output ids) on 4
    training sequences."""
    rc = induction_config("softmax", True, 0, d_model=4, n_layers=1, n_heads=1, vocab=12, n_train=4, batch=4,
                          n_test=8, aux_weight=aux_weight)
    return fs.setup(rc)


def _scipy_flow(loss, params0, args, ts):
    """``dθ/dt = −∇L(θ)`` of the flattened parameters by SciPy's DOP853 (rtol 1e-11, atol 1e-13)."""
    flat0, unravel = ravel_pytree(params0)
    grad = jax.jit(jax.grad(lambda v: loss(unravel(v), args)))
    sol = solve_ivp(lambda t, v: -np.asarray(grad(v)), (ts[0], ts[-1]), np.asarray(flat0), method="DOP853",
                    t_eval=ts, rtol=1e-11, atol=1e-13)
    assert sol.success, sol.message
    return sol.y.T  # (len(ts), n_params)


@pytest.fixture(scope="module")
def tiny():
    loss, p0, args, _ = _tiny()
    return loss, p0, args, _scipy_flow(loss, p0, args, TS)


def _flat(sol) -> np.ndarray:
    return np.stack([np.asarray(ravel_pytree(jax.tree.map(lambda a: a[i], sol.params))[0])
                     for i in range(len(np.asarray(sol.t)))])


@pytest.mark.slow  # ~150 s on 2 busy cores, almost all of it compiling the engine's solve of the transformer
def test_flow_matches_scipy(tiny):
    loss, p0, args, ref = tiny
    sol = fs.flow(loss, p0, args, t1=float(TS[-1]), ts=TS, max_steps=4096, rtol=1e-9)
    assert sol.status == "ok"
    got = _flat(sol)
    moved = np.max(np.abs(ref[-1] - ref[0]))
    assert moved > 0.05  # the parameters move: the comparison is not of two standing states
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-7 * max(1.0, np.max(np.abs(ref))))
    losses = [float(loss(jax.tree.map(lambda a: a[i], sol.params), args)) for i in range(len(TS))]
    np.testing.assert_allclose(np.asarray(sol.loss), losses, rtol=1e-12)
    assert losses[-1] < losses[0]


@pytest.mark.slow  # the control of the slow SciPy comparison above: it runs with it
def test_flow_comparison_separates_another_loss(tiny):
    """Negative control: the SciPy flow of the loss without the next-token term (aux 0) is far from
    the flow of the figure's loss, far beyond the tolerance the test above uses."""
    _, _, _, ref = tiny
    loss0, p0, args, _ = _tiny(aux_weight=0.0)
    other = _scipy_flow(loss0, p0, args, TS)
    assert np.max(np.abs(other[-1] - ref[-1])) > 1e3 * 1e-7 * max(1.0, np.max(np.abs(ref)))


@pytest.mark.slow  # ~60 s: one compile of the descent per lr
def test_gd_approaches_the_flow(tiny):
    """GD at step ``lr`` to ``t = 1``: distance to the (SciPy) flow ``O(lr)``, halving with ``lr``."""
    loss, p0, args, ref = tiny
    errs = []
    for lr in (0.02, 0.01, 0.005):
        steps = int(round(TS[-1] / lr))
        gd = fs.descent(loss, p0, args, steps=steps, record=[0, steps], lr=lr)
        assert gd.status == "ok"
        assert float(np.asarray(gd.t)[-1]) == pytest.approx(TS[-1])
        errs.append(np.max(np.abs(_flat(gd)[-1] - ref[-1])))
    errs = np.asarray(errs)
    ratios = errs[:-1] / errs[1:]
    assert np.all((ratios > 1.7) & (ratios < 2.3)), (errs, ratios)
    assert errs[-1] < 0.05 * np.max(np.abs(ref[-1] - ref[0]))


def _fake_data(cfg: dict) -> dict:
    """Hand-made ``compute`` output: 2 kernels, 2 heads, 5 points, the last two of the flow unreached."""
    K, P, H = len(cfg["kernels"]), 5, 2
    d = {}
    for o in fs.OPTIMISERS:
        d[f"{o}_t"] = np.tile(np.array([0.0, 0.1, 1.0, 10.0, 100.0]), (K, 1))
        d[f"{o}_k"] = np.zeros((K, P), int)
        d[f"{o}_valid"] = np.ones((K, P), bool)
        d[f"{o}_loss"] = np.tile(np.linspace(5.0, 1.0, P), (K, 1))
        d[f"{o}_bos"] = np.tile(np.linspace(0.1, 0.95, P)[:, None] * np.array([1.0, 0.5]), (K, 1, 1))
        d[f"{o}_acc"] = np.tile(np.linspace(0.0, 1.0, P), (K, 1))
        d[f"{o}_seconds"] = np.ones(K)
        d[f"{o}_steps"] = np.full(K, 7)
        d[f"{o}_status"] = np.array(["ok"] * K)
        d[f"{o}_t_end"] = np.full(K, 100.0)
    d["flow_valid"][:, 3:] = False
    d["flow_status"] = np.array(["max_steps"] * K)
    d["flow_t_end"] = np.full(K, 2.5)
    assert d["flow_bos"].shape == (K, P, H)
    return d


def test_summary_records_each_curve():
    cfg = fs.config(True)
    s = fs.summary(_fake_data(cfg), cfg)
    assert list(s) == ["softmax-norm", "linear-raw"]
    for row in s.values():
        assert set(row) == set(fs.OPTIMISERS)
        f = row["flow"]
        assert (f["t_end"], f["status"], f["steps"]) == (2.5, "max_steps", 7)
        assert f["t"] == [0.0, 0.1, 1.0]  # unreached save points left out
        assert len(f["bos_share"]) == 3 and f["bos_share"][-1] == [pytest.approx(0.5250), pytest.approx(0.2625)]
        assert f["final_max_bos_share"] == pytest.approx(0.525) and f["final_sink_heads"] == 0
        assert row["adam"]["axis"] == "step" and row["gd"]["axis"] == "flow time"
        assert row["adam"]["final_sink_heads"] == 1  # 0.95 > 0.9 in head 0, 0.475 in head 1
        assert "AdamW" in row["adam"]["optimiser"] and "GD" in row["gd"]["optimiser"]


@pytest.mark.slow
def test_quick_figure_json(tmp_path):
    from gradflow.sims.build import build

    rec = build("flow-sinks", str(tmp_path), quick=True, progress=False)
    on_disk = json.loads((tmp_path / "flow-sinks.json").read_text())
    assert on_disk["summary"] == json.loads(json.dumps(rec["summary"]))
    for name, row in on_disk["summary"].items():
        f = row["flow"]
        assert f["status"] in ("ok", "max_steps") and 0 < f["t_end"] <= on_disk["config"]["t1"]
        assert f["steps"] <= on_disk["config"]["max_steps"]
        assert row["gd"]["t"][-1] >= f["t"][-1]  # GD runs to the flow time the flow reached
        for o in fs.OPTIMISERS:
            assert len(row[o]["bos_share"]) == len(row[o]["t"]) == len(row[o]["induction_acc"]) > 1
            assert all(len(b) == on_disk["config"]["n_heads"] for b in row[o]["bos_share"])


@pytest.mark.slow  # ~20-35 s on 2 cores (compiles the transformer's AdamW loop and its evaluation); the sizing
# runs are an experiment reported in docs/flow-sinks.md, not a figure of the default build
def test_sizing_run_takes_adamws_first_step_and_applies_its_criteria():
    """``sinks_sizing.adamw_run`` at a tiny size: its step-0 loss is the loss at the flow's
    initialisation, its step-1 loss the loss after AdamW's first step written by hand (bias-corrected
    moments ``m̂ = g``, ``v̂ = g²``: ``θ₁ = θ₀ − lr·(g/(|g| + ε) + wd·θ₀)``, ε = 1e-8, optax's default);
    the sink and learned flags are the stated criteria applied to the last row."""
    from gradflow.sims.beyond import sinks_sizing as sz

    run = sz.adamw_run(8, 4, 1, 3, n_test=16, points=3)
    assert [r["k"] for r in run["rows"]] == [0, 1, 2, 3]
    cfg = {**fs.config(True), "d_model": 4, "n_heads": 1, "n_train": 8, "n_test": 16}
    loss, p0, args, _ = fs.setup(fs.run_config(cfg, "softmax", True))
    g = jax.grad(loss)(p0, args)
    lr, wd = run["lr"], run["weight_decay"]
    p1 = jax.tree.map(lambda p, gi: p - lr * (gi / (np.abs(gi) + 1e-8) + wd * p), p0, g)
    assert run["rows"][0]["loss"] == pytest.approx(float(loss(p0, args)), rel=1e-12)
    assert run["rows"][1]["loss"] == pytest.approx(float(loss(p1, args)), rel=1e-9)
    assert run["rows"][1]["loss"] != pytest.approx(run["rows"][0]["loss"], rel=1e-9)  # the step moved it
    last = run["rows"][-1]
    assert run["sink_heads"] == sum(b > sz.SINK_SHARE for b in last["bos"]) and len(last["bos"]) == 1
    assert run["learned"] == (last["acc"] >= sz.LEARNED_ACC)


def _label(run: dict) -> str:
    """The sizing table's task column: the task, the kernel if not softmax, the run seed if not 0."""
    out = run.get("task", "induction")
    out += ", linear w/o norm" if run.get("kernel", "softmax") == "linear" else ""
    return out + (f", seed {run['seed']}" if run.get("seed", 0) else "")


def _held_out(run: dict) -> str:
    """The sizing table's held-out column: induction accuracy, the Zipf task's cross-entropy excess
    over the law's entropy, or the Bigram-Backcopy task's accuracy on the copied tokens."""
    last, task = run["rows"][-1], run.get("task", "induction")
    if task == "zipf":
        return f"{last['excess']:+.3f} nats"
    return f"{last['acc']:.3f}" + (" (copies)" if task == "backcopy" else "")


def test_sizing_table_of_the_page_is_the_committed_json():
    """docs/flow-sinks.md's sizing table holds every committed run (figures/flow-sinks-sizing.json):
    its task, size, steps, final loss, held-out measure and layer-2 BOS shares as the JSON has them."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    runs = json.loads((root / "figures" / "flow-sinks-sizing.json").read_text())["runs"]
    page = (root / "docs" / "flow-sinks.md").read_text()
    assert runs
    for r in runs:
        last = r["rows"][-1]
        row = (f"| {_label(r)} | {r['n_train']:,} | {r['d_model']} | {r['n_heads']} | {r['steps']:,} | "
               f"{last['loss']:.3f} | {_held_out(r)} | {', '.join(f'{b:.2f}' for b in last['bos'])} |")
        assert row in page, row


def test_zipf_batch_follows_its_law_and_entropy_is_the_closed_form():
    """``zipf_batch``: column 0 is BOS, the other tokens follow ``P(k) ∝ 1/k`` (frequencies of
    200,000 draws within 4 binomial standard deviations of each ``p_k``; a uniform law is far
    outside, the negative control), and ``zipf_entropy`` is ``−Σ p log p`` written out by hand
    for a 4-token vocabulary (``p = (6, 3, 2)/11``)."""
    from gradflow.sims.beyond import sinks_sizing as sz

    seq = sz.zipf_batch(3, 20_000, vocab=50, length=11)
    assert seq.shape == (20_000, 11) and seq.dtype == np.int32 and (seq[:, 0] == 0).all()
    k = np.arange(1, 50)
    p = (1 / k) / (1 / k).sum()
    freq = np.bincount(seq[:, 1:].ravel(), minlength=50)[1:] / seq[:, 1:].size
    sd = np.sqrt(p * (1 - p) / seq[:, 1:].size)
    assert np.all(np.abs(freq - p) <= 4 * sd)
    uniform = np.full(49, 1 / 49)
    assert not np.all(np.abs(freq - uniform) <= 4 * sd)
    q = np.array([6, 3, 2]) / 11
    assert sz.zipf_entropy(4) == pytest.approx(-(q * np.log(q)).sum(), rel=1e-14)
    with pytest.raises(ValueError, match="vocab"):
        sz.zipf_batch(0, 4, vocab=1)


def test_backcopy_batch_copies_after_triggers_only():
    """``backcopy_batch``: wherever the token before is a trigger (``≤ triggers``, from the third
    token on) the token repeats the one two back and is flagged copied; nowhere else is a token
    flagged. Elsewhere the draws follow the bigram law: the pairs ``(a, next)`` of one frequent
    ``a`` concentrate on its law's most likely id (a per-``a`` permutation: not the same id for
    every ``a``, the control against a unigram draw)."""
    from gradflow.sims.beyond import sinks_sizing as sz

    seq, copied = sz.backcopy_batch(5, 4000, vocab=50, triggers=5)
    prev, prev2 = seq[:, 1:-1], seq[:, :-2]
    want = np.zeros_like(copied)
    want[:, 3:] = seq[:, 2:-1] <= 5
    assert (copied == want).all() and copied.any()
    assert (seq[:, 2:][copied[:, 2:]] == prev2[copied[:, 2:]]).all()
    tops = []
    for a in (6, 7, 8):
        nxt = seq[:, 2:][(prev == a) & ~copied[:, 2:]]
        counts = np.bincount(nxt, minlength=50)
        assert counts.max() / counts.sum() > 0.15  # the law's top id has p = 0.22
        tops.append(int(counts.argmax()))
    assert len(set(tops)) > 1
    with pytest.raises(ValueError, match="triggers"):
        sz.backcopy_batch(0, 4, vocab=10, triggers=9)


@pytest.mark.slow  # ~40 s on 2 cores: compiles rkc and the evaluation of a tiny transformer
def test_sizing_flow_run_chain_matches_scipy_and_gd_is_euler():
    """``sinks_sizing.flow_run`` on a tiny Bigram-Backcopy setting: its chain of resumed
    ``integrate`` calls (rkc, rtol 1e-4) saves training losses within 1e-3 (relative) of SciPy's
    DOP853 flow at rtol 1e-11 on the same raveled loss, at every save point of two calls
    (``t`` = 0 … 3); GD's rows sit at ``t = lr·k`` with the loss of ``lr·k`` explicit Euler steps
    written out by hand."""
    from gradflow.sims.beyond import sinks_sizing as sz

    run = sz.flow_run("backcopy", 16, 4, 1, 1e9, n_test=16, t1=3.0, gd_lrs=(0.5,), gd_points=3)
    assert run["calls"] == 2 and run["t_end"] == pytest.approx(3.0) and run["status"] == "ok"
    ts = np.array([r["t"] for r in run["rows"]])
    assert np.all(np.diff(ts) > 0) and ts[0] == 0.0
    _, loss, p0, args, _ = sz._setting("backcopy", 16, 4, 1, 16)
    flat0, unravel = ravel_pytree(p0)
    f = jax.jit(lambda x: loss(unravel(x), args))
    g = jax.jit(jax.grad(lambda x: loss(unravel(x), args)))
    ref = solve_ivp(lambda t, x: -np.asarray(g(x)), (0.0, 3.0), np.asarray(flat0), method="DOP853", t_eval=ts,
                    rtol=1e-11, atol=1e-13)
    want = np.array([float(f(x)) for x in ref.y.T])
    got = np.array([r["loss"] for r in run["rows"]])
    assert np.max(np.abs(got - want) / want) < 1e-3
    assert not np.allclose(got, want[0], rtol=1e-3)  # the flow moved the loss (control)
    gd = run["gd"][0]
    x = np.asarray(flat0)
    for r in gd["rows"]:
        assert r["t"] == pytest.approx(0.5 * r["k"])
    for _ in range(gd["rows"][-1]["k"]):
        x = x - 0.5 * np.asarray(g(x))
    assert gd["rows"][-1]["loss"] == pytest.approx(float(f(x)), rel=1e-9)


def test_flow_vs_adamw_table_of_the_page_is_current(tmp_path):
    """docs/flow-sinks.md's flow-against-AdamW table is what ``python -m gradflow.sims.beyond.sinks_sizing
    --docs`` writes from the committed JSON files; a stale copy of the page is detected (control), and
    a flow run whose setting has no AdamW run is refused."""
    import pathlib
    import shutil

    from gradflow.sims.beyond import sinks_sizing as sz

    root = pathlib.Path(__file__).resolve().parents[1]
    assert sz.write_docs(str(root), check=True)
    for rel in (sz.FLOW_JSON, sz.SIZING_JSON, sz.DOCS_PAGE):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / rel, tmp_path / rel)
    page = tmp_path / sz.DOCS_PAGE
    text = page.read_text()
    start = text.index(sz.TABLE_OPEN) + len(sz.TABLE_OPEN)
    page.write_text(text[:start] + "\n| stale |" + text[start:])
    assert not sz.write_docs(str(tmp_path), check=True)
    flow = json.loads((root / sz.FLOW_JSON).read_text())["flows"][0]
    runs = json.loads((root / sz.SIZING_JSON).read_text())["runs"]
    assert sz._adamw_of(flow, runs)["n_train"] == flow["n_train"]
    with pytest.raises(ValueError, match="no AdamW sizing run"):
        sz._adamw_of({**flow, "n_train": flow["n_train"] + 1}, runs)
