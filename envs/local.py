"""In-process batch of Python text environments, and the helpers the worker pool shares with it.

:class:`LocalEnvBatch` runs N :class:`envs.base.TextEnv` one after another in the calling process,
behind the :class:`envs.base.EnvBatch` protocol. It is the reference the pool (``envs.pool``) is
tested against and the cheap choice for fast environments. Exceptions raised by environment code
propagate to the caller here (the pool turns them into failed episodes instead).

Groups (docs/environments.md §1.1): env ``i`` belongs to group ``i // n``; all envs of a group get
the same seed, hence the same task. :func:`grouped_seeds` builds that seed list.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from envs.base import Observation, Step, TextEnv


def grouped_seeds(group_seeds: Sequence[int], group_size: int) -> list[int]:
    """Each group's seed repeated ``group_size`` times, groups in order
    (docs/environments.md §1.1)."""
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    return [int(s) for s in group_seeds for _ in range(group_size)]


def check_length(kind: str, values: Sequence[Any], num_envs: int) -> list[Any]:
    """``values`` as a list, or a one-line ValueError when it does not hold one per env."""
    values = list(values)
    if len(values) != num_envs:
        raise ValueError(f"expected {num_envs} {kind} (one per environment), got {len(values)}")
    return values


def make_step(results: Sequence[tuple[Observation, float, bool, dict[str, Any]]]) -> Step:
    """Stack per-env ``(observation, reward, done, info)`` into a :class:`envs.base.Step`.

    Every info gets a boolean ``won`` (False when the environment did not report one).
    """
    infos = []
    for _, _, _, info in results:
        info = dict(info)
        info["won"] = bool(info.get("won", False))
        infos.append(info)
    return Step(
        observations=[r[0] for r in results],
        rewards=np.asarray([r[1] for r in results], np.float32),
        dones=np.asarray([r[2] for r in results], bool),
        infos=infos,
    )


class LocalEnvBatch:
    """N text environments built by ``factory()``, stepped sequentially in this process."""

    def __init__(self, factory: Callable[[], TextEnv], num_envs: int) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self._envs = [factory() for _ in range(num_envs)]
        self._closed = False

    @property
    def num_envs(self) -> int:
        """Number of environments N."""
        return len(self._envs)

    def reset(self, seeds: Sequence[int]) -> list[Observation]:
        """Start an episode in every environment; equal seeds give the same task."""
        seeds = check_length("seeds", seeds, self.num_envs)
        return [env.reset(int(seed)) for env, seed in zip(self._envs, seeds, strict=True)]

    def step(self, actions: Sequence[Any]) -> Step:
        """Apply one action per environment and stack the results."""
        actions = check_length("actions", actions, self.num_envs)
        return make_step([env.step(a) for env, a in zip(self._envs, actions, strict=True)])

    def close(self) -> None:
        """Close the environments that have a ``close`` method (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for env in self._envs:
            close = getattr(env, "close", None)
            if callable(close):
                close()

    def __enter__(self) -> LocalEnvBatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
