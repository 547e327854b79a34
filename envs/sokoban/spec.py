"""Sokoban's registry entry: the JAX-native batch, the paper and compact prompts, the BFS expert.

Every split's batch is the same kind (one jitted, vmapped :class:`SokobanBatch`): a room is its
seed, and the trainer keeps the splits apart by disjoint seed ranges (training from [0, 2³⁰),
test and validation in blocks of their own above 2³¹, ``arlarena_jax.train.build``). The expert
reads the grid off each prompt and answers with the first move of an optimal plan; with the
compact prompt its reasoning is empty.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from envs.base import EnvBatch
from envs.registry import EnvSpec, check_split
from envs.sokoban.prompts import SOKOBAN_COMPACT_FORMAT, SOKOBAN_FORMAT, SOKOBAN_KEYWORDS
from envs.spec_helpers import lazy, require_at_least
from envs.text import Expert

DEMO_BATCH = 64  # rooms the expert plays at once


@dataclasses.dataclass(frozen=True)
class SokobanConfig:
    """The ``env.sokoban`` config section (room generation, docs/environments.md §3.1)."""

    dim_room: int = 6
    num_boxes: int = 1
    search_depth: int = 30

    def __post_init__(self) -> None:
        require_at_least("sokoban", self, {"dim_room": 3, "num_boxes": 1, "search_depth": 1})


def make_batch(env: Any, num_envs: int, split: str) -> EnvBatch:
    """``num_envs`` rooms of ``env.sokoban``'s size, ending after ``env.max_turns`` moves."""
    from envs.sokoban.batch import SokobanBatch
    from envs.sokoban.env import EnvParams

    check_split(split)
    s = env.sokoban
    params = EnvParams(
        dim_room=s.dim_room,
        num_boxes=s.num_boxes,
        max_steps=env.max_turns,
        search_depth=s.search_depth,
    )
    return SokobanBatch(num_envs, params)


def expert(env: Any) -> Expert:
    """The BFS expert, with empty reasoning for the compact prompt."""
    from envs.sokoban.expert import bfs_expert, expert_replies, short_expert_replies

    replies = short_expert_replies if env.prompt == "compact" else expert_replies
    return bfs_expert(replies, batch_size=DEMO_BATCH)


SOKOBAN = EnvSpec(
    name="sokoban",
    make_batch=make_batch,
    formats={"paper": SOKOBAN_FORMAT, "compact": SOKOBAN_COMPACT_FORMAT},
    expert=expert,
    settings=SokobanConfig,
    tokenizer_episodes=256,
    # the compact prompt as one on-device program (envs/sokoban/device.py)
    device_env=lazy("envs.sokoban.device", "make_device_env"),
    paper={"train_batch_size": 32, "group_size": 8, "max_turns": 15, "history_length": 2},
    ignores={
        "num_workers": "its batch runs in-process",
        "step_timeout_s": "its batch runs in-process",
        "data_path": "its rooms are generated",
    },
    native_reward="dense",  # shaped every step (docs/environments.md §3.2); single: +10 on a win
    moves=tuple(word for word, _ in sorted(SOKOBAN_KEYWORDS, key=lambda k: k[1])),
)
