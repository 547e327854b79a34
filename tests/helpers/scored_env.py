"""A one-number text environment with injected faults, for the failed-rollout tests (spawned
pool workers import it; it imports nothing heavy).

The action is a string: a number ``k`` ends the episode with reward ``k`` (won iff k > 0);
``wait`` gives reward 0 and goes on; ``crash`` kills the worker process, ``hang`` sleeps far past
any test timeout and ``raise`` raises ValueError (the pool ends that episode as a failure).
Observations are ``task <seed> turn <t>``, so equal seeds share anchors turn by turn.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from envs.base import Observation
from envs.projection import Projection
from envs.text import Generation, TaskFormat


class ScoredEnv:
    """See module doc."""

    def reset(self, seed: int) -> Observation:
        self.seed, self.turn, self.done = int(seed), 0, False
        return Observation(text=f"task {self.seed} turn 0")

    def step(self, action: Any) -> tuple[Observation, float, bool, dict[str, Any]]:
        if self.done:  # the rollout still steps finished environments
            return Observation(text=f"task {self.seed} turn {self.turn}"), 0.0, True, {}
        if action == "crash":
            os._exit(1)
        if action == "hang":
            time.sleep(600)
        if action == "raise":
            raise ValueError("boom")
        self.turn += 1
        obs = Observation(text=f"task {self.seed} turn {self.turn}")
        if action == "wait":
            return obs, 0.0, False, {"won": False}
        reward, self.done = float(action), True
        return obs, reward, True, {"won": reward > 0}


SCORED_FORMAT = TaskFormat(
    name="scored",
    extract_task=lambda obs: obs.text,
    build_prompt=lambda obs, task, window: obs.text,
    project=lambda text, obs: Projection(text.strip(), True, True),
    memory_action=lambda projection, text: text,
)


class ScriptPolicy:
    """Plays ``script[k]`` at its k-th call (one text per prompt, in the order given: the
    running environments by index); each response is two tokens with fixed log-probs."""

    def __init__(self, script: Sequence[Sequence[str]]) -> None:
        self.script, self.calls = [list(texts) for texts in script], 0

    def __call__(self, prompts: list[str], *, training: bool, seeds=None) -> list[Generation]:
        texts = self.script[self.calls]
        self.calls += 1
        if len(texts) != len(prompts):
            raise ValueError(
                f"script call {self.calls}: {len(texts)} texts, {len(prompts)} prompts"
            )
        return [Generation(t, (1, 2), (5, 6), (-0.5, -0.75)) for t in texts]
