"""ALFWorld's prompt format (docs/environments.md §1.4, §1.5).

Both variants list the admissible commands without ``help``, each in single quotes; the
with-history variant shows the task (the text after ``"Your task is to: "`` in the reset
observation), the history window and the raw current observation, the no-history variant the
whole reset text. Responses are projected with :func:`envs.projection.project_text` against the
admissible commands.
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

TASK_MARKER = "Your task is to: "

ALFWORLD_NO_HIS = (
    "\nYou are an expert agent acting in the ALFRED embodied household environment.\n"
    "Your current observation is: {current_observation}\n"
    "Your admissible actions in the current situation are: [{admissible_actions}].\n"
    "\nNow it's your turn to take an action.\n"
    "First reason step by step about the current situation. " + THINK_THEN_ACT
)
ALFWORLD = (
    "\nYou are an expert agent acting in the ALFRED embodied household environment. "
    "Your task is to: {task_description}\n"
    + HISTORY
    + "You are now at step {current_step}, and your current observation is: "
    "{current_observation}\n"
    "Your admissible actions in the current situation are: [{admissible_actions}].\n"
    "\nNow it's your turn to take an action.\n"
    "First reason step by step about the current situation. " + THINK_THEN_ACT
)


def task_after_marker(text: str) -> str | None:
    """The text after ``"Your task is to: "``, stripped (None without the marker)."""
    start = text.find(TASK_MARKER)
    return text[start + len(TASK_MARKER) :].strip() if start >= 0 else None


def alfworld_task(obs: Observation) -> str:
    """The text after ``"Your task is to: "`` in the reset observation, stripped
    (docs/environments.md §1.4)."""
    task = task_after_marker(obs.text)
    if task is not None:
        return task
    if obs.task:
        return obs.task
    raise ValueError(f"ALFWorld reset observation has no {TASK_MARKER!r}: {obs.text[:80]!r}")


def alfworld_actions(admissible: Sequence[str]) -> str:
    """Single-quoted commands without ``help``, joined by ``"\\n "`` (docs/environments.md §1.4)."""
    return quoted_commands([a for a in admissible if a != "help"])


def alfworld_prompt(obs: Observation, task: str, window: HistoryWindow | None) -> str:
    """ALFWorld user message (docs/environments.md §1.4); ``window=None`` selects ``NO_HIS``."""
    actions = alfworld_actions(obs.admissible)
    return admissible_prompt((ALFWORLD, ALFWORLD_NO_HIS), obs, task, window, actions)


def alfworld_project(text: str, obs: Observation) -> Projection:
    """ALFWorld: strict format, action checked against the admissible commands
    (docs/environments.md §1.5)."""
    return project_text(text, obs.admissible)


TASK_TYPES = (
    "pick_and_place",
    "pick_two_obj_and_place",
    "look_at_obj_in_light",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_clean_then_place_in_recep",
)
GAMEFILE_KEYS = ("gamefile", "extra.gamefile")


def game_file(info: Mapping[str, Any]) -> str | None:
    """The game-file path in an info dict (``gamefile``, or TextWorld's ``extra.gamefile``)."""
    for key in GAMEFILE_KEYS:
        value = info.get(key)
        if value:
            return str(value[0] if isinstance(value, list | tuple) else value)
    return None


def task_type(path: str) -> str | None:
    """The first task type that is a substring of ``path`` (so ``pick_and_place`` covers
    ``pick_and_place_simple``)."""
    return next((task for task in TASK_TYPES if task in path), None)


def alfworld_episode_metrics(info: Mapping[str, Any], won: bool) -> dict[str, float]:
    """``<task type>_success_rate``: the episode's success under its game's task type."""
    path = game_file(info)
    task = task_type(path) if path else None
    return {} if task is None else {f"{task}_success_rate": float(won)}


ALFWORLD_FORMAT = TaskFormat(
    "alfworld",
    alfworld_task,
    alfworld_prompt,
    alfworld_project,
    text_memory_action,
    episode_metrics=alfworld_episode_metrics,
)
