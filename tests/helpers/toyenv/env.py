"""The environment: a card shows a digit (the seed's last digit); saying it wins."""

from __future__ import annotations

from typing import Any

from envs.base import Observation


class Guess:
    """Say the number on the card: won on the first right answer; ``max_turns`` tries."""

    def __init__(self, max_turns: int) -> None:
        self.max_turns, self.target, self.turns = max_turns, 0, 0

    def observation(self) -> Observation:
        return Observation(f"The card says {self.target}.", task="say the number")

    def reset(self, seed: int) -> Observation:
        self.target, self.turns = seed % 10, 0
        return self.observation()

    def step(self, action: Any) -> tuple[Observation, float, bool, dict[str, Any]]:
        self.turns += 1
        won = action == str(self.target)
        done = won or self.turns >= self.max_turns
        return self.observation(), 10.0 * won, done, {"won": won}
