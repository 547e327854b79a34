"""Evaluation on held-out tasks: one episode per seed, evaluation sampling, the metrics of
docs/environments.md §1.7.

Validation in the original (docs/environments.md §5.3) runs the same turn loop with group size 1 and
the evaluation sampling settings; ``val/success_rate`` is the mean of ``won`` over trajectories and
``val/text/test_score`` the mean episode return over rows. Seeds run in chunks of the batch's size
(the last chunk padded with repeats of its first seed, whose results are dropped), so any number
of held-out seeds evaluates on a fixed-size environment batch.

An evaluation is one batch for sampling: it draws one sample seed from the policy's stream and
every chunk plays with it, episode ``k`` (the k-th seed) as trajectory ``k``
(:mod:`arlarena_jax.rollout.keys`). So the outcomes do not depend on the chunk size, nor on
which chunks a process plays.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from arlarena_jax.rollout.chunks import seed_chunks
from arlarena_jax.rollout.keys import draw_sample_seed
from arlarena_jax.rollout.loop import Rollout, collect
from arlarena_jax.rollout.metrics import rollout_metrics
from arlarena_jax.rollout.policy import Policy
from envs.base import EnvBatch
from envs.text import TaskFormat


def evaluate(
    envs: EnvBatch,
    task_format: TaskFormat,
    policy: Policy,
    *,
    seeds: Sequence[int],
    max_turns: int,
    history_length: int = 2,
    rows: Any = None,
    before_chunk: Callable[[], None] | None = None,
    collector: Callable[..., Rollout] = collect,
    first_index: int = 0,
    whole: Callable[[Rollout], Rollout] | None = None,
) -> tuple[dict[str, float], Rollout]:
    """``val/…`` metrics over one episode per seed, and the merged rollout. ``before_chunk()``
    runs before each chunk (the trainer's stop check: it raises to abandon the evaluation);
    ``collector`` plays each chunk (``collect``, or an on-device rollout's ``collect``).

    Several processes: ``seeds`` are this process's block of the evaluation, whose episodes are
    numbered from ``first_index``, and ``whole`` gathers every process's merged rollout into the
    evaluation's (the metrics are the whole evaluation's)."""
    if not seeds and whole is None:  # a process's block may be empty (more processes than seeds)
        raise ValueError("evaluate needs at least one seed")
    kept_rows, trajectories = [], []
    sample_seed = draw_sample_seed(policy)  # one for the whole evaluation (module doc)
    for chunk in seed_chunks(seeds, envs.num_envs):
        if before_chunk is not None:
            before_chunk()
        rollout = collector(
            envs,
            task_format,
            policy,
            group_seeds=chunk.seeds,
            group_size=1,
            max_turns=max_turns,
            history_length=history_length,
            rows=rows,
            training=False,
            group_offset=first_index + chunk.start,
            sample_seed=sample_seed,
        )
        kept = {t.trajectory for t in rollout.trajectories[: chunk.real]}
        trajectories += rollout.trajectories[: chunk.real]
        kept_rows += [r for r in rollout.rows if r.trajectory in kept]
    merged = Rollout(kept_rows, trajectories, 1, task_format.name)
    merged = merged if whole is None else whole(merged)
    metrics = rollout_metrics(merged, training=False, episode_metrics=task_format.episode_metrics)
    return metrics, merged
