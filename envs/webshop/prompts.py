"""WebShop's prompt format (docs/environments.md §1.4, §1.5), ready for the environment to come.

The available actions are ``'<action>',`` lines in brackets; a with-history prompt longer than
13,000 characters falls back to the no-history variant. Responses are projected with
:func:`envs.projection.project_text` without an admissible list (a strictly formatted action is
always valid).
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
    history_fields,
    text_memory_action,
)

WEBSHOP_MAX_PROMPT_CHARS = 13_000  # a longer with-history WebShop prompt falls back to NO_HIS

_WEBSHOP_HEAD = (
    "\nYou are an expert autonomous agent shopping in the WebShop e\u2011commerce environment.\n"
    "Your task is to: {task_description}.\n"
)
_WEBSHOP_TAIL = (
    "Your admissible actions in the current situation are:\n[\n{available_actions}\n].\n"
    "\nNow it's your turn to take one action for the current step.\n"
    "First reason step by step about the current situation, then weigh which admissible action "
    "moves you closest to the shopping goal. " + THINK_THEN_ACT
)
WEBSHOP_NO_HIS = (
    _WEBSHOP_HEAD + "Your current observation is: {current_observation}.\n" + _WEBSHOP_TAIL
)
WEBSHOP = (
    _WEBSHOP_HEAD
    + HISTORY
    + "You are now at step {current_step}, and your current observation is: "
    "{current_observation}.\n" + _WEBSHOP_TAIL
)


def webshop_task(obs: Observation) -> str:
    """The instruction: ``obs.task``, else ``parts[2]`` of a raw page whose ``parts[1]`` is
    ``"Instruction:"``, else ``""``."""
    if obs.task:
        return obs.task
    parts = obs.text.split(" [SEP] ")
    return parts[2] if len(parts) > 2 and parts[1] == "Instruction:" else ""


def webshop_actions(admissible: Sequence[str]) -> str:
    """One ``'<action>',`` line per available action (docs/environments.md §1.4)."""
    return "\n".join(f"'{a}'," for a in admissible)


def webshop_prompt(obs: Observation, task: str, window: HistoryWindow | None) -> str:
    """WebShop user message (docs/environments.md §1.4); falls back to ``NO_HIS`` past 13,000
    characters."""
    fields = dict(
        task_description=task,
        current_observation=obs.text,
        available_actions=webshop_actions(obs.admissible),
    )
    if window is not None:
        prompt = WEBSHOP.format(**fields, **history_fields(window))
        if len(prompt) <= WEBSHOP_MAX_PROMPT_CHARS:
            return prompt
    return WEBSHOP_NO_HIS.format(**fields)


def webshop_project(text: str, obs: Observation) -> Projection:
    """WebShop: strict format; a strictly formatted action is always valid
    (docs/environments.md §1.5)."""
    return project_text(text, None)


SCORE_KEY = "webshop_task_score (not success_rate)"


PURCHASE_PARTS = ("r_type", "r_att", "r_option", "r_price", "title_score")


def webshop_episode_metrics(info: Mapping[str, Any], won: bool) -> dict[str, float]:
    """The final task score (0 unless something was bought), the purchase rate, and the score's
    parts of the episodes that bought (``purchase/<part>``, averaged over those episodes only:
    the original's ``rollout/r_type`` etc., docs/environments.md §6.7)."""
    if "task_score" not in info:
        return {}
    metrics = {SCORE_KEY: float(info["task_score"]), "purchase_rate": float("asin" in info)}
    metrics.update({f"purchase/{k}": float(info[k]) for k in PURCHASE_PARTS if k in info})
    return metrics


WEBSHOP_FORMAT = TaskFormat(
    "webshop",
    webshop_task,
    webshop_prompt,
    webshop_project,
    text_memory_action,
    episode_metrics=webshop_episode_metrics,
)
