"""A training run as one object: built once from a :class:`Config`, closed by ``with``.

:class:`Run` owns everything a run opens (the model, the sampler, environments, the TensorBoard
writer, the checkpointer) and its state, typed: :class:`TrainState` on device (checkpointed with
orbax) and :class:`HostState` on the host (JSON beside it). Its methods are the verbs of the
trainer (``arlarena_jax.train.loop.train``), of ``arlarena eval`` and of a sweep:

- :meth:`Run.resume` restores the newest checkpoint of the run directory;
- :meth:`Run.clone` runs behaviour cloning on expert demonstrations (or :meth:`Run.adopt_start`
  takes a shared start's), and :meth:`Run.continue_cloning` continues it (``sft.continue_steps``);
- :meth:`Run.evaluate` measures held-out success;
- :meth:`Run.step` is one RL iteration (rollout, update, sync, monitor, roll back, log);
- :meth:`Run.save` checkpoints (a step the stability monitor condemns rolls back to the last good
  checkpoint: :meth:`~arlarena_jax.train.run_checkpoints.RunCheckpoints.roll_back`);
- :meth:`Run.finish` evaluates, exports, records the run as complete (``run_dir/final.json``,
  :class:`~arlarena_jax.train.finish.Finish`; :func:`~arlarena_jax.train.finish.complete_summary`
  reads it back) and returns the :class:`~arlarena_jax.train.finish.Summary`.

Stopping: with a :class:`~arlarena_jax.train.preemption.PreemptionGuard` (``Run(config,
guard=guard)``), :meth:`Run.check_stop` is called at the safe points of every phase (between
demonstration chunks, after every cloning step, between evaluation chunks, after every RL step,
before and after the export) and raises :class:`Stopped` once SIGTERM or SIGINT has arrived; a
stopped cloning first saves its state (parameters, optimizer state, steps done) in
``run_dir/checkpoints_sft``, and :meth:`Run.stopped` saves the RL state once there is one. The
next start continues from there: from the RL checkpoints, else from the cloning checkpoint, which
is removed once the cloned policy is saved as step 0. An RL step saved by a stop during its
held-out evaluation (``trainer.eval_every``) is evaluated first on the next start.

Hard kills (SIGKILL, a lost node): cloning also saves its state every ``sft.save_every_s`` seconds
of cloning and after its last step, and its demonstrations are kept in
``run_dir/demonstrations.jsonl`` (with a hash of the ``env`` settings and seeds that made them)
until step 0 is saved, so a killed cloning goes on from its newest save without playing the
expert again.

Only what a command uses is built: ``arlarena eval`` opens no writer and no training
environments. Training task seeds come from a NumPy generator seeded by ``trainer.seed`` (or
``trainer.rl_seed``: :func:`~arlarena_jax.train.config.rl_stream_seed`) and restored on
resume; demonstration and evaluation seeds come from disjoint blocks (``build``).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

from arlarena_jax.rollout.loop import Rollout
from arlarena_jax.train.async_rollouts import AsyncRollouts
from arlarena_jax.train.cloning import Cloning
from arlarena_jax.train.config import Config
from arlarena_jax.train.config_io import dump_config
from arlarena_jax.train.evaluation import Evaluation, evaluates_at
from arlarena_jax.train.finish import Finish, Summary
from arlarena_jax.train.learner import Learner
from arlarena_jax.train.metrics import ConsoleProgress
from arlarena_jax.train.monitor import StabilityMonitor
from arlarena_jax.train.pieces import Pieces
from arlarena_jax.train.preemption import PreemptionGuard
from arlarena_jax.train.resolution import Resolved, resolve_run, rl_stream_seed
from arlarena_jax.train.rl_step import SyncRollouts, rl_step
from arlarena_jax.train.run_checkpoints import RunCheckpoints
from arlarena_jax.train.run_lock import hold_run_dir
from arlarena_jax.train.run_state import HostState, TrainState
from arlarena_jax.train.stops import Stopped, Stops


class Run:
    """One run of ``config`` (resolved: every method setting and the run directory pinned)."""

    def __init__(
        self,
        config: Config | Resolved,
        *,
        console: bool = True,
        guard: PreemptionGuard | None = None,
        lock_wait_s: float = 0.0,
    ) -> None:
        """``lock_wait_s``: how long to wait for a run directory another process holds
        (:mod:`~arlarena_jax.train.run_lock`) before refusing it."""
        self.resolved = resolve_run(config)  # once: every piece reads this resolution
        self.config = config = self.resolved.config
        # several processes: process 0 alone prints the progress (a pod's launcher gathers every
        # host's output; the others print only their errors and stop line)
        self.console = console and jax.process_index() == 0
        self.run_dir = Path(config.trainer.run_dir)
        self.started = time.perf_counter()
        self.stops = Stops(guard, lambda: (self.host.step, config.trainer.total_steps))
        self._closing = contextlib.ExitStack()
        # before anything is written
        lock = hold_run_dir(self.run_dir, jax.process_index(), wait_s=lock_wait_s)
        if lock is not None:
            self._closing.callback(lock.release)
        try:
            self._build(config)
        except BaseException:
            self._closing.close()  # a start that fails releases the directory
            raise

    def _build(self, config: Config) -> None:
        """The run's pieces and collaborators (see :meth:`__init__`)."""
        closing = self._closing
        self.pieces = p = Pieces(
            self.resolved, self.run_dir, closing, lambda: self.host.policy_calls
        )
        self.model, self.tokenizer, self.mesh = p.model, p.tokenizer, p.mesh
        layout = lambda: p.engine.param_layout  # noqa: E731 (the sampler: built on first use)
        self.learner = Learner(
            config, p.model, p.objective, p.tokenizer, p.mesh, sampler_layout=layout
        )
        self.monitor = StabilityMonitor(config.monitor)
        self.checkpoints = RunCheckpoints(
            config, self.run_dir, closing, self.learner, self.monitor, p
        )
        self.checkpointer = self.checkpoints.checkpointer
        self.rng = np.random.default_rng(rl_stream_seed(config))
        self.host = HostState(rng=self.rng.bit_generator.state)  # step 0's, as a checkpoint
        self.history: list[dict[str, float]] = []
        self.events = self.skipped = 0
        self.cloning = Cloning(config, self.run_dir, p, self.stops, self.console)
        self.continuing = None  # continued cloning (sft.continue_steps), after the start's
        if config.sft.continue_steps:
            args = (config, self.run_dir, p, self.stops, self.console)
            self.continuing = Cloning(*args, continued=True)
            closing.callback(self.continuing.close)
        self._cloned = False  # cloning finished in this process (its policy not saved yet)
        closing.callback(self.cloning.close)
        self.evaluation = Evaluation(config, self.run_dir, p)
        self.sync_rollouts = SyncRollouts(config, p, self.learner, self.rng)
        calls = lambda: self.host.policy_calls  # noqa: E731
        self.async_rollouts = AsyncRollouts(config, p, self.learner, self.rng, calls, closing)
        self._progress = ConsoleProgress(config.trainer.total_steps) if self.console else None
        evaluate = lambda step: self.evaluate(step)  # noqa: E731 (looked up at each call)
        self.finishing = Finish(config, self.run_dir, self.learner, p, self.stops, evaluate)

    # -- lifetime -------------------------------------------------------------------------------

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close what was opened (environments, writer, checkpointer), in reverse order."""
        self._closing.close()

    @property
    def phase(self) -> str:
        return self.stops.phase

    @phase.setter
    def phase(self, value: str) -> None:
        self.stops.phase = value

    def train_state(self) -> TrainState:
        """The device state, first built from the model's current parameters."""
        return self.learner.train_state()

    @property
    def done(self) -> bool:
        return self.host.step >= self.config.trainer.total_steps

    @property
    def asynchronous(self) -> bool:
        """Whether RL steps take their batches from the producer thread (docs/architecture.md)."""
        return self.config.trainer.max_staleness > 0

    # -- the story: start, step, save, check_stop, finish ----------------------------------------

    def start(self) -> None:
        """Dump the config; resume, or clone (if enabled; a stopped cloning continues) and
        evaluate the starting policy, saved as step 0 with cloning or as a rollback target."""
        c = self.config
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if jax.process_index() == 0:
            dump_config(c, self.run_dir / "config.yaml")
        self.check_stop()
        resumed = self.resume()
        if resumed is None and c.sft.enabled:
            self.adopt_start() if c.sft.init_from else self.clone()
            if self.continuing is not None:
                self.continue_cloning()
        evaluates = c.trainer.eval_at_start or c.sft.enabled
        unevaluated = resumed == 0 and evaluates and self.host.sft_success is None
        if resumed is None or unevaluated:  # unevaluated: stopped during that evaluation
            self._start_policy()
        elif resumed > 0 and self.evaluation.missed(resumed):  # a stop during it: redo it
            self.phase = "evaluation"
            self.evaluate(resumed)
        self.cloning.remove_checkpoint()
        if self.continuing is not None:
            self.continuing.remove_checkpoint()
        self.phase = "RL"

    def resume(self, step: int | None = None) -> int | None:
        """Restore the newest checkpoint that verifies and restores (device and host state); its
        step, or None. A newer one that fails to restore is set aside, with one line on stderr
        naming its file and why (missing, truncated or unreadable). ``step``: restore that one
        instead (an evaluation of an earlier policy; nothing is set aside)."""
        restored = self.checkpoints.restore(step)
        if restored is None:
            return None
        step, host = restored
        self.host = HostState(**host)
        self.rng.bit_generator.state = self.host.rng
        if self.pieces.sampler is not None:
            self.pieces.policy.calls = self.host.policy_calls
            self.pieces.engine.update_params(self.learner.sampler_params())
        return step

    def clone(self) -> dict[str, float]:
        """Behaviour cloning on expert demonstrations (:class:`~arlarena_jax.train.cloning.
        Cloning`); the state is rebuilt from the cloned parameters."""
        metrics = self.cloning.clone()
        self.learner.state, self._cloned = None, True
        return metrics

    def adopt_start(self) -> None:
        """Take the cloned policy of the shared start in ``sft.init_from`` instead of cloning (and
        its evaluation, unless cloning continues from it)."""
        self.cloning.adopt(self.host, evaluation=self.continuing is None)
        self.learner.state, self._cloned = None, True  # rebuilt from the start's parameters

    def continue_cloning(self) -> dict[str, float]:
        """``sft.continue_steps`` more cloning steps from the start's policy, a fresh optimizer
        (a stopped one continues from ``run_dir/checkpoints_sft_continued``)."""
        self._cloned = False  # the policy before it is not this run's start: a stop saves none
        metrics = self.continuing.clone()
        self.learner.state, self._cloned = None, True
        return metrics

    def _start_policy(self) -> None:
        """Evaluate the starting policy (with cloning or ``trainer.eval_at_start``); save it as
        step 0 (with cloning, or as the first rollback target)."""
        c = self.config
        if self.host.start_eval is not None:  # the shared start's evaluation of these parameters
            self.pieces.writer.scalars(0, self.host.start_eval)
        elif c.trainer.eval_at_start or c.sft.enabled:
            self.phase = "evaluation"
            self.host.start_eval = self.evaluate(0)
            self.host.sft_success = self.host.start_eval["val/success_rate"]
        if self.host.sft_success is not None and self.console:
            split, success = c.trainer.eval_split, 100 * self.host.sft_success
            print(f"held-out success before RL ({split}): {success:.1f}%", flush=True)
        if c.sft.enabled or (c.trainer.total_steps > 0 and c.monitor.rollback):
            self.checkpoints.save_start(self.host)

    def step(self) -> dict[str, float]:
        """One RL iteration: rollout, update, sync, monitor (and roll back), evaluate, log."""
        self.train_state()
        self.host.step += 1
        step = self.host.step
        rollouts = self.async_rollouts if self.asynchronous else self.sync_rollouts
        p = self.pieces
        episode_metrics = p.task_format.episode_metrics
        metrics = rl_step(step, rollouts, self.learner, p.timer, episode_metrics, p.exchange)
        new_events = self.monitor.observe(step, metrics)
        self.events += len(new_events)
        self.skipped += int(metrics.get("actor/skipped_steps", 0))
        if self.monitor.should_rollback:
            self.async_rollouts.stop()  # its batches came from discarded parameters
            metrics |= self.checkpoints.roll_back(step)
        metrics |= self.monitor.metrics()
        calls = (
            self.async_rollouts.consumed_calls if self.asynchronous else self.pieces.policy.calls
        )
        self.host.rng, self.host.policy_calls = self.rng.bit_generator.state, calls
        try:  # the step is complete: a stop during its evaluation saves it (a resume redoes it)
            if evaluates_at(self.config, step):
                metrics |= self.evaluate()  # written with the step's metrics
                self.evaluation.keep_episodes(step)
        finally:
            self._record(step, metrics, new_events)
        return metrics

    def _record(self, step: int, metrics: dict[str, float], events: list) -> None:
        self.pieces.writer.scalars(step, metrics)
        for event in events:
            self.pieces.writer.text(step, "stability", event.message)
        self.history.append({"step": float(step), **metrics})
        if self._progress is not None:
            self._progress.update(step, metrics)

    def evaluate(self, step: int | None = None) -> dict[str, float]:
        """Held-out success of the current parameters (``val/…``); written at ``step`` if given."""
        return self.evaluate_rollout(step)[0]

    def evaluate_rollout(self, step: int | None = None) -> tuple[dict[str, float], Rollout]:
        """:meth:`evaluate`, and the held-out rollout itself (turn by turn, for transcripts).
        Under asynchronous RL the producer is paused meanwhile (the engine is shared)."""
        with self.async_rollouts.paused():
            chunks = self.stops.check_between_chunks
            return self.evaluation.run(self.learner.sampler_params(), step, chunks)

    @property
    def last_eval_episodes(self) -> list[dict[str, Any]]:
        """The last evaluation's outcomes, per episode."""
        return self.evaluation.last_episodes

    def save(self, *, force: bool = False) -> bool:
        """Checkpoint the state at the current step if due (or ``force``). The metrics written so
        far are flushed to disk first: every step a checkpoint covers keeps its scalars."""
        return self.checkpoints.save(self.host, force=force)

    def check_stop(self, at: tuple[int, int] | None = None) -> None:
        """A safe point: once SIGTERM or SIGINT has arrived, raise :class:`Stopped`, naming the
        signal, the phase and ``at`` (step, of steps; default: the RL step, of total_steps)."""
        self.stops.check(at)

    def finish(self) -> Summary:
        """Wait for checkpoints; at the end of the schedule evaluate, export and record the run
        as complete in ``run_dir/final.json`` (:class:`~arlarena_jax.train.finish.Finish`); the
        summary. A stop during the export stops the run: the next start exports again (the final
        evaluation it reads from the record)."""
        self.async_rollouts.stop()
        self.checkpoints.save_cloned(self.host)  # cloning only: keep the cloned policy
        if not self.done:
            return self._summary({})
        untouched = not self.history and not self._cloned  # trained no further in this start
        record = self.finishing.evaluate_and_export(self.host, untouched)
        summary = self._summary(record["final_eval"] or {})
        self.finishing.record_complete(record, summary)
        return summary

    def stopped(self, stop: Stopped) -> Summary:
        """After :class:`Stopped`: save the RL state if there is one (cloned or trained) that no
        checkpoint holds, wait for every save, and return the summary saying where it stopped."""
        self.async_rollouts.stop()
        self.checkpoints.save_unsaved(self.host, cloned=self._cloned)
        return self._summary({}, stopped=str(stop))

    def _summary(self, final_eval: dict[str, float], stopped: str | None = None) -> Summary:
        return Summary(
            self.host.sft_success,
            final_eval.get("val/success_rate"),
            self.host.step,
            self.events,
            self.skipped,
            time.perf_counter() - self.started,
            str(self.run_dir),
            self.history,
            final_eval,
            stopped,
        )
