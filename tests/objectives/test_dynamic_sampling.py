"""Dynamic sampling / DAPO group filter with cold start (docs/algorithms.md §7, TV-6)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arlarena_jax.objectives.compose import GroupFilter
from arlarena_jax.objectives.dynamic_sampling import (
    SamplingResult,
    collect_groups,
    is_uniform,
    select_groups,
)

Group = tuple[str, list[float]]  # (name, episode returns of its n trajectories)


class Rollouts:
    """A scripted ``generate``: each call returns the next try's groups and counts the calls."""

    def __init__(self, tries: Sequence[Sequence[Group]]):
        self.tries = [list(t) for t in tries]
        self.calls = 0

    def __call__(self) -> list[Group]:
        self.calls += 1
        return self.tries[self.calls - 1]


def returns_of(group: Group) -> list[float]:
    return group[1]


def names(result: SamplingResult) -> list[str]:
    return [name for name, _ in result.groups]


def collect(tries, group_filter, *, batch=2, n=3, step=1, training=True):
    rollouts = Rollouts(tries)
    result = collect_groups(
        rollouts,
        returns_of,
        group_filter,
        train_batch_size=batch,
        group_size=n,
        global_step=step,
        training=training,
    )
    return result, rollouts.calls


# ---------------------------------------------------------------------------------------------
# is_uniform / select_groups
# ---------------------------------------------------------------------------------------------


def test_is_uniform_uses_exact_equality():
    assert is_uniform([10.0, 10.0, 10.0])
    assert is_uniform([0, 0.0, 0])
    assert is_uniform([5.0])
    assert not is_uniform([0.0, 10.0, 0.0])
    assert not is_uniform([1.0, 1.0 + 1e-12])
    assert not is_uniform([float("nan"), float("nan")])


def test_select_groups_regular_try_drops_uniform_groups():
    returns = [[10, 0, 10], [0, 0, 0], [10, 10, 10], [0, 10, 0]]
    assert select_groups(returns, remaining=12, group_size=3, last_try=False) == [0, 3]


def test_select_groups_regular_try_truncates_to_whole_groups():
    returns = [[1, 0], [0, 0], [0, 1], [2, 1], [1, 2]]
    assert select_groups(returns, remaining=4, group_size=2, last_try=False) == [0, 2]
    assert select_groups(returns, remaining=5, group_size=2, last_try=False) == [0, 2]
    assert select_groups(returns, remaining=1, group_size=2, last_try=False) == []
    assert select_groups(returns, remaining=0, group_size=2, last_try=True) == []


def test_select_groups_last_try_fills_with_uniform_groups_in_rollout_order():
    u, m = [3, 3], [0, 3]  # uniform, mixed
    # non-uniform [1, 3], then uniform groups 0 then 2 ... until ⌊7/2⌋ = 3 groups.
    assert select_groups([u, m, u, m, u], remaining=7, group_size=2, last_try=True) == [0, 1, 3]
    assert select_groups([u, m, u, m, u], remaining=7, group_size=2, last_try=False) == [1, 3]
    # Enough non-uniform groups: no fill, truncation to ⌊4/2⌋ = 2.
    assert select_groups([m, u, m, m], remaining=4, group_size=2, last_try=True) == [0, 2]
    # Fewer groups than needed: all of them.
    assert select_groups([u, m], remaining=10, group_size=2, last_try=True) == [0, 1]


def test_groups_without_their_failed_members():
    """docs/algorithms.md §3.0: a group gives the returns of its valid members only. [1, 2] (one
    of 3 failed) still differs; [5, 5] (a 0 failed) and [7] (two failed) are uniform."""
    groups = [[1, 2], [5, 5], [7], [0, 1, 0]]
    assert select_groups(groups, remaining=12, group_size=3, last_try=False) == [0, 3]
    assert select_groups(groups, remaining=9, group_size=3, last_try=True) == [0, 1, 3]


def test_select_groups_validates_sizes():
    with pytest.raises(ValueError, match=r"^group 1 has 4 episode returns but group_size=3$"):
        select_groups([[1, 2, 3], [1, 2, 3, 4]], remaining=6, group_size=3, last_try=False)
    with pytest.raises(ValueError, match="group_size must be >= 1"):
        select_groups([], remaining=6, group_size=0, last_try=False)
    with pytest.raises(ValueError, match="remaining must be >= 0"):
        select_groups([], remaining=-1, group_size=2, last_try=False)


