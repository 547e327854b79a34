"""Sokoban as a gymnax environment (docs/environments.md §3), JAX-native and vmappable.

State = fixed layer (0 wall, 1 floor, 2 target) + player cell + box cells + step counters. The
observation is the full grid of cell codes 0..6 (``render.py``). Dynamics follow gym-sokoban's
``SokobanEnv.step`` with ARLArena's wrapper (docs/environments.md §3.1, §3.2):

* actions 1–4 = up, down, left, right: push a box if the cell beyond it is inside the grid and
  free (floor/target, no box), else move into a free cell, else stay; the step is counted;
* reward of a counted step = −0.1, +1 / −1 if the number of boxes on targets rose / fell, +10 if
  every target is covered; boxes on targets = num_boxes − #targets without a box (gym-sokoban's
  count, in which a target under the player is uncovered), taken from the state before and
  after the step (gym-sokoban keeps a counter that reset sets to 0; the two differ only for a
  room that starts with a box on a target, which generation never produces);
* action 0 ("still"/invalid; any action outside 1..4 acts the same): reward −0.1, nothing
  moves, not counted, ``won`` False;
* terminated = solved; truncated = not solved and ``num_env_steps`` ≥ ``max_steps``.

Unlike gym-sokoban, stepping a finished episode (solved or out of steps) through ``step_env`` is a
no-op: the state is returned unchanged with reward 0 and ``info["done"]`` True. gymnax's own
``step`` auto-resets on done as usual; the batch wrapper calls ``step_env`` directly.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

from envs.sokoban.generate import generate_room
from envs.sokoban.render import (
    BOX,
    BOX_ON_TARGET,
    MOVES,
    PLAYER,
    PLAYER_ON_TARGET,
    TARGET,
    WALL,
)

STEP_PENALTY, BOX_ON_REWARD, BOX_OFF_PENALTY, SOLVED_REWARD = -0.1, 1.0, -1.0, 10.0


@struct.dataclass
class EnvState:
    """One Sokoban episode: the fixed layer, the movable pieces and the step counters."""

    fixed: jax.Array  # [dim, dim] int8: 0 wall, 1 floor, 2 target
    player: jax.Array  # [2] int32 (row, column)
    boxes: jax.Array  # [num_boxes, 2] int32
    num_env_steps: jax.Array  # int32: counted steps (actions 1–4)
    time: jax.Array  # int32: all step_env calls on an unfinished episode (action 0 included)


@struct.dataclass
class EnvParams:
    """docs/environments.md §3.1 settings. Shape- and loop-defining fields are static (pytree aux
    data)."""

    dim_room: int = struct.field(pytree_node=False, default=6)
    num_boxes: int = struct.field(pytree_node=False, default=1)
    num_gen_steps: int = struct.field(pytree_node=False, default=20)  # int(1.7·(6+6))
    search_depth: int = struct.field(pytree_node=False, default=30)
    max_gen_attempts: int = struct.field(pytree_node=False, default=16)  # 4 tries × 4 reseeds
    max_steps: int = 15
    p_change_directions: float = 0.35


def render_grid(state: EnvState) -> jax.Array:
    """Cell codes 0..6 [dim, dim] int8: fixed layer, then boxes (3 on target, 4 off), then
    player (6 on target, 5 off)."""
    fixed = state.fixed
    rows, cols = state.boxes[:, 0], state.boxes[:, 1]
    box_codes = jnp.where(fixed[rows, cols] == TARGET, BOX_ON_TARGET, BOX).astype(jnp.int8)
    grid = fixed.at[rows, cols].set(box_codes)
    on_target = fixed[state.player[0], state.player[1]] == TARGET
    code = jnp.where(on_target, PLAYER_ON_TARGET, PLAYER).astype(jnp.int8)
    return grid.at[state.player[0], state.player[1]].set(code)


def boxes_on_target(state: EnvState) -> jax.Array:
    """num_boxes − #targets not covered by a box (gym-sokoban ``_calc_reward``), int32."""
    targets = state.fixed == TARGET
    covered = jnp.zeros_like(targets).at[state.boxes[:, 0], state.boxes[:, 1]].set(True)
    return state.boxes.shape[0] - jnp.sum(targets & ~covered, dtype=jnp.int32)


def is_solved(state: EnvState) -> jax.Array:
    """All targets covered by boxes (a target under the player is uncovered)."""
    return boxes_on_target(state) == state.boxes.shape[0]


