"""Next-token sampling (greedy, temperature, top-k, top-p) against the formulas, in NumPy float64.

Expected values are computed here from the definitions: p = softmax(z/τ); top-k keeps the k
largest logits; top-p keeps the tokens whose strictly-better probability mass is below p; the
kept probabilities are renormalised. The behaviour log-prob is log softmax(z/τ)[token], never
the renormalised one. Log-prob tolerance: 1e-5 absolute (float32 log-softmax of logits of order 1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from arlarena_jax.sampler.sampling import GREEDY, SamplingParams, sample

sample_jit = jax.jit(sample, static_argnames="params")


def log_softmax(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, np.float64)
    shifted = z - z.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def draw(logits: np.ndarray, params: SamplingParams, n: int, seed: int = 0):
    """``n`` draws (tokens, log-probs) from one row of logits, one key per draw."""
    rows = jnp.broadcast_to(jnp.asarray(logits, jnp.float32), (n, logits.shape[-1]))
    keys = jax.random.split(jax.random.key(seed), n)
    tokens, log_probs = sample_jit(rows, keys, params)
    return np.asarray(tokens), np.asarray(log_probs)


def nucleus(probs: np.ndarray, top_p: float) -> np.ndarray:
    """Boolean mask of the tokens top-p keeps (a token stays if the mass above it is < top_p)."""
    order = np.argsort(-probs)
    sorted_probs = probs[order]
    before = np.cumsum(sorted_probs) - sorted_probs
    keep = np.zeros(probs.shape, bool)
    keep[order[before < top_p]] = True
    return keep


@pytest.fixture(scope="module")
def logits() -> np.ndarray:
    return np.random.default_rng(0).normal(0.0, 2.0, size=(64, 50)).astype(np.float32)


def test_greedy_is_argmax_with_untempered_log_prob(logits):
    keys = jax.random.split(jax.random.key(1), logits.shape[0])
    tokens, log_probs = sample_jit(jnp.asarray(logits), keys, GREEDY)
    expected = logits.argmax(-1)
    np.testing.assert_array_equal(np.asarray(tokens), expected)
    np.testing.assert_allclose(
        np.asarray(log_probs), log_softmax(logits)[np.arange(64), expected], atol=1e-5
    )


@pytest.mark.parametrize(
    "params",
    [SamplingParams(temperature=0.7, top_k=1), SamplingParams(temperature=0.7, top_p=1e-6)],
    ids=["top_k=1", "top_p=1e-6"],
)
def test_degenerate_filters_equal_greedy(logits, params):
    # Every row gets its own key; the only token left after the filter is the argmax.
    keys = jax.random.split(jax.random.key(2), logits.shape[0])
    tokens, log_probs = sample_jit(jnp.asarray(logits), keys, params)
    expected = logits.argmax(-1)
    np.testing.assert_array_equal(np.asarray(tokens), expected)
    # The log-prob is still that of softmax(z/τ) over the whole vocabulary.
    np.testing.assert_allclose(
        np.asarray(log_probs), log_softmax(logits / 0.7)[np.arange(64), expected], atol=1e-5
    )


def test_top_k_only_draws_the_k_largest(logits):
    row = logits[0]
    k = 5
    tokens, log_probs = draw(row, SamplingParams(temperature=1.0, top_k=k), 20_000)
    top = set(np.argsort(-row)[:k].tolist())
    # Renormalised over the top 5, each of them has probability > 1e-2 here, so in 20,000 draws
    # every one appears (a miss has probability < (1 − 1e-2)^20000 ≈ 1e-87).
    assert set(tokens.tolist()) == top
    np.testing.assert_allclose(log_probs, log_softmax(row)[tokens], atol=1e-5)


def test_top_p_only_draws_the_nucleus(logits):
    row = logits[1]
    probs = np.exp(log_softmax(row / 0.7))
    keep = nucleus(probs, 0.6)
    tokens, _ = draw(row, SamplingParams(temperature=0.7, top_p=0.6), 20_000)
    assert set(tokens.tolist()) <= set(np.flatnonzero(keep).tolist())


Z = np.array([2.0, 1.0, 0.5, 0.0, -1.0, -3.0], np.float32)


@pytest.mark.parametrize(
    "params",
    [SamplingParams(temperature=0.7), SamplingParams(temperature=1.3, top_k=4, top_p=0.9)],
    ids=["temperature", "top_k+top_p"],
)
def test_empirical_frequencies_match_softmax(params):
    n = 200_000
    probs = np.exp(log_softmax(Z / params.temperature))
    keep = np.ones(6, bool)
    if params.top_k:
        keep &= np.arange(6) < params.top_k  # Z is sorted, so the k largest are the first k
    if params.top_p < 1.0:  # the nucleus of the top-k distribution, renormalised
        keep &= nucleus(np.where(keep, probs, 0.0) / np.where(keep, probs, 0.0).sum(), params.top_p)
    expected = np.where(keep, probs, 0.0) / np.where(keep, probs, 0.0).sum()
    tokens, log_probs = draw(Z, params, n, seed=3)
    freq = np.bincount(tokens, minlength=6) / n
    # Each frequency is Binomial(n, p)/n with standard deviation √(p(1−p)/n) ≤ 1.2e-3; allow 5
    # standard deviations (a correct sampler fails one category with probability < 6e-7), and
    # a filtered-out token (p = 0, so the bound is 0) must never appear.
    sd = np.sqrt(expected * (1 - expected) / n)
    assert np.all(np.abs(freq - expected) <= 5 * sd), (freq, expected)
    np.testing.assert_allclose(log_probs, log_softmax(Z / params.temperature)[tokens], atol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"temperature": float("inf")}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": -0.5}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
    ],
)
def test_invalid_params_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kwargs)


def test_params_are_static_and_greedy_flag():
    assert GREEDY.greedy and not SamplingParams(temperature=0.5).greedy
    # Sampling settings are static jit arguments: equal settings hash equal.
    assert hash(SamplingParams(0.7, 0.9, 20)) == hash(SamplingParams(0.7, 0.9, 20))
