"""Multi-turn GAE over turn rows (docs/algorithms.md §3.7b): a hand-computed two-turn example, and
a property test against a plain NumPy GAE over each trajectory's flattened valid tokens."""

from __future__ import annotations

import chex
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings

from arlarena_jax.objectives import advantage
from arlarena_jax.objectives.batch import make_batch
from arlarena_jax.objectives.stats import last_token_onehot


def _prepared(batch, rewards_on_last):
    """The batch as Objective.prepare leaves it for the estimator: R placed on the last token."""
    placed = rewards_on_last[:, None] * last_token_onehot(batch.response_mask)
    return batch._replace(token_rewards=placed * batch.row_mask[:, None])


def test_two_turns_match_the_hand_computed_example():
    # One trajectory of two turns with 2 valid tokens each, given in reverse order, plus a
    # padding row. γ = 0.9, λ = 0.8 (γλ = 0.72). Flattened: V = [0.5, 0.6, 0.7, 0.8],
    # r = [0, 0.2, 0, 1.0] (turn 0 earned 0.2, turn 1 earned 1.0; episode return 1.2).
    # δ3 = 1 − 0.8 = 0.2;            Â3 = 0.2
    # δ2 = 0.9·0.8 − 0.7 = 0.02;     Â2 = 0.02 + 0.72·0.2 = 0.164
    # δ1 = 0.2 + 0.9·0.7 − 0.6 = 0.23; Â1 = 0.23 + 0.72·0.164 = 0.34808
    # δ0 = 0.9·0.6 − 0.5 = 0.04;     Â0 = 0.04 + 0.72·0.34808 = 0.2906176
    mask = jnp.array([[1, 1, 0], [1, 1, 0], [0, 0, 0]], jnp.float32)
    values = jnp.array([[0.7, 0.8, 9.0], [0.5, 0.6, 9.0], [3.0, 3.0, 3.0]])
    batch = make_batch(
        mask,
        jnp.zeros_like(mask),
        row_mask=jnp.array([1.0, 1.0, 0.0]),
        traj_ids=jnp.array([0, 0, 2]),
        turn_ids=jnp.array([1, 0, 0]),
        group_ids=jnp.array([0, 0, 2]),
        episode_returns=jnp.array([1.2, 1.2, 0.0]),
        step_rewards=jnp.array([1.0, 0.2, 0.0]),
        values=values,
    )
    batch = _prepared(batch, batch.episode_returns)
    _, returns = advantage.multi_turn_gae(gamma=0.9, lam=0.8).fn(batch)
    raw = returns - values * mask
    expected_raw = np.array([[0.164, 0.2, 0.0], [0.2906176, 0.34808, 0.0], [0.0, 0.0, 0.0]])
    chex.assert_trees_all_close(raw, expected_raw, atol=1e-6)  # float32 arithmetic
    expected_returns = [[0.864, 1.0, 0.0], [0.7906176, 0.94808, 0.0], [0.0, 0.0, 0.0]]
    chex.assert_trees_all_close(returns, np.array(expected_returns), atol=1e-6)


def _reference(rows, gamma, lam):
    """Plain GAE over each trajectory's valid tokens in turn order. ``rows``: (traj, turn, values,
    valid, turn reward) with the reward on the row's last valid token."""
    out = {}
    for traj in {r[0] for r in rows}:
        mine = sorted((r for r in rows if r[0] == traj), key=lambda r: r[1])
        flat_v, flat_r, where = [], [], []
        for r in mine:
            idx = [t for t, m in enumerate(r[3]) if m]
            for j, t in enumerate(idx):
                flat_v.append(r[2][t])
                flat_r.append(r[4] if j == len(idx) - 1 else 0.0)
                where.append((r[1], t))
        adv, next_v, next_a = [0.0] * len(flat_v), 0.0, 0.0
        for k in reversed(range(len(flat_v))):
            next_a = flat_r[k] + gamma * next_v - flat_v[k] + gamma * lam * next_a
            adv[k], next_v = next_a, flat_v[k]
        out.update({(traj, *w): a for w, a in zip(where, adv, strict=True)})
    return out


@st.composite
def _trajectories(draw):
    width = draw(st.integers(1, 4))
    rows = []
    for traj in range(draw(st.integers(1, 3))):
        for turn in range(draw(st.integers(1, 4))):
            length = draw(st.integers(1, width))
            values = draw(st.lists(st.floats(-2, 2), min_size=width, max_size=width))
            reward = draw(st.floats(-1, 1))
            rows.append((traj, turn, values, [1] * length + [0] * (width - length), reward))
    order = draw(st.permutations(range(len(rows))))
    return [rows[i] for i in order], width


@settings(max_examples=25, deadline=None)
@given(_trajectories(), st.floats(0, 1), st.floats(0, 1))
def test_equals_gae_over_flattened_trajectories(data, gamma, lam):
    rows, width = data
    returns_of = {r[0]: sum(x[4] for x in rows if x[0] == r[0]) for r in rows}
    mask = jnp.array([r[3] for r in rows], jnp.float32)
    batch = make_batch(
        mask,
        jnp.zeros_like(mask),
        row_mask=jnp.ones(len(rows)),
        traj_ids=jnp.array([r[0] for r in rows]),
        turn_ids=jnp.array([r[1] for r in rows]),
        group_ids=jnp.zeros(len(rows), jnp.int32),
        episode_returns=jnp.array([returns_of[r[0]] for r in rows]),
        step_rewards=jnp.array([r[4] for r in rows]),
        values=[r[2] for r in rows],
    )
    batch = _prepared(batch, batch.episode_returns)
    # jitted, as the update runs it (one program per example instead of ~20 eager operations)
    _, returns = jax.jit(advantage.multi_turn_gae(gamma=gamma, lam=lam).fn)(batch)
    raw = np.asarray(returns) - np.asarray(batch.values) * np.asarray(batch.response_mask)
    expected = _reference(rows, gamma, lam)
    for i, r in enumerate(rows):
        for t in range(width):
            want = expected.get((r[0], r[1], t), 0.0)
            # float32 against float64 over ≤ 16 steps of |δ| ≤ 5: 1e-4 absolute
            np.testing.assert_allclose(raw[i, t], want, atol=1e-4)
