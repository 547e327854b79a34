"""The typed models a served environment speaks: pydantic subclasses of OpenEnv's ``Action``,
``Observation`` and ``State`` (docs/environments.md §15.1).

* Actions: an environment that declares ``moves`` (``EnvSpec.moves``: Sokoban) takes
  :func:`move_action`'s model (``move``: one of its moves by name, for Sokoban ``still``,
  ``up``, ``down``, ``left``, ``right``), every other environment :class:`TextAction`
  (``command``: the already projected command; for math, the model's whole reply, or null,
  which ends the episode without a turn as the rollout's spent reply budget does,
  :class:`envs.serving.environment.Served`). A client that sends another shape (an unknown
  field, a missing one, a move that is not one of the declared) gets OpenEnv's error reply.
* Observations (:class:`ArlarenaObservation`): ``text`` (the raw observation, what the rollout's
  prompt formats build on), ``admissible`` (the admissible commands where the environment has
  them), ``task``, ``won``, ``info`` (the step's whole info: the reward breakdown such as
  ``task_score``, ``action_is_effective``, ``score_delta``), the episode's ``split``, ``index``,
  ``seed`` and ``turn``, and OpenEnv's ``reward`` and ``done``.
"""

from __future__ import annotations

import functools
import math
from typing import Any, ClassVar, Literal

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field, create_model


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


class MoveAction(Action):
    """One move of an environment whose step takes an action index (:func:`move_action`)."""

    moves: ClassVar[tuple[str, ...]] = ()  # the declared moves, by index

    def batch_action(self) -> int:
        """The action index the environment batch takes (the move's place in ``moves``)."""
        return self.moves.index(self.move)  # type: ignore[attr-defined]


@functools.cache
def move_action(env_name: str, moves: tuple[str, ...]) -> type[MoveAction]:
    """The action model of ``env_name``, whose moves are ``moves`` by index (``EnvSpec.moves``;
    index 0 the no-op an invalid reply becomes): ``{"move": name}``, named ``<Env>Action``."""
    described = Field(description=f"the move; {moves[0]} is the no-op (an invalid reply)")
    model = create_model(
        f"{env_name.title()}Action", __base__=MoveAction, move=(Literal[moves], described)
    )
    model.moves = moves
    return model


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


def action_model(env_name: str, moves: tuple[str, ...] = ()) -> type[Action]:
    """The action type of ``env_name``: its declared ``moves`` (:func:`move_action`), else text
    commands."""
    return move_action(env_name, moves) if moves else TextAction


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