def move(state: EnvState, action: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(player, boxes) after a push-or-move action in 1..4 (docs/environments.md §3.1);
    unchanged if blocked."""
    shape = jnp.array(state.fixed.shape, jnp.int32)
    delta = jnp.array(MOVES, jnp.int32)[jnp.clip(action - 1, 0, 3)]
    nxt, beyond = state.player + delta, state.player + 2 * delta

    def inside(cell):
        return jnp.all((cell >= 0) & (cell < shape))

    def box_at(cell):
        return jnp.all(state.boxes == cell, axis=-1)

    def free(cell):
        clipped = jnp.clip(cell, 0, shape - 1)
        return inside(cell) & (state.fixed[clipped[0], clipped[1]] != WALL) & ~box_at(cell).any()

    hit = box_at(nxt)
    push = hit.any() & free(beyond)
    step = push | free(nxt)
    boxes = jnp.where(push & hit[:, None], beyond, state.boxes)
    return jnp.where(step, nxt, state.player), boxes


class SokobanEnv(environment.Environment):
    """gymnax Sokoban (see module doc); rooms from :func:`envs.sokoban.generate.generate_room`."""

    @property
    def default_params(self) -> EnvParams:
        return EnvParams()

    def step_env(
        self, key: jax.Array, state: EnvState, action: int | jax.Array, params: EnvParams
    ) -> tuple[jax.Array, EnvState, jax.Array, jax.Array, dict[str, Any]]:
        """(obs, state, reward, terminated, info{won, action_is_effective, done}) of a step."""
        del key
        action = jnp.asarray(action, jnp.int32)
        finished = is_solved(state) | (state.num_env_steps >= params.max_steps)
        counted = ~finished & (action >= 1) & (action <= 4)
        player, boxes = move(state, action)
        player = jnp.where(counted, player, state.player)
        boxes = jnp.where(counted, boxes, state.boxes)
        new = state.replace(
            player=player,
            boxes=boxes,
            num_env_steps=state.num_env_steps + counted.astype(jnp.int32),
            time=state.time + (~finished).astype(jnp.int32),
        )
        before, after = boxes_on_target(state), boxes_on_target(new)
        solved = is_solved(new)
        shaped = (
            STEP_PENALTY
            + jnp.where(after > before, BOX_ON_REWARD, 0.0)
            + jnp.where(after < before, BOX_OFF_PENALTY, 0.0)
            + jnp.where(solved, SOLVED_REWARD, 0.0)
        )
        reward = jnp.where(counted, shaped, jnp.where(finished, 0.0, STEP_PENALTY))
        done = finished | (counted & (solved | (new.num_env_steps >= params.max_steps)))
        info = {
            "won": solved & (counted | finished),
            "action_is_effective": jnp.any(player != state.player),
            "done": done,
        }
        return self.get_obs(new), new, reward.astype(jnp.float32), solved, info

    def reset_env(self, key: jax.Array, params: EnvParams) -> tuple[jax.Array, EnvState]:
        """A new episode in the room generated from ``key`` (deterministic per key)."""
        room = generate_room(key, params)
        state = EnvState(
            fixed=room.fixed,
            player=room.player,
            boxes=room.boxes,
            num_env_steps=jnp.int32(0),
            time=jnp.int32(0),
        )
        return self.get_obs(state), state

    def get_obs(self, state: EnvState, params: EnvParams | None = None, key=None) -> jax.Array:
        """The full grid of cell codes 0..6, [dim, dim] int8."""
        return render_grid(state)

    def is_terminated(self, state: EnvState, params: EnvParams) -> jax.Array:
        """Natural end: the puzzle is solved."""
        return is_solved(state)

    def is_truncated(self, state: EnvState, params: EnvParams) -> jax.Array:
        """Time limit: ``max_steps`` counted steps used without solving."""
        return ~is_solved(state) & (state.num_env_steps >= params.max_steps)

    @property
    def name(self) -> str:
        return "Sokoban"

    @property
    def num_actions(self) -> int:
        return 5

    def action_space(self, params: EnvParams | None = None) -> spaces.Discrete:
        """0 still, 1 up, 2 down, 3 left, 4 right."""
        return spaces.Discrete(5)

    def observation_space(self, params: EnvParams) -> spaces.Box:
        dim = params.dim_room
        return spaces.Box(0, 6, (dim, dim), jnp.int8)

    def state_space(self, params: EnvParams) -> spaces.Dict:
        dim, n = params.dim_room, params.num_boxes
        return spaces.Dict(
            {
                "fixed": spaces.Box(0, 2, (dim, dim), jnp.int8),
                "player": spaces.Box(0, dim - 1, (2,), jnp.int32),
                "boxes": spaces.Box(0, dim - 1, (n, 2), jnp.int32),
                "num_env_steps": spaces.Discrete(params.max_steps + 1),
                "time": spaces.Box(0, jnp.iinfo(jnp.int32).max, (), jnp.int32),
            }
        )
