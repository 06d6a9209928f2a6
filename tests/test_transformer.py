"""Sec. 4 transformer code: kernels vs hand computations, masking, task generators, training."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradflow._errors import GradflowValueError
from gradflow.sims.sec4.kernels import KERNELS, kernel_weights
from gradflow.sims.sec4.tasks import group_batch, group_of, induction_batch
from gradflow.sims.sec4.train import (RunConfig, attack_pairs, bos_share, bos_share_rowwise, group_config,
                                    induction_config, run_name, shares, sparsity, train)

VARIANTS = [(k, n) for k in KERNELS for n in (True, False) if not (k == "softmax" and not n)]

# 3x3 example: with k = sqrt(3)·I and d_h = 3 the logits q kᵀ/√d_h are exactly q = L.
L = np.array([[0.0, 1.0, -1.0], [2.0, 0.0, 1.0], [0.5, -0.5, 0.0]])
K = np.sqrt(3.0) * np.eye(3)


def _elu1(x):
    return np.where(x > 0, x, np.exp(x) - 1) + 1


def _hand(kernel: str, normalization: bool) -> np.ndarray:
    """Entry-by-entry formulas of the paper's Table 1, loops over i, j."""
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
    if kernel == "softmax" or normalization:
        tot = g.sum(1, keepdims=True)
        g = g / (np.maximum(np.abs(tot), 1) if kernel in ("mlp", "linear") else tot)
    return g


@pytest.mark.parametrize("kernel,normalization", VARIANTS)
def test_kernel_matches_hand_computation_3x3(kernel, normalization):
    w = kernel_weights(jnp.asarray(L), jnp.asarray(K), kernel, normalization, phi=jnp.tanh)
    np.testing.assert_allclose(np.asarray(w), _hand(kernel, normalization), rtol=1e-12, atol=1e-14)


def test_kernel_literal_values():
    """Two rows worked out by hand: softmax(0, 1, −1) and the signed normaliser max(|Σ|, 1)."""
    w = kernel_weights(jnp.asarray(L), jnp.asarray(K), "softmax", True)
    e = np.exp(1.0)
    np.testing.assert_allclose(np.asarray(w[0]), [1 / (1 + e + 1 / e), e / (1 + e + 1 / e), (1 / e) / (1 + e + 1 / e)],
                               rtol=1e-12)
    lin = np.asarray(kernel_weights(jnp.asarray(L), jnp.asarray(K), "linear", True))
    np.testing.assert_allclose(lin[0], [0.0, 1.0, -1.0])  # Σ = 0 -> divided by 1, unchanged
    np.testing.assert_allclose(lin[1], [2 / 3, 0.0, 1 / 3])  # Σ = 3
    # negative control: the un-normalised sigmoid row is not a distribution
    sig = np.asarray(kernel_weights(jnp.asarray(L), jnp.asarray(K), "sigmoid", False))
    assert abs(sig[0].sum() - 1) > 0.1


@pytest.mark.parametrize("kernel,normalization", VARIANTS)
def test_causal_mask_future_weights_exactly_zero(kernel, normalization):
    rng = np.random.default_rng(0)
    q, k = (jnp.asarray(rng.standard_normal((5, 4)) * 3) for _ in range(2))
    phi = lambda x: jnp.tanh(x) + 0.5  # noqa: E731
    w = np.asarray(kernel_weights(q, k, kernel, normalization, causal=True, phi=phi))
    assert np.all(w[np.triu_indices(5, 1)] == 0.0)
    # each causal row equals the row computed from its prefix alone (a second formulation)
    for i in range(5):
        row = kernel_weights(q[i:i + 1], k[:i + 1], kernel, normalization, phi=phi)
        np.testing.assert_allclose(w[i, :i + 1], np.asarray(row[0]), rtol=1e-12, atol=1e-15)
    # future keys get exactly zero gradient
    grad = jax.grad(lambda kk: jnp.sum(kernel_weights(q, kk, kernel, normalization, causal=True, phi=phi)[2] * jnp.arange(1.0, 6.0)))(k)
    assert np.all(np.asarray(grad)[3:] == 0.0) and np.any(np.asarray(grad)[:3] != 0.0)
    # negative control: without the mask the upper triangle is not zero
    w_full = np.asarray(kernel_weights(q, k, kernel, normalization, causal=False, phi=phi))
    assert np.any(w_full[np.triu_indices(5, 1)] != 0.0)


def test_masked_logit_is_dtype_min_in_float32():
    """float32 path: masked entries exactly 0 and rows finite even with huge logits."""
    q = jnp.full((3, 2), 100.0, jnp.float32)
    for kernel in ("softmax", "sigmoid", "elu"):
        w = kernel_weights(q, q, kernel, kernel == "softmax", causal=True)
        assert w.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(w)))
        assert float(w[0, 1]) == 0.0 and float(w[0, 2]) == 0.0


@pytest.mark.parametrize("args,match", [
    (("softmax", False), "normalization"), (("relu", True), "kernel"), (("mlp", True), "phi"),
])
def test_kernel_bad_arguments(args, match):
    q = jnp.ones((3, 2))
    with pytest.raises(GradflowValueError, match=match):
        kernel_weights(q, q, *args)


