"""Sec. 4 transformer code: kernels vs hand computations, masking, task generators, training."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradflow._errors import GradflowValueError
from sims.transformer.kernels import KERNELS, attention_weights
from sims.transformer.tasks import group_batch, group_of, induction_batch
from sims.transformer.train import RunConfig, attack_pairs, shares, sparsity, train

VARIANTS = [(k, n) for k in KERNELS for n in (True, False) if not (k == "softmax" and not n)]

# 3x3 example: with k = sqrt(3)·I and d_h = 3 the logits q kᵀ/√d_h are exactly q = L.
L = np.array([[0.0, 1.0, -1.0], [2.0, 0.0, 1.0], [0.5, -0.5, 0.0]])
K = np.sqrt(3.0) * np.eye(3)


def _elu1(x):
    return np.where(x > 0, x, np.exp(x) - 1) + 1


def _hand(kernel: str, normalise: bool) -> np.ndarray:
    """Entry-by-entry formulas of Table 1 (SPEC §7), loops over i, j."""
    phi = np.tanh
    g = np.zeros((3, 3))
    for i in range(3):
        for j in range(3):
            if kernel == "softmax":
                g[i, j] = np.exp(L[i, j])
            elif kernel == "sigmoid":
                g[i, j] = 1 / (1 + np.exp(-L[i, j]))
            elif kernel == "elu":
                g[i, j] = _elu1(L[i, j])
            elif kernel == "elu-elu":
                g[i, j] = sum(_elu1(L[i, m]) * _elu1(K[j, m]) for m in range(3))
            elif kernel == "mlp":
                g[i, j] = sum(phi(L[i, m]) * phi(K[j, m]) for m in range(3)) / np.sqrt(3)
            else:
                g[i, j] = L[i, j]
    if kernel == "softmax" or normalise:
        tot = g.sum(1, keepdims=True)
        g = g / (np.maximum(np.abs(tot), 1) if kernel in ("mlp", "linear") else tot)
    return g


@pytest.mark.parametrize("kernel,normalise", VARIANTS)
def test_kernel_matches_hand_computation_3x3(kernel, normalise):
    w = attention_weights(jnp.asarray(L), jnp.asarray(K), kernel, normalise, phi=jnp.tanh)
    np.testing.assert_allclose(np.asarray(w), _hand(kernel, normalise), rtol=1e-12, atol=1e-14)


def test_kernel_literal_values():
    """Two rows worked out by hand: softmax(0, 1, −1) and the signed normaliser max(|Σ|, 1)."""
    w = attention_weights(jnp.asarray(L), jnp.asarray(K), "softmax", True)
    e = np.exp(1.0)
    np.testing.assert_allclose(np.asarray(w[0]), [1 / (1 + e + 1 / e), e / (1 + e + 1 / e), (1 / e) / (1 + e + 1 / e)],
                               rtol=1e-12)
    lin = np.asarray(attention_weights(jnp.asarray(L), jnp.asarray(K), "linear", True))
    np.testing.assert_allclose(lin[0], [0.0, 1.0, -1.0])  # Σ = 0 -> divided by 1, unchanged
    np.testing.assert_allclose(lin[1], [2 / 3, 0.0, 1 / 3])  # Σ = 3
    # negative control: the un-normalised sigmoid row is not a distribution
    sig = np.asarray(attention_weights(jnp.asarray(L), jnp.asarray(K), "sigmoid", False))
    assert abs(sig[0].sum() - 1) > 0.1


@pytest.mark.parametrize("kernel,normalise", VARIANTS)
def test_causal_mask_future_weights_exactly_zero(kernel, normalise):
    rng = np.random.default_rng(0)
    q, k = (jnp.asarray(rng.standard_normal((5, 4)) * 3) for _ in range(2))
    phi = lambda x: jnp.tanh(x) + 0.5  # noqa: E731
    w = np.asarray(attention_weights(q, k, kernel, normalise, causal=True, phi=phi))
    assert np.all(w[np.triu_indices(5, 1)] == 0.0)
    # each causal row equals the row computed from its prefix alone (a second formulation)
    for i in range(5):
        row = attention_weights(q[i:i + 1], k[:i + 1], kernel, normalise, phi=phi)
        np.testing.assert_allclose(w[i, :i + 1], np.asarray(row[0]), rtol=1e-12, atol=1e-15)
    # future keys get exactly zero gradient
    grad = jax.grad(lambda kk: jnp.sum(attention_weights(q, kk, kernel, normalise, causal=True, phi=phi)[2] * jnp.arange(1.0, 6.0)))(k)
    assert np.all(np.asarray(grad)[3:] == 0.0) and np.any(np.asarray(grad)[:3] != 0.0)
    # negative control: without the mask the upper triangle is not zero
    w_full = np.asarray(attention_weights(q, k, kernel, normalise, causal=False, phi=phi))
    assert np.any(w_full[np.triu_indices(5, 1)] != 0.0)


def test_masked_logit_is_dtype_min_in_float32():
    """float32 path: masked entries exactly 0 and rows finite even with huge logits."""
    q = jnp.full((3, 2), 100.0, jnp.float32)
    for kernel in ("softmax", "sigmoid", "elu"):
        w = attention_weights(q, q, kernel, kernel == "softmax", causal=True)
        assert w.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(w)))
        assert float(w[0, 1]) == 0.0 and float(w[0, 2]) == 0.0


@pytest.mark.parametrize("args,match", [
    (("softmax", False), "normalise"), (("relu", True), "kernel"), (("mlp", True), "phi"),
])
def test_kernel_bad_arguments(args, match):
    q = jnp.ones((3, 2))
    with pytest.raises(GradflowValueError, match=match):
        attention_weights(q, q, *args)


def _valid_induction(seq, vocab, n):
    """Independent validator of one induction sequence; returns a list of violations."""
    bad = []
    ctx, q, c = list(seq[1:n + 1]), seq[n + 1], seq[n + 2]
    if seq[0] != vocab:
        bad.append("BOS")
    if len(set(ctx)) != n or not all(0 <= t < vocab for t in ctx):
        bad.append("distinct")
    if q not in ctx[:-1]:
        bad.append("query")
    elif ctx[ctx.index(q) + 1] != c:
        bad.append("target")
    return bad


def test_induction_sequences_valid():
    seq = induction_batch(3, 2000, vocab=50, n_context=10)
    assert seq.shape == (2000, 13) and seq.dtype == np.int32
    assert all(not _valid_induction(s, 50, 10) for s in seq)
    positions = [list(s[1:11]).index(s[11]) for s in seq]
    assert set(positions) == set(range(9))  # every position with a successor is used
    np.testing.assert_array_equal(seq, induction_batch(3, 2000))  # seeded
    # negative controls: the validator catches each corruption
    bad = seq[0].copy(); bad[2] = bad[1]
    assert "distinct" in _valid_induction(bad, 50, 10)
    bad = seq[0].copy(); bad[12] = (bad[12] + 1) % 50
    assert _valid_induction(bad, 50, 10)
    bad = seq[0].copy(); bad[11] = bad[10]  # the last context token has no successor
    assert "query" in _valid_induction(bad, 50, 10)


def test_group_sequences_valid():
    seq, lab = group_batch(5, 2000, vocab=48, n_groups=4, n_context=10)
    assert seq.shape == (2000, 11) and np.all(seq[:, 0] == 48)
    assert set(np.unique(lab)) == {0, 1, 2, 3}
    body = seq[:, 1:]
    assert np.all(body // 12 == lab[:, None])  # every token in the label's group (12 tokens each)
    assert np.all(group_of(body) == lab[:, None])
    assert all(len(set(r)) == 10 for r in body)
    # negative control: another label breaks the group check
    assert not np.all(body // 12 == ((lab + 1) % 4)[:, None])


def test_task_bad_arguments():
    with pytest.raises(GradflowValueError, match="vocab"):
        induction_batch(0, 10, vocab=5, n_context=10)
    with pytest.raises(GradflowValueError, match="vocab"):
        group_batch(0, 10, vocab=20, n_groups=4, n_context=10)
    with pytest.raises(GradflowValueError, match="normalise"):
        RunConfig(kernel="softmax", normalise=False)
    for field, val in [("lr", 0.0), ("lr", float("nan")), ("lr", float("inf")), ("weight_decay", -0.1),
                       ("aux_weight", -1.0), ("aux_weight", float("nan")), ("stop_acc", 0.0), ("stop_acc", 1.0)]:
        with pytest.raises(GradflowValueError, match=field):
            RunConfig(**{field: val})
    RunConfig(lr=1e-3, weight_decay=0.0, aux_weight=0.0, stop_acc=0.5)  # control: boundary values accepted


def test_shares_and_sparsity_by_hand():
    w = np.array([[[[[1.0, 0.0], [-1.0, 3.0]]]]])  # (N=1, L=1, H=1, T=2, T=2)
    np.testing.assert_allclose(shares(w)[0, 0, 0], [[1.0, 0.0], [0.25, 0.75]])
    np.testing.assert_allclose(sparsity(shares(w), slice(None)), [[(1.0 + 0.75) / 2]])


def test_attack_pairs_different_labels_and_none_when_one_label():
    y = np.array([0, 0, 1, 1, 2, 3])
    pred = np.array([0, 0, 1, 0, 2, 0])  # correct: 0, 1, 2, 4 with labels 0, 0, 1, 2
    a, b = attack_pairs(pred, y, 100, np.random.default_rng(0))
    # by hand: correct labels 0,0,1,2 -> ordered different-label pairs 2·2 + 2·2 + 1·1 + 1·1 = 10
    want = {(i, j) for i in (0, 1, 2, 4) for j in (0, 1, 2, 4) if y[i] != y[j]}
    assert len(want) == 10 and set(zip(a.tolist(), b.tolist())) == want and len(a) == 10
    a, b = attack_pairs(pred, y, 3, np.random.default_rng(0))
    assert len(a) == 3 and len(set(zip(a.tolist(), b.tolist()))) == 3 and all(y[a] != y[b])
    # a diverged model predicts label 0 everywhere: no valid pair, returns at once
    a, b = attack_pairs(np.zeros(2000, int), np.repeat(np.arange(4), 500), 500, np.random.default_rng(0))
    assert len(a) == len(b) == 0


# ----------------------------------------------------------------------------- training

TINY = dict(d_model=32, n_layers=2, n_heads=4, n_train=256, epochs=2, batch=32, n_test=64,
            evals_per_epoch=2, n_pairs=20)


def test_flip_attack_flips_a_one_token_reader_and_not_a_pooler(monkeypatch):
    """measure_groups on two hand-made models with the same attention (the CLS row of every head
    on position 3, the other rows 0): one reads the group off that token alone (every attacked
    pair flips), one takes the majority group of the 10 tokens (one swapped token never flips it)."""
    import importlib

    tr = importlib.import_module("sims.transformer.train")
    cfg = RunConfig(kernel="softmax", normalise=True, **{**TINY, "n_test": 400, "n_pairs": 100})

    def maps(model, x):
        w = np.zeros((len(x), cfg.n_layers, cfg.n_heads, x.shape[1], x.shape[1]))
        w[:, :, :, 0, 3] = 1.0
        return w

    def predict(model, x, task):
        groups = group_of(x[:, 1:], vocab=cfg.group_vocab, n_groups=cfg.n_groups)
        if model == "one-token":
            return groups[:, 2]  # the token at position 3
        return np.array([np.bincount(g, minlength=cfg.n_groups).argmax() for g in groups])

    monkeypatch.setattr(tr, "_maps", maps)
    monkeypatch.setattr(tr, "_predict", predict)
    reader, pooler = tr.measure_groups("one-token", cfg), tr.measure_groups("pooler", cfg)
    assert reader["group_acc"] == pooler["group_acc"] == 1.0 and reader["n_pairs"] == pooler["n_pairs"] == 100
    assert reader["flip_rate"] == 1.0 and pooler["flip_rate"] == 0.0
    # sparsity: the mean over rows of the largest share; only the CLS row of the 11 is non-zero
    np.testing.assert_allclose(reader["sparsity_groups"], 1.0 / (cfg.n_context + 1))


def test_nonfinite_loss_stops_training_as_diverged(tmp_path, monkeypatch):
    """A step whose loss is NaN (as in a diverged model) ends training at the next evaluation."""
    import importlib

    tr = importlib.import_module("sims.transformer.train")  # the package re-exports train()

    step = tr._step
    cfg = RunConfig(kernel="sigmoid", normalise=False, **TINY)  # 8 steps/epoch, evaluations every 4
    _, hist = train(cfg, "groups", progress=False)  # control: a finite loss goes on
    assert hist["diverged_step"] is None and hist["step"][:2] == [4, 8]  # goes past the first evaluation
    monkeypatch.setattr(tr, "_step", lambda *a: (lambda m, o, loss: (m, o, loss * jnp.nan))(*step(*a)))
    ckpt = str(tmp_path / "run")
    _, hist = train(cfg, "groups", checkpoint=ckpt, progress=False)
    assert hist["diverged_step"] == 4 and hist["step"] == [4] and hist["stopped_step"] is None
    monkeypatch.setattr(tr, "_step", step)
    _, again = train(cfg, "groups", checkpoint=ckpt, progress=False)  # a diverged checkpoint is final
    assert again["diverged_step"] == 4 and again["step"] == [4]


def test_checkpoint_of_another_config_is_not_resumed(tmp_path):
    import json

    cfg = RunConfig(kernel="sigmoid", normalise=False, **TINY)
    ckpt = str(tmp_path / "run")
    train(cfg, "groups", checkpoint=ckpt, progress=False, stop_after=4)
    assert json.loads((tmp_path / "run.json").read_text())["config"] == cfg.to_dict()
    _, same = train(cfg, "groups", checkpoint=ckpt, progress=False, stop_after=0)
    assert same["step"] == [4]  # control: the same config resumes (0 new steps, history kept)
    other = RunConfig(kernel="sigmoid", normalise=False, **{**TINY, "lr": 2e-3})
    _, hist = train(other, "groups", checkpoint=ckpt, progress=False, stop_after=0)
    assert hist["step"] == [] and not (tmp_path / "run.json").exists()  # stale checkpoint deleted
    assert not list(tmp_path.iterdir())
    train(cfg, "groups", checkpoint=ckpt, progress=False, stop_after=4)
    _, hist = train(cfg, "induction", checkpoint=ckpt, progress=False, stop_after=0)  # other task
    assert hist["step"] == []


def test_only_the_induction_model_stops_early():
    """SPEC's early stop is on induction accuracy: the group model trains every epoch."""
    cfg = RunConfig(kernel="sigmoid", normalise=False, stop_acc=1e-6, **TINY)  # every evaluation is above
    _, ind = train(cfg, "induction", progress=False)
    assert ind["above_step"] == 4 and ind["stopped_step"] == 12 and ind["step"] == [4, 8, 12]  # control
    _, grp = train(cfg, "groups", progress=False)
    assert grp["above_step"] == 4 and grp["stopped_step"] is None and grp["step"] == [4, 8, 12, 16]


