"""One TextWorld game at a time on the real engine (docs/environments.md §10.3).

:class:`TextworldEnv` is a :class:`envs.base.TextEnv`: the host pool (``envs.pool``) or
``envs.local.LocalEnvBatch`` runs N of them, each built by a picklable :class:`TextworldFactory`.

* ``reset(seed)`` plays ``games[seed % len(games)]`` (the split's games in their seed order):
  equal seeds give the same game, so a GRPO group shares its task.
* Observation: the game's text (``engine.clean``: no banner, no prompt line; at reset the
  objective and the first room), the admissible commands (sorted, as the engine gives them) and
  the task, the game's objective text.
* ``step(command)``: an admissible command (compared case- and whitespace-insensitively) is
  played on the engine; any other string uses a step, changes nothing and is answered
  :data:`NOT_ADMISSIBLE` without reaching the interpreter, whose meta commands (``save``,
  ``restore``, ``script``, ``quit``, ...) would write files into the working directory, read the
  next command as a file name or end the game. Reward ``win_reward`` on the winning step, else 0
  (the single end-of-episode reward, as ALFWorld's, docs/environments.md §4.5). The episode ends
  when won or lost or after ``max_steps`` steps; stepping an ended episode returns the last
  observation, reward 0 and ``done`` again.
* ``info``: ``won``, ``lost``, ``score`` and ``max_score`` (the engine's points),
  ``score_delta`` (points gained by this step), ``quest_remaining`` (the commands of the engine's
  winning policy still to play: ``policy_commands``, 0 once won; where the engine has none, a
  lost or unwinnable game, it keeps its last value), ``quest_length`` (``quest_remaining`` at the
  reset), ``quest_progress`` (``quest_remaining`` before the step minus after it: negative for a
  step away from the goal), ``progress`` and ``progress_max`` (the gain and the episode's maximum
  of the signal ``progress`` names, ``quest``: quest_progress over quest_length, ``score``:
  score_delta over max_score; what ``env.reward: dense`` reads, docs/environments.md §1.9) and
  ``gamefile``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from envs.base import Observation
from envs.textworld.engine import clean, quiet, start

WIN_REWARD = 10.0
MAX_STEPS = 12  # meow-tea-taro's max_iter for w2-o3-q4
PROGRESS_SIGNALS = ("quest", "score")  # env.textworld.progress: what info["progress"] measures
NOT_ADMISSIBLE = "Nothing happens."  # the answer to a command that is not admissible


def _canonical(command: str) -> str:
    return " ".join(command.lower().split())


def remaining(state: Any, previous: int) -> int:
    """The winning policy's commands still to play: 0 once won, else the engine's
    ``policy_commands``; where it has none (a lost or unwinnable game) ``previous``."""
    if state["won"]:
        return 0
    policy = state["policy_commands"]
    return len(policy) if policy else previous


@dataclasses.dataclass(frozen=True)
class TextworldFactory:
    """Builds a :class:`TextworldEnv` over ``games`` (picklable: pool workers call it)."""

    games: tuple[str, ...]
    max_steps: int = MAX_STEPS
    win_reward: float = WIN_REWARD
    progress: str = "quest"

    def __call__(self) -> TextworldEnv:
        return TextworldEnv(
            self.games,
            max_steps=self.max_steps,
            win_reward=self.win_reward,
            progress=self.progress,
        )


class TextworldEnv:
    """A generated TextWorld game through ``textworld.start`` (see module doc)."""

    def __init__(
        self,
        games: tuple[str, ...] | list[str],
        *,
        max_steps: int = MAX_STEPS,
        win_reward: float = WIN_REWARD,
        progress: str = "quest",
    ) -> None:
        if not games:
            raise ValueError("TextworldEnv needs at least one game file")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if progress not in PROGRESS_SIGNALS:
            raise ValueError(
                f"progress must be one of {', '.join(PROGRESS_SIGNALS)}, got {progress!r}"
            )
        self.games = tuple(str(g) for g in games)
        self.max_steps = max_steps
        self.win_reward = float(win_reward)
        self.progress = progress
        self._engine: Any = None
        self._game: str | None = None
        self._obs = Observation("")
        self._info: dict[str, Any] = {}
        self._steps, self._done = 0, True

    def game_for(self, seed: int) -> str:
        """The game file ``reset(seed)`` plays: ``games[seed % len(games)]``."""
        return self.games[int(seed) % len(self.games)]

    def _update(self, state: Any, reset: bool) -> None:
        """The observation and the info (module doc) after a reset or a step."""
        self._obs = Observation(
            text=clean(state.feedback),
            admissible=tuple(state["admissible_commands"] or ()),
            task=str(state["objective"] or "").strip(),
        )
        before = {"score": 0, "quest_remaining": 0} if reset else self._info
        left = remaining(state, before["quest_remaining"])
        length = left if reset else self._info["quest_length"]
        score, max_score = int(state["score"]), int(state["max_score"])
        self._info = {
            "won": bool(state["won"]),
            "lost": bool(state["lost"]),
            "score": score,
            "max_score": max_score,
            "score_delta": 0 if reset else score - before["score"],
            "quest_remaining": left,
            "quest_length": length,
            "quest_progress": 0 if reset else before["quest_remaining"] - left,
            "gamefile": self._game,
        }
        quest = self.progress == "quest"
        self._info["progress"] = self._info["quest_progress" if quest else "score_delta"]
        self._info["progress_max"] = length if quest else max_score

    def reset(self, seed: int) -> Observation:
        """Start ``game_for(seed)`` from its initial state."""
        game = self.game_for(seed)
        if not Path(game).is_file():
            raise FileNotFoundError(f"TextWorld game file not found: {game}")
        if game != self._game:
            self.close()
            self._engine, self._game = start(game), game
        with quiet():
            self._update(self._engine.reset(), reset=True)
        self._steps, self._done = 0, False
        return self._obs

    def step(self, action: Any) -> tuple[Observation, float, bool, dict[str, Any]]:
        """Apply one command (see module doc)."""
        if self._done:
            ended = {"score_delta": 0, "quest_progress": 0, "progress": 0}
            return self._obs, 0.0, True, {**self._info, **ended}
        admissible = {_canonical(c): c for c in self._obs.admissible}
        command = admissible.get(_canonical(str(action)))
        if command is None:
            return self._refuse()
        with quiet():
            state, _, engine_done = self._engine.step(command)
        self._update(state, reset=False)
        self._steps += 1
        won = self._info["won"]
        self._done = won or self._info["lost"] or bool(engine_done)
        self._done = self._done or self._steps >= self.max_steps
        return self._obs, self.win_reward if won else 0.0, self._done, dict(self._info)

    def _refuse(self) -> tuple[Observation, float, bool, dict[str, Any]]:
        """A step that is not played: the same state, :data:`NOT_ADMISSIBLE`, no progress."""
        self._steps += 1
        self._done = self._steps >= self.max_steps
        self._obs = dataclasses.replace(self._obs, text=NOT_ADMISSIBLE)
        unchanged = {"score_delta": 0, "quest_progress": 0, "progress": 0}
        self._info = {**self._info, **unchanged}
        return self._obs, 0.0, self._done, dict(self._info)

    def close(self) -> None:
        """Release the engine."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None
