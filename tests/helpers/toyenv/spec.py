"""The registry entry: batches of cards in this process, the prompt, and a perfect expert."""

from __future__ import annotations

from typing import Any

from envs.local import LocalEnvBatch
from envs.registry import EnvSpec, check_split
from envs.text import Expert, ScriptedPolicy
from tests.helpers.toyenv.env import Guess
from tests.helpers.toyenv.prompts import GUESS_FORMAT


def make_batch(env: Any, num_envs: int, split: str) -> LocalEnvBatch:
    """``num_envs`` cards; training and evaluation differ only by their seeds."""
    check_split(split)
    return LocalEnvBatch(lambda: Guess(env.max_turns), num_envs)


def expert_replies(prompts: list[str]) -> list[str]:
    """Read the card off each prompt and say it."""
    return [f"<think></think><action>{p.split('says ')[1][0]}</action>" for p in prompts]


def expert(env: Any) -> Expert:
    """Seeds with the same last digit show the same card: each is played once."""
    return Expert(lambda seeds: ScriptedPolicy(expert_replies), task_of=lambda seed: seed % 10)


GUESS = EnvSpec(
    name="guess",
    make_batch=make_batch,
    formats={"paper": GUESS_FORMAT},
    expert=expert,
    tokenizer_episodes=20,
)
