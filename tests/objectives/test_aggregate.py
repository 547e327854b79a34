"""Loss aggregation (docs/algorithms.md §5) against TV-1, and padding invariance. Tolerance 1e-6."""

from __future__ import annotations

import chex
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from arlarena_jax.objectives import aggregate as agg
from tests.helpers.spec_vectors import TV1_LOSS, TV1_MASK

ROWS = jnp.ones(3)


class TV1Test(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.named_parameters(
        ("token_mean", agg.token_mean(), 0.25),  # (3 − 1.5)/6
        ("seq_mean_token_sum", agg.seq_mean_token_sum(), 0.5),  # (3 − 1.5 + 0)/3
        ("seq_mean_token_mean", agg.seq_mean_token_mean(), 0.5625),  # (1.5 − 0.375)/2
        ("seq_mean_token_sum_norm", agg.seq_mean_token_sum_norm(), 0.375),  # 1.5/4
    )
    def test_values(self, aggregation, expected):
        value = self.variant(aggregation.fn)(TV1_LOSS, TV1_MASK, ROWS)
        np.testing.assert_allclose(value, expected, atol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_seq_mean_token_mean_of_only_empty_rows_is_zero(self):
        value = self.variant(agg.seq_mean_token_mean().fn)(TV1_LOSS, jnp.zeros((3, 4)), ROWS)
        self.assertEqual(float(value), 0.0)


@pytest.mark.parametrize(
    "aggregation",
    [
        agg.token_mean(),
        agg.seq_mean_token_sum(),
        agg.seq_mean_token_mean(),
        agg.seq_mean_token_sum_norm(max_response_length=4),
    ],
    ids=lambda a: a.name,
)
def test_padding_rows_and_tokens_change_nothing(aggregation):
    expected = float(aggregation(TV1_LOSS, TV1_MASK, ROWS))
    garbage = jnp.full((2, 4), 123.0)
    loss = jnp.concatenate([TV1_LOSS, garbage])
    mask = jnp.concatenate([TV1_MASK, jnp.ones((2, 4))])  # even a set mask on padding rows
    rows = jnp.concatenate([ROWS, jnp.zeros(2)])
    wide_loss = jnp.concatenate([loss, jnp.full((5, 3), -7.0)], axis=1)
    wide_mask = jnp.concatenate([mask, jnp.zeros((5, 3))], axis=1)
    np.testing.assert_allclose(float(aggregation(wide_loss, wide_mask, rows)), expected, atol=1e-6)


def test_by_name_and_unknown_mode():
    assert agg.by_name("seq-mean-token-mean").name == "seq-mean-token-mean"
    with pytest.raises(ValueError, match="unknown loss_agg_mode 'token-sum'"):
        agg.by_name("token-sum")
