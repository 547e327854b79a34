"""Paired held-out comparisons (arlarena_jax.train.held_out): numbers worked by hand, and the
laws that hold for any pair of outcome lists."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arlarena_jax.train.held_out import (
    describe,
    held_out_path,
    paired_change,
    read_records,
    run_change,
    write_records,
)


def outcomes(wins: list[bool], first_seed: int = 100) -> list[dict]:
    return [
        {"seed": first_seed + i, "won": w, "return": float(w), "length": 4, "failed": False}
        for i, w in enumerate(wins)
    ]


def test_a_worked_example():
    """10 games: before wins 0-3, after wins 2-7. Per-game differences: -1 (games 0, 1), 0
    (2, 3, 8, 9), +1 (4-7): mean (4 - 2) / 10 = 0.2; deviations (-1.2)^2 x 2 + 0.2^2 x 4 +
    0.8^2 x 4 = 2.88 + 0.16 + 2.56 = 5.6, SE = sqrt(5.6 / 10 / 10) = 0.2366."""
    before = outcomes([i < 4 for i in range(10)])
    after = outcomes([2 <= i < 8 for i in range(10)])
    change = paired_change(before, after)
    assert change.n == 10 and change.before == 0.4 and change.after == 0.6
    assert change.change == pytest.approx(0.2, abs=1e-12)
    assert change.se == pytest.approx(math.sqrt(0.056), abs=1e-12)
    assert (change.gained, change.lost) == (4, 2)
    assert describe(change) == "+20.0 ± 23.7 points (paired SE; 4 games gained, 2 lost, of 10)"


def test_only_shared_seeds_count_and_failed_episodes_are_left_out():
    before = outcomes([True, False, False])  # seeds 100-102
    after = outcomes([True, True], first_seed=101)  # seeds 101-102
    after[1]["failed"] = True  # seed 102 lost to the infrastructure
    change = paired_change(before, after)
    assert (change.n, change.change, change.se) == (1, 1.0, 0.0)
    assert paired_change(before, outcomes([True], first_seed=7)) is None


@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=80))
def test_laws(pairs):
    """The change is the difference of the two success rates and equals (gained - lost) / n;
    swapping the evaluations negates it and keeps its SE; the SE lies in [0, 1]."""
    before = outcomes([a for a, _ in pairs])
    after = outcomes([b for _, b in pairs])
    forward, backward = paired_change(before, after), paired_change(after, before)
    assert forward.change == pytest.approx(forward.after - forward.before, abs=1e-12)
    assert backward.change == pytest.approx(-forward.change, abs=1e-12)
    assert backward.se == pytest.approx(forward.se, abs=1e-12)
    assert 0.0 <= forward.se <= 1.0
    assert forward.gained - forward.lost == round(forward.change * forward.n)


def test_a_run_pairs_its_first_and_last_evaluation(tmp_path):
    assert run_change(tmp_path) is None
    write_records(held_out_path(tmp_path, 0), outcomes([False, False, True, True]))
    assert run_change(tmp_path) is None  # one evaluation only
    write_records(held_out_path(tmp_path, 5), outcomes([False, False, False, True]))
    write_records(held_out_path(tmp_path, 10), outcomes([True, True, True, True]))
    change = run_change(tmp_path)
    assert (change.before, change.after, change.gained, change.lost) == (0.5, 1.0, 2, 0)
    assert read_records(held_out_path(tmp_path, 10))[0] == outcomes([True])[0]