def _valid_induction(seq, vocab, n, shift):
    """Independent validator of one induction sequence; returns a list of violations."""
    bad = []
    ctx, q, c = list(seq[1:n + 1]), int(seq[n + 1]), int(seq[n + 2])
    if seq[0] != 0:
        bad.append("BOS")
    if len(set(ctx)) != n or not all(1 <= t < vocab for t in ctx):
        bad.append("distinct")
    q_plain = q - vocab if shift else q
    if shift and not vocab + 1 <= q < 2 * vocab:
        bad.append("shift")
    if q_plain not in ctx:
        bad.append("query")
    else:
        r = ctx.index(q_plain)
        if (ctx + [q])[r + 1] != c:  # after the last context token comes the query itself
            bad.append("target")
    return bad


@pytest.mark.parametrize("shift", [True, False])
def test_induction_sequences_valid(shift):
    seq = induction_batch(3, 3000, vocab=50, n_context=10, shift_query=shift)
    assert seq.shape == (3000, 13) and seq.dtype == np.int32
    assert all(not _valid_induction(s, 50, 10, shift) for s in seq)
    q = seq[:, 11] - (50 if shift else 0)
    positions = [list(s[1:11]).index(qq) for s, qq in zip(seq, q)]
    assert set(positions) == set(range(10))  # q at any context position, the last one included
    last = np.array(positions) == 9
    np.testing.assert_array_equal(seq[last, 12], seq[last, 11])  # then the target is the query's id
    if shift:
        assert seq[:, 11].min() >= 51 and seq[:, 11].max() <= 99 and seq[:, 1:11].max() <= 49
    else:
        assert seq[:, 11].max() <= 49
    np.testing.assert_array_equal(seq, induction_batch(3, 3000, shift_query=shift))  # seeded
    # negative controls: the validator catches each corruption
    bad = seq[0].copy(); bad[2] = bad[1]
    assert "distinct" in _valid_induction(bad, 50, 10, shift)
    bad = seq[0].copy(); bad[12] = bad[12] % 49 + 1
    assert _valid_induction(bad, 50, 10, shift)
    assert _valid_induction(seq[0], 50, 10, not shift)  # the other id convention is caught


def test_query_last_switch():
    """``query_last=False`` (an earlier version's rule) never puts q on the last context token."""
    seq = induction_batch(4, 3000, shift_query=False, query_last=False)
    positions = {list(s[1:11]).index(s[11]) for s in seq}
    assert positions == set(range(9))
    assert 9 in {list(s[1:11]).index(s[11]) for s in induction_batch(4, 3000, shift_query=False)}  # control


