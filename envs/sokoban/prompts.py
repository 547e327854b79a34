"""Sokoban's prompt formats and projection (docs/environments.md §1.4, §1.5).

* ``SOKOBAN_FORMAT`` (the paper's, ``env.prompt: paper``): a symbol legend, the goal and rules,
  the history window, the grid on its own lines and the fixed admissible list.
* ``SOKOBAN_COMPACT_FORMAT`` (``env.prompt: compact``): four short lines for tiny CPU policies;
  not the paper's template.
* :func:`project_sokoban`: the first ``<action>`` … ``</action>`` of the lower-cased response, a
  keyword substring test, and a ``<think>``/``</think>`` presence check.
"""

from __future__ import annotations

import re

from envs.base import Observation
from envs.projection import Projection
from envs.text import HISTORY, THINK_THEN_ACT, HistoryWindow, TaskFormat, history_fields, no_task

# Keywords in test order (the first substring hit wins); "still" is action 0 but valid.
SOKOBAN_KEYWORDS = (("up", 1), ("down", 2), ("left", 3), ("right", 4), ("still", 0))
SOKOBAN_ACTION_NAMES = ("Still", "Up", "Down", "Left", "Right")  # memory words, by action id

_SOKOBAN_HEAD = (
    "\nYou are an expert agent playing in the Sokoban environment.\n"
    "\n# Symbols and Their Meaning\n"
    "- Walls (`#`): block movement; nothing can move through them or be pushed into them.\n"
    "- Floor (`_`): open cells where you can walk and push boxes.\n"
    "- Targets (`O`): the cells where the boxes must end up.\n"
    "- Boxes (`X`): what you have to push onto the targets.\n"
    "- Player (`P`): you; you move around the grid to push boxes.\n"
    "- Box on Target (`√`): a box already placed on a target.\n"
    "- Player on Target (`S`): you, standing on a target.\n"
    "\n# Your Goal\n"
    "Push every box (`X`) onto a target (`O`). You win once all boxes are on targets.\n"
    "\n# Rules\n"
    "You can push boxes but never pull them, so plan ahead to avoid getting stuck.\n"
    "You can neither walk through walls (`#`) nor push boxes into them.\n"
    "Avoid traps: do not push a box into a corner or along a wall where it cannot be moved "
    "again.\n"
    "\n# Current Step\n"
)
_SOKOBAN_TAIL = (
    "{current_observation}\n"
    'Your admissible actions are ["up", "down", "left", "right"].\n'
    "\nNow it's your turn to make a move (choose ONE action only for the current step).\n"
    "First reason step by step about the current situation: locate the boxes and the targets, "
    "plan a path that pushes a box toward a target, and stay clear of corners and walls. "
    + THINK_THEN_ACT
)
SOKOBAN_NO_HIS = _SOKOBAN_HEAD + "Your current observation is:\n" + _SOKOBAN_TAIL
SOKOBAN = (
    _SOKOBAN_HEAD
    + HISTORY
    + "You are now at step {current_step}, and your current observation is:\n"
    + _SOKOBAN_TAIL
)

# A short prompt for tiny CPU policies (not the paper's template: the paper-scale configs use
# SOKOBAN_FORMAT). Same information a policy needs: the step, the legend, the previous action
# (the history window reduced to its last action word) and the grid, one character per cell (the
# spec's ``" # \t"`` cells cost two to three tokens each with a small vocabulary).
SOKOBAN_COMPACT = (
    "Sokoban step {current_step}. Push the box X onto the target O (# wall, _ floor, P you).\n"
    "Last action: {last_action}.\n"
    "{grid}\n"
    "Answer with <action>up|down|left|right</action>."
)
_LAST_ACTION = re.compile(r"Action \d+: '([^']*)'\]$")


def sokoban_prompt(obs: Observation, task: str, window: HistoryWindow | None) -> str:
    """Sokoban text-mode user message (docs/environments.md §1.4): the grid on its own line(s)."""
    if window is None:
        return SOKOBAN_NO_HIS.format(current_observation=obs.text)
    return SOKOBAN.format(current_observation=obs.text, **history_fields(window))


def compact_grid(text: str) -> str:
    """The spec's grid text (cells ``" s \t"``, rows joined by newlines) as one character per
    cell: ``" # \t # \t"`` → ``"##"``."""
    return "\n".join("".join(c.strip() for c in row.split("\t")[:-1]) for row in text.split("\n"))


def sokoban_compact_prompt(obs: Observation, task: str, window: HistoryWindow | None) -> str:
    """The compact Sokoban prompt (see :data:`SOKOBAN_COMPACT`); "none" before the first move."""
    last = _LAST_ACTION.search(window.history) if window is not None else None
    step = window.current_step if window is not None else 1
    return SOKOBAN_COMPACT.format(
        current_step=step,
        last_action=last.group(1) if last else "none",
        grid=compact_grid(obs.text),
    )


def project_sokoban(text: str) -> Projection:
    """Sokoban projection (docs/environments.md §1.5): action id 0..4; the format flag is always 1.

    Missing ``<action>``/``</action>`` (after lower-casing) or no keyword → action 0, invalid. A
    keyword hit is valid unless ``<think>`` or ``</think>`` is missing from the original text
    (case-sensitive); the action is executed either way.
    """
    lowered = text.lower()
    start, end = lowered.find("<action>"), lowered.find("</action>")
    if start < 0 or end < 0:
        return Projection(0, False, True)
    inside = lowered[start + len("<action>") : end].strip()  # empty when </action> comes first
    hit = next((code for word, code in SOKOBAN_KEYWORDS if word in inside), None)
    if hit is None:
        return Projection(0, False, True)
    has_think = "<think>" in text and "</think>" in text
    return Projection(hit, has_think, True)


def sokoban_project(text: str, obs: Observation) -> Projection:
    """Sokoban keyword projection to an action id 0..4 (docs/environments.md §1.5)."""
    return project_sokoban(text)


def sokoban_memory_action(projection: Projection, raw_text: str) -> str:
    """The action's word, capitalised as the original's lookup ("Up", …, "Still" for 0)."""
    return SOKOBAN_ACTION_NAMES[int(projection.action)]


SOKOBAN_FORMAT = TaskFormat(
    "sokoban", no_task, sokoban_prompt, sokoban_project, sokoban_memory_action
)
SOKOBAN_COMPACT_FORMAT = TaskFormat(
    "sokoban_compact", no_task, sokoban_compact_prompt, sokoban_project, sokoban_memory_action
)
