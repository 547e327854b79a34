"""Host-side DAPO group filter with cold start (docs/algorithms.md §7, TV-6).

The filter drops whole groups, so it runs on the host between rollout and collation
(docs/algorithms.md §7). A group is kept on a regular try iff its ``n`` raw episode returns (no
invalid penalty, no overlong shaping) are not all exactly equal. The last try fills up with uniform
groups so the batch is not left short; the batch may still end smaller than the target.

A group's returns are those of its valid members: episodes lost to an infrastructure failure are
left out (docs/algorithms.md §3.0), so a group may give fewer than ``n``, and one left with fewer
than 2 is uniform (it carries no gradient).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, NamedTuple, TypeVar

from arlarena_jax.objectives.compose import GroupFilter

G = TypeVar("G")


class SamplingResult(NamedTuple, Generic[G]):
    """Groups kept over all tries, in rollout order; the number of tries; groups kept per try."""

    groups: list[G]
    num_tries: int
    num_kept_per_try: list[int]


def is_uniform(returns: Sequence[float]) -> bool:
    """True iff all episode returns are exactly equal (docs/algorithms.md §7), so also for fewer
    than 2 returns. NaN never equals."""
    return all(r == returns[0] for r in returns[1:])


def _check_group_sizes(
    group_returns: Sequence[Sequence[float]], group_size: int, where: str = ""
) -> None:
    for index, returns in enumerate(group_returns):
        if len(returns) > group_size:
            raise ValueError(
                f"{where}group {index} has {len(returns)} episode returns but "
                f"group_size={group_size}"
            )


def select_groups(
    group_returns: Sequence[Sequence[float]], remaining: int, group_size: int, last_try: bool
) -> list[int]:
    """Indices of the groups one try keeps (docs/algorithms.md §7).

    Regular try: the non-uniform groups in order, truncated to ⌊remaining/n⌋ whole groups when
    they exceed the remaining need. Last try: needed = remaining; the non-uniform groups in order,
    then, if fewer than ⌊needed/n⌋, uniform groups in order until ⌊needed/n⌋ are taken.

    The kept indices are returned sorted, i.e. in the original rollout order (filled uniform
    groups interleave with the non-uniform ones by position). The spec leaves the order of the
    filled groups open; no estimator depends on row order across groups.
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if remaining < 0:
        raise ValueError(f"remaining must be >= 0, got {remaining}")
    _check_group_sizes(group_returns, group_size)
    capacity = remaining // group_size
    uniform = [is_uniform(returns) for returns in group_returns]
    kept = [i for i, flat in enumerate(uniform) if not flat][:capacity]
    if last_try and len(kept) < capacity:
        fill = [i for i, flat in enumerate(uniform) if flat]
        kept += fill[: capacity - len(kept)]
    return sorted(kept)


def _check_sizes(train_batch_size: int, group_size: int, group_filter: GroupFilter) -> None:
    if train_batch_size < 1 or group_size < 1:
        raise ValueError(
            f"train_batch_size and group_size must be >= 1, got {train_batch_size} and {group_size}"
        )
    if group_filter.max_num_gen_batches < 1:
        raise ValueError(
            f"GroupFilter.max_num_gen_batches must be >= 1, got {group_filter.max_num_gen_batches}"
        )


def collect_groups(
    generate: Callable[[], Sequence[G]],
    returns_of: Callable[[G], Sequence[float]],
    group_filter: GroupFilter | None,
    *,
    train_batch_size: int,
    group_size: int,
    global_step: int,
    training: bool = True,
) -> SamplingResult[G]:
    """Roll out until Q = train_batch_size·group_size trajectories are kept (docs/algorithms.md §7).

    ``generate()`` runs one full fresh rollout and returns its groups (each of ``group_size``
    trajectories); ``returns_of(group)`` gives the raw episode returns of the group's valid
    members (at most ``group_size``: failed episodes left out). With no filter, or
    one not active at this step (``GroupFilter.is_active``: training and step > cold start), one
    rollout is returned whole. Otherwise at most ``max_num_gen_batches`` tries run, the last one
    with the fill rule. Groups are concatenated in try order. Rollout metrics should be taken from
    the last ``generate()`` call (docs/algorithms.md §7).
    """
    if group_filter is None or not group_filter.is_active(global_step, training):
        groups = list(generate())
        return SamplingResult(groups, 1, [len(groups)])
    _check_sizes(train_batch_size, group_size, group_filter)
    target = train_batch_size * group_size
    kept: list[G] = []
    per_try: list[int] = []
    while len(kept) * group_size < target and len(per_try) < group_filter.max_num_gen_batches:
        last_try = len(per_try) + 1 == group_filter.max_num_gen_batches
        groups = list(generate())
        returns = [returns_of(group) for group in groups]
        _check_group_sizes(returns, group_size, where=f"rollout try {len(per_try) + 1}: ")
        chosen = select_groups(returns, target - len(kept) * group_size, group_size, last_try)
        kept += [groups[i] for i in chosen]
        per_try.append(len(chosen))
    return SamplingResult(kept, len(per_try), per_try)
