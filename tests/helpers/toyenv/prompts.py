"""The prompt format: the card, the answer format, and the projection of a reply to an action."""

from __future__ import annotations

from envs.base import Observation
from envs.projection import Projection, project_text
from envs.text import HistoryWindow, TaskFormat, no_task, text_memory_action


def guess_prompt(obs: Observation, task: str, window: HistoryWindow | None) -> str:
    return f"{obs.text} Answer with <think>...</think><action>the number</action>."


def guess_project(text: str, obs: Observation) -> Projection:
    return project_text(text, [str(n) for n in range(10)])


GUESS_FORMAT = TaskFormat("guess", no_task, guess_prompt, guess_project, text_memory_action)
