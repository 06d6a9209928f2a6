"""Tests for sims/basics/attention_basics.py and the four attention-basics figures (seeds 000/001; their entries in figures/README.md)."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

from gradflow import GradflowValueError
from gradflow.sims.basics import attention_basics as ab

# seed 000's hand calculation, rounded to 3 decimals in the document
SEED000_WEIGHTS = [0.768, 0.001, 0.070, 0.006, 0.155]


def _hand_softmax(scores, T=1.0):
    e = [math.exp(s / T) for s in scores]
    return [v / sum(e) for v in e]


def test_five_word_softmax_matches_hand_calculation():
    w = np.asarray(ab.softmax_weights(ab.FIVE_SCORES))
    np.testing.assert_allclose(w, SEED000_WEIGHTS, atol=1e-3)
    np.testing.assert_allclose(w, _hand_softmax(ab.FIVE_SCORES), rtol=1e-12)


@pytest.mark.parametrize("T", [0.1, 0.5, 2.0, 10.0])
def test_temperature_matches_hand_calculation(T):
    np.testing.assert_allclose(np.asarray(ab.softmax_weights(ab.FIVE_SCORES, T)),
                               _hand_softmax(ab.FIVE_SCORES, T), rtol=1e-10)


def test_temperature_negative_control():
    # at T = 2 the row is no longer the document's T = 1 row
    w = np.asarray(ab.softmax_weights(ab.FIVE_SCORES, 2.0))
    assert np.max(np.abs(w - SEED000_WEIGHTS)) > 1e-3


def test_entropy_limits():
    n = len(ab.FIVE_SCORES)
    h = [float(ab.softmax_entropy(ab.FIVE_SCORES, T)) for T in (0.05, 1.0, 1e4)]
    p = _hand_softmax(ab.FIVE_SCORES)
    assert h[0] < 1e-3
    assert h[1] == pytest.approx(-sum(v * math.log(v) for v in p), rel=1e-12)
    assert h[2] == pytest.approx(math.log(n), rel=1e-6)


@pytest.mark.parametrize("T", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_temperature_raises(T):
    with pytest.raises(GradflowValueError, match="temperature"):
        ab.softmax_weights(ab.FIVE_SCORES, T)


@pytest.mark.parametrize("d_k", [4, 64, 1024])
def test_score_variance_is_d_k(d_k):
    s = ab.dot_products(0, d_k, 20_000)
    assert s.shape == (20_000,)
    assert abs(np.var(s, ddof=1) / d_k - 1) < 0.05


def test_scaled_score_variance_negative_control():
    # dividing by sqrt(d_k) gives variance 1, which is not within 5 % of d_k
    d_k = 64
    s = ab.dot_products(1, d_k, 20_000) / math.sqrt(d_k)
    assert abs(np.var(s, ddof=1) / d_k - 1) > 0.05
    assert abs(np.var(s, ddof=1) - 1) < 0.05


def test_max_weight_with_and_without_scaling():
    m = ab.max_weights(0, 1024, 16, 400)
    raw, scaled = m[:, 0].mean(), m[:, 1].mean()
    assert raw > 0.9  # seed 001: ≈ 0.96
    assert 0.2 < scaled < 0.3  # seed 001: ≈ 0.24
    small = ab.max_weights(0, 4, 16, 400)[:, 0].mean()
    assert small < 0.6  # d_k = 4: far from one-hot (seed 001: 0.42)


@pytest.mark.bad_input
@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_bad_d_k_raises(bad):
    with pytest.raises(GradflowValueError, match="d_k"):
        ab.dot_products(0, bad, 100)


def test_attention_d_k_zero_raises():
    with pytest.raises(GradflowValueError, match="d_k"):
        ab.attention_weights(np.zeros((3, 0)), np.zeros((3, 0)))


def test_attention_matches_numpy_formula():
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((5, 8)), rng.standard_normal((7, 8))
    s = q @ k.T / math.sqrt(8)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    np.testing.assert_allclose(np.asarray(ab.attention_weights(q, k)), e / e.sum(axis=1, keepdims=True), rtol=1e-12)


def test_causal_row0_one_hot_and_upper_triangle_zero():
    rng = np.random.default_rng(2)
    n = 10
    q, k = rng.standard_normal((n, 16)), rng.standard_normal((n, 16))
    A = np.asarray(ab.attention_weights(q, k, causal=True))
    assert np.all(np.isfinite(A))
    assert A[0, 0] == 1.0 and np.all(A[0, 1:] == 0.0)
    assert np.all(A[np.triu_indices(n, 1)] == 0.0)
    np.testing.assert_allclose(A.sum(axis=1), 1.0, atol=1e-14)
    # negative control: without the mask row 0 is not one-hot and the upper triangle is not zero
    B = np.asarray(ab.attention_weights(q, k, causal=False))
    assert B[0, 0] < 1.0 and np.all(B[np.triu_indices(n, 1)] > 0.0)


def test_causal_rows_do_not_depend_on_later_tokens():
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal((8, 4)), rng.standard_normal((8, 4))
    full = np.asarray(ab.attention_weights(q, k, causal=True))
    for m in (1, 2, 5, 8):
        np.testing.assert_allclose(np.asarray(ab.attention_weights(q[:m], k[:m], causal=True)), full[:m, :m],
                                   atol=1e-15)


def test_causal_mask_uses_finite_fill_even_with_extreme_scores():
    q = np.array([[1e150], [1.0]])
    k = np.array([[1e150], [-1.0]])
    A = np.asarray(ab.attention_weights(q, k, causal=True, scale=False))
    assert np.all(np.isfinite(A)) and A[0, 0] == 1.0


def test_causal_needs_square():
    with pytest.raises(GradflowValueError, match="causal"):
        ab.attention_weights(np.ones((2, 3)), np.ones((4, 3)), causal=True)


def test_coreference_dataset_targets_are_animate():
    sentences, targets = ab.coreference_dataset()
    assert len(sentences) == len(targets) == 2 * 8 * 8 * 5 * 4
    assert ab.SENTENCE in sentences
    for s, t in zip(sentences, targets):
        assert s[ab.IT_INDEX] == "it" and s[t] in ab.ANIMATE


def test_training_links_it_to_animal_untrained_does_not():
    emb = ab.embeddings(3, 50, 0.6)
    x = ab.encode([ab.SENTENCE], emb)[0]
    sentences, targets = ab.coreference_dataset()
    idx = [i for i, s in enumerate(sentences) if s != ab.SENTENCE][::10]  # test sentence held out
    p0 = ab.random_projection(jax.random.PRNGKey(0), 50, 16)
    before = float(ab.it_row(p0, x)[ab.ANIMAL_INDEX])
    p, losses = ab.train_projection(p0, ab.encode([sentences[i] for i in idx], emb), targets[idx],
                                    steps=60, learning_rate=0.01)
    after = float(ab.it_row(p, x)[ab.ANIMAL_INDEX])
    assert before < 0.3  # untrained: not linked (uniform would be 1/12)
    assert after > 0.9 and losses[-1] < losses[0]


def test_embeddings_are_deterministic():
    a, b = ab.embeddings(7, 5, 1.0), ab.embeddings(7, 5, 1.0)
    assert all(np.array_equal(a[w], b[w]) for w in a)
    assert not np.array_equal(a["it"], ab.embeddings(8, 5, 1.0)["it"])
