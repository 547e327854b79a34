"""Inputs of the spec's hand-checkable test vectors (spec/algorithms.md §12), shared by tests."""

from __future__ import annotations

import jax.numpy as jnp

from arlarena_jax.objectives.batch import TurnBatch, make_batch

# TV-1 aggregation
TV1_LOSS = jnp.array([[1.0, 2.0, 3.0, 4.0], [-1.0, 0.5, 2.0, -3.0], [5.0, 6.0, 7.0, 8.0]])
TV1_MASK = jnp.array([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])

# TV-2 shared policy-loss batch: 2 groups x 3 rows x 4 tokens
TV2_OLD = jnp.array(
    [
        [-1.0, -0.5, -2.0, -1.0],
        [-0.7, -1.2, -0.3, -2.5],
        [-1.5, -0.8, -1.1, -1.0],
        [-0.2, -0.9, -1.4, -0.6],
        [-2.0, -1.0, -1.0, -1.0],
        [-0.4, -0.6, -0.9, -1.0],
    ]
)
TV2_DELTA = jnp.array(
    [
        [0.0, 0.3, -0.1, 0.5],
        [1.5, -0.4, 0.1, 0.0],
        [-0.05, -0.02, 0.7, 0.0],
        [0.1, 0.25, -0.3, 0.05],
        [-0.3, 0.0, 0.0, 0.0],
        [0.2, -0.2, 0.0, 0.0],
    ]
)
TV2_MASK = jnp.array(
    [
        [1.0, 1.0, 1.0, 0.0],
        [1.0, 1.0, 1.0, 1.0],
        [1.0, 1.0, 0.0, 0.0],
        [1.0, 1.0, 1.0, 1.0],
        [1.0, 0.0, 0.0, 0.0],
        [1.0, 1.0, 1.0, 0.0],
    ]
)
TV2_ROW_ADV = jnp.array([1.0, -0.5, -0.5, 0.8, -1.2, 0.0])
TV2_LP = TV2_OLD + TV2_DELTA
# TV-2f: entropy all 1.5 except (0,0) = 0.5 and (3,2) = 2.5; the reference equals the old policy.
TV2_ENTROPY = jnp.full((6, 4), 1.5).at[0, 0].set(0.5).at[3, 2].set(2.5)


def tv2_batch() -> TurnBatch:
    """TV-2's batch with advantages A[i,t] = a_i·m[i,t] already filled, ref := lp_old."""
    batch = make_batch(TV2_MASK, TV2_OLD, group_ids=[0, 0, 0, 1, 1, 1], ref_log_probs=TV2_OLD)
    return batch._replace(advantages=TV2_ROW_ADV[:, None] * TV2_MASK)


def ragged(values: list[list[float]], width: int = 4) -> jnp.ndarray:
    """Right-pad ragged per-row values (the spec lists valid tokens only) with zeros."""
    return jnp.array([row + [0.0] * (width - len(row)) for row in values])
