"""Head to head: two methods' runs of one seed compared game by game on the same held-out games.

Runs of a sweep evaluate the same held-out seeds, so two methods' runs of one replicate seed are
paired game by game: their difference in success at a step both evaluated is d̄ = mean_i
(won_A,i − won_B,i) ± sqrt(mean_i (d_i − d̄)² / n) (:func:`arlarena_jax.train.held_out.
paired_change`). Games both runs win, or both lose, add nothing to the SE, so the paired SE is
smaller than the two evaluations' own SEs combined whenever the runs agree on most games.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

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


def _by_seed(group: Group) -> dict[int, Run]:
    """The group's runs by seed (the first run of a seed, should a group repeat one)."""
    runs: dict[int, Run] = {}
    for run in group.runs:
        runs.setdefault(run.seed, run)
    return runs


def run_versus(a: Run, b: Run) -> tuple[int, bool, PairedChange] | None:
    """``a`` − ``b`` at the newest step after 0 that both kept per-game outcomes for (whether it
    is the last of both, and the paired change); None without one or without shared games."""
    steps_a, steps_b = evaluated_steps(a.path), evaluated_steps(b.path)
    shared = sorted(set(steps_a) & set(steps_b) - {0})
    if not shared:
        return None
    step = shared[-1]
    change = paired_change(
        read_records(held_out_path(b.path, step)), read_records(held_out_path(a.path, step))
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
            mine, theirs = _by_seed(later), _by_seed(earlier)
            for seed in sorted(mine.keys() & theirs.keys()):
                found = run_versus(mine[seed], theirs[seed])
                if found is not None:
                    out.append(Versus(later.label, earlier.label, seed, *found))
    return out


def versus_cell(v: Versus) -> str:
    """E.g. ``+10.9 ± 6.3 (12/5)``, `` @step 8`` added where it is not both runs' last."""
    c = v.change
    text = f"{100 * c.change:+.1f} ± {100 * c.se:.1f} ({c.gained}/{c.lost})"
    return text if v.final else f"{text} @step {v.step}"


def versus_record(v: Versus) -> dict:
    """One comparison for summary.json (points, like the runs' paired change)."""
    c = v.change
    return {
        "a": v.a,
        "b": v.b,
        "seed": v.seed,
        "step": v.step,
        "final": v.final,
        "games": c.n,
        "difference": round(100 * c.change, 6),
        "se": round(100 * c.se, 6),
        "only_a_won": c.gained,
        "only_b_won": c.lost,
    }
