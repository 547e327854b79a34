"""ALFWorld's registry entry: TextWorld games in the host pool, the paper prompt, the
walkthrough-replay expert and the check that the built games exist.

Training batches play the ``train`` split of ``env.data_path``, evaluation batches
``env.alfworld.eval_split``; seed ``s`` plays game ``s % len(games)`` of the fixed play order.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

from arlarena_jax.errors import ConfigError
from envs.alfworld.prompts import ALFWORLD_FORMAT
from envs.base import EnvBatch
from envs.registry import EnvSpec, check_purpose
from envs.rewards import INFO_PROGRESS
from envs.text import Expert

BUILD_HINT = "build them with `arlarena alfworld build` and `arlarena alfworld generate`"


@dataclasses.dataclass(frozen=True)
class AlfworldConfig:
    """The ``env.alfworld`` config section."""

    eval_split: Literal["valid_seen", "valid_unseen"] = "valid_seen"  # in / out of distribution
    expert_think: bool = True  # demonstrations carry a short rationale (false: empty <think>)


def games(env: Any, split: str) -> tuple[str, ...]:
    """Solvable game files of ``env.data_path/json_2.1.1/<split>`` (sorted); none is a one-line
    ConfigError."""
    from envs.alfworld.data import JSON_DIR, find_games

    if env.data_path is None:
        raise ConfigError(
            f"config key 'env.data_path': ALFWorld needs the directory holding {JSON_DIR}/ "
            f"({BUILD_HINT})"
        )
    folder = Path(env.data_path) / JSON_DIR / split
    found = find_games(folder) if folder.is_dir() else []
    if not found:
        raise ConfigError(
            f"config key 'env.data_path': no solvable ALFWorld games in {folder} ({BUILD_HINT})"
        )
    return tuple(str(g) for g in found)


def split_of(env: Any, purpose: str) -> str:
    """The split a batch for ``purpose`` plays: ``train``, or ``env.alfworld.eval_split``."""
    return "train" if check_purpose(purpose) == "train" else env.alfworld.eval_split


def check_data(env: Any, training: bool) -> None:
    """The engine and the evaluation games, and the training games when ``training``."""
    from envs.alfworld import engine

    if not engine.available():
        raise ConfigError(
            f"config key 'env.name': 'alfworld' needs the real engine: {engine.INSTALL_HINT}"
        )
    games(env, env.alfworld.eval_split)
    if training:
        games(env, "train")


def make_batch(env: Any, num_envs: int, purpose: str) -> EnvBatch:
    """``num_envs`` games of the purpose's split in ``env.num_workers`` pool processes (0: in
    this process), each episode capped at ``env.max_turns`` steps."""
    from envs.alfworld.env import AlfworldFactory
    from envs.pool import text_env_batch

    factory = AlfworldFactory(games(env, split_of(env, purpose)), max_steps=env.max_turns)
    return text_env_batch(factory, num_envs, env.num_workers, env.step_timeout_s)


def expert(env: Any) -> Expert:
    """Replays of the training games' stored walkthroughs, one per distinct game."""
    from envs.alfworld.expert import walkthrough_expert

    return walkthrough_expert(
        games(env, "train"),
        think=env.alfworld.expert_think,
        batch_size=env.train_batch_size * env.group_size,
    )


def add_commands(subparsers: Any) -> None:
    """``arlarena alfworld build|generate``."""
    from envs.alfworld.cli import add_commands as add

    add(subparsers)


ALFWORLD = EnvSpec(
    name="alfworld",
    make_batch=make_batch,
    formats={"paper": ALFWORLD_FORMAT},
    expert=expert,
    check_data=check_data,
    settings=AlfworldConfig,
    tokenizer_episodes=32,
    paper={"train_batch_size": 16, "group_size": 8, "max_turns": 50, "history_length": 2},
    commands=add_commands,
    ignores={},  # reads every common env key: the pool's num_workers and step_timeout_s included
    # the goal's state conditions a step satisfied over those unmet at the reset, as the
    # environment reports them in info (envs/alfworld/progress.py, envs/rewards.py)
    progress=INFO_PROGRESS,
)
