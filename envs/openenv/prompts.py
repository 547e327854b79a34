"""The prompt format of any OpenEnv environment (``env.prompt: paper``; docs/environments.md,
§15.2).

The observation text is what :mod:`envs.openenv.render` makes of the server's observation (one
declared field, or every field as sorted JSON); the task is ``env.openenv.instructions``; the
admissible actions, where ``env.openenv.admissible_field`` names them, are listed in single
quotes and a strictly formatted action is valid only when it is one of them. Responses are
projected with :func:`envs.projection.project_text`: the text inside ``<action>…</action>`` is
what the server receives, lower-cased as every text environment's action is.
"""

from __future__ import annotations

from envs.base import Observation
from envs.projection import Projection, project_text
from envs.text import (
    HISTORY,
    THINK_THEN_ACT,
    HistoryWindow,
    TaskFormat,
    history_fields,
    quoted_commands,
    text_memory_action,
)

GENERIC_INTRO = "\nYou are an expert agent acting in an environment. Your task is to: {task}\n"
GENERIC_NO_HIS = (
    GENERIC_INTRO + "Your current observation is: {current_observation}\n{actions}"
    "\nNow it's your turn to take an action.\n"
    "First reason step by step about the current situation. " + THINK_THEN_ACT
)
GENERIC = (
    GENERIC_INTRO + HISTORY + "You are now at step {current_step}, and your current observation "
    "is: {current_observation}\n{actions}"
    "\nNow it's your turn to take an action.\n"
    "First reason step by step about the current situation. " + THINK_THEN_ACT
)
NO_TASK = "act well: the environment's rewards say how well"


def openenv_task(obs: Observation) -> str:
    """``env.openenv.instructions`` (the environment puts it in ``Observation.task``)."""
    return obs.task or NO_TASK


def actions_block(obs: Observation) -> str:
    """The admissible actions line, or nothing when the environment declares none."""
    if not obs.admissible:
        return ""
    listed = quoted_commands(obs.admissible)
    return f"Your admissible actions in the current situation are: [{listed}].\n"


def openenv_prompt(obs: Observation, task: str, window: HistoryWindow | None) -> str:
    """The user message; ``window=None`` selects ``GENERIC_NO_HIS``."""
    fields = dict(task=task, current_observation=obs.text, actions=actions_block(obs))
    if window is None:
        return GENERIC_NO_HIS.format(**fields)
    return GENERIC.format(**fields, **history_fields(window))


def openenv_project(text: str, obs: Observation) -> Projection:
    """Strict format; checked against the admissible actions where there are any."""
    return project_text(text, obs.admissible or None)


OPENENV_FORMAT = TaskFormat(
    "openenv", openenv_task, openenv_prompt, openenv_project, text_memory_action
)
