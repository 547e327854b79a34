"""Head to head on the test split, at each run's end point: a sweep with a ``protocol`` evaluates
each run's final policy once on the test games (``RUN_DIR/evaluations/test/episodes.jsonl``,
:mod:`arlarena_jax.arena.evaluate`). Two groups' runs of the same seed pair game by game there,
as on their own evaluation split (:mod:`~arlarena_jax.arena.report.versus`), each pair of groups
followed by its mean over the seeds both ran."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from arlarena_jax.arena.evaluate import EPISODES_FILE, EVALUATIONS_DIR
from arlarena_jax.arena.report.comparison import Comparison, one_seed, with_pooled
from arlarena_jax.arena.report.groups import Group
from arlarena_jax.arena.report.versus import by_seed
from arlarena_jax.arena.spec import TEST_EVALUATION
from arlarena_jax.train.held_out import paired_change, read_records


def test_episodes(run_dir: Path) -> list[dict] | None:
    """The run's per-episode outcomes on the test split at its end point; None without them."""
    path = Path(run_dir) / EVALUATIONS_DIR / TEST_EVALUATION / EPISODES_FILE
    return read_records(path) if path.is_file() else None


def end_point_comparisons(groups: Sequence[Group]) -> list[Comparison]:
    """Every later group against every earlier one on the test split, seed by seed where both
    runs were tested, then their mean over two or more seeds."""
    per_seed = []
    for j, later in enumerate(groups):
        for earlier in groups[:j]:
            mine, theirs = by_seed(later), by_seed(earlier)
            for seed in sorted(mine.keys() & theirs.keys()):
                a, b = test_episodes(mine[seed].path), test_episodes(theirs[seed].path)
                change = None if a is None or b is None else paired_change(b, a)
                if change is not None:
                    names = (later.label, earlier.label)
                    per_seed.append(one_seed(f"{names[0]} − {names[1]}", names, seed, change))
    return with_pooled(per_seed)
