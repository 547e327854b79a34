"""One RL step, synchronous or asynchronous alike: take a batch, update, publish, and one
assembly of the step's metrics (:func:`step_metrics`).

A rollout source hands the step its batch (``take``) and receives the updated parameters
(``publish``): :class:`SyncRollouts` plays the batch in the step itself on the current
parameters; :class:`~arlarena_jax.train.async_rollouts.AsyncRollouts` takes it from the
producer thread, up to ``trainer.max_staleness`` updates behind.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import MutableMapping
from typing import Any, Protocol

import numpy as np

from arlarena_jax.device_turn import TURN
from arlarena_jax.rollout.metrics import rollout_metrics
from arlarena_jax.train.config import Config
from arlarena_jax.train.metrics import Timer
from arlarena_jax.train.process_stats import own_numbers, process_metrics
from arlarena_jax.train.processes import Exchange
from arlarena_jax.train.producer import staleness_metrics
from arlarena_jax.train.rl import collect_batch


@dataclasses.dataclass
class Batch:
    """What a step trains on: the kept groups (``rollout``), the last try, the number of tries,
    the rollout's timing splits (``rollout``, ``rollout/env``) and this process's environment
    steps. From the producer also the task RNG's state and the policy's call counter after it,
    the parameters' version it started on and the seconds the trainer and the producer waited
    for each other."""

    rollout: Any
    last: Any
    tries: int
    seconds: MutableMapping[str, float]
    env_steps: int = 0  # this process's environment steps (TimedEnvBatch.steps)
    rng: dict | None = None
    calls: int | None = None
    version: int | None = None
    trainer_wait_s: float = 0.0
    producer_wait_s: float = 0.0


class Rollouts(Protocol):
    def take(self, step: int, timer: Timer) -> Batch: ...

    def publish(self, step: int) -> None: ...


def step_metrics(
    step: int, update: dict[str, float], batch: Batch, timer: Timer, episode_metrics=None
) -> dict[str, float]:
    """The step's metrics: the update's, the rollout's (``rollout_metrics`` of the last try),
    the timing splits (``timer``'s and the batch's, with ``rollout/policy``: the rollout's
    non-environment part, prompts and sampling), the producer's (``async/…``: staleness, waits)
    when the batch came from it, ``batch/gen_tries`` and ``perf/response_tokens_per_s``."""
    seconds = batch.seconds
    # the synchronous step's splits are its timer's (a defaultdict): an environment that did not
    # play (on-device rollouts) is logged as 0 s there; the producer's copy leaves it out
    env = (
        seconds["rollout/env"]
        if isinstance(seconds, defaultdict)
        else seconds.get("rollout/env", 0.0)
    )
    seconds["rollout/policy"] = seconds["rollout"] - env
    metrics = dict(update)
    metrics |= rollout_metrics(batch.last, episode_metrics=episode_metrics)
    metrics |= timer.metrics() | {f"timing/{k}": v for k, v in seconds.items()}
    if batch.version is not None:
        metrics |= staleness_metrics(batch.rollout.rows, step, batch.version)
        metrics["async/trainer_wait_s"] = batch.trainer_wait_s
        metrics["async/producer_wait_s"] = batch.producer_wait_s
    metrics["batch/gen_tries"] = float(batch.tries)
    metrics["perf/response_tokens_per_s"] = metrics["batch/response_tokens"] / max(
        seconds["rollout"], 1e-9
    )
    return metrics


def rl_step(
    step: int,
    rollouts: Rollouts,
    learner,
    timer: Timer,
    episode_metrics=None,
    exchange: Exchange | None = None,
) -> dict[str, float]:
    """Step ``step``: the batch from ``rollouts``, the update (``learner``), the new parameters
    published to the rollouts (timed as ``sync``); the step's metrics (:func:`step_metrics`),
    with ``exchange`` every process's share of the step and its spread (``process/…``,
    :mod:`~arlarena_jax.train.process_stats`: a collective)."""
    timer.reset()
    before = None if exchange is None else exchange.traffic
    batch = rollouts.take(step, timer)
    with timer("update"), TURN:  # the device turn: asynchronous RL's producer decodes meanwhile
        update = learner.update(batch.rollout, timer)
    with timer("sync"), TURN:
        rollouts.publish(step)
    metrics = step_metrics(step, update, batch, timer, episode_metrics)
    if exchange is not None:
        seconds = {**timer.seconds, **batch.seconds}  # the producer's rollout splits, if any
        own = own_numbers(seconds, batch.env_steps, exchange.traffic - before)
        metrics |= process_metrics(exchange, own)
    return metrics


def play_batch(
    config: Config, pieces, rng: np.random.Generator, step: int, envs, collector
) -> tuple[Any, Any, int]:
    """Play step ``step``'s batch (``collect_batch``) on ``envs``: the kept groups, the last
    try, the tries; task seeds drawn from ``rng``."""
    c = config
    return collect_batch(
        envs,
        pieces.task_format,
        pieces.policy,
        pieces.objective,
        group_seeds=lambda _: rng.integers(0, 2**30, c.env.train_batch_size),
        group_size=c.env.group_size,
        max_turns=c.env.max_turns,
        history_length=c.env.history_length,
        rows=pieces.rows,
        global_step=step,
        collector=collector,
        exchange=pieces.exchange,
    )


class SyncRollouts:
    """The synchronous source: the step plays its batch on the current parameters (timed as
    ``rollout``, the environments' share as ``rollout/env``) and syncs the sampler after the
    update."""

    def __init__(self, config: Config, pieces, learner, rng: np.random.Generator) -> None:
        self.config, self.pieces, self.learner, self.rng = config, pieces, learner, rng

    def take(self, step: int, timer: Timer) -> Batch:
        p = self.pieces
        envs = p.envs("train")
        before = envs.steps
        with timer("rollout"):
            played = play_batch(self.config, p, self.rng, step, envs, p.collector)
        return Batch(*played, seconds=timer.seconds, env_steps=envs.steps - before)

    def publish(self, step: int) -> None:
        self.pieces.engine.update_params(self.learner.sampler_params())
