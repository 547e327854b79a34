"""A Sokoban text env with injected faults, for the pool tests (spawned workers import it).

Actions 0..4 behave as in ``SokobanTextEnv``; ``CRASH`` kills the worker process, ``HANG`` sleeps
far past any test timeout, ``RAISE`` raises ValueError, ``SLOW`` sleeps ``SLOW_S`` seconds and then
acts as action 1 (a late reply that still comes). ``reset(RAISE_SEED)`` raises too.
"""

from __future__ import annotations

import os
import time
from typing import Any

from envs.base import Observation
from envs.sokoban.reference import SokobanTextEnv

CRASH, HANG, RAISE, SLOW = 7, 8, 9, 10
SLOW_S = 0.6
RAISE_SEED = 666


class FaultyEnv(SokobanTextEnv):
    """``SokobanTextEnv`` plus the magic actions and seed above."""

    def reset(self, seed: int) -> Observation:
        """As the parent, but ``RAISE_SEED`` raises RuntimeError."""
        if seed == RAISE_SEED:
            raise RuntimeError(f"cannot reset with seed {seed}")
        return super().reset(seed)

    def step(self, action: Any) -> tuple[Observation, float, bool, dict[str, Any]]:
        """As the parent, but the magic actions crash, hang or raise."""
        if action == CRASH:
            os._exit(1)
        if action == HANG:
            time.sleep(600)
        if action == RAISE:
            raise ValueError("boom")
        if action == SLOW:
            time.sleep(SLOW_S)
            action = 1
        return super().step(action)


class BrokenFactory:
    """A picklable factory that always fails: the pool's start-up error path."""

    def __call__(self) -> SokobanTextEnv:
        raise OSError("no such engine")
