"""Head to head: two methods' runs of one seed compared game by game on the same held-out games.

Runs of a sweep evaluate the same held-out seeds, so two methods' runs of one replicate seed are
paired game by game: their difference in success at a step both evaluated is d̄ = mean_i
(won_A,i − won_B,i) ± sqrt(mean_i (d_i − d̄)² / n) (:func:`arlarena_jax.train.held_out.
paired_change`). Games both runs win, or both lose, add nothing to the SE, so the paired SE is
smaller than the two evaluations' own SEs combined whenever the runs agree on most games.
Where the two methods share two or more seeds, the per-seed differences are averaged too, with
their SE over seeds (:func:`~arlarena_jax.arena.report.comparison.pooled`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from arlarena_jax.arena.report.comparison import Comparison, one_seed, record, with_pooled
from arlarena_jax.arena.report.groups import Group
from arlarena_jax.arena.report.runs import Run
from arlarena_jax.train.held_out import (
    PairedChange,
    evaluated_steps,
    held_out_path,
    paired_change,
    read_records,
)


@dataclasses.dataclass(frozen=True)
class Versus:
    """``a`` − ``b`` in held-out success at ``step``, for the runs of replicate ``seed``;
    ``change.gained``: games only ``a`` won, ``change.lost``: games only ``b`` won."""

    a: str  # group label
    b: str
    seed: int
    step: int
    final: bool  # step is the last evaluation of both runs
    change: PairedChange


def by_seed(group: Group) -> dict[int, Run]:
    """The group's runs by seed (the first run of a seed, should a group repeat one)."""
    runs: dict[int, Run] = {}
    for run in group.runs:
        runs.setdefault(run.seed, run)
    return runs


def run_versus(a: Run, b: Run) -> tuple[int, bool, PairedChange] | None:
    """``a`` − ``b`` at the newest step after 0 that both kept per-game outcomes for (whether it
    is the last of both, and the paired change); None without one, without shared games, or
    when the two runs evaluated on different splits."""
    split = a.eval_split
    if b.eval_split != split:
        return None
    steps_a, steps_b = evaluated_steps(a.path, split), evaluated_steps(b.path, split)
    shared = sorted(set(steps_a) & set(steps_b) - {0})
    if not shared:
        return None
    step = shared[-1]
    change = paired_change(
        read_records(held_out_path(b.path, step, split)),
        read_records(held_out_path(a.path, step, split)),
    )
    if change is None:
        return None
    return step, step == steps_a[-1] == steps_b[-1], change


def head_to_head(groups: Sequence[Group]) -> list[Versus]:
    """Every later group against every earlier one (table order, so against the baseline
    first), seed by seed where both groups ran the seed and kept per-game outcomes."""
    out = []
    for j, later in enumerate(groups):
        for earlier in groups[:j]:
            mine, theirs = by_seed(later), by_seed(earlier)
            for seed in sorted(mine.keys() & theirs.keys()):
                found = run_versus(mine[seed], theirs[seed])
                if found is not None:
                    out.append(Versus(later.label, earlier.label, seed, *found))
    return out


def comparison(v: Versus) -> Comparison:
    """The head-to-head ``v`` as a one-seed :class:`Comparison` over its games."""
    step = None if v.final else v.step
    return one_seed(f"{v.a} − {v.b}", (v.a, v.b), v.seed, v.change, step, v.final)


def comparisons(groups: Sequence[Group]) -> list[Comparison]:
    """:func:`head_to_head` seed by seed, each pair of methods followed by its mean over the
    seeds both ran where they are two or more."""
    return with_pooled([comparison(v) for v in head_to_head(groups)])


def versus_record(v: Versus) -> dict:
    """One seed's comparison for summary.json (points, like the runs' paired change), with its
    power (:func:`~arlarena_jax.arena.report.comparison.record`)."""
    return record(comparison(v)) | {
        "seed": v.seed,
        "step": v.step,
        "final": v.final,
        "games": v.change.n,
    }
