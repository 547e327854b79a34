"""Inputs of the spec's hand-checkable test vectors (spec/algorithms.md §12), shared by tests."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

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


# TV-4: 11 turn rows, T = 3, penalty c = 0.1, γ = 0.95 (its expected values: test_advantage.py).
TV4_LENGTHS = np.array([3, 2, 3, 3, 2, 3, 3, 2, 3, 3, 2])
TV4_MASK = (np.arange(3)[None, :] < TV4_LENGTHS[:, None]).astype(np.float32)
TV4_GROUPS = np.array([0] * 6 + [1] * 5)  # a, b
TV4_TRAJ = np.array([0, 0, 1, 1, 1, 2, 3, 3, 4, 4, 5])  # a1 a1 a2 a2 a2 a3 b1 b1 b2 b2 b3
TV4_TURN = np.array([0, 1, 0, 1, 2, 0, 0, 1, 0, 1, 0])
TV4_ANCHOR = np.array([0, 1, 0, 2, 1, 0, 3, 4, 3, 4, 3])  # a|s0 a|s1 a|s2 b|t0 b|t1
TV4_RETURN = np.array([10, 10, 0, 0, 0, 10, 0, 0, 0, 0, 0], np.float32)
TV4_INVALID = np.array([0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0], np.float32)
TV4_STEP_REWARD = np.array([0, 10, 0, 0, 0, 10, 0, 0, 0, 0, 0], np.float32)

TV4_MEAN_ENTROPY = np.array([0.5, 0.2, 0.9, 0.4, 0.6, 0.3, 0.8, 0.1, 0.7, 0.5, 0.3])


def tv4_batch() -> TurnBatch:
    """TV-4's batch. Padding tokens of old_entropy/values carry garbage that must be ignored."""
    entropy = TV4_MEAN_ENTROPY[:, None] * TV4_MASK + 7.0 * (1.0 - TV4_MASK)
    values = np.linspace(-1.0, 1.0, 33).reshape(11, 3)
    rng = np.random.default_rng(4)
    return make_batch(
        TV4_MASK,
        rng.normal(-1.0, 0.3, (11, 3)),
        group_ids=TV4_GROUPS,
        traj_ids=TV4_TRAJ,
        turn_ids=TV4_TURN,
        anchor_ids=TV4_ANCHOR,
        episode_returns=TV4_RETURN,
        step_rewards=TV4_STEP_REWARD,
        action_valid=1.0 - TV4_INVALID,
        old_entropy=entropy,
        values=values,
        ref_log_probs=rng.normal(-1.0, 0.3, (11, 3)),
    )
