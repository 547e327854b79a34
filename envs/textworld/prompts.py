"""TextWorld's prompt format, ALFWorld's shape (docs/environments.md §1.4, §1.5, §10.4).

The admissible commands are listed one per line in single quotes; the with-history variant shows
the task (the game's objective), the history window and the current observation, the no-history
variant the current observation alone (at reset it holds the objective). Responses are projected
with :func:`envs.projection.project_text` against the admissible commands.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from envs.base import Observation
from envs.projection import Projection, project_text
from envs.text import (
    HISTORY,
    THINK_THEN_ACT,
    HistoryWindow,
    TaskFormat,
    admissible_prompt,
    quoted_commands,
    text_memory_action,
)

TEXTWORLD_NO_HIS = (
    "\nYou are an expert agent playing a TextWorld text adventure game.\n"
    "Your current observation is: {current_observation}\n"
    "Your admissible actions in the current situation are: [{admissible_actions}].\n"
    "\nNow it's your turn to take an action.\n"
    "First reason step by step about the current situation. " + THINK_THEN_ACT
)
TEXTWORLD = (
    "\nYou are an expert agent playing a TextWorld text adventure game. "
    "Your task is to: {task_description}\n"
    + HISTORY
    + "You are now at step {current_step}, and your current observation is: "
    "{current_observation}\n"
    "Your admissible actions in the current situation are: [{admissible_actions}].\n"
    "\nNow it's your turn to take an action.\n"
    "First reason step by step about the current situation. " + THINK_THEN_ACT
)


def textworld_task(obs: Observation) -> str:
    """The game's objective (the environment puts it in ``Observation.task``)."""
    if not obs.task:
        raise ValueError(f"TextWorld reset observation has no objective: {obs.text[:80]!r}")
    return obs.task


def textworld_actions(admissible: Sequence[str]) -> str:
    """Single-quoted commands joined by ``"\\n "``."""
    return quoted_commands(admissible)


def textworld_prompt(obs: Observation, task: str, window: HistoryWindow | None) -> str:
    """TextWorld user message; ``window=None`` selects ``TEXTWORLD_NO_HIS``."""
    actions = textworld_actions(obs.admissible)
    return admissible_prompt((TEXTWORLD, TEXTWORLD_NO_HIS), obs, task, window, actions)


def textworld_project(text: str, obs: Observation) -> Projection:
    """Strict format, the action checked against the admissible commands."""
    return project_text(text, obs.admissible)


def textworld_episode_metrics(info: Mapping[str, Any], won: bool) -> dict[str, float]:
    """``textworld_score_ratio``: the points reached over the game's maximum."""
    top = info.get("max_score") or 0
    return {"textworld_score_ratio": float(info.get("score", 0)) / top} if top else {}


TEXTWORLD_FORMAT = TaskFormat(
    "textworld",
    textworld_task,
    textworld_prompt,
    textworld_project,
    text_memory_action,
    episode_metrics=textworld_episode_metrics,
)