def test_group_checkpoint_stopped_early_trains_on_to_the_same_model(tmp_path):
    """A groups checkpoint an older version marked as stopped early resumes to the last epoch and
    ends where an uninterrupted run ends; an induction checkpoint that stopped early is final."""
    import json

    import equinox as eqx

    cfg = RunConfig(kernel="sigmoid", normalise=False, **TINY)
    for task in ("groups", "induction"):
        ckpt = tmp_path / task
        train(cfg, task, checkpoint=str(ckpt), progress=False, stop_after=4)
        meta = json.loads((tmp_path / f"{task}.json").read_text())
        meta["history"]["stopped_step"] = 4  # as the older version wrote it
        (tmp_path / f"{task}.json").write_text(json.dumps(meta))
        model, hist = train(cfg, task, checkpoint=str(ckpt), progress=False)
        if task == "induction":  # control: an early stop of the induction model is final
            assert hist["step"] == [4] and hist["stopped_step"] == 4
            continue
        assert hist["step"] == [4, 8, 12, 16] and hist["stopped_step"] is None
        whole, h_whole = train(cfg, task, progress=False)
        assert hist["acc"] == h_whole["acc"] and hist["above_step"] == h_whole["above_step"]
        leaves = zip(jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_array)),
                     jax.tree_util.tree_leaves(eqx.filter(whole, eqx.is_array)))
        assert all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in leaves)
        other, _ = train(RunConfig(kernel="sigmoid", normalise=False, seed=1, **TINY), task, progress=False)
        assert not np.allclose(other.head.weight, whole.head.weight)  # control: the comparison can fail


