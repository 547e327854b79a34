"""Sokoban dynamics, rewards and the batch wrapper
(docs/environments.md §3.1, §3.2; the spec's §8 item 2)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envs.sokoban.batch import SokobanBatch
from envs.sokoban.env import EnvParams, EnvState, SokobanEnv
from envs.sokoban.render import (
    BOX,
    BOX_ON_TARGET,
    FLOOR,
    PLAYER,
    PLAYER_ON_TARGET,
    TARGET,
    WALL,
    parse_text,
    render_text,
)
from envs.sokoban.solver import solve

SPEC_SEED0 = "\n".join(  # spec §2.3 test vector, row by row
    [
        " # \t # \t # \t # \t # \t # \t",
        " # \t _ \t _ \t _ \t _ \t # \t",
        " # \t # \t O \t _ \t P \t # \t",
        " # \t # \t # \t X \t _ \t # \t",
        " # \t # \t # \t _ \t _ \t # \t",
        " # \t # \t # \t # \t # \t # \t",
    ]
)
SEED0_ROWS = ["######", "#____#", "##O_P#", "###X_#", "###__#", "######"]
OPTIMUM = [2, 2, 3, 1, 4, 1, 3]  # down, down, left, up, right, up, left
SYMBOL = {"#": 0, "_": 1, "O": 2, "√": 3, "X": 4, "P": 5, "S": 6}
UP, DOWN, LEFT, RIGHT = 1, 2, 3, 4


def state_from_grid(grid: np.ndarray) -> EnvState:
    """The fresh-episode state of a grid of cell codes 0..6 (exactly one player)."""
    grid = np.asarray(grid)
    players = np.argwhere((grid == PLAYER) | (grid == PLAYER_ON_TARGET))
    if len(players) != 1:
        raise ValueError(f"a Sokoban grid needs exactly one player, found {len(players)}")
    boxes = np.argwhere((grid == BOX) | (grid == BOX_ON_TARGET))
    target = np.isin(grid, (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET))
    fixed = np.where(grid == WALL, WALL, np.where(target, TARGET, FLOOR)).astype(np.int8)
    return EnvState(
        fixed=jnp.asarray(fixed),
        player=jnp.asarray(players[0], jnp.int32),
        boxes=jnp.asarray(boxes.reshape(-1, 2), jnp.int32),
        num_env_steps=jnp.int32(0),
        time=jnp.int32(0),
    )


def grid_of(rows: list[str]) -> np.ndarray:
    return np.array([[SYMBOL[c] for c in row] for row in rows], np.int8)


@pytest.fixture(scope="module")
def env() -> SokobanEnv:
    return SokobanEnv()


@pytest.fixture(scope="module")
def step(env):
    """Jitted single-env step_env with default params: (obs, state, reward, terminated, info)."""
    params = env.default_params
    return jax.jit(lambda state, action: env.step_env(jax.random.key(0), state, action, params))


@pytest.fixture(scope="module")
def batch() -> SokobanBatch:
    return SokobanBatch(16)


@pytest.fixture(scope="module")
def states(batch):
    """16 generated fresh states (batched leaves), from the batch's compiled reset."""
    batch.reset(list(range(100, 116)))
    return batch.state


def run(step, state, actions):
    """Step a state through actions; returns the final state and per-step outputs (host)."""
    rewards, dones, wons, effective = [], [], [], []
    for action in actions:
        _, state, reward, _, info = step(state, action)
        rewards.append(float(reward))
        dones.append(bool(info["done"]))
        wons.append(bool(info["won"]))
        effective.append(bool(info["action_is_effective"]))
    return state, rewards, dones, wons, effective


def test_seed0_room_renders_as_spec(env):
    state = state_from_grid(grid_of(SEED0_ROWS))
    obs = np.asarray(env.get_obs(state))
    assert render_text(obs) == SPEC_SEED0
    np.testing.assert_array_equal(parse_text(SPEC_SEED0), obs)
    assert solve(obs) == OPTIMUM


def test_seed0_optimum_return(step):
    state, rewards, dones, wons, effective = run(
        step, state_from_grid(grid_of(SEED0_ROWS)), OPTIMUM
    )
    assert np.isclose(sum(rewards), -0.1 * 7 + 1 + 10, atol=1e-5)
    assert np.allclose(rewards, [-0.1] * 6 + [10.9], atol=1e-6)
    assert dones == [False] * 6 + [True] and wons == [False] * 6 + [True]
    assert all(effective) and int(state.num_env_steps) == 7


def test_push_on_and_off_target(step):
    rows = ["#######", "#PX__O#", "#_XO__#", "#######"]
    state = state_from_grid(grid_of(rows))
    _, rewards, dones, _, _ = run(step, state, [DOWN, RIGHT])  # box 2 onto its target
    assert np.allclose(rewards, [-0.1, 0.9]) and dones == [False, False]
    _, rewards, _, _, _ = run(step, state, [DOWN, RIGHT, RIGHT])  # … and off it again
    assert np.allclose(rewards, [-0.1, 0.9, -1.1])


