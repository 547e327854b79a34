"""ALFWorld's registry entry: TextWorld games in the host pool, the paper prompt, the
walkthrough-replay expert and the check that the built games exist.

Three disjoint splits: ``validation`` is ``env.alfworld.validation_games`` games carved from
``env.data_path``'s ``train`` folder (those whose path hashes lowest: the same games on every
machine), ``train`` the rest of that folder, ``test`` the official ``env.alfworld.test_split``
(``valid_seen`` in distribution, ``valid_unseen`` out of it: held out, never tuned on). Seed ``s``
plays game ``s % len(games)`` of the split's fixed play order.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any, Literal

from arlarena_base.errors import ConfigError
from envs.alfworld.prompts import ALFWORLD_FORMAT
from envs.base import EnvBatch
from envs.registry import EnvSpec, check_split
from envs.rewards import INFO_PROGRESS
from envs.spec_helpers import expert_options, lazy, pool_batch, require_at_least
from envs.text import Expert

BUILD_HINT = "build them with `arlarena alfworld build` and `arlarena alfworld generate`"


@dataclasses.dataclass(frozen=True)
class AlfworldConfig:
    """The ``env.alfworld`` config section."""

    test_split: Literal["valid_seen", "valid_unseen"] = "valid_seen"  # in / out of distribution
    validation_games: int = 32  # training-folder games kept apart as the validation split
    expert_think: bool = True  # demonstrations carry a short rationale (false: empty <think>)

    def __post_init__(self) -> None:
        require_at_least("alfworld", self, {"validation_games": 1})


def folder_games(env: Any, folder_name: str) -> tuple[str, ...]:
    """Solvable game files of ``env.data_path/json_2.1.1/<folder_name>`` (sorted); none is a
    one-line ConfigError."""
    from envs.alfworld.data import JSON_DIR, find_games

    if env.data_path is None:
        raise ConfigError(
            f"config key 'env.data_path': ALFWorld needs the directory holding {JSON_DIR}/ "
            f"({BUILD_HINT})"
        )
    folder = Path(env.data_path) / JSON_DIR / folder_name
    found = find_games(folder) if folder.is_dir() else []
    if not found:
        raise ConfigError(
            f"config key 'env.data_path': no solvable ALFWorld games in {folder} ({BUILD_HINT})"
        )
    return tuple(str(g) for g in found)


def _path_hash(game: str, folder: str) -> str:
    """SHA-256 of the game's path below its split folder (the same on every machine)."""
    return hashlib.sha256(str(Path(game).relative_to(folder)).encode()).hexdigest()


def carve_validation(games: tuple[str, ...], folder: str, count: int) -> tuple[tuple, tuple]:
    """``(train, validation)``: the ``count`` games whose path hashes lowest are validation, the
    rest training, each in the folder's sorted order. Fewer than ``count + 1`` games is a
    one-line ConfigError."""
    if len(games) <= count:
        raise ConfigError(
            f"config key 'env.alfworld.validation_games': {count} validation games carved from "
            f"{len(games)} training games leave none to train on"
        )
    ranked = sorted(games, key=lambda g: _path_hash(g, folder))
    validation = set(ranked[:count])
    return tuple(g for g in games if g not in validation), tuple(
        g for g in games if g in validation
    )


def training_games(env: Any) -> dict[str, tuple[str, ...]]:
    """The training folder's games, carved into ``train`` and ``validation`` (module doc)."""
    from envs.alfworld.data import JSON_DIR

    folder = str(Path(env.data_path or ".") / JSON_DIR / "train")
    train, validation = carve_validation(
        folder_games(env, "train"), folder, env.alfworld.validation_games
    )
    return {"train": train, "validation": validation}


def games(env: Any, split: str) -> tuple[str, ...]:
    """The game files of ``split`` (``train``, ``validation`` or ``test``, see module doc)."""
    if check_split(split) == "test":
        return folder_games(env, env.alfworld.test_split)
    return training_games(env)[split]


def split_members(env: Any) -> dict[str, frozenset[str]]:
    """Each split's games, by their trial's task id and scene (``<task>/<trial>``): a trial
    found in two folders is one game in two splits."""
    found = {**training_games(env), "test": games(env, "test")}
    return {
        split: frozenset("/".join(Path(g).parts[-3:-1]) for g in files)
        for split, files in found.items()
    }


def check_data(env: Any, training: bool) -> None:
    """The engine and the test games; the training and validation games when ``training``."""
    from envs.alfworld import engine

    if not engine.available():
        raise ConfigError(
            f"config key 'env.name': 'alfworld' needs the real engine: {engine.INSTALL_HINT}"
        )
    games(env, "test")
    if training:
        games(env, "validation")


def make_batch(env: Any, num_envs: int, split: str) -> EnvBatch:
    """``num_envs`` games of ``split`` in ``env.num_workers`` pool processes (0: in
    this process), each episode capped at ``env.max_turns`` steps."""
    from envs.alfworld.env import AlfworldFactory

    return pool_batch(env, AlfworldFactory(games(env, split), max_steps=env.max_turns), num_envs)


def expert(env: Any) -> Expert:
    """Replays of the training games' stored walkthroughs, one per distinct game."""
    from envs.alfworld.expert import walkthrough_expert

    return walkthrough_expert(games(env, "train"), **expert_options(env, "alfworld"))


ALFWORLD = EnvSpec(
    name="alfworld",
    make_batch=make_batch,
    formats={"paper": ALFWORLD_FORMAT},
    expert=expert,
    check_data=check_data,
    split_members=split_members,
    settings=AlfworldConfig,
    tokenizer_episodes=32,
    paper={"train_batch_size": 16, "group_size": 8, "max_turns": 50, "history_length": 2},
    commands=lazy("envs.alfworld.cli", "add_commands"),  # arlarena alfworld build|generate
    ignores={},  # reads every common env key: the pool's num_workers and step_timeout_s included
    # the goal's state conditions a step satisfied over those unmet at the reset, as the
    # environment reports them in info (envs/alfworld/progress.py, envs/rewards.py)
    progress=INFO_PROGRESS,
)