def test_run_trains_on_a_group_model_stopped_early_and_keeps_the_induction_part(tmp_path, monkeypatch):
    import importlib

    tr = importlib.import_module("sims.transformer.train")
    cfg = RunConfig(kernel="sigmoid", normalise=False, **TINY)
    first = tr.run(cfg, str(tmp_path / "a"), progress=False)
    assert not tr.groups_stopped_early(first)
    tasks = []
    real = tr.train
    monkeypatch.setattr(tr, "train", lambda cfg, task, **kw: (tasks.append(task), real(cfg, task, **kw))[1])
    assert tr.run(cfg, str(tmp_path / "b"), progress=False, previous=first) is first  # control: complete
    assert tasks == []
    old = {**first, "history_groups": {**first["history_groups"], "stopped_step": 4},
           "example_maps": first["example_maps"] + 1.0}  # marks the induction part as the old one's
    new = tr.run(cfg, str(tmp_path / "b"), progress=False, previous=old)
    assert tasks == ["groups"] and not tr.groups_stopped_early(new)
    assert new["history_groups"]["step"][-1] == 16 and new["history_induction"] == first["history_induction"]
    np.testing.assert_array_equal(new["example_maps"], old["example_maps"])
    for key in ("group_acc", "flip_rate"):  # the group model trained again from scratch, as in `first`
        assert new[key] == first[key]
    np.testing.assert_allclose(new["sparsity_groups"], first["sparsity_groups"], rtol=1e-5)
    induction = tr.measure_induction(tr._model(cfg, "induction"), cfg)
    assert set(induction) == set(tr.INDUCTION_KEYS)  # what a kept induction part must hold
    assert (tmp_path / "b" / "sigmoid-raw-s0.npz").exists()


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_model(tmp_path):
    """Stop after 5 steps (last checkpoint at step 4), resume, compare with an uninterrupted run."""
    import equinox as eqx

    cfg = RunConfig(kernel="sigmoid", normalise=False, **TINY)
    ckpt = str(tmp_path / "run")
    train(cfg, "induction", checkpoint=ckpt, progress=False, stop_after=5)
    meta = __import__("json").loads((tmp_path / "run.json").read_text())
    assert meta["step"] == 4 and (tmp_path / "run.4.eqx").exists()
    resumed, hist = train(cfg, "induction", checkpoint=ckpt, progress=False)
    whole, hist_whole = train(cfg, "induction", progress=False)
    assert hist["step"] == hist_whole["step"] == [4, 8, 12, 16]
    leaves = zip(jax.tree_util.tree_leaves(eqx.filter(resumed, eqx.is_array)),
                 jax.tree_util.tree_leaves(eqx.filter(whole, eqx.is_array)))
    assert all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in leaves)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.16.eqx", "run.json"]  # old leaves removed
    # negative control: a fresh run from another seed ends elsewhere
    other, _ = train(RunConfig(kernel="sigmoid", normalise=False, seed=1, **TINY), "induction", progress=False)
    assert not np.allclose(other.head.weight, whole.head.weight)