def test_group_sequences_valid():
    seq, lab = group_batch(5, 2000, vocab=41, n_groups=4, n_context=10)
    assert seq.shape == (2000, 11) and np.all(seq[:, -1] == 0)  # CLS = 0 last
    assert set(np.unique(lab)) == {0, 1, 2, 3}
    body = seq[:, :-1]
    assert np.all((body - 1) // 10 == lab[:, None])  # every token in the label's group (ids 1 … 40)
    assert np.all(group_of(body) == lab[:, None])
    # vocab 41: each sequence holds its whole group, shuffled
    assert all(sorted(r) == list(range(1 + 10 * g, 11 + 10 * g)) for r, g in zip(body, lab))
    assert len({tuple(r) for r in body}) > 1000
    # negative controls: another label breaks the group check; vocab 81 draws 10 of 20
    assert not np.all((body - 1) // 10 == ((lab + 1) % 4)[:, None])
    big, lab2 = group_batch(5, 200, vocab=81)
    assert np.all((big[:, :-1] - 1) // 20 == lab2[:, None]) and any(sorted(r) != list(range(r.min(), r.min() + 10))
                                                                    for r in big[:, :-1])


@pytest.mark.bad_input
def test_task_bad_arguments():
    with pytest.raises(GradflowValueError, match="vocab"):
        induction_batch(0, 10, vocab=10, n_context=10)  # 9 content tokens for 10 distinct
    with pytest.raises(GradflowValueError, match="vocab"):
        group_batch(0, 10, vocab=40, n_groups=4, n_context=10)
    with pytest.raises(GradflowValueError, match="vocab"):
        group_batch(0, 10, vocab=42, n_groups=4, n_context=10)  # 41 content ids do not split in 4
    with pytest.raises(GradflowValueError, match="shift_query"):
        induction_batch(0, 10, shift_query=1)
    with pytest.raises(GradflowValueError, match="normalization"):
        RunConfig(kernel="softmax", normalization=False)
    for field, val in [("lr", 0.0), ("lr", float("nan")), ("lr", float("inf")), ("weight_decay", -0.1),
                       ("aux_weight", -1.0), ("aux_weight", float("nan")), ("stop_acc", 0.0), ("stop_acc", 1.0),
                       ("embed_std", 0.0), ("positions", "rope"), ("attack", "greedy"), ("sink_rows", (0, 9)),
                       ("sink_rows", (1, 12)), ("sink_rows", 3), ("task", "copy"), ("n_heads", 3),
                       ("early_stop", 1), ("use_mlp", "yes")]:
        with pytest.raises(GradflowValueError, match=field):
            RunConfig(**{field: val})
    with pytest.raises(GradflowValueError, match="vocab"):
        group_config("softmax", True, vocab=48)  # 47 content ids
    RunConfig(lr=1e-3, weight_decay=0.0, aux_weight=0.0, stop_acc=0.5, sink_rows=(1, 11))  # control: accepted


# ----------------------------------------------------------------------------- measurements

def test_shares_and_sparsity_by_hand():
    w = np.array([[[[[1.0, 0.0], [-1.0, 3.0]]]]])  # (N=1, L=1, H=1, T=2, T=2)
    np.testing.assert_allclose(shares(w)[0, 0, 0], [[1.0, 0.0], [0.25, 0.75]])
    np.testing.assert_allclose(sparsity(shares(w), slice(None)), [[(1.0 + 0.75) / 2]])


def test_bos_share_on_hand_made_maps_rows_1_to_9():
    """Two sequences of 12 input rows, one head. Sequence 0: rows 1…9 put 0.95 on BOS (share 0.95);
    sequence 1: un-normalised rows, row i (1…9) has weight i on BOS and 9 on other keys, so its
    share is Σi / Σ(i + 9) = 45 / 126 per sequence (not the mean of the row ratios). The rows of
    t_10 and q (10, 11) put weight 5 on a non-BOS key and nothing on BOS, and must not count."""
    T = 12
    w = np.zeros((2, 1, 1, T, T))
    for i in range(1, 10):
        w[0, 0, 0, i, 0], w[0, 0, 0, i, 1] = 0.95, 0.05
        w[1, 0, 0, i, 0], w[1, 0, 0, i, 1] = float(i), 9.0
    w[:, 0, 0, 0, 0] = 0.0  # row 0 (BOS itself) must not count either
    w[:, 0, 0, 10:, 1] = 5.0
    want = (0.95 + 45 / 126) / 2
    np.testing.assert_allclose(bos_share(w)[0, 0], want, rtol=1e-8)
    # negative controls: rows 1…10 (t_10 included), and the row-wise mean of shares, differ
    assert abs(bos_share(w, (1, 10))[0, 0] - want) > 0.01
    assert abs(np.mean([np.mean([i / (i + 9) for i in range(1, 10)]), 0.95]) - want) > 0.01
    assert abs(bos_share_rowwise(w, (1, 9))[0, 0] - want) > 0.01
    np.testing.assert_allclose(bos_share_rowwise(w, (1, 9))[0, 0],
                               (0.95 + np.mean([i / (i + 9) for i in range(1, 10)])) / 2)


def test_sink_count_as_the_authors_and_over_fractions_only():
    """Two variants, one kept 4-head run each, hand-made layer-2 shares. The authors count a head
    as a sink when its share exceeds 0.9; a signed kernel's share can exceed 1 (a row sums to ≈ 0),
    and the bounded count leaves those out. A run below 0.95 accuracy never counts."""
    from gradflow.sims.sec4 import _figures as f

    shares = np.array([[0.95, 0.99, 0.5, 1.0], [1.37, -1.25, 0.65, 87.6]])  # (V, H)
    data = {"bos_share": shares[:, None, None, :],  # (V, R=1, L=1, H)
            "ind_available": np.array([[True], [True]]), "induction_acc": np.array([[1.0], [0.99]])}
    np.testing.assert_allclose(f.sink_percent(data), [75.0, 50.0])
    np.testing.assert_allclose(f.sink_percent_bounded(data), [75.0, 0.0])  # positive kernel: the same
    data["induction_acc"] = np.array([[1.0], [0.5]])  # control: the second run is not kept
    assert np.isnan(f.sink_percent(data)[1]) and f.sink_percent_all(data)[1] == 50.0


def _attack_fixture(monkeypatch, heads):
    """Hand-made group models on vocab 41 (each sequence holds its whole group): attention maps
    whose CLS row of head ``h`` is ``heads[h](tokens)``, and two predictors."""
    import importlib

    tr = importlib.import_module("gradflow.sims.sec4.train")

    def maps(model, x):
        w = np.zeros((len(x), 1, len(heads), x.shape[1], x.shape[1]))
        for h, f in enumerate(heads):
            w[:, 0, h, -1, :-1] = f(x[:, :-1])
        return w

    def leader(x):  # the first token of its group: one per sequence of vocab 41
        return ((x - 1) % 10 == 0).astype(float)

    def predict(model, x):
        g = group_of(x[:, :-1])
        if model == "one-token":  # reads the label off the token it attends to (the leader)
            return g[np.arange(len(x)), np.argmax(leader(x[:, :-1]), axis=1)]
        return np.array([np.bincount(r, minlength=4).argmax() for r in g])  # majority of the 10 tokens

    monkeypatch.setattr(tr, "_maps", maps)
    monkeypatch.setattr(tr, "_predict", predict)
    monkeypatch.setattr(tr, "_forward", lambda model, x: (predict(model, x), maps(model, x)))
    return tr, leader


def test_authors_attack_flips_a_one_token_reader_and_not_a_pooler(monkeypatch):
    """The authors' attack, max over heads: head 1 attends to one token per sequence (its group's
    leader) and the one-token model reads the label there, so A's leader among B's other 9 tokens
    gives A's label in both directions (flip rate 1); the majority-vote model follows B's 9 tokens
    (0). Head 0 attends uniformly: its top token (the first, by a stable sort) is a random one,
    and the mixed sequence keeps B's leader, so the one-token model mostly predicts B there."""
    tr, leader = _attack_fixture(monkeypatch, [lambda x: np.ones(x.shape), lambda x: leader(x)])
    cfg = group_config("softmax", True, n_test=400, n_pairs=200)
    x, y = tr._data(cfg, 5, 400)
    reader = tr.flip_attack("one-token", x, y, 200, np.random.default_rng(0), n_groups=4)
    pooler = tr.flip_attack("pooler", x, y, 200, np.random.default_rng(0), n_groups=4)
    assert reader[0, 1] == 1.0 and pooler[0, 1] == 0.0 and pooler.max() == 0.0
    assert reader[0, 0] < 0.25  # the uniform head's top-1 token carries A's label only by chance
    res = tr.measure_groups("one-token", cfg)
    assert res["flip_rate"] == 1.0 and res["group_acc"] == 1.0 and res["flip_per_head"].shape == (1, 2)
    assert tr.measure_groups("pooler", cfg)["flip_rate"] == 0.0


def test_swap_top_attack_switch(monkeypatch):
    """``attack="swap-top"`` (an earlier version's attack) also separates the two models, on
    correctly classified pairs; it reports one rate."""
    tr, leader = _attack_fixture(monkeypatch, [lambda x: leader(x)])
    cfg = group_config("softmax", True, n_test=400, n_pairs=100, attack="swap-top")
    reader, pooler = tr.measure_groups("one-token", cfg), tr.measure_groups("pooler", cfg)
    assert reader["flip_rate"] == 1.0 and pooler["flip_rate"] == 0.0


def test_attack_pairs_different_labels_and_none_when_one_label():
    y = np.array([0, 0, 1, 1, 2, 3])
    pred = np.array([0, 0, 1, 0, 2, 0])  # correct: 0, 1, 2, 4 with labels 0, 0, 1, 2
    a, b = attack_pairs(pred, y, 100, np.random.default_rng(0))
    want = {(i, j) for i in (0, 1, 2, 4) for j in (0, 1, 2, 4) if y[i] != y[j]}
    assert len(want) == 10 and set(zip(a.tolist(), b.tolist())) == want and len(a) == 10
    a, b = attack_pairs(np.zeros(2000, int), np.repeat(np.arange(4), 500), 500, np.random.default_rng(0))
    assert len(a) == len(b) == 0


# ----------------------------------------------------------------------------- model switches

def _leaves(model):
    import equinox as eqx

    return {jax.tree_util.keystr(p): np.asarray(v) for p, v in
            jax.tree_util.tree_leaves_with_path(eqx.filter(model, eqx.is_array))}


def test_model_switches_change_what_they_should():
    from gradflow.sims.sec4.train import _model

    base = induction_config("softmax", True, d_model=32, n_heads=4)
    leaves = _leaves(_model(base))
    assert abs(leaves[".embed.weight"].std() - 1.0) < 0.1 and abs(leaves[".pos.weight"].std() - 1.0) < 0.3
    assert leaves[".embed.weight"].shape == (100, 32)  # shifted query ids: 50 + 50 inputs
    bias = leaves[".blocks[0].attn.wq.bias"]
    assert bias.shape == (32,) and 0 < np.abs(bias).max() <= 1 / np.sqrt(32)  # PyTorch's U(±1/√in)
    assert any(".ln1" in k for k in leaves) and any(".fc1" in k for k in leaves) and ".ln_f.weight" in leaves
    small = _leaves(_model(induction_config("softmax", True, d_model=32, embed_std=0.02)))
    assert abs(small[".embed.weight"].std() - 0.02) < 0.005
    assert not any(k.endswith("wq.bias") for k in _leaves(_model(induction_config("softmax", True, d_model=32,
                                                                                   bias=False))))
    no_ln = _leaves(_model(induction_config("softmax", True, d_model=32, use_layernorm=False)))
    assert not any(".ln" in k for k in no_ln) and any(".fc1" in k for k in no_ln)
    no_mlp = _leaves(_model(induction_config("softmax", True, d_model=32, use_mlp=False)))
    assert not any(".fc" in k or ".ln2" in k for k in no_mlp) and any(".ln1" in k for k in no_mlp)
    unshifted = _leaves(_model(induction_config("softmax", True, d_model=32, shift_query=False)))
    assert unshifted[".embed.weight"].shape == (50, 32) and unshifted[".head.weight"].shape == (50, 32)
    grp = _leaves(_model(group_config("mlp", True, d_model=32)))
    assert ".pos.weight" not in grp and grp[".head.weight"].shape == (4, 32)
    assert grp[".blocks[0].attn.phi.layers[0].weight"].shape == (128, 32)  # φ: d_h → 4 d_h (1 head: d_h = 32)
    assert len([k for k in grp if k.startswith(".blocks[")]) and not any(k.startswith(".blocks[1]") for k in grp)


def test_switched_off_layernorm_and_mlp_change_the_output():
    """A model without LayerNorm / MLP computes something else from the same token embeddings;
    the control (the same switches) gives the same output."""
    from gradflow.sims.sec4.train import _model

    x = jnp.asarray(induction_batch(0, 1)[0, :-1])
    out = {}
    for ln in (True, False):
        for mlp in (True, False):
            model = _model(induction_config("softmax", True, d_model=32, use_layernorm=ln, use_mlp=mlp))
            out[ln, mlp] = np.asarray(model(x)[0])
    assert all(np.isfinite(v).all() for v in out.values())
    keys = list(out)
    assert all(not np.allclose(out[a], out[b]) for i, a in enumerate(keys) for b in keys[i + 1:])
    again = _model(induction_config("softmax", True, d_model=32, use_layernorm=False, use_mlp=False))
    np.testing.assert_array_equal(np.asarray(again(x)[0]), out[False, False])


def test_run_names_carry_every_setting():
    a = induction_config("sigmoid", False)
    names = {run_name(a)} | {run_name(induction_config("sigmoid", False, **{k: v})) for k, v in
                             [("lr", 1e-2), ("n_heads", 1), ("shift_query", False), ("early_stop", True),
                              ("sink_rows", (1, 10)), ("embed_std", 0.02), ("bias", False)]}
    assert len(names) == 8 and all(n.startswith("induction-sigmoid-raw-s0-") for n in names)
    assert run_name(a) == run_name(induction_config("sigmoid", False))  # control: same settings, same name


# ----------------------------------------------------------------------------- training

TINY = dict(d_model=32, n_layers=2, n_heads=4, n_train=256, epochs=2, batch=32, n_test=64,
            evals_per_epoch=2, n_pairs=20)
TINY_GROUPS = dict(d_model=32, n_train=256, epochs=2, batch=32, n_test=64, evals_per_epoch=2, n_pairs=20)


def test_nonfinite_loss_stops_training_as_diverged(tmp_path, monkeypatch):
    """A step whose loss is NaN (as in a diverged model) ends training at the next evaluation."""
    import importlib

    tr = importlib.import_module("gradflow.sims.sec4.train")
    step = tr._steps
    cfg = group_config("sigmoid", False, **TINY_GROUPS)  # 8 steps/epoch, evaluations every 4
    _, hist = train(cfg, progress=False)  # control: a finite loss goes on
    assert hist["diverged_step"] is None and hist["step"] == [4, 8, 12, 16]
    monkeypatch.setattr(tr, "_steps", lambda *a: (lambda m, o, loss: (m, o, loss * jnp.nan))(*step(*a)))
    ckpt = str(tmp_path / "run")
    _, hist = train(cfg, checkpoint=ckpt, progress=False)
    assert hist["diverged_step"] == 4 and hist["step"] == [4] and hist["stopped_step"] is None
    monkeypatch.setattr(tr, "_steps", step)
    _, again = train(cfg, checkpoint=ckpt, progress=False)  # a diverged checkpoint is final
    assert again["diverged_step"] == 4 and again["step"] == [4]


def test_checkpoint_of_another_config_is_not_resumed(tmp_path):
    import json

    cfg = group_config("sigmoid", False, **TINY_GROUPS)
    ckpt = str(tmp_path / "run")
    train(cfg, checkpoint=ckpt, progress=False, stop_after=4)
    assert json.loads((tmp_path / "run.json").read_text())["config"] == cfg.to_dict()
    _, same = train(cfg, checkpoint=ckpt, progress=False, stop_after=0)
    assert same["step"] == [4]  # control: the same config resumes (0 new steps, history kept)
    other = group_config("sigmoid", False, **{**TINY_GROUPS, "use_layernorm": False})
    _, hist = train(other, checkpoint=ckpt, progress=False, stop_after=0)
    assert hist["step"] == [] and not (tmp_path / "run.json").exists()  # stale checkpoint deleted
    assert not list(tmp_path.iterdir())


def test_early_stop_is_a_switch_off_by_default():
    """With every evaluation above ``stop_acc``, ``early_stop=True`` stops one epoch after the first;
    the default trains every epoch and records the BOS share of every layer-2 head each time."""
    cfg = induction_config("sigmoid", False, stop_acc=1e-6, **TINY)
    _, full = train(cfg, progress=False)
    assert full["stopped_step"] is None and full["step"] == [4, 8, 12, 16] and full["above_step"] == 4
    assert len(full["bos"]) == 4 and all(len(b) == 4 and all(0 <= v <= 1 for v in b) for b in full["bos"])
    _, stop = train(induction_config("sigmoid", False, stop_acc=1e-6, early_stop=True, **TINY), progress=False)
    assert stop["stopped_step"] == 12 and stop["step"] == [4, 8, 12]


def test_run_writes_a_result_and_loads_it_without_training(tmp_path, monkeypatch):
    import importlib

    tr = importlib.import_module("gradflow.sims.sec4.train")
    cfg = induction_config("softmax", True, **TINY)
    first = tr.run(cfg, str(tmp_path), progress=False)
    assert (tmp_path / (run_name(cfg) + ".npz")).exists()
    assert first["bos_share"].shape == (2, 4) and first["history"]["step"] == [4, 8, 12, 16]
    assert 0 <= first["induction_acc"] <= 1 and first["config"] == cfg.to_dict()
    monkeypatch.setattr(tr, "train", lambda *a, **k: pytest.fail("trained a finished run"))
    again = tr.run(cfg, str(tmp_path), progress=False)
    np.testing.assert_array_equal(again["bos_share"], first["bos_share"])
    other = induction_config("softmax", True, **{**TINY, "lr": 2e-3})  # control: other settings train
    with pytest.raises(pytest.fail.Exception):
        tr.run(other, str(tmp_path), progress=False)
    grp = group_config("softmax", True, **TINY_GROUPS)
    monkeypatch.undo()
    res = tr.run(grp, str(tmp_path), progress=False)
    assert res["flip_per_head"].shape == (1, 1) and res["flip_rate"] == res["flip_per_head"].max()


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_model(tmp_path):
    """Stop after 5 steps (last checkpoint at step 4), resume, compare with an uninterrupted run."""
    import equinox as eqx

    cfg = induction_config("sigmoid", False, **TINY)
    ckpt = str(tmp_path / "run")
    train(cfg, checkpoint=ckpt, progress=False, stop_after=5)
    meta = __import__("json").loads((tmp_path / "run.json").read_text())
    assert meta["step"] == 4 and (tmp_path / "run.4.eqx").exists()
    resumed, hist = train(cfg, checkpoint=ckpt, progress=False)
    whole, hist_whole = train(cfg, progress=False)
    assert hist["step"] == hist_whole["step"] == [4, 8, 12, 16]
    leaves = zip(jax.tree_util.tree_leaves(eqx.filter(resumed, eqx.is_array)),
                 jax.tree_util.tree_leaves(eqx.filter(whole, eqx.is_array)))
    assert all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in leaves)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.16.eqx", "run.json"]  # old leaves removed
    other, _ = train(induction_config("sigmoid", False, seed=1, **TINY), progress=False)
    assert not np.allclose(other.head.weight, whole.head.weight)  # control: another seed ends elsewhere


def test_reproduce_keeps_long_figures_quick_unless_paper_scale(monkeypatch, tmp_path):
    from gradflow.app import cli
    import gradflow.sims.build as registry

    calls = []
    monkeypatch.setattr(registry, "build", lambda fig_id, out, quick, force, progress: calls.append((fig_id, quick))
                        or {"cached": False, "summary": {}})
    args = cli._parser().parse_args(["reproduce", "--out", str(tmp_path), "--no-progress", "--jobs", "1"])
    args.ids, args.list, args.verbose = ["fig2", "flip-rate", "flow-sinks"], False, False
    assert cli._cmd_figures(args) == 0
    assert calls == [("fig2", False), ("flip-rate", True), ("flow-sinks", True)]
    calls.clear()
    args = cli._parser().parse_args(["reproduce", "--paper-scale", "--out", str(tmp_path), "--jobs", "1"])
    args.ids, args.list, args.verbose, args.no_progress = ["flip-rate"], False, False, True
    cli._cmd_figures(args)
    assert calls == [("flip-rate", False)]


@pytest.mark.slow
def test_quick_figures_build_and_quick_run_learns_induction(tmp_path, monkeypatch):
    """All five Sec. 4 figures in quick mode (fresh cache): the quick softmax induction run
    reaches accuracy >= 0.9 (the CI requirement); the untrained model is at chance (control)."""
    import json

    import gradflow.sims.sec4.grids as sweep
    from gradflow.app import cli
    from gradflow.sims.sec4.train import _data, _model, _predict, _seeds

    monkeypatch.setenv(sweep.RUNS_CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(sweep.COMMITTED_RUNS_ENV, str(tmp_path / "none"))
    ids = ["sinks-induction", "accuracy-induction", "flip-rate", "sparsity-heads", "attn-patterns"]
    assert cli.main(["figures", *ids, "--quick", "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    for fig_id in ids:
        assert (tmp_path / "out" / f"{fig_id}.png").stat().st_size > 0
    record = json.loads((tmp_path / "out" / "accuracy-induction.json").read_text())
    assert record["summary"]["softmax-norm"]["induction_acc"][0] >= 0.9
    run = record["config"]["induction_runs"][0]
    assert run["shift_query"] and not run["early_stop"] and run["sink_rows"] == [1, 9] and run["lr"] == 1e-3
    cfg = sweep.make_config("induction", "softmax", True, sweep.induction_runs(True)[0])
    x, y = _data(cfg, _seeds(cfg)[1], 1000)
    assert np.mean(_predict(_model(cfg), x) == y[:, -1]) < 0.05


def test_sweep_cli_refuses_unknown_variant(capsys):
    from gradflow.sims.sec4 import grids as sweep

    with pytest.raises(SystemExit) as e:
        sweep.main(["sinks", "--variants", "softmax-norm", "nope-norm"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "nope-norm" in err and "sigmoid-raw" in err  # names the valid choices


def test_sec4_figure_configs_record_the_settings():
    from gradflow.sims.sec4 import _figures as _sec4
    from gradflow.sims.sec4 import flip_rate

    cfg = _sec4.config(quick=False)
    assert cfg["seeds"] == [0]
    main = cfg["induction_runs"][0]
    assert (main["n_layers"], main["n_heads"], main["vocab"], main["shift_query"], main["early_stop"],
            main["lr"], main["sink_rows"], main["epochs"], main["n_train"]) == (2, 4, 50, True, False, 1e-3,
                                                                                 [1, 9], 10, 100_000)
    assert [r["n_heads"] for r in cfg["induction_runs"]] == [4, 1]
    assert cfg["induction_runs"][1]["only_variants"] == ["softmax-norm", "sigmoid-raw", "linear-raw"]
    grp = cfg["group_runs"]
    assert cfg["group_seeds"] == [0, 1, 2, 3, 4]  # the flip grid: the authors' seeds 0–4 of every 1 × 1 panel
    panels = [g for g in grp if "only_variants" not in g]
    assert sorted((g["use_mlp"], g["use_layernorm"], g["seed"]) for g in panels) == sorted(
        (m, ln, s) for m in (True, False) for ln in (True, False) for s in range(5))
    assert all((g["n_layers"], g["n_heads"], g["vocab"], g["n_train"]) == (1, 1, 41, 10_000) for g in panels)
    assert (grp[-1]["n_layers"], grp[-1]["n_heads"], grp[-1]["only_variants"], grp[-1]["seed"]) == (
        2, 4, ["softmax-norm"], 0)
    assert "seeds 0–4" in _sec4.group_note(cfg) and "authors" not in _sec4.group_note(cfg)
    assert "seed 0 only (authors: 0–4)" in _sec4.group_note(_sec4.config(quick=True, tasks=("groups",)))
    data = {"ind_available": np.zeros((len(cfg["variants"]), 2), bool)}
    assert "seed 0 only (authors: 0–4)" in _sec4.induction_note(cfg)
    # the title names the variants that have the 1-head run; the quick scale has 4 heads only
    assert "4 heads (+ 1 head: softmax, sigmoid w/o norm, linear w/o norm)," in _sec4.induction_note(cfg)
    assert "4 heads," in _sec4.induction_note(_sec4.config(quick=True, tasks=("induction",)))
    more = {**cfg, "induction_runs": cfg["induction_runs"] + [{**cfg["induction_runs"][0], "lr": 1e-2}]}
    assert "(+ 4 heads" not in _sec4.induction_note(more)  # another lr of the 4-head runs: no new head count
    assert "only" not in _sec4.induction_note({**cfg, "seeds": [0, 1, 2, 3, 4]})  # control: full set
    q = _sec4.config(quick=True, tasks=("groups",))
    V = len(q["variants"])
    G = len(q["group_runs"])
    fake = {"grp_available": np.zeros((V, G), bool), "flip_rate": np.full((V, G), -1e30)}
    out = flip_rate.FIGURE.summary(fake, flip_rate.FIGURE.config(True))
    assert out["seeds"] == [0] and out["paper_seeds"] == [0, 1, 2, 3, 4]
    assert all(out[name] is None for name in q["variants"])
    assert data["ind_available"].shape == (11, 2)


@pytest.mark.parametrize("kernel", ["sigmoid", "elu"])
def test_normalized_logit_kernels_have_finite_gradients_where_terms_underflow(kernel):
    """Logits near −100 (float32): every term g underflows or is subnormal. The weights are
    computed as softmax(log g) and their gradient is finite; the plain quotient g / Σ g (the
    control) has a non-finite gradient there (it made training diverge)."""
    q = jnp.full((3, 4), -10.0, jnp.float32)
    k = jnp.full((3, 4), 5.0, jnp.float32)  # logits q·k/√4 = −100

    def loss(q, fn):
        return jnp.sum(fn(q) * jnp.arange(3.0))

    ours = lambda q: kernel_weights(q, k, kernel, True)
    g = (lambda z: jax.nn.sigmoid(z)) if kernel == "sigmoid" else (lambda z: jax.nn.elu(z) + 1)
    plain = lambda q: (lambda w: w / jnp.maximum(w.sum(-1, keepdims=True), jnp.finfo(jnp.float32).tiny))(g(q @ k.T / 2))
    w = ours(q)
    np.testing.assert_allclose(np.asarray(w), 1 / 3, rtol=1e-6)  # equal logits: uniform rows
    assert np.all(np.isfinite(np.asarray(jax.grad(loss)(q, ours))))
    assert not np.all(np.isfinite(np.asarray(jax.grad(loss)(q, plain))))  # control


def test_committed_paper_runs_load_and_are_found_after_the_normalization_rename(monkeypatch):
    """The committed paper-scale results (trained when the field was ``normalise``) keep their file
    names and are found by :func:`find_result`: the settings' hash uses the old field name, and
    their stored configs read back with today's names. Control: hashing under the new name would
    give other file names, so the mapping is what keeps them findable."""
    import glob
    import hashlib
    import json
    import os
    import warnings

    from gradflow.sims.sec4.grids import COMMITTED_RUNS_ENV, find_result
    from gradflow.sims.sec4.train import load_result

    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "figures", "transformer-runs")
    monkeypatch.setenv(COMMITTED_RUNS_ENV, root)
    files = sorted(glob.glob(os.path.join(root, "paper", "*.npz")))
    assert len(files) >= 10
    for path in files:
        res = load_result(path)
        assert "normalization" in res["config"] and "normalise" not in res["config"]
        cfg = RunConfig(**res["config"])
        assert run_name(cfg) + ".npz" == os.path.basename(path)
        hit = find_result(cfg, quick=False)
        assert hit is not None and os.path.samefile(hit[0], path)
        new_hash = hashlib.sha256(json.dumps(cfg.to_dict(), sort_keys=True).encode()).hexdigest()[:10]
        assert new_hash != cfg.key()  # control: without the mapping the committed file would be missed
    # the deprecated keyword and attribute: same config, with a DeprecationWarning
    with pytest.warns(DeprecationWarning, match="normalise"):
        old = RunConfig(kernel="sigmoid", normalise=False)
    assert old == RunConfig(kernel="sigmoid", normalization=False) != RunConfig(kernel="sigmoid", normalization=True)
    with pytest.warns(DeprecationWarning):
        assert old.normalise is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # control: the new spelling warns about nothing
        assert RunConfig(kernel="sigmoid", normalization=False).normalization is False


def test_flip_summary_mean_counts_only_the_seeds_finished():
    """A hand-made flip grid: in one panel softmax has 4 of its 5 seeds finished (rates 0.2, 0.4,
    0.6, 0.8: mean 0.5 — dividing by all 5 seeds would give 0.4) and sigmoid w/o norm has one
    diverged seed (left out of its mean 0.3 and counted as diverged); the bar notes say (4/5) and
    (4/5, 1 diverged). Control: with every seed finished (seed 2 at 1.0) there is no note and the
    mean is over 5 (0.6)."""
    from gradflow.sims.sec4 import flip_rate

    cfg = flip_rate.FIGURE.config(False)
    V, G = len(cfg["variants"]), len(cfg["group_runs"])
    g0 = flip_rate._panels(cfg)[0]
    cols = flip_rate._same(cfg, g0)
    assert [cfg["group_runs"][c]["seed"] for c in cols] == [0, 1, 2, 3, 4]
    data = {"grp_available": np.zeros((V, G), bool), "flip_rate": np.full((V, G), np.nan),
            "group_acc": np.full((V, G), np.nan), "diverged_step_groups": np.full((V, G), np.nan),
            "flip_per_head": np.full((V, G, 2, 4), np.nan)}
    sm, sg = cfg["variants"].index("softmax-norm"), cfg["variants"].index("sigmoid-raw")
    for i, rates in ((sm, [0.2, 0.4, 0.9, 0.6, 0.8]), (sg, [0.3, 0.3, 0.9, 0.3, 0.3])):
        data["grp_available"][i, cols] = True
        data["flip_rate"][i, cols] = rates
        data["flip_per_head"][i, cols, 0, 0] = rates
        data["group_acc"][i, cols] = 1.0
    data["grp_available"][sm, cols[2]] = False  # softmax seed 2 not run
    data["diverged_step_groups"][sg, cols[2]] = 120.0  # sigmoid seed 2 diverged
    s0 = cfg["group_runs"][g0]
    key = f"mean over seeds 1x1 {'mlp' if s0['use_mlp'] else 'no-mlp'} {'ln' if s0['use_layernorm'] else 'no-ln'}"
    out = flip_rate.FIGURE.summary(data, cfg)
    assert out["softmax-norm"][key] == {"flip_rate": 0.5, "seeds_finished": 4, "seeds_diverged": 0, "seeds": 5}
    assert out["sigmoid-raw"][key] == {"flip_rate": 0.3, "seeds_finished": 4, "seeds_diverged": 1, "seeds": 5}
    assert "seed 2" not in " ".join(out["softmax-norm"]) and out["sigmoid-raw"][key.replace("mean over seeds ", "")
                                                                                 + " seed 2"]["diverged_step"] == 120
    _, _, k, n_div = flip_rate._seed_stats(flip_rate._sec4.unpack(data), cols)
    assert [flip_rate._note(int(a), int(b), 5) for a, b in zip(k[[sm, sg]], n_div[[sm, sg]])] == [
        " (4/5)", " (4/5, 1 diverged)"]
    # control: every seed finished
    data["grp_available"][sm, cols[2]] = True
    data["flip_rate"][sm, cols[2]] = 1.0
    full = flip_rate.FIGURE.summary(data, cfg)["softmax-norm"][key]
    assert full == {"flip_rate": 0.6, "seeds_finished": 5, "seeds_diverged": 0, "seeds": 5}
    assert flip_rate._note(5, 0, 5) == ""


@pytest.mark.parametrize("argv, message", [(["flips", "--seeds", "-1"], "seed: got -1; expected a non-negative integer"),
                                           (["sinks", "--lrs", "0"], "lr: got 0.0; expected a positive finite number"),
                                           (["sinks", "--heads", "3"], "n_heads: got 3; expected a divisor of d_model")])
def test_grids_cli_refuses_bad_settings_before_training(argv, message, monkeypatch, capsys):
    """A bad seed, lr or head count is a usage error (exit 2, the setting named on stderr, no
    traceback) raised before any run trains. Control: the valid settings pass the check and reach
    the training (stubbed here to stop at once)."""
    from gradflow.sims.sec4 import grids

    class Reached(Exception):
        pass

    def stub(*args, **kwargs):
        raise Reached

    monkeypatch.setattr(grids, "collect", stub)
    with pytest.raises(SystemExit) as exc:
        grids.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    good = [a if a not in ("-1", "0", "3") else {"-1": "1", "0": "1e-3", "3": "4"}[a] for a in argv]
    with pytest.raises(Reached):
        grids.main(good + ["--variants", "softmax-norm"])
