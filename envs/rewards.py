"""Reward shaping at the environment boundary: ``env.reward: native | single | dense`` (issue 21;
the practitioner's guide's single vs dense turn-level rewards; docs/environments.md §1.9).

An environment declares what its own reward is (``EnvSpec.native_reward``: ``single``, one
reward on the winning step, or ``dense``, a reward every turn) and, where it has one, an honest
progress signal (``EnvSpec.progress``: the progress a step gained and the episode's maximum, read
from the step's info; TextWorld and ALFWorld report theirs as ``progress`` and ``progress_max``,
:data:`INFO_PROGRESS`). :class:`ShapedRewards` wraps a batch and replaces each step's reward:

* ``single``: ``win_reward`` on the step that wins, else 0 (from a dense environment: Sokoban's
  shaped rewards become its +10 win reward only);
* ``dense``: the progress gained by the step (negative for a step away from the goal). With
  ``normalise`` (meow-tea-taro's option) it is divided by the episode's maximum total progress
  ``G``: the gains telescope, so a won episode's rewards sum to 1 and a lost one's to the
  fraction of ``G`` it covered.

``native`` leaves the environment's reward alone. The rollout stores each step's shaped reward on
its turn row (``TurnBatch.step_rewards``: GiGPO's step level and PPO's GAE across turns read
it) and sums them into ``episode_return``; success reads ``won``, never the reward.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from envs.base import EnvBatch, Observation, Step

MODES = ("native", "single", "dense")


@dataclasses.dataclass(frozen=True)
class Progress:
    """An environment's progress signal: ``gained(info)`` this step, ``maximum(info)`` in all."""

    gained: Callable[[Mapping[str, Any]], float]
    maximum: Callable[[Mapping[str, Any]], float]


# The progress the environment reports in each step's info: ``progress`` (gained by the step) and
# ``progress_max`` (the episode's maximum); TextWorld's and ALFWorld's signal.
INFO_PROGRESS = Progress(
    gained=lambda info: info.get("progress", 0),
    maximum=lambda info: info.get("progress_max", 0),
)


def single_rewards(infos: Sequence[Mapping[str, Any]], win_reward: float) -> np.ndarray:
    """``win_reward`` where the step's info says ``won``, else 0."""
    return np.asarray([win_reward if info.get("won") else 0.0 for info in infos], np.float32)


def dense_rewards(
    infos: Sequence[Mapping[str, Any]], progress: Progress, normalise: bool
) -> np.ndarray:
    """The progress each step gained, divided by the maximum when ``normalise``."""
    out = []
    for info in infos:
        gained = float(progress.gained(info))
        if normalise:
            top = float(progress.maximum(info))
            gained = gained / top if top > 0 else 0.0
        out.append(gained)
    return np.asarray(out, np.float32)


class ShapedRewards:
    """``batch`` with its step rewards replaced (see module doc); finished environments keep
    reward 0. The original reward is kept in each info as ``native_reward``."""

    def __init__(
        self,
        batch: EnvBatch,
        mode: str,
        *,
        win_reward: float,
        progress: Progress | None = None,
        normalise: bool = False,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"reward mode must be one of {', '.join(MODES)}, got {mode!r}")
        if mode == "dense" and progress is None:
            raise ValueError("dense rewards need the environment's progress signal")
        self.batch, self.mode = batch, mode
        self.win_reward, self.progress, self.normalise = win_reward, progress, normalise
        self._done = np.zeros(batch.num_envs, bool)

    @property
    def num_envs(self) -> int:
        return self.batch.num_envs

    def reset(self, seeds: Sequence[int]) -> list[Observation]:
        self._done = np.zeros(self.num_envs, bool)
        return self.batch.reset(seeds)

    def step(self, actions: Sequence[Any]) -> Step:
        step = self.batch.step(actions)
        if self.mode == "native":
            return step
        if self.mode == "single":
            rewards = single_rewards(step.infos, self.win_reward)
        else:
            rewards = dense_rewards(step.infos, self.progress, self.normalise)
        rewards = np.where(self._done, 0.0, rewards).astype(np.float32)
        infos = [
            {**info, "native_reward": float(r)}
            for info, r in zip(step.infos, step.rewards, strict=True)
        ]
        self._done = self._done | np.asarray(step.dones, bool)
        return dataclasses.replace(step, rewards=rewards, infos=infos)

    def close(self) -> None:
        self.batch.close()
