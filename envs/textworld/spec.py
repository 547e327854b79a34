"""TextWorld's registry entry: generated games in the host pool, the ALFWorld-shaped prompt, the
walkthrough-replay expert and the game sets, built on demand (docs/environments.md §10).

A batch plays one split of the tier's games, ``train``, ``validation`` or ``test``
(``envs.textworld.build``: disjoint in content); seed ``s`` plays game ``s % len(games)``. The
games live in ``env.data_path``, else ``$ARLARENA_TEXTWORLD_DIR``, else
``~/.cache/arlarena/textworld``. Missing games are generated there when the data is checked
(``env.textworld.auto_build``, the default: generation is deterministic, so the cache holds the
same games on every machine), or beforehand with ``arlarena textworld build``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

from arlarena_base.errors import ConfigError
from envs.base import EnvBatch
from envs.registry import EnvSpec, check_split
from envs.rewards import INFO_PROGRESS
from envs.spec_helpers import expert_options, lazy, pool_batch, require_at_least, require_one_of
from envs.text import Expert
from envs.textworld.env import PROGRESS_SIGNALS
from envs.textworld.prompts import TEXTWORLD_FORMAT

logger = logging.getLogger(__name__)
TIER_NAMES = ("w2-o3-q4", "w4-o6-q8", "cooking")
DIR_VARIABLE = "ARLARENA_TEXTWORLD_DIR"


@dataclasses.dataclass(frozen=True)
class TextworldConfig:
    """The ``env.textworld`` config section."""

    tier: str = "w2-o3-q4"  # w2-o3-q4 | w4-o6-q8 | cooking (docs/environments.md §10.2)
    train_games: int = 1000  # distinct training games
    validation_games: int = 64  # distinct validation games (what choices read)
    test_games: int = 100  # distinct test games (what results report)
    seed: int = 0  # first generation seed (test seeds start 1,000,000 higher, validation 2,000,000)
    auto_build: bool = True  # generate missing games into the cache when the data is checked
    build_workers: int = 0  # processes generating games on demand (0: this process)
    win_reward: float = 10.0  # the reward of the winning step, as ALFWorld's
    expert_think: bool = True  # demonstrations carry a short rationale (false: empty <think>)
    # what env.reward: dense rewards: quest (walkthrough steps gained) or score (points gained)
    progress: str = "quest"

    def __post_init__(self) -> None:
        require_one_of("textworld", self, {"tier": TIER_NAMES, "progress": PROGRESS_SIGNALS})
        require_at_least(
            "textworld", self, {"train_games": 1, "validation_games": 1, "test_games": 1}
        )
        require_at_least("textworld", self, {"seed": 0, "build_workers": 0})


def data_root(env: Any) -> Path:
    """Where the games live (see module doc)."""
    if env.data_path is not None:
        return Path(env.data_path)
    if os.environ.get(DIR_VARIABLE):
        return Path(os.environ[DIR_VARIABLE])
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "arlarena" / "textworld"


def _split(env: Any, split: str, exclude: frozenset[str]) -> list[Any]:
    from envs.textworld.build import build_split, existing_split, split_folder

    t = env.textworld
    count = getattr(t, f"{split}_games")
    root = data_root(env)
    found = existing_split(root, t.tier, t.seed, split, count, exclude)
    if len(found) == count:
        return found
    folder = split_folder(root, t.tier, t.seed, split)
    if not t.auto_build:
        raise ConfigError(
            f"config key 'env.textworld.auto_build': {len(found)} of {count} {split} games in "
            f"{folder} (build them with `arlarena textworld build`)"
        )
    logger.warning("generating %d TextWorld %s games into %s", count - len(found), split, folder)
    return build_split(root, t.tier, t.seed, split, count, exclude=exclude, workers=t.build_workers)


def _splits_up_to(env: Any, split: str) -> dict[str, list[Any]]:
    """The games of ``split`` and of the splits built before it (``build.BUILD_ORDER``)."""
    from envs.textworld.build import BUILD_ORDER

    games: dict[str, list[Any]] = {}
    for name in BUILD_ORDER[: BUILD_ORDER.index(check_split(split)) + 1]:
        exclude = frozenset(g.hash for built in games.values() for g in built)
        games[name] = _split(env, name, exclude)
    return games


def split_games(env: Any, split: str) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """The game files of ``split`` (``train``, ``validation`` or ``test``) and their
    walkthroughs."""
    from envs.textworld.build import split_folder

    chosen = _splits_up_to(env, split)[split]
    t = env.textworld
    folder = split_folder(data_root(env), t.tier, t.seed, split)
    return tuple(str(folder / g.file) for g in chosen), tuple(g.walkthrough for g in chosen)


def split_members(env: Any) -> dict[str, frozenset[str]]:
    """Each split's game content hashes (disjoint by construction; checked at start-up)."""
    return {
        name: frozenset(g.hash for g in games)
        for name, games in _splits_up_to(env, "train").items()
    }


def check_data(env: Any, training: bool) -> None:
    """The engine, the test and validation games, and the training games when ``training``."""
    from envs.textworld import engine

    if not engine.available():
        raise ConfigError(
            f"config key 'env.name': 'textworld' needs the real engine: {engine.INSTALL_HINT}"
        )
    split_games(env, "train" if training else "validation")


def make_batch(env: Any, num_envs: int, split: str) -> EnvBatch:
    """``num_envs`` games of ``split`` in ``env.num_workers`` pool processes (0: in
    this process), each episode capped at ``env.max_turns`` steps."""
    from envs.textworld.env import TextworldFactory

    files, _ = split_games(env, split)
    t = env.textworld
    factory = TextworldFactory(
        files, max_steps=env.max_turns, win_reward=t.win_reward, progress=t.progress
    )
    return pool_batch(env, factory, num_envs)


def expert(env: Any) -> Expert:
    """Replays of the training games' walkthroughs, one per distinct game."""
    from envs.textworld.expert import walkthrough_expert

    _, walkthroughs = split_games(env, "train")
    return walkthrough_expert(walkthroughs, **expert_options(env, "textworld"))


TEXTWORLD = EnvSpec(
    name="textworld",
    make_batch=make_batch,
    formats={"paper": TEXTWORLD_FORMAT},
    expert=expert,
    check_data=check_data,
    split_members=split_members,
    settings=TextworldConfig,
    tokenizer_episodes=32,
    # meow-tea-taro examples/textworld/run_reinforce_pp_qwen-1.5b.sh: w2-o3-q4, rollout.n 8,
    # max_iter 12 turns, 5000 training instances; batch and history as ALFWorld's
    paper={"train_batch_size": 16, "group_size": 8, "max_turns": 12, "history_length": 2},
    commands=lazy("envs.textworld.cli", "add_commands"),  # arlarena textworld build
    ignores={},  # reads every common env key: the pool's num_workers and step_timeout_s included
    # env.textworld.progress: quest steps or score points gained over the episode's maximum, as
    # the environment reports them in info (envs/textworld/env.py, envs/rewards.py)
    progress=INFO_PROGRESS,
    single_reward=lambda env: env.textworld.win_reward,
)