def test_reproduce_keeps_long_figures_quick_unless_paper_scale(monkeypatch, tmp_path):
    from gradflow import cli
    import sims._registry as registry

    calls = []
    monkeypatch.setattr(registry, "build", lambda fig_id, out, quick, force, progress: calls.append((fig_id, quick))
                        or {"cached": False, "summary": {}})
    args = cli._parser().parse_args(["reproduce", "--out", str(tmp_path), "--no-progress"])
    args.ids, args.list, args.verbose = ["fig2", "flip-rate"], False, False
    assert cli._cmd_figures(args) == 0
    assert calls == [("fig2", False), ("flip-rate", True)]
    calls.clear()
    args = cli._parser().parse_args(["reproduce", "--paper-scale", "--out", str(tmp_path)])
    args.ids, args.list, args.verbose, args.no_progress = ["flip-rate"], False, False, True
    cli._cmd_figures(args)
    assert calls == [("flip-rate", False)]
    calls.clear()
    args = cli._parser().parse_args(["figures", "flip-rate", "--out", str(tmp_path)])  # figures: as asked
    cli._cmd_figures(args)
    assert calls == [("flip-rate", False)]


@pytest.mark.slow
def test_quick_figures_build_and_quick_run_learns_induction(tmp_path, monkeypatch):
    """All five Sec. 4 figures in quick mode (fresh cache); the quick softmax run is above chance
    (1/50, a uniform guess over the vocabulary): in its 800 steps it learns that the target is a
    context token (about 1/9), while induction proper (accuracy >> 1/9) needs paper scale.
    Negative control: the untrained model is at chance."""
    import json

    import sims.transformer.sweep as sweep
    from gradflow import cli
    from sims.transformer.train import _accuracy, _data, _model, _seeds

    monkeypatch.setattr(sweep, "CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sweep, "COMMITTED", str(tmp_path / "none"))
    ids = ["sinks-induction", "accuracy-induction", "flip-rate", "sparsity-heads", "attn-patterns"]
    assert cli.main(["figures", *ids, "--quick", "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    for fig_id in ids:
        assert (tmp_path / "out" / f"{fig_id}.png").stat().st_size > 0
    acc = json.loads((tmp_path / "out" / "accuracy-induction.json").read_text())["summary"]
    assert acc["softmax-norm"]["induction_acc"][0] > 0.06
    flips = json.loads((tmp_path / "out" / "flip-rate.json").read_text())["summary"]
    assert flips["softmax-norm"]["n_pairs"] == [500]
    assert flips["softmax-norm"]["group_stopped_early_step"] == [None]  # the group model used every epoch
    cfg = sweep.run_config("softmax", True, 0, quick=True)
    x, y = _data(cfg, "induction", _seeds(cfg, "induction")[1], 1000)
    assert _accuracy(_model(cfg, "induction"), x, y, "induction") < 0.05


def test_result_path_prefers_a_result_whose_group_model_trained_every_epoch(tmp_path, monkeypatch):
    import json
    import os

    import sims.transformer.sweep as sweep

    monkeypatch.setattr(sweep, "COMMITTED", str(tmp_path / "committed"))
    monkeypatch.setattr(sweep, "CACHE", str(tmp_path / "cache"))
    cfg = sweep.run_config("softmax", True, 0, quick=True)

    def write(base, stopped, config=None):
        path = tmp_path / base / "quick" / "softmax-norm-s0.npz"
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {"config": config or cfg.to_dict(), "history_groups": {"stopped_step": stopped}}
        np.savez(path, meta=np.array(json.dumps(meta)))
        return str(path)

    assert sweep.result_path(cfg, quick=True) is None
    old = write("committed", 582)
    assert sweep.result_path(cfg, quick=True) == old  # the only one: used (figures label it)
    new = write("cache", None)
    assert sweep.result_path(cfg, quick=True) == new  # committed first, but not an early-stopped group model
    os.remove(old)
    done = write("committed", None)
    assert sweep.result_path(cfg, quick=True) == done  # both complete: the committed one
    os.remove(new)
    os.remove(done)
    write("committed", None, config={**cfg.to_dict(), "lr": 0.5})
    assert sweep.result_path(cfg, quick=True) is None  # written for another config: not a result of cfg


def test_sweep_cli_refuses_unknown_variant(capsys):
    from sims.transformer import sweep

    with pytest.raises(SystemExit) as e:
        sweep.main(["--variants", "softmax-norm", "nope-norm"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "nope-norm" in err and "sigmoid-raw" in err  # names the valid choices


def test_sec4_figures_state_the_seed_deviation():
    from sims import _sec4, flip_rate

    cfg = _sec4.config(quick=True)
    assert cfg["seeds"] == [0]
    data = {"available": np.zeros((len(cfg["variants"]), 1), bool)}
    assert "seed 0 only (SPEC: 0–4)" in _sec4.scale_note(cfg, data)
    assert "only" not in _sec4.scale_note({**cfg, "seeds": [0, 1, 2, 3, 4]}, data)  # control: full set
    V = len(cfg["variants"])
    fake = {"available": np.zeros((V, 1), bool), "flip_rate": np.full((V, 1), -1.0),
            "n_pairs": np.zeros((V, 1), int), "group_acc": np.full((V, 1), -1.0)}
    out = flip_rate.FIGURE.summary(fake, cfg)
    assert out["seeds"] == [0] and out["spec_seeds"] == [0, 1, 2, 3, 4]
    assert all(out[name] is None for name in cfg["variants"])


@pytest.mark.parametrize("kernel", ["sigmoid", "elu"])
def test_normalised_logit_kernels_have_finite_gradients_where_terms_underflow(kernel):
    """Logits near −100 (float32): every term g underflows or is subnormal. The weights are
    computed as softmax(log g) and their gradient is finite; the plain quotient g / Σ g (the
    control) has a non-finite gradient there (it made training diverge)."""
    q = jnp.full((3, 4), -10.0, jnp.float32)
    k = jnp.full((3, 4), 5.0, jnp.float32)  # logits q·k/√4 = −100

    def loss(q, fn):
        return jnp.sum(fn(q) * jnp.arange(3.0))

    ours = lambda q: attention_weights(q, k, kernel, True)
    g = (lambda z: jax.nn.sigmoid(z)) if kernel == "sigmoid" else (lambda z: jax.nn.elu(z) + 1)
    plain = lambda q: (lambda w: w / jnp.maximum(w.sum(-1, keepdims=True), jnp.finfo(jnp.float32).tiny))(g(q @ k.T / 2))
    w = ours(q)
    np.testing.assert_allclose(np.asarray(w), 1 / 3, rtol=1e-6)  # equal logits: uniform rows
    assert np.all(np.isfinite(np.asarray(jax.grad(loss)(q, ours))))
    assert not np.all(np.isfinite(np.asarray(jax.grad(loss)(q, plain))))  # control
