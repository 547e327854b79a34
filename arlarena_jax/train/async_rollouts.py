"""Asynchronous RL's rollout source (``trainer.max_staleness`` k > 0; docs/architecture.md):
a :class:`~arlarena_jax.train.producer.Producer` thread plays the batches, at most k updates
behind the trainer, on its own copy of the task RNG; the trainer takes them in order.

The producer starts at the first step that needs it, from the task RNG and the policy's call
counter of the last consumed batch, and stops with the run, before an evaluation's rollback and on
a stop (its queued batches dropped: the next step starts a new one from the last consumed
batch). Under ``trainer.partial_rollouts`` a rollout switches to newer parameters before a decode
call (:meth:`AsyncRollouts.switch_to_newest`).
"""

from __future__ import annotations

import contextlib
from typing import Any

import jax
import numpy as np

from arlarena_jax.train.config import Config
from arlarena_jax.train.metrics import TimedEnvBatch, Timer
from arlarena_jax.train.producer import Producer
from arlarena_jax.train.rl_step import Batch, play_batch


class AsyncRollouts:
    """The producer side of a run. ``pieces``: the run's sampler, environments and formats
    (``engine``, ``policy``, ``collector``, ``envs``, …); ``learner``: the parameters to
    publish; ``rng``: the run's task RNG (set to the consumed batch's); ``first_calls``: the
    policy's call counter to start from; ``closing``: where the producer's stop is registered
    (before the environments close)."""

    def __init__(
        self, config: Config, pieces, learner, rng: np.random.Generator, first_calls, closing
    ) -> None:
        self.config, self.pieces, self.learner, self.rng = config, pieces, learner, rng
        self.first_calls, self.closing = first_calls, closing
        self.producer: Producer | None = None  # while it runs
        self.consumed_calls = 0  # the policy's call counter after the last consumed batch
        self.producing_step = 0  # the step whose batch the producer plays (for tests)

    def take(self, step: int, timer: Timer) -> Batch:
        """Step ``step``'s batch from the producer (started if not running; the wait timed as
        ``wait``); the task RNG and the call counter move to those after it."""
        producer = self.start(step)
        with timer("wait"):
            produced, waited = producer.take(step)
        batch = produced.value
        self.rng.bit_generator.state, self.consumed_calls = batch.rng, batch.calls
        batch.version, batch.trainer_wait_s = produced.version, waited
        batch.producer_wait_s = produced.wait_s
        return batch

    def publish(self, step: int) -> None:
        """Publish the updated parameters (an on-device copy) as version ``step``."""
        # ready before the device turn is given back (arlarena_jax.device_turn)
        self.producer.publish(jax.block_until_ready(self.learner.sampler_copy()), step)

    def paused(self):
        """A context in which the producer does not play (the engine is shared)."""
        return self.producer.paused() if self.producer else contextlib.nullcontext()

    def start(self, step: int) -> Producer:
        """The producer (started at ``step`` from the task RNG and the policy's call counter
        of the last consumed batch, if not running); stopped with the run."""
        if self.producer is not None:
            return self.producer
        c, p = self.config, self.pieces
        envs = TimedEnvBatch(p.envs("train").envs, Timer())  # opened here, closed after it
        collector, policy = p.collector, p.policy
        policy.calls = self.consumed_calls = self.first_calls()
        rng = np.random.default_rng()
        rng.bit_generator.state = self.rng.bit_generator.state

        def produce(at: int, params: Any, version: int) -> Batch:
            return self.produce(envs, rng, collector, at, params, version)

        self.producer = Producer(
            produce,
            max_staleness=c.trainer.max_staleness,
            first_step=step,
            last_step=c.trainer.total_steps,
            params=self.learner.sampler_copy(),
            version=step - 1,
        )
        self.closing.callback(self.stop)  # before the environments close
        return self.producer

    def produce(self, envs, rng, collector, step: int, params: Any, version: int) -> Batch:
        """The producer thread: play step ``step``'s batch on ``params`` of ``version``."""
        c, engine, timer = self.config, self.pieces.engine, envs.timer
        engine.update_params(params)
        engine.params_version, self.producing_step = version, step
        timer.reset()
        before = envs.steps
        if c.trainer.partial_rollouts:
            engine.before_decode = self.switch_to_newest
        try:
            with timer("rollout"):
                rollout, last, tries = play_batch(c, self.pieces, rng, step, envs, collector)
        finally:
            engine.before_decode = None
        state = rng.bit_generator.state
        calls = self.pieces.policy.calls
        seconds, env_steps = dict(timer.seconds), envs.steps - before
        return Batch(rollout, last, tries, seconds, env_steps, rng=state, calls=calls)

    def switch_to_newest(self) -> None:
        """Partial rollouts' safe point (before a decode call): take newer parameters."""
        if self.producer is None:
            return
        params, version = self.producer.newest()
        engine = self.pieces.engine
        if version > engine.params_version:
            engine.update_params(params)
            engine.params_version = version

    def stop(self) -> None:
        """Stop and join the producer (its queued batches dropped); the next step starts a new
        one from the last consumed batch's task RNG and call counter."""
        producer, self.producer = self.producer, None
        if producer is not None:
            producer.stop()
            self.pieces.policy.calls = self.consumed_calls
