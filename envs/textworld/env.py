"""One TextWorld game at a time on the real engine (docs/environments.md §10.3).

:class:`TextworldEnv` is a :class:`envs.base.TextEnv`: the host pool (``envs.pool``) or
``envs.local.LocalEnvBatch`` runs N of them, each built by a picklable :class:`TextworldFactory`.

* ``reset(seed)`` plays ``games[seed % len(games)]`` (the split's games in their seed order):
  equal seeds give the same game, so a GRPO group shares its task.
* Observation: the game's text (``engine.clean``: no banner, no prompt line; at reset the
  objective and the first room), the admissible commands (sorted, as the engine gives them) and
  the task, the game's objective text.
* ``step(command)``: any string is a command; one the game does not understand answers with its
  parser's message and still uses a step. Reward ``win_reward`` on the winning step, else 0 (the
  single end-of-episode reward, as ALFWorld's, docs/environments.md §4.5). The episode ends when
  won or lost or after ``max_steps`` steps; stepping an ended episode returns the last
  observation, reward 0 and ``done`` again.
* ``info``: ``won``, ``lost``, ``score`` and ``max_score`` (the engine's points),
  ``score_delta`` (points gained by this step, for a dense-reward shaper) and ``gamefile``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from envs.base import Observation
from envs.textworld.engine import clean, quiet, start

WIN_REWARD = 10.0
MAX_STEPS = 12  # meow-tea-taro's max_iter for w2-o3-q4


@dataclasses.dataclass(frozen=True)
class TextworldFactory:
    """Builds a :class:`TextworldEnv` over ``games`` (picklable: pool workers call it)."""

    games: tuple[str, ...]
    max_steps: int = MAX_STEPS
    win_reward: float = WIN_REWARD

    def __call__(self) -> TextworldEnv:
        return TextworldEnv(self.games, max_steps=self.max_steps, win_reward=self.win_reward)


class TextworldEnv:
    """A generated TextWorld game through ``textworld.start`` (see module doc)."""

    def __init__(
        self,
        games: tuple[str, ...] | list[str],
        *,
        max_steps: int = MAX_STEPS,
        win_reward: float = WIN_REWARD,
    ) -> None:
        if not games:
            raise ValueError("TextworldEnv needs at least one game file")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.games = tuple(str(g) for g in games)
        self.max_steps = max_steps
        self.win_reward = float(win_reward)
        self._engine: Any = None
        self._game: str | None = None
        self._obs = Observation("")
        self._info: dict[str, Any] = {}
        self._steps, self._done = 0, True

    def game_for(self, seed: int) -> str:
        """The game file ``reset(seed)`` plays: ``games[seed % len(games)]``."""
        return self.games[int(seed) % len(self.games)]

    def _update(self, state: Any, delta: int) -> None:
        self._obs = Observation(
            text=clean(state.feedback),
            admissible=tuple(state["admissible_commands"] or ()),
            task=str(state["objective"] or "").strip(),
        )
        self._info = {
            "won": bool(state["won"]),
            "lost": bool(state["lost"]),
            "score": int(state["score"]),
            "max_score": int(state["max_score"]),
            "score_delta": int(delta),
            "gamefile": self._game,
        }

    def reset(self, seed: int) -> Observation:
        """Start ``game_for(seed)`` from its initial state."""
        game = self.game_for(seed)
        if not Path(game).is_file():
            raise FileNotFoundError(f"TextWorld game file not found: {game}")
        if game != self._game:
            self.close()
            self._engine, self._game = start(game), game
        with quiet():
            self._update(self._engine.reset(), 0)
        self._steps, self._done = 0, False
        return self._obs

    def step(self, action: Any) -> tuple[Observation, float, bool, dict[str, Any]]:
        """Apply one command (see module doc)."""
        if self._done:
            return self._obs, 0.0, True, {**self._info, "score_delta": 0}
        before = self._info["score"]
        with quiet():
            state, _, engine_done = self._engine.step(str(action).replace("\\", ""))
        self._update(state, int(state["score"]) - before)
        self._steps += 1
        won = self._info["won"]
        self._done = won or self._info["lost"] or bool(engine_done)
        self._done = self._done or self._steps >= self.max_steps
        return self._obs, self.win_reward if won else 0.0, self._done, dict(self._info)

    def close(self) -> None:
        """Release the engine."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None