@settings(max_examples=50, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.lists(st.sampled_from([0.0, 1.0]), min_size=n, max_size=n), max_size=8),
        )
    ),
    st.integers(0, 20),
    st.booleans(),
)
def test_select_groups_properties(sized_groups, remaining, last_try):
    n, groups = sized_groups
    kept = select_groups(groups, remaining, n, last_try)
    capacity = remaining // n
    mixed = [i for i, g in enumerate(groups) if not is_uniform(g)]
    assert kept == sorted(set(kept)) and all(0 <= i < len(groups) for i in kept)
    assert len(kept) <= capacity
    assert [i for i in kept if not is_uniform(groups[i])] == mixed[:capacity]
    if last_try:
        assert len(kept) == min(capacity, len(groups))
    else:
        assert all(not is_uniform(groups[i]) for i in kept)


# ---------------------------------------------------------------------------------------------
# collect_groups: TV-6, cold start, no filter, truncation
# ---------------------------------------------------------------------------------------------

A, B = ("a", [10.0, 0.0, 10.0]), ("b", [0.0, 0.0, 0.0])
C, D, E = ("c", [10.0, 10.0, 10.0]), ("d", [0.0, 10.0, 0.0]), ("e", [0.0, 0.0, 0.0])


def test_tv6_regular_tries():
    result, calls = collect([[A, B], [C, D], [A, D]], GroupFilter(max_num_gen_batches=3))
    assert names(result) == ["a", "d"]  # 3 + 3 = Q = 6: stop after try 2
    assert result.num_tries == 2 and result.num_kept_per_try == [1, 1] and calls == 2


def test_tv6_last_try_fills_with_first_uniform_group():
    result, calls = collect([[A, B], [C, E]], GroupFilter(max_num_gen_batches=2))
    assert names(result) == ["a", "c"]  # needed = 3 -> ⌊3/3⌋ = 1 group, the first uniform: c
    assert result.num_tries == 2 and result.num_kept_per_try == [1, 1] and calls == 2


def test_cold_start_steps_1_to_15_plain_16_filtered():
    cold = GroupFilter(max_num_gen_batches=3, cold_start_steps=15)
    for step in range(1, 16):
        result, calls = collect([[B, C]], cold, step=step)
        assert names(result) == ["b", "c"] and calls == 1, step
        assert result.num_tries == 1 and result.num_kept_per_try == [2]
    result, calls = collect([[B, C], [A, D]], cold, step=16)
    assert names(result) == ["a", "d"] and calls == 2
    assert result.num_kept_per_try == [0, 2]


def test_no_filter_or_not_training_returns_one_rollout_whole():
    for group_filter, training in ((None, True), (GroupFilter(), False)):
        result, calls = collect([[B, C, A]], group_filter, training=training)
        assert names(result) == ["b", "c", "a"] and calls == 1
        assert result == SamplingResult([B, C, A], 1, [3])


def test_one_try_over_filling_is_truncated_to_whole_groups():
    result, calls = collect([[A, D, ("f", [1.0, 2.0, 3.0])]], GroupFilter(), batch=2)
    assert names(result) == ["a", "d"] and calls == 1
    assert result.num_kept_per_try == [2]
    # Second try over-fills the remaining need of one group.
    result, calls = collect([[A, B], [D, C, ("f", [1.0, 2.0, 3.0])]], GroupFilter(), batch=2)
    assert names(result) == ["a", "d"] and result.num_kept_per_try == [1, 1]


def test_batch_may_end_smaller_than_target():
    # Each try yields one uniform group; the last try can fill only with what it has.
    result, calls = collect([[B], [C]], GroupFilter(max_num_gen_batches=2), batch=2)
    assert names(result) == ["c"] and result.num_kept_per_try == [0, 1] and calls == 2


def test_single_try_is_the_last_try():
    result, _ = collect([[B, C, A]], GroupFilter(max_num_gen_batches=1), batch=2)
    assert names(result) == ["b", "a"]  # a first, then fill with b; kept in rollout order
    assert result.num_kept_per_try == [2]


def test_collect_validates_group_size_and_settings():
    with pytest.raises(ValueError, match=r"^rollout try 2: group 1 has 4 episode returns"):
        collect([[B, C], [A, ("x", [1.0, 2.0, 3.0, 4.0])]], GroupFilter())
    with pytest.raises(ValueError, match="max_num_gen_batches must be >= 1, got 0"):
        collect([[A]], GroupFilter(max_num_gen_batches=0))
    with pytest.raises(ValueError, match="train_batch_size and group_size must be >= 1"):
        collect([[A]], GroupFilter(), batch=0)
