"""The typed models a served environment speaks: pydantic subclasses of OpenEnv's ``Action``,
``Observation`` and ``State`` (docs/environments.md §15.1).

* Actions: Sokoban takes :class:`SokobanAction` (``move``: one of ``still``, ``up``, ``down``,
  ``left``, ``right``), every other environment :class:`TextAction` (``command``: the already
  projected command; for math, the model's whole reply, or null, which ends the episode without
  a turn as the rollout's spent reply budget does, :class:`envs.serving.environment.Served`). A
  client that sends another shape (an
  unknown field, a missing one, a move that is not one of the five) gets OpenEnv's error reply.
* Observations (:class:`ArlarenaObservation`): ``text`` (the raw observation, what the rollout's
  prompt formats build on), ``admissible`` (the admissible commands where the environment has
  them), ``task``, ``won``, ``info`` (the step's whole info: the reward breakdown such as
  ``task_score``, ``action_is_effective``, ``score_delta``), the episode's ``split``, ``index``,
  ``seed`` and ``turn``, and OpenEnv's ``reward`` and ``done``.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

from envs.sokoban.prompts import SOKOBAN_KEYWORDS

MOVES = dict(SOKOBAN_KEYWORDS)  # move name -> Sokoban's action id


class TextAction(Action):
    """One command of a text environment (TextWorld, ALFWorld, WebShop, math)."""

    command: str | None = Field(
        description=(
            "the projected command (math: the model's whole reply); null ends the episode "
            "without a turn where the environment's rollout does so (math: the reply budget is "
            "spent), and is refused elsewhere"
        )
    )

    def batch_action(self) -> str | None:
        """The action as the environment batch takes it."""
        return self.command


class SokobanAction(Action):
    """One Sokoban move."""

    move: Literal["still", "up", "down", "left", "right"] = Field(
        description="the move; still is Sokoban's no-op (what an invalid reply becomes)"
    )

    def batch_action(self) -> int:
        """The action id the Sokoban batch takes (0 still, 1 up, 2 down, 3 left, 4 right)."""
        return MOVES[self.move]


class ArlarenaObservation(Observation):
    """What one turn shows the agent, with the step's reward breakdown."""

    text: str = Field(default="", description="the raw observation (no template, no history)")
    admissible: list[str] = Field(default_factory=list, description="admissible commands")
    task: str = Field(default="", description="the task where the environment has one")
    won: bool = Field(default=False, description="the episode was won at this step")
    info: dict[str, Any] = Field(default_factory=dict, description="the step's info")
    split: str = Field(default="", description="the split of the episode's panel")
    index: int = Field(default=0, description="the episode's index in its panel")
    seed: int = Field(default=0, description="the seed the index stands for")
    turn: int = Field(default=0, description="steps taken in this episode")


class ArlarenaState(State):
    """The session's episode: environment, panel position and progress."""

    env_name: str = ""
    split: str = ""
    index: int = 0
    seed: int = 0
    done: bool = False
    total_reward: float = 0.0


ACTIONS: dict[str, type[Action]] = {"sokoban": SokobanAction}


def action_model(env_name: str) -> type[Action]:
    """The action type of ``env_name`` (Sokoban's moves, else text commands)."""
    return ACTIONS.get(env_name, TextAction)


def jsonable(value: Any) -> Any:
    """``value`` with NumPy scalars and arrays, tuples and odd floats made JSON-ready."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if hasattr(value, "tolist"):  # NumPy and JAX scalars and arrays
        return jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
