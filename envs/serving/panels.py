"""Episode panels: an episode index of a split always plays the same episode.

A *panel* is the fixed, ordered list of episodes of one split: episode ``index`` of split
``split`` plays seed ``blocks[split] + offset + index``. The blocks are the trainer's evaluation
seed blocks (``arlarena_jax.train.build.EVAL_SEED_BLOCKS``, passed in by the caller: nothing
under ``envs/`` imports the trainer), so with ``offset`` = ``env.eval_seed`` the ``test`` panel's
first ``trainer.eval_episodes`` episodes are exactly the episodes a run's test evaluation plays.
A seed selects the episode as everywhere else: Sokoban generates the room of the seed; TextWorld,
ALFWorld, WebShop and math play task ``seed mod`` the split's size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

BLOCK_SIZE = 2**29  # seeds per split block (the trainer's EVAL_BLOCK_SIZE)


@dataclasses.dataclass(frozen=True)
class Panels:
    """The episode panels of every split: ``seed(split, index)``."""

    blocks: Mapping[str, int]  # the first seed of each split's block
    offset: int = 0  # env.eval_seed

    def seed(self, split: str, index: int) -> int:
        """The seed of episode ``index`` of ``split``; a bad split or index is a ValueError."""
        if split not in self.blocks:
            raise ValueError(f"split must be one of {', '.join(self.blocks)}, got {split!r}")
        if isinstance(index, bool) or not isinstance(index, int):
            raise ValueError(f"index must be an integer, got {index!r}")
        if not 0 <= index < BLOCK_SIZE - self.offset:
            raise ValueError(f"index must lie in [0, {BLOCK_SIZE - self.offset}), got {index}")
        return int(self.blocks[split]) + self.offset + index
