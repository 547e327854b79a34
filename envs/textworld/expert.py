"""The TextWorld expert for behaviour cloning: each game's walkthrough, replayed
(docs/environments.md §10.5).

Generation stores the walkthrough of every game (the quest's winning commands, checked on the
engine when the game is built: ``Generated.solvable``); the engine is deterministic, so replaying
it from the reset wins. Environment ``i`` of a chunk plays seed ``seeds[i]``, i.e. game
``seeds[i] % len(games)``; past a walkthrough's end the reply is the no-op ``look``.
"""

from __future__ import annotations

from collections.abc import Sequence

from envs.text import Expert, ReplayPolicy


class WalkthroughExpert(ReplayPolicy):
    """Scripted policy replaying one walkthrough per environment."""

    def __init__(self, walkthroughs: Sequence[Sequence[str]], *, think: bool = True) -> None:
        super().__init__(walkthroughs, filler="look", think=think)


def walkthrough_expert(
    walkthroughs: Sequence[Sequence[str]], *, think: bool = True, batch_size: int = 64
) -> Expert:
    """Demonstrations over a split whose game ``k`` has ``walkthroughs[k]``: seed ``s`` plays
    game ``s % len(walkthroughs)``, so each distinct game is played once (``task_of``)."""
    plans = [tuple(w) for w in walkthroughs]
    if not plans:
        raise ValueError("walkthrough_expert needs at least one game")
    return Expert(
        policy_for=lambda seeds: WalkthroughExpert(
            [plans[s % len(plans)] for s in seeds], think=think
        ),
        task_of=lambda seed: int(seed) % len(plans),
        every_turn=True,
        batch_size=batch_size,
    )
