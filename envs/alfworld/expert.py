"""The ALFWorld expert for behaviour cloning: the handcoded expert's walkthroughs, replayed
(docs/environments.md §4.8).

Every built game stores the walkthrough the handcoded expert found (``games.build_trial``; the
engine is deterministic, so replaying it from the reset reproduces the expert's episode).
:class:`WalkthroughExpert` is a scripted policy over a batch whose environment ``i`` plays
``games[i]``: at turn ``t`` it answers ``<think>…</think><action>walkthrough_i[t]</action>``, the
format the projection accepts (docs/environments.md §1.5). It is called once per turn with every
environment's prompt in order, so the rollout must generate for finished environments too
(``collect(..., skip_done=False)``); replies past a walkthrough's end are the no-op ``look``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from envs.alfworld.env import play_order
from envs.text import Expert, ReplayPolicy, plan_reply


def walkthrough(game_file: str | Path) -> tuple[str, ...]:
    """The stored expert walkthrough of a built game (empty when it is unsolvable)."""
    with open(game_file) as f:
        return tuple(json.load(f).get("walkthrough") or ())


def expert_reply(command: str, *, think: bool = True) -> str:
    """``<think>rationale</think><action>command</action>``; ``think=False`` leaves the
    reasoning empty (the short reply of tiny CPU policies)."""
    return plan_reply(command, think=think)


class WalkthroughExpert(ReplayPolicy):
    """Scripted policy replaying one walkthrough per environment (see module doc)."""

    def __init__(self, walkthroughs: Sequence[Sequence[str]], *, think: bool = True) -> None:
        super().__init__(walkthroughs, filler="look", think=think)

    @property
    def walkthroughs(self) -> list[tuple[str, ...]]:
        return self.plans


def walkthrough_expert(
    games: Sequence[str | Path], *, think: bool = True, batch_size: int = 64
) -> Expert:
    """Demonstrations over ``games`` (an environment's game list): seed ``s`` plays game
    ``play_order(games)[s % len(games)]``, whose replay does not depend on the seed, so each
    distinct game is played once (``task_of``)."""
    order = play_order(games)
    return Expert(
        policy_for=lambda seeds: WalkthroughExpert(
            [walkthrough(order[s]) for s in seeds], think=think
        ),
        task_of=lambda seed: int(seed) % len(order),
        every_turn=True,
        batch_size=batch_size,
    )
