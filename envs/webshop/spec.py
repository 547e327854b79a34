"""WebShop's registry entry: sessions in the host pool, the paper prompt, the scripted shopper
and the release scripts' per-method values (docs/environments.md §6, docs/algorithms.md §8).

A batch plays one goal split: ``test`` (the first ``env.webshop.test_goals`` of the goal seed's
shuffle, as the original's), ``validation`` (the next ``env.webshop.validation_goals``) or
``train`` (the rest); seed ``s`` plays goal ``s % len(goals)`` of its split.
The catalogue is the synthetic one (``env.webshop.data: synthetic``, nothing to download) or the
real files (``data: files``, read from ``env.data_path`` or ``$WEBSHOP_DATA``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from arlarena_base.errors import ConfigError, InvalidField
from envs.base import EnvBatch
from envs.registry import EnvSpec, check_split
from envs.rewards import Progress
from envs.spec_helpers import expert_options, lazy, pool_batch, require_at_least, require_one_of
from envs.text import Expert
from envs.webshop.prompts import WEBSHOP_FORMAT

NOUN_KINDS = ("auto", "spacy", "lexicon")

# WebShop's progress (env.reward: dense): the purchase score in [0, 1] on the buying turn (the
# original WebShop's reward: attributes, options, type and price matched), 0 on every other turn
# (info["task_score"] is 0 until a purchase), of a maximum of 1. The native reward stays
# ARLArena's 10 for an exact score of 1.0, else 0.
PURCHASE_SCORE = Progress(
    gained=lambda info: float(info.get("task_score", 0.0)), maximum=lambda info: 1.0
)
SEARCH_KINDS = ("bm25", "pyserini")


@dataclasses.dataclass(frozen=True)
class WebshopConfig:
    """The ``env.webshop`` config section."""

    data: str = "synthetic"  # synthetic | files (env.data_path, else $WEBSHOP_DATA)
    catalogue_seed: int = 0  # the synthetic catalogue's seed
    num_products: int = 1000  # the synthetic catalogue's size
    goal_seed: int = 0  # prices, goals and the one fixed train/test partition
    test_goals: int = 500  # the first goals of the shuffle are the test split
    validation_goals: int = 200  # the next ones the validation split (what choices read)
    nouns: str = "auto"  # auto (spaCy when a verified model is installed) | spacy | lexicon
    search: str = "bm25"  # bm25 (bm25s, Lucene-like analysis) | pyserini (Java + an index)
    index_dir: str | None = None  # the Lucene index for search: pyserini
    expert_think: bool = True  # demonstrations carry a short rationale (false: empty <think>)

    def __post_init__(self) -> None:
        choices = {"data": ("synthetic", "files"), "nouns": NOUN_KINDS, "search": SEARCH_KINDS}
        require_one_of("webshop", self, choices)
        minimums = {"num_products": 10, "test_goals": 1, "validation_goals": 1}
        require_at_least("webshop", self, minimums)
        if self.search == "pyserini" and not self.index_dir:
            raise InvalidField(
                "webshop", "index_dir", "search: pyserini needs the Lucene index folder"
            )


def source_of(env: Any) -> Any:
    """The :class:`envs.webshop.shop.ShopSource` of an ``env`` config section."""
    from envs.webshop.shop import ShopSource

    w = env.webshop
    return ShopSource(
        data=w.data,
        data_dir=env.data_path,
        catalogue_seed=w.catalogue_seed,
        num_products=w.num_products,
        goal_seed=w.goal_seed,
        test_size=w.test_goals,
        validation_size=w.validation_goals,
        nouns=w.nouns,
        search=w.search,
        index_dir=w.index_dir,
    )


def shop(env: Any) -> Any:
    """The loaded shop (cached per process); a data problem is a one-line ConfigError."""
    from envs.webshop.catalogue import CatalogueError
    from envs.webshop.goals import SplitError
    from envs.webshop.shop import load_shop

    try:
        return load_shop(source_of(env))
    except SplitError as exc:
        raise ConfigError(f"config key 'env.webshop.test_goals': {exc}") from None
    except (CatalogueError, RuntimeError, ValueError) as exc:
        key = "env.data_path" if env.webshop.data == "files" else "env.webshop"
        raise ConfigError(f"config key {key!r}: {exc}") from None


def check_data(env: Any, training: bool) -> None:
    """The catalogue loads, its goals split, search and nouns are available."""
    shop(env)


def split_members(env: Any) -> dict[str, frozenset[tuple]]:
    """Each split's goals, by what makes a goal: the target product and its option values."""
    goals = shop(env).goals
    return {
        name: frozenset((g.asin, g.goal_options) for g in goals.split(name))
        for name in ("train", "validation", "test")
    }


def make_batch(env: Any, num_envs: int, split: str) -> EnvBatch:
    """``num_envs`` sessions on ``split``'s goals in ``env.num_workers`` pool processes (0: in
    this process), each episode capped at ``env.max_turns`` steps."""
    from envs.webshop.env import WebShopFactory

    factory = WebShopFactory(source_of(env), split=check_split(split), max_steps=env.max_turns)
    return pool_batch(env, factory, num_envs)


def expert(env: Any) -> Expert:
    """The scripted shopper over the training goals."""
    from envs.webshop.expert import shopper_expert

    return shopper_expert(shop(env), max_steps=env.max_turns, **expert_options(env, "webshop"))


SMTM = "seq-mean-token-mean"

WEBSHOP = EnvSpec(
    name="webshop",
    make_batch=make_batch,
    formats={"paper": WEBSHOP_FORMAT},
    expert=expert,
    check_data=check_data,
    split_members=split_members,
    settings=WebshopConfig,
    tokenizer_episodes=64,
    paper={"train_batch_size": 16, "group_size": 8, "max_turns": 15, "history_length": 2},
    method_settings={  # the WebShop release scripts (docs/algorithms.md §8)
        "sapo": {"use_seq_mask": True},
        "cispo": {"use_seq_mask": True},
        "gspo": {"clip_low": 3e-2, "clip_high": 4e-2, "regularizer_agg_mode": SMTM},
        "sampo": {"gigpo_mode": "mean_norm", "cold_start_steps": 5},
        "dapo_grpo": {"cold_start_steps": 0},
        "dapo_gigpo": {"cold_start_steps": 5},
    },
    commands=lazy("envs.webshop.cli", "add_commands"),  # arlarena webshop build|stats
    ignores={},  # reads every common env key (data_path only with webshop.data: files)
    progress=PURCHASE_SCORE,
)
