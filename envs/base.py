"""The one interface the rollout sees, for JAX-native and pooled Python environments alike.

An :class:`EnvBatch` holds N environments. ``reset(seeds)`` starts one episode per environment
(environments given equal seeds play the same task: that is how a GRPO group shares a task);
``step(actions)`` applies one already-projected action per environment. Observations are text; the
rollout builds prompts from them and keeps the raw text as the GiGPO anchor
(docs/environments.md §1.3).
Stepping an environment whose episode has ended is allowed and changes nothing that is read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np


@dataclasses.dataclass(frozen=True)
class Observation:
    """What one environment shows the agent at one turn."""

    text: str  # the raw observation (no template, no history): the anchor
    admissible: tuple[str, ...] = ()  # admissible commands where the env has them (ALFWorld)
    task: str = ""  # task description where the env has one (ALFWorld, WebShop)


@dataclasses.dataclass(frozen=True)
class Step:
    """The outcome of one batched step: per environment observation, reward, done and info.

    ``infos[i]`` always holds ``won`` (bool); environments add their own keys
    (``action_is_effective``, ``task_score``, ``failure`` for a worker that crashed or hung).
    """

    observations: list[Observation]
    rewards: np.ndarray  # [N] float32
    dones: np.ndarray  # [N] bool
    infos: list[dict[str, Any]]


class EnvBatch(Protocol):
    """N environments behind batched reset and step (see module doc)."""

    @property
    def num_envs(self) -> int: ...

    def reset(self, seeds: Sequence[int]) -> list[Observation]: ...

    def step(self, actions: Sequence[Any]) -> Step: ...

    def close(self) -> None: ...


class TextEnv(Protocol):
    """One Python environment, as a worker of the host pool runs it."""

    def reset(self, seed: int) -> Observation: ...

    def step(self, action: Any) -> tuple[Observation, float, bool, dict[str, Any]]: ...
