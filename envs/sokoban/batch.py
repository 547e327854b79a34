"""N Sokoban environments behind the :class:`envs.base.EnvBatch` protocol
(docs/environments.md §1.1, §3.1).

Reset and step are each one jitted, vmapped function over all N environments (N static); text
rendering, infos and the expert (BFS solver) run on the host. Environment i of ``reset(seeds)``
plays the room of ``jax.random.key(uint32(seeds[i]))``: equal seeds give identical rooms, which is
how a GRPO group shares its task. ``step`` calls ``SokobanEnv.step_env`` without gymnax's
auto-reset: a finished environment stays as it is and further steps return reward 0, done True.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from envs.base import Observation, Step
from envs.sokoban.env import EnvParams, EnvState, SokobanEnv, is_solved
from envs.sokoban.generate import check_gen_params
from envs.sokoban.render import render_text
from envs.sokoban.solver import solve


class SokobanBatch:
    """N JAX-native Sokoban environments (see module doc)."""

    def __init__(self, num_envs: int, params: EnvParams | None = None) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self._num_envs = num_envs
        self.params = params if params is not None else EnvParams()
        check_gen_params(self.params)
        self.env = SokobanEnv()
        env, p = self.env, self.params
        no_key = jax.random.key(0)  # step_env ignores its key

        def reset_one(seed: jax.Array) -> tuple[EnvState, jax.Array]:
            obs, state = env.reset_env(jax.random.key(seed), p)
            return state, obs

        def step_one(state: EnvState, action: jax.Array):
            obs, state, reward, _, info = env.step_env(no_key, state, action, p)
            return state, obs, reward, info["done"], info["won"], info["action_is_effective"]

        self._reset = jax.jit(jax.vmap(reset_one))
        self._step = jax.jit(jax.vmap(step_one))
        self._state: EnvState | None = None
        self._grids = np.zeros((num_envs, p.dim_room, p.dim_room), np.int8)
        self._dones = np.zeros(num_envs, bool)

    @property
    def num_envs(self) -> int:
        return self._num_envs

    @property
    def state(self) -> EnvState:
        """The batched device state ([N, …] leaves)."""
        if self._state is None:
            raise RuntimeError("call reset() first")
        return self._state

    def reset(self, seeds: Sequence[int]) -> list[Observation]:
        """Start one episode per environment in the room of its seed (0 ≤ seed < 2³²)."""
        seeds = np.asarray(seeds, np.int64)
        if seeds.shape != (self._num_envs,):
            raise ValueError(f"expected {self._num_envs} seeds, got shape {seeds.shape}")
        if seeds.min() < 0 or seeds.max() >= 2**32:
            raise ValueError("seeds must lie in [0, 2**32)")
        self._state, grids = self._reset(jnp.asarray(seeds.astype(np.uint32)))
        self._grids = np.asarray(grids)
        self._dones = np.zeros(self._num_envs, bool)
        return [Observation(text=render_text(g)) for g in self._grids]

    def step(self, actions: Sequence[Any]) -> Step:
        """Apply one action in 0..4 per environment (0 = still/invalid)."""
        actions = np.asarray(actions, np.int64)
        if actions.shape != (self._num_envs,):
            raise ValueError(f"expected {self._num_envs} actions, got shape {actions.shape}")
        out = self._step(self.state, jnp.asarray(actions.astype(np.int32)))
        self._state, grids, rewards, dones, won, effective = out
        self._grids = np.asarray(grids)
        self._dones = np.asarray(dones)
        won, effective = np.asarray(won), np.asarray(effective)
        infos = [
            {"won": bool(w), "action_is_effective": bool(e)}
            for w, e in zip(won, effective, strict=True)
        ]
        return Step(
            observations=[Observation(text=render_text(g)) for g in self._grids],
            rewards=np.asarray(rewards, np.float32),
            dones=self._dones.copy(),
            infos=infos,
        )

    def grids(self) -> np.ndarray:
        """The current grids of cell codes, [N, dim, dim] int8 (host copy)."""
        return self._grids.copy()

    def solved(self) -> np.ndarray:
        """Per environment: all boxes on targets, [N] bool."""
        return np.asarray(jax.vmap(is_solved)(self.state))

    def expert_actions(self) -> list[int]:
        """The BFS solver's next action per environment: the first move of a shortest solution,
        0 (still) for a finished, solved or unsolvable environment."""
        actions = []
        for grid, done in zip(self._grids, self._dones, strict=True):
            plan = None if done else solve(grid)
            actions.append(plan[0] if plan else 0)
        return actions

    def fresh(self) -> SokobanBatch:
        """Another batch of the same size and settings sharing this one's compiled programs,
        with a state of its own (no episode until its ``reset``): what a server hands each of
        its sessions without compiling again (``envs.serving.source``)."""
        other = copy.copy(self)
        other._state = None
        other._grids = np.zeros_like(self._grids)
        other._dones = np.zeros_like(self._dones)
        return other

    def close(self) -> None:
        self._state = None
