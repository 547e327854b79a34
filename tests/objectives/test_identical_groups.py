"""A group of identical values gets exactly zero advantage (docs/algorithms.md §3.11),
whatever the value and wherever its rows sit in the batch.

Exactness is the point: float32 cannot hold a shaped return such as 10.3, and a group mean that is
off by one rounding error, divided by a standard deviation of the same size plus 1e-6, gives an
advantage of order one that pushes the whole group one way. So every assertion here is ``== 0``
(no tolerance), and step returns of identical trajectories must be bitwise equal.

Batches are drawn by hypothesis: rows are spread over a few groups in random order, with padding
rows between them; one group's real rows all carry the same value, the other rows random values.
Values are arbitrary float32 numbers, shaped Sokoban returns (10.3, 10 − 0.1·k) and γ-discounted
returns (10·γ^j).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from arlarena_jax.objectives import advantage
from arlarena_jax.objectives.batch import TurnBatch, make_batch

ROWS, TOKENS, GROUPS = 16, 4, 3
SETTINGS = settings(max_examples=40, deadline=None)

SHAPED = [10.3, *(10.0 - 0.1 * k for k in range(16)), *(10.0 * 0.95**j for j in range(16))]
VALUES = st.one_of(
    st.floats(-1e4, 1e4, allow_nan=False, width=32),
    st.sampled_from([float(np.float32(v)) for v in SHAPED]),
)

# Every estimator that centres on a group statistic; those marked σ also divide by the group std.
# EMPG shifts every advantage by a batch mean, so its law is stated apart (below).
ESTIMATORS = {
    "grpo σ": advantage.grpo(norm_by_std=True),
    "grpo": advantage.grpo(norm_by_std=False),
    "vanilla_grpo σ": advantage.vanilla_grpo(norm_by_std=True),
    "drgrpo": advantage.drgrpo(),
    "rloo": advantage.rloo(),
    "pass_at_k σ": advantage.pass_at_k(norm_by_std=True),
    "gigpo mean_std_norm σ": advantage.gigpo(mode="mean_std_norm"),
    "gigpo mean_norm": advantage.gigpo(mode="mean_norm"),
}


@functools.cache
def jitted(name: str):
    return jax.jit(lambda batch: ESTIMATORS[name].fn(batch)[0])


@st.composite
def batches(draw) -> tuple[TurnBatch, np.ndarray]:
    """(batch, rows of the identical group): one turn per trajectory, scores in token_rewards.
    Group 0 holds the identical values and at least two real rows (rows 0 and 1, which the
    estimators see in place: segment reductions do not depend on where a group's rows sit)."""
    value = draw(VALUES)
    groups = np.asarray(draw(st.lists(st.integers(0, GROUPS - 1), min_size=ROWS, max_size=ROWS)))
    real = np.asarray(draw(st.lists(st.booleans(), min_size=ROWS, max_size=ROWS)))
    others = draw(st.lists(VALUES, min_size=ROWS, max_size=ROWS))
    # at least two members: a singleton has μ = 0, σ = 1 (docs/algorithms.md §3.1)
    groups[:2], real[:2] = 0, True
    same = (groups == 0) & real
    scores = np.where(same, value, np.asarray(others, np.float32)).astype(np.float32)
    lengths = np.asarray(draw(st.lists(st.integers(1, TOKENS), min_size=ROWS, max_size=ROWS)))
    mask = (np.arange(TOKENS)[None, :] < lengths[:, None]).astype(np.float32)
    entropy = np.asarray(draw(st.lists(VALUES, min_size=ROWS, max_size=ROWS)), np.float32)
    batch = make_batch(
        mask,
        np.zeros((ROWS, TOKENS)),
        group_ids=groups,
        anchor_ids=groups,  # GiGPO: one anchor state per group, so its step group is the group
        episode_returns=scores,
        step_rewards=scores,
        row_mask=real.astype(np.float32),
        old_entropy=np.abs(entropy)[:, None] * mask / 1e3,
    )
    rewards = np.zeros((ROWS, TOKENS), np.float32)
    rewards[:, 0] = scores  # s_i = Σ_t token_rewards[i, t] = the score, exactly
    return batch._replace(token_rewards=jnp.asarray(rewards)), same


@SETTINGS
@given(batches(), st.sampled_from(sorted(ESTIMATORS)))
def test_a_group_of_identical_values_gets_exactly_zero(data, name):
    batch, same = data
    adv = np.asarray(jitted(name)(batch))
    assert np.all(np.isfinite(adv))
    assert np.all(adv[same] == 0.0), (name, adv[same][:, 0])


@SETTINGS
@given(batches(), VALUES, st.sampled_from([0.0, 0.05]))
def test_empg_does_not_depend_on_the_value_of_an_identical_group(data, other, zeta):
    """EMPG (docs/algorithms.md §3.10) scales the GRPO advantage by g_i and then subtracts the batch
    mean of the first column, so an identical group's rows are not 0 but −mean: its GRPO advantage
    must be exactly 0, so that replacing its value changes no advantage of the batch, bit for
    bit."""
    batch, same = data
    scores = np.array(batch.token_rewards)
    scores[same, 0] = np.float32(other)
    moved = batch._replace(token_rewards=jnp.asarray(scores))
    estimator = jax.jit(advantage.empg(zeta=zeta).fn)
    np.testing.assert_array_equal(estimator(batch)[0], estimator(moved)[0])


def test_a_float32_mean_of_twenty_four_copies_of_ten_point_three_is_not_exact():
    """The case that was found: the plain float32 mean of 24 copies of 10.3 is 10.300002, so
    the deviation is not 0. It is 0 here because the sums run on values shifted by the pivot."""
    copies = jnp.full((24,), jnp.float32(10.3))
    assert float(jnp.sum(copies) / 24) != float(copies[0])  # the naive mean is off
    batch = make_batch(
        np.ones((24, 1)), np.zeros((24, 1)), group_ids=np.zeros(24), episode_returns=copies
    )
    batch = batch._replace(token_rewards=copies[:, None])
    assert np.all(np.asarray(jitted("grpo σ")(batch)) == 0.0)


# ---- step returns of identical trajectories -----------------------------------------------


@st.composite
def identical_trajectories(draw) -> tuple[TurnBatch, np.ndarray, np.ndarray]:
    """Several copies of one trajectory (same step rewards, same anchor states per turn) in one
    group, their turn rows shuffled among padding rows and rows of another, random group."""
    copies = draw(st.integers(2, 4))
    turns = draw(st.integers(1, 4))
    rewards = draw(st.lists(VALUES, min_size=turns, max_size=turns))
    noise_turns = ROWS - copies * turns - draw(st.integers(0, 2))
    rows = []  # (traj, turn, group, anchor, step reward, real)
    for c in range(copies):
        rows += [(c, k, 0, k, rewards[k], True) for k in range(turns)]
    for k in range(max(noise_turns, 0)):
        rows.append((copies + k % 2, k // 2, 1, 100 + k, draw(VALUES), True))
    rows += [(0, 0, 0, 0, 0.0, False)] * (ROWS - len(rows))
    order = draw(st.permutations(range(ROWS)))
    traj, turn, group, anchor, reward, real = (
        np.asarray(x) for x in zip(*(rows[i] for i in order), strict=True)
    )
    won = float(np.float32(draw(VALUES)))
    episode = np.where(group == 0, won, np.asarray(reward, np.float32))
    batch = make_batch(
        np.ones((ROWS, TOKENS)),
        np.zeros((ROWS, TOKENS)),
        group_ids=group,
        traj_ids=traj,
        turn_ids=turn,
        anchor_ids=anchor,
        episode_returns=episode,
        step_rewards=reward,
        row_mask=real.astype(np.float32),
    )
    rewards_t = np.zeros((ROWS, TOKENS), np.float32)
    rewards_t[:, -1] = episode
    return batch._replace(token_rewards=jnp.asarray(rewards_t)), (group == 0) & real, turn


@SETTINGS
@given(identical_trajectories(), st.sampled_from([1.0, 0.95, 0.9, 0.5]))
def test_identical_trajectories_have_bitwise_equal_step_returns(data, gamma):
    batch, copy_rows, turn = data
    returns = np.asarray(jax.jit(advantage.step_returns, static_argnums=1)(batch, gamma))
    for k in np.unique(turn[copy_rows]):
        at_k = returns[copy_rows & (turn == k)]
        assert np.all(at_k == at_k[0]), (k, at_k)


@SETTINGS
@given(identical_trajectories(), st.sampled_from(["mean_std_norm", "mean_norm"]))
def test_identical_trajectories_get_exactly_zero_gigpo_advantage(data, mode):
    batch, copy_rows, _ = data
    adv = np.asarray(jax.jit(advantage.gigpo(gamma=0.95, mode=mode).fn)(batch)[0])
    assert np.all(adv[copy_rows] == 0.0), adv[copy_rows][:, -1]


def test_step_returns_follow_the_recurrence_in_any_row_order():
    """G_k = r_k + γ·G_{k+1} (docs/algorithms.md §3.9), by hand: rewards (1, 2, 4) at turns
    (0, 1, 2) and γ = 0.5 give (1 + 0.5·(2 + 0.5·4), 2 + 0.5·4, 4) = (3, 4, 4), exact in float32;
    the rows are stored out of turn order, with a one-turn trajectory and a padding row among
    them."""
    batch = make_batch(
        np.ones((5, 1)),
        np.zeros((5, 1)),
        group_ids=np.zeros(5),
        traj_ids=[0, 1, 0, 0, 0],
        turn_ids=[2, 0, 0, 1, 0],
        step_rewards=[4.0, 7.0, 1.0, 2.0, 9.0],
        row_mask=[1, 1, 1, 1, 0],
    )
    returns = advantage.step_returns(batch, 0.5)
    assert np.asarray(returns).tolist() == [4.0, 7.0, 3.0, 4.0, 0.0]
