"""Each run's change over its start: its last held-out evaluation minus its step-0 one over the
same games (:func:`arlarena_jax.train.held_out.run_change`), seed by seed, and a group's mean
over its seeds where it has two or more, each with its power."""

from __future__ import annotations

from collections.abc import Sequence

from arlarena_jax.arena.report.comparison import Comparison, one_seed, with_pooled
from arlarena_jax.arena.report.groups import Group
from arlarena_jax.arena.report.versus import by_seed
from arlarena_jax.train.held_out import run_change

NAMES = ("final", "start")  # the verdict reads "final > start", "final < start"


def start_changes(groups: Sequence[Group]) -> list[Comparison]:
    """Final − start per run that kept both evaluations' per-game outcomes, in table order and
    seed order, each group followed by its mean over seeds where it has two or more."""
    per_seed = []
    for group in groups:
        for seed, run in sorted(by_seed(group).items()):
            change = run_change(run.path, run.eval_split)
            if change is not None:
                per_seed.append(one_seed(group.label, NAMES, seed, change))
    return with_pooled(per_seed)
