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

Stopping: with a :class:`~arlarena_jax.train.checkpoint.PreemptionGuard` (``Run(config,
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
import hashlib
import json
import math
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from arlarena_jax.models.lora import (
    frozen_part,
    join_trainable,
    merged_model,
    sampler_params,
    split_trainable,
    trainable_part,
)
from arlarena_jax.objectives.compose import Input
from arlarena_jax.rollout.loop import Rollout, collect
from arlarena_jax.rollout.metrics import rollout_metrics
from arlarena_jax.rollout.policy import SamplerPolicy
from arlarena_jax.train import build
from arlarena_jax.train.checkpoint import (
    Checkpointer,
    PreemptionGuard,
    abstract_like,
    read_params,
)
from arlarena_jax.train.config import Config, ConfigError, resolve, rl_stream_seed
from arlarena_jax.train.config_io import config_to_dict, dump_config
from arlarena_jax.train.critic import (
    CriticSetup,
    CriticState,
    build_value_module,
    exportable_critic,
    make_critic_step,
    make_values_fn,
    value_forward,
)
from arlarena_jax.train.demos import (
    Demonstration,
    demonstrations,
    read_demonstrations,
    write_demonstrations,
)
from arlarena_jax.train.evaluate import evaluate
from arlarena_jax.train.export import export_critic, export_hf
from arlarena_jax.train.final import complete_record, read_final, write_final
from arlarena_jax.train.held_out import episode_records, held_out_path, read_records, write_records
from arlarena_jax.train.kept_tokenizer import run_tokenizer
from arlarena_jax.train.layout import checkpoints_dir
from arlarena_jax.train.metrics import ConsoleProgress, MetricsWriter, TimedEnvBatch, Timer
from arlarena_jax.train.monitor import StabilityMonitor
from arlarena_jax.train.optim import current_learning_rate, make_optimizer
from arlarena_jax.train.producer import Producer, staleness_metrics
from arlarena_jax.train.rl import UpdateSetup, cached, collect_batch, update_policy
from arlarena_jax.train.run_lock import hold_run_dir
from arlarena_jax.train.sft import CloneState, SFTJob, prepare_sft
from arlarena_jax.train.start import START_STEP
from arlarena_jax.train.update import make_log_prob_fn, make_prepare_fn, make_update_step


@dataclasses.dataclass
class TrainState:
    """The checkpointed device state; ``ref_params`` only when the objective reads reference
    log-probs, the critic's parameters and optimizer state only when it reads values."""

    params: Any
    opt_state: Any
    objective_state: Any
    ref_params: Any = None
    critic_params: Any = None
    critic_opt_state: Any = None

    @property
    def critic(self) -> CriticState | None:
        if self.critic_params is None:
            return None
        return CriticState(self.critic_params, self.critic_opt_state)

    @critic.setter
    def critic(self, value: CriticState | None) -> None:
        self.critic_params, self.critic_opt_state = (None, None) if value is None else value

    def as_tree(self) -> dict[str, Any]:
        """The checkpoint's tree: a dict of the fields that are set; under LoRA the parameters'
        trainable part only (the adapters; the frozen base is rebuilt from ``model``)."""
        fields = (f.name for f in dataclasses.fields(self))
        tree = {name: getattr(self, name) for name in fields if getattr(self, name) is not None}
        for name in PARAMETER_FIELDS:
            if name in tree:
                tree[name] = trainable_part(tree[name])
        return tree

    def restored(self, tree: dict[str, Any]) -> TrainState:
        """The state of a checkpoint's ``tree`` (:meth:`as_tree`), its parameters joined with
        this state's frozen parts (under LoRA, the base model)."""
        tree = {f.name: None for f in dataclasses.fields(self)} | dict(tree)  # unset: None
        for name in PARAMETER_FIELDS:
            if tree[name] is not None:
                tree[name] = join_trainable(tree[name], frozen_part(getattr(self, name)))
        return TrainState(**tree)


PARAMETER_FIELDS = ("params", "ref_params", "critic_params")


@dataclasses.dataclass
class HostState:
    """The checkpointed host state: the step, the task-seed RNG, the sampler's call counter and
    the held-out success after cloning (and every ``val/…`` metric of that evaluation)."""

    step: int = 0
    rng: dict | None = None
    policy_calls: int = 0
    sft_success: float | None = None
    start_eval: dict[str, float] | None = None  # val/… of the starting policy (step 0)


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


CLONING_CHECKPOINTS = "checkpoints_sft"  # cloning's state, until step 0 is saved
DEMONSTRATIONS = "demonstrations.jsonl"  # the expert turns cloning trains on, as long


class Stopped(Exception):
    """SIGTERM or SIGINT arrived: raised at a safe point, what to resume is saved (or is
    saved by :meth:`Run.stopped`). ``str()`` says which signal, in which phase, at which step."""


def demonstrations_key(config: Config) -> str:
    """What makes the cloning's demonstrations (the ``env`` settings, the seeds), hashed: kept
    demonstrations are read back only under the same key."""
    made_by = {
        "env": config_to_dict(config.env),
        "seeds": [build.DEMO_SEED_BASE, config.sft.num_episodes],
    }
    text = json.dumps(made_by, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


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


def eval_seeds(config: Config) -> list[int]:
    """The seeds of the run's evaluation split (``build.eval_seeds``)."""
    return build.eval_seeds(config)


def eval_policy(policy: SamplerPolicy, config: Config) -> SamplerPolicy:
    """The evaluation copy of the policy: its own seed stream from call 0, so evaluation never
    shifts the training rollouts' seeds (a resumed run matches an uninterrupted one), equal
    parameters score equally, and ``arlarena eval`` reproduces the trainer's numbers."""
    return dataclasses.replace(policy, seed=config.trainer.seed + 1, calls=0)


def optimizer_steps(config: Config) -> int:
    """Upper bound of optimizer steps (schedules count mini-batch updates): one row per turn, or
    one per trajectory under trajectory rows."""
    rows_per_trajectory = config.env.max_turns if build.row_layout(config) is None else 1
    rows = config.env.train_batch_size * config.env.group_size * rows_per_trajectory
    per_step = math.ceil(rows / config.trainer.mini_batch_size) * config.trainer.ppo_epochs
    return max(1, config.trainer.total_steps * per_step)


def rl_optimizer(config: Config):
    """The RL optimizer of ``config.optim`` over :func:`optimizer_steps` updates."""
    return make_optimizer(config.optim, optimizer_steps(config))


def critic_optimizer(config: Config):
    """The critic's optimizer of ``config.critic.optim``: one step per policy step."""
    return make_optimizer(config.critic.optim, optimizer_steps(config))


def roll_back(
    checkpointer, monitor, state: TrainState, engine, step: int, lora=None
) -> dict[str, float]:
    """Restore ``state``'s parameters, optimizer and objective state from the newest good
    checkpoint (the step counter and the task RNG go on, so the run sees new tasks) and tell the
    monitor which step was restored, so it forgets what came after it."""
    good = checkpointer.last_good_step()
    if good is None:
        return {}
    tree, _ = checkpointer.restore(abstract_like(state.as_tree()), good)
    restored = state.restored(tree)
    for name in tree:
        setattr(state, name, getattr(restored, name))
    engine.update_params(sampler_params(state.params, lora))
    monitor.rolled_back(good)
    print(f"step {step}: unstable, rolled back to the state of step {good}", flush=True)
    return {"stability/rolled_back_to": float(good)}


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
        self.console, self.guard, self.phase = console, guard, "startup"
        self.run_dir = Path(config.trainer.run_dir)
        self.started = time.perf_counter()
        self._closing = contextlib.ExitStack()
        self.last_eval_episodes: list[dict[str, Any]] = []  # the last evaluation's, per episode
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
        """The run's pieces (see :meth:`__init__`)."""
        self.mesh = build.build_mesh(config)
        self.tokenizer = run_tokenizer(config)  # kept in run_dir/tokenizer when built
        self.model = build.build_model(config, self.tokenizer, self.mesh, config.trainer.seed)
        self.objective = build.build_objective(config)
        self.task_format = build.task_format(config)  # the env's prompts, looked up once
        self.rows = build.row_layout(config)  # turn rows (None) or trajectory rows
        self.optimizer = rl_optimizer(config)
        # the critic: built (from the policy as it is then) when the objective needs values
        self.needs_critic = Input.VALUES in self.objective.requirements
        self.critic_optimizer = critic_optimizer(config) if self.needs_critic else None
        self._critic_module: Any = None
        self.checkpointer = self._closing.enter_context(
            Checkpointer(
                checkpoints_dir(self.run_dir),
                keep=config.trainer.keep_checkpoints,
                save_every=max(config.trainer.save_every, 1),
            )
        )
        self.monitor = StabilityMonitor(config.monitor)
        self.rng = np.random.default_rng(rl_stream_seed(config))
        self.host = HostState(rng=self.rng.bit_generator.state)  # step 0's, as a checkpoint
        self.state: TrainState | None = None
        self.history: list[dict[str, float]] = []
        self.events = self.skipped = 0
        self._writer: MetricsWriter | None = None
        self._sampler: tuple[Any, SamplerPolicy] | None = None
        self._envs: dict[str, Any] = {}
        self._device_rollout: Any = None
        self._setup: UpdateSetup | None = None
        self._cloning: Checkpointer | None = None  # run_dir/checkpoints_sft, opened on use
        self._cloned = False  # cloning finished in this process (its policy not saved yet)
        self._cloning_saved_at = time.monotonic()  # when cloning last saved (or began)
        self._cloning_loss = math.nan  # of the last cloning step
        self._closing.callback(self._close_cloning)
        self._timer = Timer()
        self._producer: Producer | None = None  # asynchronous RL's rollout thread, while it runs
        self._consumed_calls = 0  # the policy's call counter after the last consumed batch
        self._producing_step = 0  # the step whose batch the producer plays (for tests)
        self._progress = ConsoleProgress(config.trainer.total_steps) if self.console else None

    # -- lifetime -------------------------------------------------------------------------------

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close what was opened (environments, writer, checkpointer), in reverse order."""
        self._closing.close()

    # -- lazily built pieces --------------------------------------------------------------------

    @property
    def writer(self) -> MetricsWriter:
        if self._writer is None:
            self._writer = self._closing.enter_context(
                contextlib.closing(
                    MetricsWriter(
                        self.run_dir / "tensorboard", eval_split=self.config.trainer.eval_split
                    )
                )
            )
        return self._writer

    @property
    def engine(self):
        return self._sampler_pair()[0]

    @property
    def policy(self) -> SamplerPolicy:
        return self._sampler_pair()[1]

    def _sampler_pair(self) -> tuple[Any, SamplerPolicy]:
        if self._sampler is None:
            self._sampler = build.build_policy(self.config, self.model, self.tokenizer, self.mesh)
            self._sampler[1].calls = self.host.policy_calls
        return self._sampler

    @property
    def collector(self):
        """What plays a batch of episodes: the host loop (``collect``), or under
        ``env.device_rollout`` the on-device rollout's ``collect`` (built once)."""
        if not self.config.env.device_rollout:
            return collect
        if self._device_rollout is None:
            self._device_rollout = build.build_device_rollout(self.config, self.policy)
        return self._device_rollout.collect

    def envs(self, purpose: str):
        """The training (``"train"``) or evaluation (``"eval"``: ``trainer.eval_split``'s)
        environments, opened once and closed with the run."""
        if purpose not in self._envs:
            c = self.config
            training = purpose == "train"
            n = (
                c.env.train_batch_size * c.env.group_size
                if training
                else min(c.env.eval_batch_size, c.trainer.eval_episodes)
            )
            split = "train" if training else c.trainer.eval_split
            batch = self._closing.enter_context(contextlib.closing(build.make_envs(c, n, split)))
            self._envs[purpose] = TimedEnvBatch(batch, self._timer) if training else batch
        return self._envs[purpose]

    def train_state(self) -> TrainState:
        """The device state, first built from the model's current parameters."""
        if self.state is None:
            _, params = nnx.split(self.model)
            reference = Input.REF_LOG_PROBS in self.objective.requirements
            self.state = TrainState(
                params,
                self.optimizer.init(trainable_part(params)),  # LoRA: the adapters' only
                self.objective.init_state(),
                jax.tree.map(jnp.copy, params) if reference else None,
            )
            if self.needs_critic:
                self._critic_module = build_value_module(self.config, self.model, self.mesh)
                _, critic_params = nnx.split(self._critic_module)
                opt_state = self.critic_optimizer.init(trainable_part(critic_params))
                self.state.critic = CriticState(critic_params, opt_state)
        return self.state

    # -- verbs ----------------------------------------------------------------------------------

    def resume(self, step: int | None = None) -> int | None:
        """Restore the newest checkpoint that verifies and restores (device and host state); its
        step, or None. A newer one that fails to restore is set aside, with one line on stderr
        naming its file and why (missing, truncated or unreadable). ``step``: restore that one
        instead (an evaluation of an earlier policy; nothing is set aside)."""
        target = abstract_like(self.train_state().as_tree())
        if step is not None:
            tree, host = self.checkpointer.restore(target, step)
        else:
            restored = self.checkpointer.restore_latest_valid(target)
            if restored is None:
                return None
            step, tree, host, _ = restored  # a skipped step: reported by the checkpointer
        self.state = self.train_state().restored(tree)
        self.host = HostState(**host)
        self.rng.bit_generator.state = self.host.rng
        nnx.update(self.model, self.state.params)
        if self._sampler is not None:
            self.policy.calls = self.host.policy_calls
            self.engine.update_params(sampler_params(self.state.params, self.config.model.lora))
        return step

    def clone(self) -> dict[str, float]:
        """Behaviour cloning on expert demonstrations of their own seed block (``sft.*``),
        continuing a stopped or killed cloning from ``run_dir/checkpoints_sft``."""
        c, sft = self.config, self.config.sft
        demos = self._demonstrations()
        if not demos:
            raise ConfigError(
                f"config key 'sft.num_episodes': none of the {sft.num_episodes} expert episodes "
                f"succeeded within env.max_turns={c.env.max_turns}; nothing to clone"
            )
        length = dict(steps=sft.steps) if sft.steps is not None else dict(epochs=sft.epochs)
        start = time.perf_counter()
        job = prepare_sft(
            self.model,
            self.tokenizer,
            demos,
            batch_size=sft.batch_size,
            micro_batch_size=sft.micro_batch_size,
            optim=sft.optim,
            seed=sft.seed,
            enable_thinking=c.sampler.enable_thinking,
            mesh=self.mesh,
            **length,
        )
        self.phase = "cloning"
        state = self._cloning_start(job)
        if self.console:
            again = f", continuing after step {state.step}" if state.step else ""
            print(f"cloning: {job.total} steps on {len(demos)} expert turns{again}", flush=True)
        self.check_stop((state.step, job.total))
        self._cloning_saved_at = time.monotonic()  # seconds of cloning are counted from here
        final, history = job.run(
            state, log_fn=self._log_cloning, after_step=lambda s: self._cloning_step(job, s)
        )
        nnx.update(self.model, final.params)
        self.state, self._cloned = None, True  # rebuilt from the cloned parameters
        metrics = {
            "sft/final_loss": history[-1]["loss"] if history else self._cloning_loss,
            "sft/examples": float(len(demos)),
            "sft/steps": float(job.total),
            "timing/sft": time.perf_counter() - start,
        }
        self.writer.scalars(0, metrics)
        if self.console:
            print(f"cloning done: loss {metrics['sft/final_loss']:.4f}", flush=True)
        return metrics

    def _demonstrations(self) -> list[Demonstration]:
        """The expert turns to clone: those an earlier start of this cloning kept in
        ``run_dir/demonstrations.jsonl`` (made by the same ``env`` settings and seeds), else
        played now and kept there (removed with the cloning checkpoint)."""
        c, sft = self.config, self.config.sft
        self.phase = "demonstrations"
        path, key = self.run_dir / DEMONSTRATIONS, demonstrations_key(c)
        demos = read_demonstrations(path, key)
        (missing,) = self._on_any_process(demos is None)  # all play, or none
        if not missing:
            if self.console:
                print(f"demonstrations: {len(demos)} expert turns kept in {path}", flush=True)
            return demos
        seeds = range(build.DEMO_SEED_BASE, build.DEMO_SEED_BASE + sft.num_episodes)
        demos = demonstrations(c.env, seeds, before_chunk=self.check_stop)
        if demos and jax.process_index() == 0:
            write_demonstrations(path, demos, key)
        return demos

    def adopt_start(self) -> None:
        """Take the cloned policy of the shared start in ``sft.init_from`` (its checkpoint step 0,
        parameters only) instead of cloning, and its held-out evaluation, when it saved one."""
        directory = Path(self.config.sft.init_from)
        _, params = nnx.split(self.model)
        target = abstract_like(trainable_part(params))  # LoRA: the start's adapters
        adopted, host = read_params(checkpoints_dir(directory), START_STEP, target)
        nnx.update(self.model, adopted)
        self.state, self._cloned = None, True  # rebuilt from the start's parameters
        if host.get("start_eval") is not None:
            self.host.sft_success, self.host.start_eval = host["sft_success"], host["start_eval"]
            split = self.config.trainer.eval_split
            episodes = held_out_path(directory, START_STEP, split)  # its per-episode outcomes
            if episodes.is_file() and jax.process_index() == 0:
                kept = held_out_path(self.run_dir, START_STEP, split)
                write_records(kept, read_records(episodes))
        self.writer.text(0, "start", f"cloned policy of the shared start {directory.absolute()}")
        if self.console:
            print(f"starting from the cloned policy of {directory}", flush=True)

    def _cloning_start(self, job: SFTJob) -> CloneState:
        """The state cloning last saved in ``run_dir/checkpoints_sft``, else the start."""
        _, params = nnx.split(self.model)
        fresh = job.start(params)
        directory = self.run_dir / CLONING_CHECKPOINTS
        step = self._cloning_checkpointer().latest_step() if directory.is_dir() else None
        if step is None:
            return fresh
        trainable, frozen = split_trainable(fresh.params)  # LoRA: saved are the adapters
        target = abstract_like({"params": trainable, "opt_state": fresh.opt_state})
        tree, host = self._cloning_checkpointer().restore(target, step)
        made, wants = (host["total"], host["batches_per_epoch"]), (job.total, job.num_batches)
        if made != wants:
            raise ConfigError(
                f"config key 'sft.steps': the cloning checkpoint in {directory} is of {made[0]} "
                f"steps over {made[1]} batches per epoch, this config clones {wants[0]} steps "
                f"over {wants[1]}; remove {directory} to clone from the start"
            )
        self._cloning_loss = float(host.get("loss", math.nan))
        return CloneState(join_trainable(tree["params"], frozen), tree["opt_state"], step)

    def _cloning_step(self, job: SFTJob, state: CloneState) -> None:
        """After a cloning step: save the cloning state once ``sft.save_every_s`` seconds of
        cloning have passed since the last save, and after the last step (so a hard kill loses
        at most that much); once stopped (but the last step), save it and stop."""
        every, last = self.config.sft.save_every_s, state.step >= job.total
        due = every > 0 and (last or time.monotonic() - self._cloning_saved_at >= every)
        requested = self.guard is not None and self.guard.requested
        requested, due = self._on_any_process(requested, due)  # every process saves, or none
        stop = requested and not last
        if stop or due:
            self._save_cloning(job, state, wait=stop)
        if stop:
            raise self._stopped_at((state.step, job.total))

    def _save_cloning(self, job: SFTJob, state: CloneState, *, wait: bool) -> None:
        """Save ``state`` in ``run_dir/checkpoints_sft`` (keeping only the newest), in the
        background unless ``wait``."""
        checkpointer = self._cloning_checkpointer()
        if state.step not in checkpointer.all_steps():
            epoch, batch = job.position(state.step)
            host = dict(
                step=state.step,
                total=job.total,
                batches_per_epoch=job.num_batches,
                epoch=epoch,  # the next batch: the stream's position
                batch=batch,
                loss=self._cloning_loss,  # of the last step done
            )
            tree = {"params": trainable_part(state.params), "opt_state": state.opt_state}
            checkpointer.save(state.step, tree, host, force=True)
        if wait:
            checkpointer.wait()
        self._cloning_saved_at = time.monotonic()

    def _cloning_checkpointer(self) -> Checkpointer:
        if self._cloning is None:
            self._cloning = Checkpointer(self.run_dir / CLONING_CHECKPOINTS, keep=1)
        return self._cloning

    def _close_cloning(self) -> None:
        if self._cloning is not None:
            self._cloning.close()
            self._cloning = None

    def _remove_cloning_checkpoint(self) -> None:
        """Once the cloned policy is an RL checkpoint, the cloning checkpoint and the kept
        demonstrations go."""
        self._close_cloning()
        directory = self.run_dir / CLONING_CHECKPOINTS
        if jax.process_index() == 0:
            if directory.is_dir():
                shutil.rmtree(directory)
            (self.run_dir / DEMONSTRATIONS).unlink(missing_ok=True)

    def _log_cloning(self, step: int, metrics: dict[str, float]) -> None:
        self._cloning_loss = metrics["loss"]
        self.writer.scalars(step, {f"sft/{k}": v for k, v in metrics.items()})
        if self.console and (step + 1) % 10 == 0:
            print(
                f"[cloning {step + 1}] loss {metrics['loss']:.4f} "
                f"grad {metrics['grad_norm']:.3f} lr {metrics['lr']:.2e}",
                flush=True,
            )

    def evaluate(self, step: int | None = None) -> dict[str, float]:
        """Held-out success of the current parameters (``val/…``); written at ``step`` if given."""
        return self.evaluate_rollout(step)[0]

    def evaluate_rollout(self, step: int | None = None) -> tuple[dict[str, float], Rollout]:
        """:meth:`evaluate`, and the held-out rollout itself (turn by turn, for transcripts).
        Under asynchronous RL the producer is paused meanwhile (the engine is shared)."""
        with self._producer.paused() if self._producer else contextlib.nullcontext():
            return self._evaluate(step)

    def _evaluate(self, step: int | None) -> tuple[dict[str, float], Rollout]:
        c = self.config
        self.engine.update_params(sampler_params(self.train_state().params, self.config.model.lora))
        metrics, rollout = evaluate(
            self.envs("eval"),
            self.task_format,
            eval_policy(self.policy, c),
            seeds=eval_seeds(c),
            max_turns=c.env.max_turns,
            history_length=c.env.history_length,
            rows=self.rows,
            before_chunk=self.check_stop,
            collector=self.collector,
        )
        self.last_eval_episodes = episode_records(rollout.trajectories, eval_seeds(c))
        if step is not None:
            self.writer.scalars(step, metrics)
            self._keep_episodes(step)
        return metrics, rollout

    def _keep_episodes(self, step: int) -> None:
        """The last evaluation's per-episode outcomes, as ``held_out/<split>/step_NNNNNN.jsonl``."""
        if jax.process_index() == 0:
            path = held_out_path(self.run_dir, step, self.config.trainer.eval_split)
            write_records(path, self.last_eval_episodes)

    @property
    def done(self) -> bool:
        return self.host.step >= self.config.trainer.total_steps

    def step(self) -> dict[str, float]:
        """One RL iteration: rollout, update, sync, monitor (and roll back), evaluate, log."""
        state = self.train_state()
        self.host.step += 1
        step = self.host.step
        if self.asynchronous:
            metrics = self._async_rollout_and_update(step)
        else:
            metrics = self._rollout_and_update(step)
        new_events = self.monitor.observe(step, metrics)
        self.events += len(new_events)
        self.skipped += int(metrics.get("actor/skipped_steps", 0))
        if self.monitor.should_rollback:
            self.stop_producer()  # its batches came from discarded parameters
            metrics |= roll_back(
                self.checkpointer, self.monitor, state, self.engine, step, self.config.model.lora
            )
        metrics |= self.monitor.metrics()
        calls = self._consumed_calls if self.asynchronous else self.policy.calls
        self.host.rng, self.host.policy_calls = self.rng.bit_generator.state, calls
        try:  # the step is complete: a stop during its evaluation saves it (a resume redoes it)
            if self._evaluates_at(step):
                metrics |= self.evaluate()  # written with the step's metrics
                self._keep_episodes(step)
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

    def _rollout_and_update(self, step: int) -> dict[str, float]:
        c, timer, state = self.config, self._timer, self.train_state()
        timer.reset()
        with timer("rollout"):
            rollout, last, tries = collect_batch(
                self.envs("train"),
                self.task_format,
                self.policy,
                self.objective,
                group_seeds=lambda _: self.rng.integers(0, 2**30, c.env.train_batch_size),
                group_size=c.env.group_size,
                max_turns=c.env.max_turns,
                history_length=c.env.history_length,
                rows=self.rows,
                global_step=step,
                collector=self.collector,
            )
        with timer("update"):
            metrics = self._update(rollout)
        with timer("sync"):
            self.engine.update_params(sampler_params(state.params, self.config.model.lora))
        seconds = timer.seconds  # the rollout's non-environment part: prompts, sampling
        seconds["rollout/policy"] = seconds["rollout"] - seconds["rollout/env"]
        episode_metrics = self.task_format.episode_metrics
        metrics |= rollout_metrics(last, episode_metrics=episode_metrics) | timer.metrics()
        metrics["batch/gen_tries"] = float(tries)
        metrics["perf/response_tokens_per_s"] = metrics["batch/response_tokens"] / max(
            metrics["timing/rollout"], 1e-9
        )
        return metrics

    # -- asynchronous RL (trainer.max_staleness > 0; docs/architecture.md) -------------------------

    @property
    def asynchronous(self) -> bool:
        """Whether RL steps take their batches from the producer thread."""
        return self.config.trainer.max_staleness > 0

    def _async_rollout_and_update(self, step: int) -> dict[str, float]:
        """Take step ``step``'s batch from the producer, update, publish the new parameters
        (an on-device copy) as version ``step``; the step's metrics."""
        timer = self._timer
        timer.reset()
        producer = self._start_producer(step)
        with timer("wait"):
            produced, waited = producer.take(step)
        batch = produced.value
        self.rng.bit_generator.state, self._consumed_calls = batch.rng, batch.calls
        with timer("update"):
            metrics = self._update(batch.rollout)
        with timer("sync"):
            producer.publish(self._sampler_copy(), step)
        seconds = dict(batch.seconds)
        seconds["rollout/policy"] = seconds["rollout"] - seconds.get("rollout/env", 0.0)
        metrics |= rollout_metrics(batch.last, episode_metrics=self.task_format.episode_metrics)
        metrics |= timer.metrics() | {f"timing/{k}": v for k, v in seconds.items()}
        metrics |= staleness_metrics(batch.rollout.rows, step, produced.version)
        metrics["async/trainer_wait_s"] = waited
        metrics["async/producer_wait_s"] = produced.wait_s
        metrics["batch/gen_tries"] = float(batch.tries)
        metrics["perf/response_tokens_per_s"] = metrics["batch/response_tokens"] / max(
            seconds["rollout"], 1e-9
        )
        return metrics

    def _update(self, rollout) -> dict[str, float]:
        """The policy update on ``rollout`` (the state updated in place); its metrics."""
        c, state = self.config, self.train_state()
        params, opt_state, objective_state, critic, metrics = update_policy(
            self.update_setup(),
            state.params,
            state.opt_state,
            state.objective_state,
            rollout,
            mini_batch_size=c.trainer.mini_batch_size,
            ref_params=state.ref_params,
            critic=state.critic,
            timer=self._timer,
        )
        state.params, state.opt_state, state.objective_state = params, opt_state, objective_state
        state.critic = critic
        metrics["actor/lr"] = float(current_learning_rate(state.opt_state))
        return metrics

    def _sampler_copy(self):
        """The sampler's parameters as an on-device copy: the update donates ``state.params``,
        the producer's engine must never hold those buffers."""
        params = sampler_params(self.train_state().params, self.config.model.lora)
        return jax.block_until_ready(jax.tree.map(jnp.copy, params))

    def _start_producer(self, step: int) -> Producer:
        """The producer (started at ``step`` from the task RNG and the policy's call counter
        of the last consumed batch, if not running); stopped with the run."""
        if self._producer is not None:
            return self._producer
        c = self.config
        envs = TimedEnvBatch(self.envs("train").envs, Timer())  # opened here, closed after it
        collector, policy = self.collector, self.policy
        policy.calls = self._consumed_calls = self.host.policy_calls
        rng = np.random.default_rng()
        rng.bit_generator.state = self.rng.bit_generator.state

        def produce(at: int, params: Any, version: int) -> _Batch:
            return self._produce(envs, rng, collector, at, params, version)

        self._producer = Producer(
            produce,
            max_staleness=c.trainer.max_staleness,
            first_step=step,
            last_step=c.trainer.total_steps,
            params=self._sampler_copy(),
            version=step - 1,
        )
        self._closing.callback(self.stop_producer)  # before the environments close
        return self._producer

    def _produce(self, envs, rng, collector, step: int, params: Any, version: int) -> _Batch:
        """The producer thread: play step ``step``'s batch on ``params`` of ``version``."""
        c, engine, timer = self.config, self.engine, envs.timer
        engine.update_params(params)
        engine.params_version, self._producing_step = version, step
        timer.reset()
        if c.trainer.partial_rollouts:
            engine.before_decode = self._switch_to_newest
        try:
            with timer("rollout"):
                rollout, last, tries = collect_batch(
                    envs,
                    self.task_format,
                    self.policy,
                    self.objective,
                    group_seeds=lambda _: rng.integers(0, 2**30, c.env.train_batch_size),
                    group_size=c.env.group_size,
                    max_turns=c.env.max_turns,
                    history_length=c.env.history_length,
                    rows=self.rows,
                    global_step=step,
                    collector=collector,
                )
        finally:
            engine.before_decode = None
        state = rng.bit_generator.state
        return _Batch(rollout, last, tries, state, self.policy.calls, dict(timer.seconds))

    def _switch_to_newest(self) -> None:
        """Partial rollouts' safe point (before a decode call): take newer parameters."""
        if self._producer is None:
            return
        params, version = self._producer.newest()
        if version > self.engine.params_version:
            self.engine.update_params(params)
            self.engine.params_version = version

    def stop_producer(self) -> None:
        """Stop and join the producer (its queued batches dropped); the next async step starts
        a new one from the last consumed batch's task RNG and call counter."""
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.stop()
            self.policy.calls = self._consumed_calls

    def update_setup(self) -> UpdateSetup:
        """The jitted update pieces (built once; one compile per packed prompt width)."""
        if self._setup is None:
            setup = _update_setup(
                self.config, self.model, self.objective, self.optimizer, self.tokenizer, self.mesh
            )
            if self.needs_critic:
                self.train_state()  # the critic's module exists with the state
                forward = value_forward(self._critic_module, self.model)
                critic = _critic_setup(self.config, forward, self.critic_optimizer, self.mesh)
                setup = dataclasses.replace(setup, critic=critic, critic_lr=current_learning_rate)
            self._setup = setup
        return self._setup

    def save(self, *, force: bool = False) -> bool:
        """Checkpoint the state at the current step if due (or ``force``). The metrics written so
        far are flushed to disk first: every step a checkpoint covers keeps its scalars."""
        step = self.host.step
        if not force and not self.checkpointer.should_save(step):
            return False
        if self._writer is not None:
            self._writer.flush()
        good = self.monitor.mark_checkpoint(step)
        host = dataclasses.asdict(self.host)
        return self.checkpointer.save(
            step, self.train_state().as_tree(), host, force=True, good=good
        )

    def finish(self) -> Summary:
        """Wait for checkpoints; at the end of the schedule evaluate, export and record the run
        as complete in ``run_dir/final.json`` (``arlarena_jax.train.final``); the summary. A
        stop during the export stops the run: the next start exports again (the final
        evaluation it reads from the record)."""
        t = self.config.trainer
        self.stop_producer()
        if self.host.step == 0 and 0 not in self.checkpointer.all_steps():
            self.save(force=True)  # cloning only: keep the cloned policy
        self.checkpointer.wait()
        if not self.done:
            return self._summary({})
        record = self._final_record()
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

    def _final_record(self) -> dict[str, Any]:
        """``run_dir/final.json`` when it is of the step this start resumed from and trained no
        further (a stop during the export left it), else a new record of this step."""
        record = read_final(self.run_dir)
        untouched = not self.history and not self._cloned
        if record is not None and record["step"] == self.host.step and untouched:
            return record | dict(complete=False)
        return dict(
            step=self.host.step,
            final_eval=None,
            sft_success=self.host.sft_success,
            exported=False,
            complete=False,
        )

    def _write_final(self, record: dict[str, Any]) -> None:
        if jax.process_index() == 0:
            write_final(self.run_dir, record)

    def _export(self) -> None:
        """The Hugging Face export of the policy (``run_dir/hf``) and of the critic if any."""
        nnx.update(self.model, self.train_state().params)
        export_hf(self.run_dir / "hf", merged_model(self.model), self.tokenizer, self.config)
        if self.state.critic is not None:
            nnx.update(self._critic_module, self.state.critic_params)
            critic = exportable_critic(self._critic_module, self.model)
            export_critic(self.run_dir / "hf_critic", critic, self.tokenizer)

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
        elif resumed > 0:
            self._evaluate_if_missed(resumed)
        self._remove_cloning_checkpoint()
        self.phase = "RL"

    def _evaluates_at(self, step: int) -> bool:
        """Whether RL step ``step`` ends with a held-out evaluation (every ``trainer.eval_every``
        steps; the last step's is the final evaluation)."""
        t = self.config.trainer
        return bool(t.eval_every) and step % t.eval_every == 0 and step < t.total_steps

    def _evaluate_if_missed(self, step: int) -> None:
        """Redo the held-out evaluation due at ``step`` when its ``held_out`` file is missing: a
        stop during it saved the step without it. Evaluation plays its own seed stream from call
        0 (``eval_policy``), so this is the evaluation the uninterrupted run made. Process 0's
        files decide, for every process alike."""
        if not self._evaluates_at(step):
            return
        kept = held_out_path(self.run_dir, step, self.config.trainer.eval_split)
        missing = jax.process_index() == 0 and not kept.exists()
        if self._on_any_process(missing)[0]:
            self.phase = "evaluation"
            self.evaluate(step)

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
            if 0 in self.checkpointer.all_steps():  # saved by a stop during the evaluation
                self.checkpointer.discard_after(-1)
            self.save(force=True)
            self.checkpointer.wait()

    def check_stop(self, at: tuple[int, int] | None = None) -> None:
        """A safe point: once SIGTERM or SIGINT has arrived, raise :class:`Stopped`, naming the
        signal, the phase and ``at`` (step, of steps; default: the RL step, of total_steps)."""
        if self.stop_requested():
            raise self._stopped_at(at)

    def stop_requested(self) -> bool:
        """Whether a signal asked to stop; on several processes, whether any process got one
        (a collective: every process stops at the same safe point)."""
        if self.guard is None:
            return False
        return self._on_any_process(self.guard.requested)[0]

    @staticmethod
    def _on_any_process(*flags: bool) -> tuple[bool, ...]:
        """Each flag, true where it is true on any process (on several, a collective that
        every process calls at the same point, so all decide alike)."""
        if jax.process_count() == 1:
            return tuple(bool(f) for f in flags)
        from jax.experimental import multihost_utils

        gathered = multihost_utils.process_allgather(np.asarray(flags, np.bool_))
        return tuple(bool(f) for f in np.any(gathered.reshape(-1, len(flags)), axis=0))

    def _stopped_at(self, at: tuple[int, int] | None) -> Stopped:
        if at is None and self.phase != "demonstrations":
            at = (self.host.step, self.config.trainer.total_steps)
        where = "" if at is None else f" at step {at[0]} of {at[1]}"
        number = self.guard.signal if self.guard is not None else None
        name = signal.Signals(number).name if number else "a signal to another process"
        return Stopped(f"{name} during {self.phase}{where}")

    def stopped(self, stop: Stopped) -> Summary:
        """After :class:`Stopped`: save the RL state if there is one (cloned or trained) that no
        checkpoint holds, wait for every save, and return the summary saying where it stopped."""
        self.stop_producer()
        if (
            self.host.step > 0 or self._cloned
        ) and self.host.step not in self.checkpointer.all_steps():
            self.save(force=True)
        self.checkpointer.wait()
        return self._summary({}, stopped=str(stop))


@dataclasses.dataclass
class _Batch:
    """What the producer plays for one step: the kept groups, the last try, the tries, and the
    task RNG's state, the policy's call counter and the timing splits after it."""

    rollout: Any
    last: Any
    tries: int
    rng: dict
    calls: int
    seconds: dict[str, float]


def _update_setup(config: Config, model, objective, optimizer, tokenizer, mesh) -> UpdateSetup:
    """Jitted update step, log-prob function and advantage preparation for ``config``."""
    t = config.trainer
    graphdef, _ = nnx.split(model)
    # Behaviour log-probs are at the sampling temperature (τ = 1 for greedy, as the sampler).
    temperature = config.sampler.train.temperature or 1.0
    common = dict(
        micro_batch_size=t.micro_batch_size,
        temperature=temperature,
        mesh=mesh,
        prompt_widths=t.prompt_widths,
    )
    return UpdateSetup(
        objective,
        cached(
            lambda width: make_update_step(
                graphdef,
                objective,
                optimizer,
                prompt_length=width,
                mini_batch_size=t.mini_batch_size,
                **common,
            )
        ),
        cached(lambda width: make_log_prob_fn(graphdef, prompt_length=width, **common)),
        make_prepare_fn(objective),
        config.sampler.max_prefill_length,
        build.response_width(config),
        pad_id=int(tokenizer.pad_token_id or 0),
        ppo_epochs=t.ppo_epochs,
        mesh=mesh,
        use_rollout_log_probs=t.use_rollout_log_probs,
    )


def _critic_setup(config: Config, forward, optimizer, mesh) -> CriticSetup:
    """The critic's jitted value pass and mini-batch step per packed prompt width."""
    t = config.trainer
    return CriticSetup(
        cached(
            lambda width: make_values_fn(
                forward,
                prompt_length=width,
                micro_batch_size=t.micro_batch_size,
                mesh=mesh,
                prompt_widths=t.prompt_widths,
            )
        ),
        cached(
            lambda width: make_critic_step(
                forward,
                optimizer,
                prompt_length=width,
                mini_batch_size=t.mini_batch_size,
                micro_batch_size=t.micro_batch_size,
                clip=config.critic.cliprange_value,
                mesh=mesh,
                prompt_widths=t.prompt_widths,
            )
        ),
        t.mini_batch_size,
        t.micro_batch_size,
    )
