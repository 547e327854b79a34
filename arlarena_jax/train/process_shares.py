"""Which episodes each process plays, and the whole rollout put back together.

With N processes, a training batch of B groups is cut into N contiguous blocks of B / N whole
groups (group statistics stay within a process); an evaluation's E episodes into N contiguous
blocks of ⌊E / N⌋ or ⌈E / N⌉. Process p plays only its block, with the block's global group and
trajectory ids, so its episodes are the ones a single process would play in those places
(environment seeds come from the global task stream; sampling keys from the global episode,
docs/training.md "Several processes"). :func:`whole_rollout` then gathers every process's part:
every process holds the same whole rollout, in the single process's order, for what needs all
of it (dynamic sampling's filter, metrics, the batch of the update, the monitor).
"""

from __future__ import annotations

import dataclasses

from arlarena_jax.errors import ConfigError
from arlarena_jax.rollout.loop import Rollout
from arlarena_jax.train.processes import Exchange


def block(total: int, index: int, count: int) -> range:
    """Process ``index``'s contiguous block of ``total`` items over ``count`` processes: the
    first ``total % count`` blocks have one item more. Blocks are disjoint and cover
    ``range(total)`` in process order."""
    size, extra = divmod(total, count)
    start = index * size + min(index, extra)
    return range(start, start + size + (index < extra))


def check_group_shares(train_batch_size: int, count: int) -> None:
    """Refuse, in one line, a training batch that does not split into whole groups per
    process."""
    if train_batch_size % count:
        raise ConfigError(
            f"config key 'env.train_batch_size' ({train_batch_size} groups) does not split into "
            f"whole groups over {count} processes: make it a multiple of {count}"
        )


def whole_rollout(exchange: Exchange, tag: str, part: Rollout, first_env: int) -> Rollout:
    """Every process's ``part`` (this process's starts at environment ``first_env`` of the
    whole batch) as one rollout in process order, environment indices made global (on copies:
    ``part`` keeps its own indices); with one process, ``part`` itself."""
    if exchange.count == 1:
        return part
    parts = exchange.allgather(tag, (part, first_env))
    rows, trajectories = [], []
    for piece, offset in parts:
        rows += [_shifted(row, offset) for row in piece.rows]
        trajectories += [_shifted(t, offset) for t in piece.trajectories]
    return Rollout(rows, trajectories, part.group_size, part.task_format, part.data_source)


def _shifted(item, offset: int):
    """A copy of a row or trajectory with its environment index moved by ``offset``."""
    return dataclasses.replace(item, env_index=item.env_index + offset)
