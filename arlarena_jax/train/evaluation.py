"""Held-out evaluation of a run: its schedule (:func:`evaluates_at`), the repair of an evaluation
a stop interrupted (:func:`missed_evaluation`), and the evaluation itself (:class:`Evaluation`).

Every evaluation plays the seeds of ``trainer.eval_split`` (:func:`eval_seeds`) on its own copy of
the policy (:func:`eval_policy`), so equal parameters score equally, and its per-episode outcomes
are kept as ``held_out/<split>/step_NNNNNN.jsonl`` when written at a step.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax

from arlarena_jax.rollout.loop import Rollout
from arlarena_jax.rollout.policy import SamplerPolicy
from arlarena_jax.train import build
from arlarena_jax.train.config import Config
from arlarena_jax.train.evaluate import evaluate
from arlarena_jax.train.held_out import episode_records, held_out_path, write_records
from arlarena_jax.train.process_shares import block, whole_rollout
from arlarena_jax.train.stops import on_any_process


def eval_seeds(config: Config) -> list[int]:
    """The seeds of the run's evaluation split (``build.eval_seeds``)."""
    return build.eval_seeds(config)


def eval_policy(policy: SamplerPolicy, config: Config) -> SamplerPolicy:
    """The evaluation copy of the policy: its own seed stream from call 0, so evaluation never
    shifts the training rollouts' seeds (a resumed run matches an uninterrupted one), equal
    parameters score equally, and ``arlarena eval`` reproduces the trainer's numbers."""
    return dataclasses.replace(policy, seed=config.trainer.seed + 1, calls=0)


def evaluates_at(config: Config, step: int) -> bool:
    """Whether RL step ``step`` ends with a held-out evaluation (every ``trainer.eval_every``
    steps; the last step's is the final evaluation)."""
    t = config.trainer
    return bool(t.eval_every) and step % t.eval_every == 0 and step < t.total_steps


def missed_evaluation(config: Config, run_dir: Path, step: int) -> bool:
    """Whether the held-out evaluation due at RL step ``step`` is missing from ``run_dir`` (no
    ``held_out`` file): a stop during it saved the step without it. Redone, it is the evaluation
    the uninterrupted run made (evaluation plays its own seed stream from call 0). Process 0's
    files decide; the caller makes it a collective."""
    if not evaluates_at(config, step):
        return False
    kept = held_out_path(run_dir, step, config.trainer.eval_split)
    return jax.process_index() == 0 and not kept.exists()


class Evaluation:
    """Evaluations of ``pieces``' policy on ``trainer.eval_split``'s environments (opened once):
    their metrics (``val/…``), written at a step if given, and the last one's episodes."""

    def __init__(self, config: Config, run_dir: Path, pieces) -> None:
        self.config, self.run_dir, self.pieces = config, run_dir, pieces
        self.last_episodes: list[dict[str, Any]] = []  # the last evaluation's, per episode

    def run(self, params, step: int | None, before_chunk) -> tuple[dict[str, float], Rollout]:
        """Evaluate the sampler's ``params`` (``before_chunk``: a safe point between chunks);
        the metrics and the held-out rollout itself (turn by turn, for transcripts)."""
        c, p, x = self.config, self.pieces, self.pieces.exchange
        p.engine.update_params(params)
        seeds = eval_seeds(c)
        mine = block(len(seeds), x.index, x.count)  # this process's episodes (process_shares)
        metrics, rollout = evaluate(
            p.envs("eval"),
            p.task_format,
            eval_policy(p.policy, c),
            seeds=seeds[mine.start : mine.stop],
            max_turns=c.env.max_turns,
            history_length=c.env.history_length,
            rows=p.rows,
            before_chunk=before_chunk,
            collector=p.collector,
            first_index=mine.start,
            whole=lambda part: whole_rollout(x, "eval", part, 0),
        )
        self.last_episodes = episode_records(rollout.trajectories, seeds)
        if step is not None:
            p.writer.scalars(step, metrics)
            self.keep_episodes(step)
        return metrics, rollout

    def missed(self, step: int) -> bool:
        """Whether the evaluation due at RL step ``step`` is missing (:func:`missed_evaluation`;
        process 0's files decide, for every process alike)."""
        c = self.config
        return evaluates_at(c, step) and on_any_process(missed_evaluation(c, self.run_dir, step))[0]

    def keep_episodes(self, step: int) -> None:
        """The last evaluation's per-episode outcomes, as ``held_out/<split>/step_NNNNNN.jsonl``."""
        if jax.process_index() == 0:
            path = held_out_path(self.run_dir, step, self.config.trainer.eval_split)
            write_records(path, self.last_episodes)
