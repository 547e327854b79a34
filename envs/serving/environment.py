"""The OpenEnv ``Environment`` adapter: one per session, over a one-environment batch.

``reset(split=..., index=...)`` plays episode ``index`` of the split's panel
(:mod:`envs.serving.panels`); ``seed`` alone is read as the index (so a client that only sends
OpenEnv's ``seed`` still plays the panel); neither: the index after this session's last one,
from 0. ``step(action)`` applies the action to the session's own batch and returns the batch's
reward, done and info unchanged: the same numbers as stepping the batch in-process. After its
session is reclaimed (idle timeout) or the server stops, the environment answers every call with
an error naming why.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata

from envs import base
from envs.base import EnvBatch
from envs.serving.models import ArlarenaObservation, ArlarenaState, jsonable
from envs.serving.panels import BLOCK_SIZE, Panels
from envs.serving.source import BatchSource


@dataclasses.dataclass(frozen=True)
class Served:
    """What every session of one server shares."""

    name: str  # the registered environment
    split: str  # the split a reset without one plays
    splits: tuple[str, ...]  # the splits the environment declares
    panels: Panels
    source: BatchSource
    idle_timeout: float | None  # seconds (None: sessions are never reclaimed)
    # the declared moves (EnvSpec.moves), taken by index; empty: text commands
    moves: tuple[str, ...] = ()
    # the action None ends an episode without a turn: declared by environments with one row per
    # episode, whose rollout sends None once an episode's reply budget is spent (math)
    takes_none: bool = False


class ServedEnvironment(Environment[Action, ArlarenaObservation, ArlarenaState]):
    """One session's environment (see module doc)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, served: Served) -> None:
        super().__init__()
        self._served = served
        self._batch: EnvBatch | None = None
        self._batch_split = ""
        self._next_index = 0
        self._closed = False
        self._state = ArlarenaState(env_name=served.name, split=served.split)

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        split: str | None = None,
        index: int | None = None,
        **kwargs: Any,
    ) -> ArlarenaObservation:
        """Start episode ``index`` (else ``seed``, else the next) of ``split``'s panel."""
        self._check_open()
        if kwargs:
            raise ValueError(f"unknown reset argument(s): {', '.join(sorted(kwargs))}")
        split = self._served.split if split is None else split
        if split not in self._served.splits:
            raise ValueError(f"split must be one of {', '.join(self._served.splits)}")
        index = index if index is not None else seed if seed is not None else self._next_index
        episode_seed = self._served.panels.seed(split, index)
        observation = self._batch_of(split).reset([episode_seed])[0]
        self._next_index = index + 1
        self._state = ArlarenaState(
            episode_id=episode_id or f"{self._served.name}/{split}/{index}",
            env_name=self._served.name,
            split=split,
            index=index,
            seed=episode_seed,
        )
        return self._observation(observation, None, False, {"won": False})

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Any:
        """Apply ``action`` to the session's environment (the batch's own reward and info)."""
        self._check_open()
        if self._batch is None:
            raise RuntimeError("step before reset: reset the session first")
        taken = action.batch_action()  # type: ignore[attr-defined]
        if taken is None and not self._served.takes_none:
            raise ValueError(
                f"command: null ends an episode only where the rollout ends one without a turn "
                f"(math); {self._served.name} needs a command"
            )
        out = self._batch.step([taken])
        reward, done = float(out.rewards[0]), bool(out.dones[0])
        state = self._state
        state.step_count += 1
        state.done = done
        state.total_reward += reward
        return self._observation(out.observations[0], reward, done, out.infos[0])

    @property
    def state(self) -> ArlarenaState:
        """The session's episode."""
        return self._state

    def close(self) -> None:
        """Give the batch back to the server's source; later calls answer with an error."""
        if self._closed:
            return
        self._closed = True
        if self._batch is not None:
            self._served.source.give_back(self._batch_split, self._batch)
            self._batch = None

    def get_metadata(self) -> EnvironmentMetadata:
        """The environment's name and what a reset plays."""
        return EnvironmentMetadata(
            name=f"arlarena-{self._served.name}",
            description=(
                f"arlarena-jax's {self._served.name} environment; reset(split, index) plays "
                f"episode index of the split's panel (default split {self._served.split})"
            ),
            version="1.0.0",
        )

    def list_splits(self) -> list[str]:
        """The splits a reset may name (OpenEnv's task API)."""
        return list(self._served.splits)

    def num_tasks(self, split: str) -> int:
        """Episodes in a split's panel (OpenEnv's task API)."""
        self._served.panels.seed(split, 0)
        return BLOCK_SIZE - self._served.panels.offset

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        """Episode ``index`` of ``split``'s panel: its seed (OpenEnv's task API)."""
        try:
            seed = self._served.panels.seed(split, index)
        except ValueError as error:
            raise IndexError(str(error)) from None
        return {"id": f"{split}-{index}", "split": split, "index": index, "seed": seed}

    def _check_open(self) -> None:
        if self._closed:
            timeout = self._served.idle_timeout
            idle = f"idle for more than {timeout:g} s" if timeout else "idle"
            raise RuntimeError(
                f"this session's environment was reclaimed ({idle}, or the server is "
                "stopping); open a new session"
            )

    def _batch_of(self, split: str) -> EnvBatch:
        """The session's batch, for ``split`` (taken from the source at the first reset)."""
        if self._batch is not None and self._batch_split != split:
            self._served.source.give_back(self._batch_split, self._batch)
            self._batch = None
        if self._batch is None:
            self._batch = self._served.source.take(split)
            self._batch_split = split
        return self._batch

    def _observation(
        self, obs: base.Observation, reward: float | None, done: bool, info: dict[str, Any]
    ) -> ArlarenaObservation:
        state = self._state
        return ArlarenaObservation(
            text=obs.text,
            admissible=list(obs.admissible),
            task=obs.task,
            won=bool(info.get("won", False)),
            info=jsonable(info),
            split=state.split,
            index=state.index,
            seed=state.seed,
            turn=state.step_count,
            reward=reward,
            done=done,
        )