def test_blocked_moves_are_counted(step):
    state = state_from_grid(grid_of(["######", "#PXX_#", "#X_OO#", "######"]))
    # push into a box, push into a wall, two wall bumps: all counted, nothing moves
    after, rewards, dones, _, effective = run(step, state, [RIGHT, DOWN, UP, LEFT])
    assert np.allclose(rewards, -0.1) and not any(effective + dones)
    assert int(after.num_env_steps) == 4 and after.player.tolist() == [1, 1]
    np.testing.assert_array_equal(after.boxes, state.boxes)
    after, _, _, _, effective = run(step, state_from_grid(grid_of(SEED0_ROWS)), [UP])
    assert effective == [True] and after.player.tolist() == [1, 4]


def test_still_action_not_counted(step):
    state = state_from_grid(grid_of(SEED0_ROWS))
    after, rewards, dones, wons, effective = run(step, state, [0] * 20)
    assert np.allclose(rewards, -0.1) and not any(dones + wons + effective)
    assert int(after.num_env_steps) == 0 and int(after.time) == 20
    np.testing.assert_array_equal(after.player, state.player)


def test_truncation_at_max_steps_then_frozen(step):
    state = state_from_grid(grid_of(SEED0_ROWS))
    after, rewards, dones, wons, _ = run(step, state, [RIGHT] * 15)  # wall bumps
    assert dones == [False] * 14 + [True] and not any(wons)
    assert np.allclose(rewards, -0.1) and int(after.num_env_steps) == 15
    frozen, rewards, dones, _, _ = run(step, after, [LEFT, DOWN, 0])
    assert rewards == [0.0] * 3 and all(dones)
    assert all(jax.tree.leaves(jax.tree.map(lambda a, b: bool(jnp.all(a == b)), after, frozen)))


def test_solved_episode_stays_solved(step):
    state, *_ = run(step, state_from_grid(grid_of(SEED0_ROWS)), OPTIMUM)
    _, rewards, dones, wons, effective = run(step, state, [RIGHT, 0])
    assert rewards == [0.0, 0.0] and all(dones) and all(wons) and not any(effective)


def test_vmapped_step_equals_single(env, step, states):
    params = env.default_params
    vstep = jax.jit(jax.vmap(lambda s, a: env.step_env(jax.random.key(0), s, a, params)))
    actions = jax.random.randint(jax.random.key(7), (6, 16), 0, 5)
    batched = states
    for row in actions:
        out = vstep(batched, row)
        for i in range(16):
            single = step(jax.tree.map(lambda x, i=i: x[i], batched), row[i])
            for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(out), strict=True):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[i])
        batched = out[1]


def test_gymnax_api(env):
    params = env.default_params
    assert env.num_actions == 5 and env.action_space(params).n == 5
    assert env.observation_space(params).shape == (6, 6)
    assert set(env.state_space(params).spaces) == {
        "fixed",
        "player",
        "boxes",
        "num_env_steps",
        "time",
    }
    # gymnax's own (auto-resetting) reset and step trace with the documented shapes
    key = jax.random.key(0)
    obs, state = jax.eval_shape(env.reset, key, params)
    assert obs.shape == (6, 6) and obs.dtype == jnp.int8 and state.boxes.shape == (1, 2)
    out = jax.eval_shape(env.step, key, state, jnp.int32(1), params)
    assert len(out) == 6 and out[0].shape == (6, 6) and out[2].dtype == jnp.float32
    with pytest.raises(ValueError, match="num_boxes=1"):
        SokobanBatch(2, EnvParams(num_boxes=2))


def test_batch_reset_step(batch):
    obs = batch.reset([3, 3, 9, *range(200, 213)])
    assert len(obs) == batch.num_envs == 16
    assert obs[0] == obs[1] and obs[0] != obs[2]
    assert obs[0].text == render_text(batch.grids()[0])
    again = batch.reset([3, 3, 9, *range(200, 213)])
    assert again == obs
    for _ in range(15):
        result = batch.step(batch.expert_actions())
        assert result.rewards.shape == (16,) and result.dones.dtype == bool
        assert all(set(info) == {"won", "action_is_effective"} for info in result.infos)
    assert result.dones.all() and all(info["won"] for info in result.infos)
    assert batch.solved().all() and batch.expert_actions() == [0] * 16
    with pytest.raises(ValueError):
        batch.step([0] * 3)


def test_batch_episode_returns(batch):
    """Expert play from the start: return = −0.1·k + 11 with k the optimal length (§8 item 2)."""
    batch.reset(list(range(300, 316)))
    lengths = [len(solve(g)) for g in batch.grids()]
    total = np.zeros(16)
    for _ in range(max(lengths)):
        total += batch.step(batch.expert_actions()).rewards
    np.testing.assert_allclose(total, [11 - 0.1 * k for k in lengths], atol=1e-4)


@settings(max_examples=25, deadline=None)
@given(index=st.integers(0, 15), actions=st.lists(st.integers(0, 4), min_size=1, max_size=20))
def test_random_play_invariants(step, states, index, actions):
    """Random play never creates/destroys boxes or walls nor puts the player on a wall/box."""
    state = jax.tree.map(lambda x: x[index], states)
    start_fixed = np.asarray(state.fixed)
    for action in actions:
        _, state, _, _, _ = step(state, action)
        np.testing.assert_array_equal(state.fixed, start_fixed)
        boxes, player = np.asarray(state.boxes), tuple(np.asarray(state.player))
        assert boxes.shape == (1, 2) and start_fixed[tuple(boxes[0])] != WALL
        assert start_fixed[player] != WALL and player != tuple(boxes[0])
        assert int(state.num_env_steps) <= 15
