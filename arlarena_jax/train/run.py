"""A training run as one object: built once from a :class:`Config`, closed by ``with``.

:class:`Run` owns everything a run opens (the model, the sampler, environments, the TensorBoard
writer, the checkpointer) and its state, typed: :class:`TrainState` on device (checkpointed with
orbax) and :class:`HostState` on the host (JSON beside it). Its methods are the verbs of the
trainer (``arlarena_jax.train.loop.train``), of ``arlarena eval`` and of a sweep:

- :meth:`Run.resume` restores the newest checkpoint of the run directory;
- :meth:`Run.clone` runs behaviour cloning on expert demonstrations;
- :meth:`Run.evaluate` measures held-out success;
- :meth:`Run.step` is one RL iteration (rollout, update, sync, monitor, roll back, log);
- :meth:`Run.save` checkpoints, :meth:`Run.roll_back` restores the last good checkpoint;
- :meth:`Run.finish` evaluates, exports, records the run as complete (``run_dir/final.json``,
  :mod:`arlarena_jax.train.final`; :func:`complete_summary` reads it back) and returns the
  :class:`Summary`.

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
import dataclasses
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import nnx

from arlarena_jax.models.lora import merged_model
from arlarena_jax.rollout.loop import Rollout
from arlarena_jax.rollout.policy import SamplerPolicy
from arlarena_jax.train.async_rollouts import AsyncRollouts
from arlarena_jax.train.cloning import Cloning
from arlarena_jax.train.config import Config, resolve, rl_stream_seed
from arlarena_jax.train.config_io import dump_config
from arlarena_jax.train.critic import exportable_critic
from arlarena_jax.train.evaluation import Evaluation, evaluates_at, missed_evaluation
from arlarena_jax.train.export import export_critic, export_hf
from arlarena_jax.train.final import complete_record, final_record, write_final
from arlarena_jax.train.learner import Learner
from arlarena_jax.train.metrics import ConsoleProgress, MetricsWriter
from arlarena_jax.train.monitor import StabilityMonitor
from arlarena_jax.train.pieces import Pieces
from arlarena_jax.train.preemption import PreemptionGuard
from arlarena_jax.train.rl_step import SyncRollouts, rl_step
from arlarena_jax.train.run_checkpoints import RunCheckpoints
from arlarena_jax.train.run_lock import hold_run_dir
from arlarena_jax.train.run_state import HostState, TrainState
from arlarena_jax.train.stops import Stopped, Stops, on_any_process


@dataclasses.dataclass
class Summary:
    """What a run reports at the end (also printed as a table)."""

    success_after_cloning: float | None
    success_after_rl: float | None
    steps: int
    stability_events: int
    skipped_updates: int
    seconds: float
    run_dir: str
    history: list[dict[str, float]] = dataclasses.field(default_factory=list)
    final_eval: dict[str, float] = dataclasses.field(default_factory=dict)  # val/… at the end
    stopped: str | None = None  # e.g. "SIGTERM during cloning at step 37 of 260"; None: finished
    already_complete: bool = False  # the run was complete before this start: nothing was done


def complete_summary(config: Config) -> Summary | None:
    """The summary of a run of ``config`` that its ``final.json`` records as complete
    (:func:`~arlarena_jax.train.final.complete_record`), read without building anything; None
    when there is work to do."""
    t = resolve(config).trainer
    record = complete_record(t.run_dir, t.total_steps, t.export_hf)
    if record is None:
        return None
    final_eval = record.get("final_eval") or {}
    return Summary(
        record.get("sft_success"),
        final_eval.get("val/success_rate"),
        record["step"],
        int(record.get("stability_events", 0)),
        int(record.get("skipped", 0)),
        0.0,
        str(t.run_dir),
        final_eval=final_eval,
        already_complete=True,
    )


class Run:
    """One run of ``config`` (resolved: every method setting and the run directory pinned)."""

    def __init__(
        self,
        config: Config,
        *,
        console: bool = True,
        guard: PreemptionGuard | None = None,
        lock_wait_s: float = 0.0,
    ) -> None:
        """``lock_wait_s``: how long to wait for a run directory another process holds
        (:mod:`~arlarena_jax.train.run_lock`) before refusing it."""
        self.config = config = resolve(config)
        self.console, self.run_dir = console, Path(config.trainer.run_dir)
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
        self.pieces = p = Pieces(config, self.run_dir, closing, lambda: self.host.policy_calls)
        self.model, self.tokenizer, self.mesh = p.model, p.tokenizer, p.mesh
        self.learner = Learner(config, p.model, p.objective, p.tokenizer, p.mesh)
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
        self._cloned = False  # cloning finished in this process (its policy not saved yet)
        closing.callback(self.cloning.close)
        self.evaluation = Evaluation(config, self.run_dir, p)
        self.sync_rollouts = SyncRollouts(config, p, self.learner, self.rng)
        calls = lambda: self.host.policy_calls  # noqa: E731
        self.async_rollouts = AsyncRollouts(config, p, self.learner, self.rng, calls, closing)
        self._progress = ConsoleProgress(config.trainer.total_steps) if self.console else None

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

    @property
    def writer(self) -> MetricsWriter:
        return self.pieces.writer

    @property
    def engine(self):
        return self.pieces.engine

    @property
    def policy(self) -> SamplerPolicy:
        return self.pieces.policy

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
        dump_config(c, self.run_dir / "config.yaml")
        self.check_stop()
        resumed = self.resume()
        if resumed is None and c.sft.enabled:
            self.adopt_start() if c.sft.init_from else self.clone()
        evaluates = c.trainer.eval_at_start or c.sft.enabled
        unevaluated = resumed == 0 and evaluates and self.host.sft_success is None
        if resumed is None or unevaluated:  # unevaluated: stopped during that evaluation
            self._start_policy()
        elif resumed > 0 and self._missed_evaluation(resumed):  # a stop during it: redo it
            self.phase = "evaluation"
            self.evaluate(resumed)
        self.cloning.remove_checkpoint()
        self.phase = "RL"

    def _missed_evaluation(self, step: int) -> bool:
        """Whether the evaluation due at ``step`` is missing (process 0's files decide, for
        every process alike)."""
        c = self.config
        return evaluates_at(c, step) and on_any_process(missed_evaluation(c, self.run_dir, step))[0]

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
            self.policy.calls = self.host.policy_calls
            self.engine.update_params(self.learner.sampler_params())
        return step

    def clone(self) -> dict[str, float]:
        """Behaviour cloning on expert demonstrations (:class:`~arlarena_jax.train.cloning.
        Cloning`); the state is rebuilt from the cloned parameters."""
        metrics = self.cloning.clone()
        self.learner.state, self._cloned = None, True
        return metrics

    def adopt_start(self) -> None:
        """Take the cloned policy of the shared start in ``sft.init_from`` instead of cloning."""
        self.cloning.adopt(self.host)
        self.learner.state, self._cloned = None, True  # rebuilt from the start's parameters

    def _start_policy(self) -> None:
        """Evaluate the starting policy (with cloning or ``trainer.eval_at_start``); save it as
        step 0 (with cloning, or as the first rollback target)."""
        c = self.config
        if self.host.start_eval is not None:  # the shared start's evaluation of these parameters
            self.writer.scalars(0, self.host.start_eval)
        elif c.trainer.eval_at_start or c.sft.enabled:
            self.phase = "evaluation"
            self.host.start_eval = self.evaluate(0)
            self.host.sft_success = self.host.start_eval["val/success_rate"]
        if self.host.sft_success is not None and self.console:
            print(f"held-out success before RL: {100 * self.host.sft_success:.1f}%", flush=True)
        if c.sft.enabled or (c.trainer.total_steps > 0 and c.monitor.rollback):
            self.checkpoints.save_start(self.host)

    def step(self) -> dict[str, float]:
        """One RL iteration: rollout, update, sync, monitor (and roll back), evaluate, log."""
        self.train_state()
        self.host.step += 1
        step = self.host.step
        rollouts = self.async_rollouts if self.asynchronous else self.sync_rollouts
        episode_metrics = self.pieces.task_format.episode_metrics
        metrics = rl_step(step, rollouts, self.learner, self.pieces.timer, episode_metrics)
        new_events = self.monitor.observe(step, metrics)
        self.events += len(new_events)
        self.skipped += int(metrics.get("actor/skipped_steps", 0))
        if self.monitor.should_rollback:
            self.stop_producer()  # its batches came from discarded parameters
            metrics |= self.checkpoints.roll_back(step)
        metrics |= self.monitor.metrics()
        calls = self.async_rollouts.consumed_calls if self.asynchronous else self.policy.calls
        self.host.rng, self.host.policy_calls = self.rng.bit_generator.state, calls
        try:  # the step is complete: a stop during its evaluation saves it (a resume redoes it)
            if evaluates_at(self.config, step):
                metrics |= self.evaluate()  # written with the step's metrics
                self.evaluation.keep_episodes(step)
        finally:
            self._record(step, metrics, new_events)
        return metrics

    def _record(self, step: int, metrics: dict[str, float], events: list) -> None:
        self.writer.scalars(step, metrics)
        for event in events:
            self.writer.text(step, "stability", event.message)
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
            return self.evaluation.run(self.learner.sampler_params(), step, self.check_stop)

    @property
    def last_eval_episodes(self) -> list[dict[str, Any]]:
        """The last evaluation's outcomes, per episode."""
        return self.evaluation.last_episodes

    def stop_producer(self) -> None:
        """Stop and join the producer (:meth:`~arlarena_jax.train.async_rollouts.AsyncRollouts.
        stop`), if one runs."""
        self.async_rollouts.stop()

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
        as complete in ``run_dir/final.json`` (``arlarena_jax.train.final``); the summary. A
        stop during the export stops the run: the next start exports again (the final
        evaluation it reads from the record)."""
        t = self.config.trainer
        self.stop_producer()
        self.checkpoints.save_cloned(self.host)  # cloning only: keep the cloned policy
        if not self.done:
            return self._summary({})
        untouched = not self.history and not self._cloned  # trained no further in this start
        record = final_record(self.run_dir, self.host.step, self.host.sft_success, untouched)
        if t.total_steps > 0 and record["final_eval"] is None:
            self.phase = "the final evaluation"
            record["final_eval"] = self.evaluate(self.host.step)
            self._write_final(record)
        if t.export_hf:
            self.phase = "export"
            self.check_stop()
            self._export()
            self.check_stop()  # a stop that arrived during the export
            record["exported"] = True
        final_eval = record["final_eval"] or {}
        summary = self._summary(final_eval)
        record |= dict(
            complete=True,
            stability_events=summary.stability_events,
            skipped=summary.skipped_updates,
        )
        self._write_final(record)
        return summary

    def _write_final(self, record: dict[str, Any]) -> None:
        if jax.process_index() == 0:
            write_final(self.run_dir, record)

    def _export(self) -> None:
        """The Hugging Face export of the policy (``run_dir/hf``) and of the critic if any."""
        state = self.train_state()
        nnx.update(self.model, state.params)
        export_hf(self.run_dir / "hf", merged_model(self.model), self.tokenizer, self.config)
        if state.critic is not None:
            nnx.update(self.learner.critic_module, state.critic_params)
            critic = exportable_critic(self.learner.critic_module, self.model)
            export_critic(self.run_dir / "hf_critic", critic, self.tokenizer)

    def stopped(self, stop: Stopped) -> Summary:
        """After :class:`Stopped`: save the RL state if there is one (cloned or trained) that no
        checkpoint holds, wait for every save, and return the summary saying where it stopped."""
        self.stop_producer()
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
