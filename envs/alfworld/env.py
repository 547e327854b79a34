"""One ALFWorld game at a time on the real TextWorld engine (docs/environments.md §4.1, §4.4, §4.5).

:class:`AlfworldEnv` is a :class:`envs.base.TextEnv`: the host pool (``envs.pool``) or
``envs.local.LocalEnvBatch`` runs N of them, each built by a picklable :class:`AlfworldFactory`.

* ``reset(seed)`` plays ``play_order(games)[seed % len(games)]``: equal seeds give the same game
  (a GRPO group shares its task) and ``len(games)`` consecutive seeds play every game once. The
  order is a fixed shuffle (by a hash of each game's task folder and trial names, the same on
  every machine), so any window of consecutive seeds mixes the task types. The engine is textworld's
  ``PddlEnv`` behind ``AlfredDemangler(shuffle=False)`` and ``AlfredInfos``, as ARLArena builds it.
* Observation: the raw TextWorld text (at reset the whole intro, which holds "Your task is to:
  …"), the admissible commands (sorted, ``help`` included; the prompt drops it) and the task.
* ``step(command)``: any string is a command; one the game cannot apply answers "Nothing
  happens." and still uses a step. Reward 10 on the winning step, else 0
  (docs/environments.md §4.5). The episode ends when won or after ``max_steps`` steps (50,
  docs/environments.md §4.5); stepping an ended episode returns the last observation, reward 0 and
  ``done`` again.
* ``info``: ``won``, ``gamefile`` (per-task success reads it, docs/environments.md §4.7),
  ``task_type``, and the goal's progress (``envs.alfworld.progress``): ``goal_conditions`` (the
  state conditions the goal asks for), ``goal_satisfied`` (how many the state meets now),
  ``progress`` (``goal_satisfied`` after the step minus before it, negative when a condition is
  undone) and ``progress_max`` (``goal_conditions`` minus ``goal_satisfied`` at the reset, so a
  won episode's ``progress`` sums to it); ``env.reward: dense`` reads the last two
  (docs/environments.md §1.9).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from envs.alfworld import progress
from envs.alfworld.data import task_type_of
from envs.alfworld.engine import play_env
from envs.alfworld.prompts import task_after_marker
from envs.base import Observation

WIN_REWARD = 10.0
MAX_STEPS = 50


def play_order(games: Iterable[str | Path]) -> tuple[str, ...]:
    """The games in the order seeds index them (see module doc)."""

    def key(game: str) -> tuple[str, str]:
        name = "/".join(Path(game).parts[-3:-1])  # <task folder>/<trial>
        return hashlib.sha256(name.encode()).hexdigest(), game

    return tuple(sorted((str(g) for g in games), key=key))


@dataclasses.dataclass(frozen=True)
class AlfworldFactory:
    """Builds an :class:`AlfworldEnv` over ``games`` (picklable: pool workers call it)."""

    games: tuple[str, ...]
    max_steps: int = MAX_STEPS

    def __call__(self) -> AlfworldEnv:
        return AlfworldEnv(self.games, max_steps=self.max_steps)


class AlfworldEnv:
    """ALFWorld through textworld's PDDL engine (see module doc)."""

    def __init__(self, games: tuple[str, ...] | list[str], *, max_steps: int = MAX_STEPS) -> None:
        if not games:
            raise ValueError("AlfworldEnv needs at least one game file")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.games = play_order(games)
        self.max_steps = max_steps
        self._engine = play_env()
        self._game: str | None = None
        self._obs = Observation("")
        self._steps = 0
        self._done = True
        self._won = False
        self._goals: dict[str, progress.Node] = {}  # the goal of each game played, parsed once
        self._goal = {"goal_conditions": 0, "goal_satisfied": 0, "progress": 0, "progress_max": 0}

    def game_for(self, seed: int) -> str:
        """The game file that ``reset(seed)`` plays: ``play_order(games)[seed % len(games)]``."""
        return self.games[int(seed) % len(self.games)]

    def _observation(self, state: Any, task: str) -> Observation:
        return Observation(
            text=state.feedback, admissible=tuple(state["admissible_commands"]), task=task
        )

    def _info(self) -> dict[str, Any]:
        info = {"won": self._won, "gamefile": self._game, "task_type": task_type_of(self._game)}
        return {**info, **self._goal}

    def _track_goal(self, state: Any, reset: bool) -> None:
        """The goal's progress entries of the info (module doc) for ``state``."""
        goal = self._goals.get(self._game)
        if goal is None:
            with open(self._game) as f:
                goal = progress.goal_of(json.load(f)["pddl_problem"])
            self._goals[self._game] = goal
        now = progress.satisfied(goal, progress.world(state["_facts"]))
        conditions = progress.conditions(goal)
        before = now if reset else self._goal["goal_satisfied"]
        top = conditions - now if reset else self._goal["progress_max"]
        self._goal = {
            "goal_conditions": conditions,
            "goal_satisfied": now,
            "progress": now - before,
            "progress_max": top,
        }

    def reset(self, seed: int) -> Observation:
        """Start ``game_for(seed)`` from its initial state."""
        game = self.game_for(seed)
        if not Path(game).is_file():
            raise FileNotFoundError(f"ALFWorld game file not found: {game}")
        self._engine.load(game)
        self._game = game
        state = self._engine.reset()
        self._obs = self._observation(state, task_after_marker(state.feedback) or "")
        self._steps, self._done, self._won = 0, False, False
        self._track_goal(state, reset=True)
        return self._obs

    def step(self, action: Any) -> tuple[Observation, float, bool, dict[str, Any]]:
        """Apply one command (see module doc)."""
        if self._done:
            return self._obs, 0.0, True, {**self._info(), "progress": 0}
        state, _, engine_done = self._engine.step(str(action))
        self._track_goal(state, reset=False)
        self._steps += 1
        self._won = bool(state["won"])
        self._done = self._won or bool(engine_done) or self._steps >= self.max_steps
        self._obs = self._observation(state, self._obs.task)
        return self._obs, WIN_REWARD if self._won else 0.0, self._done, self._info()

    def close(self) -> None:
        """Release the engine."""
        close = getattr(self._engine, "close", None)
        if callable(close):
            close()
