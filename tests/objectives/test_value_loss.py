"""The critic's objective (docs/algorithms.md §3.7c): the clipped value loss on a hand-computed
example, its laws (a wide clip is the plain squared error; the clip only ever raises the loss),
and the explained variance."""

from __future__ import annotations

import chex
import hypothesis.strategies as st
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

from arlarena_jax.objectives.aggregate import seq_mean_token_mean
from arlarena_jax.objectives.value import clipped_value_loss, explained_variance


def test_clipped_value_loss_matches_the_hand_computed_example():
    # ε_v = 0.5. Token 0: V = 1, V_old = 0, R = 0.8: (V − R)² = 0.04, V_clip = 0.5,
    # (V_clip − R)² = 0.09 → 0.09, decided by the clip. Token 1: V = 0 = V_old, R = 1: both 1,
    # a tie, not counted as clipped. Token 2 is padding (mask 0) with a huge error.
    # L = ½·(0.09 + 1)/2 = 0.2725; clipfrac = 1/2; vpred_mean = (1 + 0)/2.
    values = jnp.array([[1.0, 0.0, 50.0]])
    old = jnp.array([[0.0, 0.0, 0.0]])
    returns = jnp.array([[0.8, 1.0, -50.0]])
    mask = jnp.array([[1.0, 1.0, 0.0]])
    out = clipped_value_loss(values, old, returns, mask, jnp.ones(1), clip=0.5)
    chex.assert_trees_all_close(out.loss, 0.2725, atol=1e-6)  # float32
    chex.assert_trees_all_close(out.metrics["vf_clipfrac"], 0.5, atol=1e-6)
    chex.assert_trees_all_close(out.metrics["vpred_mean"], 0.5, atol=1e-6)
    assert out.metrics["vf_loss"] == out.loss


def test_gradient_stops_where_the_clip_decides():
    """Where the clipped error is the larger, V_clip is flat in V: no gradient reaches V."""
    import jax

    old, returns, mask = jnp.zeros((1, 2)), jnp.array([[0.8, 1.0]]), jnp.ones((1, 2))

    def loss(v):
        return clipped_value_loss(v, old, returns, mask, jnp.ones(1), clip=0.5).loss

    grad = jax.grad(loss)(jnp.array([[1.0, 0.2]]))
    # token 0 clipped (V − V_old = 1 > ε): 0; token 1 unclipped: ½·2·(0.2 − 1)/2 = −0.4
    chex.assert_trees_all_close(grad, jnp.array([[0.0, -0.4]]), atol=1e-6)


def test_a_non_positive_clip_is_refused():
    with pytest.raises(ValueError, match="value clip must be > 0"):
        clipped_value_loss(jnp.zeros((1, 1)), jnp.zeros((1, 1)), jnp.zeros((1, 1)),
                           jnp.ones((1, 1)), jnp.ones(1), clip=0.0)  # fmt: skip


_floats = st.floats(-3, 3, allow_nan=False, width=32)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(_floats, _floats, _floats, st.booleans()), min_size=1, max_size=12),
    st.floats(0.01, 2.0),
)
def test_the_clip_never_lowers_the_loss_and_a_wide_clip_is_the_squared_error(tokens, clip):
    v, old, r, m = (jnp.array([[float(t[k]) for t in tokens]]) for k in range(4))
    rows = jnp.ones(1)
    plain = 0.5 * jnp.sum(jnp.square(v - r) * m) / (jnp.sum(m) + 1e-8)
    clipped = clipped_value_loss(v, old, r, m, rows, clip=clip)
    wide = clipped_value_loss(v, old, r, m, rows, clip=1e3)  # |V − V_old| ≤ 6 < 1e3
    assert float(clipped.loss) >= float(plain) - 1e-6
    np.testing.assert_allclose(float(wide.loss), float(plain), rtol=1e-5, atol=1e-6)
    assert float(wide.metrics["vf_clipfrac"]) == 0.0
    assert 0.0 <= float(clipped.metrics["vf_clipfrac"]) <= 1.0


def test_another_aggregation_is_used_when_given():
    # rows of 1 and 3 valid tokens, squared errors 4 and 1, 1, 1: seq-mean-token-mean gives
    # ½·(4 + 1)/2 = 1.25 where token-mean gives ½·7/4 = 0.875
    v = jnp.array([[2.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    mask = jnp.array([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    zeros, rows = jnp.zeros((2, 3)), jnp.ones(2)
    token = clipped_value_loss(v, v, zeros, mask, rows, clip=0.5)
    seq = clipped_value_loss(v, v, zeros, mask, rows, clip=0.5, aggregation=seq_mean_token_mean())
    chex.assert_trees_all_close((token.loss, seq.loss), (0.875, 1.25), atol=1e-6)


def test_explained_variance():
    returns = jnp.array([[1.0, 2.0, 3.0, 4.0, 99.0]])
    mask = jnp.array([[1.0, 1.0, 1.0, 1.0, 0.0]])
    perfect = explained_variance(returns, returns, mask)
    # V = mean(R) = 2.5 everywhere: Var(R − V) = Var(R) = 1.25 → 1 − 1.25/(1.25 + 1e-5) ≈ 8e-6
    flat = explained_variance(returns, jnp.full_like(returns, 2.5), mask)
    # V = −R: Var(2R) = 4·1.25 → 1 − 5/1.25 = −3
    wrong = explained_variance(returns, -returns, mask)
    chex.assert_trees_all_close((perfect, flat, wrong), (1.0, 8e-6, -3.0), atol=1e-4)
