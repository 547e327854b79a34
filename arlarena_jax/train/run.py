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
- :meth:`Run.finish` evaluates, exports and returns the :class:`Summary`.

Only what a command uses is built: ``arlarena eval`` opens no writer and no training
environments. Training task seeds come from a NumPy generator seeded by ``trainer.seed`` and
restored on resume; demonstration and evaluation seeds come from disjoint blocks (``build``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from arlarena_jax.objectives.compose import Input
from arlarena_jax.rollout.metrics import rollout_metrics
from arlarena_jax.rollout.policy import SamplerPolicy
from arlarena_jax.train import build
from arlarena_jax.train.checkpoint import Checkpointer, abstract_like
from arlarena_jax.train.config import Config, ConfigError, resolve
from arlarena_jax.train.config_io import dump_config
from arlarena_jax.train.evaluate import evaluate
from arlarena_jax.train.export import export_hf
from arlarena_jax.train.metrics import ConsoleProgress, MetricsWriter, TimedEnvBatch, Timer
from arlarena_jax.train.monitor import StabilityMonitor
from arlarena_jax.train.optim import current_learning_rate, make_optimizer
from arlarena_jax.train.rl import UpdateSetup, cached, collect_batch, update_policy
from arlarena_jax.train.sft import run_sft
from arlarena_jax.train.update import make_log_prob_fn, make_prepare_fn, make_update_step


@dataclasses.dataclass
class TrainState:
    """The checkpointed device state; ``ref_params`` only when the objective reads reference
    log-probs."""

    params: Any
    opt_state: Any
    objective_state: Any
    ref_params: Any = None

    def as_tree(self) -> dict[str, Any]:
        """The checkpoint's tree: a dict of the fields that are set."""
        fields = (f.name for f in dataclasses.fields(self))
        return {name: getattr(self, name) for name in fields if getattr(self, name) is not None}

    @classmethod
    def from_tree(cls, tree: dict[str, Any]) -> TrainState:
        return cls(**tree)


@dataclasses.dataclass
class HostState:
    """The checkpointed host state: the step, the task-seed RNG, the sampler's call counter and
    the held-out success after cloning."""

    step: int = 0
    rng: dict | None = None
    policy_calls: int = 0
    sft_success: float | None = None


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


def eval_seeds(config: Config) -> list[int]:
    start = build.EVAL_SEED_BASE + config.env.eval_seed
    return list(range(start, start + config.trainer.eval_episodes))


def eval_policy(policy: SamplerPolicy, config: Config) -> SamplerPolicy:
    """The evaluation copy of the policy: its own seed stream from call 0, so evaluation never
    shifts the training rollouts' seeds (a resumed run matches an uninterrupted one), equal
    parameters score equally, and ``arlarena eval`` reproduces the trainer's numbers."""
    return dataclasses.replace(policy, seed=config.trainer.seed + 1, calls=0)


def optimizer_steps(config: Config) -> int:
    """Upper bound of optimizer steps (schedules count mini-batch updates)."""
    rows = config.env.train_batch_size * config.env.group_size * config.env.max_turns
    per_step = math.ceil(rows / config.trainer.mini_batch_size) * config.trainer.ppo_epochs
    return max(1, config.trainer.total_steps * per_step)


def rl_optimizer(config: Config):
    """The RL optimizer of ``config.optim`` over :func:`optimizer_steps` updates."""
    return make_optimizer(config.optim, optimizer_steps(config))


def roll_back(checkpointer, monitor, state: TrainState, engine, step: int) -> dict[str, float]:
    """Restore ``state``'s parameters, optimizer and objective state from the newest good
    checkpoint (the step counter and the task RNG go on, so the run sees new tasks) and tell the
    monitor which step was restored, so it forgets what came after it."""
    good = checkpointer.last_good_step()
    if good is None:
        return {}
    restored, _ = checkpointer.restore(abstract_like(state.as_tree()), good)
    for name, value in restored.items():
        setattr(state, name, value)
    engine.update_params(state.params)
    monitor.rolled_back(good)
    print(f"step {step}: unstable, rolled back to the state of step {good}", flush=True)
    return {"stability/rolled_back_to": float(good)}


class Run:
    """One run of ``config`` (resolved: every method setting and the run directory pinned)."""

    def __init__(self, config: Config, *, console: bool = True) -> None:
        self.config = config = resolve(config)
        self.console = console
        self.run_dir = Path(config.trainer.run_dir)
        self.started = time.perf_counter()
        self._closing = contextlib.ExitStack()
        self.mesh = build.build_mesh(config)
        self.tokenizer = build.build_tokenizer(config)
        self.model = build.build_model(config, self.tokenizer, self.mesh, config.trainer.seed)
        self.objective = build.build_objective(config)
        self.optimizer = rl_optimizer(config)
        self.checkpointer = self._closing.enter_context(
            Checkpointer(
                self.run_dir / "checkpoints",
                keep=config.trainer.keep_checkpoints,
                save_every=max(config.trainer.save_every, 1),
            )
        )
        self.monitor = StabilityMonitor(config.monitor)
        self.rng = np.random.default_rng(config.trainer.seed)
        self.host = HostState()
        self.state: TrainState | None = None
        self.history: list[dict[str, float]] = []
        self.events = self.skipped = 0
        self._writer: MetricsWriter | None = None
        self._sampler: tuple[Any, SamplerPolicy] | None = None
        self._envs: dict[str, Any] = {}
        self._setup: UpdateSetup | None = None
        self._timer = Timer()
        self._progress = ConsoleProgress(config.trainer.total_steps) if console else None

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
                contextlib.closing(MetricsWriter(self.run_dir / "tensorboard"))
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

    def envs(self, purpose: str):
        """The evaluation or training environments (opened once, closed with the run)."""
        if purpose not in self._envs:
            c = self.config
            n = (
                min(c.env.eval_batch_size, c.trainer.eval_episodes)
                if purpose == "eval"
                else c.env.train_batch_size * c.env.group_size
            )
            batch = self._closing.enter_context(contextlib.closing(build.make_envs(c, n, purpose)))
            self._envs[purpose] = batch if purpose == "eval" else TimedEnvBatch(batch, self._timer)
        return self._envs[purpose]

    def train_state(self) -> TrainState:
        """The device state, first built from the model's current parameters."""
        if self.state is None:
            _, params = nnx.split(self.model)
            reference = Input.REF_LOG_PROBS in self.objective.requirements
            self.state = TrainState(
                params,
                self.optimizer.init(params),
                self.objective.init_state(),
                jax.tree.map(jnp.copy, params) if reference else None,
            )
        return self.state

    # -- verbs ----------------------------------------------------------------------------------

    def resume(self) -> int | None:
        """Restore the newest checkpoint (device and host state); its step, or None."""
        step = self.checkpointer.latest_step()
        if step is None:
            return None
        tree, host = self.checkpointer.restore(abstract_like(self.train_state().as_tree()), step)
        self.state = TrainState.from_tree(tree)
        self.host = HostState(**host)
        self.rng.bit_generator.state = self.host.rng
        nnx.update(self.model, self.state.params)
        if self._sampler is not None:
            self.policy.calls = self.host.policy_calls
            self.engine.update_params(self.state.params)
        return step

    def clone(self) -> dict[str, float]:
        """Behaviour cloning on expert demonstrations of their own seed block (``sft.*``)."""
        c, sft = self.config, self.config.sft
        seeds = range(build.DEMO_SEED_BASE, build.DEMO_SEED_BASE + sft.num_episodes)
        demos = build.demonstrations(c, seeds)
        if not demos:
            raise ConfigError(
                f"config key 'sft.num_episodes': none of the {sft.num_episodes} expert episodes "
                f"succeeded within env.max_turns={c.env.max_turns}; nothing to clone"
            )
        length = dict(steps=sft.steps) if sft.steps is not None else dict(epochs=sft.epochs)
        start = time.perf_counter()
        _, history = run_sft(
            self.model,
            self.tokenizer,
            demos,
            batch_size=sft.batch_size,
            optim=sft.optim,
            seed=sft.seed,
            enable_thinking=c.sampler.enable_thinking,
            mesh=self.mesh,
            log_fn=self._log_cloning,
            **length,
        )
        self.state = None  # rebuilt from the cloned parameters
        metrics = {
            "sft/final_loss": history[-1]["loss"],
            "sft/examples": float(len(demos)),
            "sft/steps": float(len(history)),
            "timing/sft": time.perf_counter() - start,
        }
        self.writer.scalars(0, metrics)
        return metrics

    def _log_cloning(self, step: int, metrics: dict[str, float]) -> None:
        self.writer.scalars(step, {f"sft/{k}": v for k, v in metrics.items()})
        if self.console and (step + 1) % 10 == 0:
            print(
                f"[cloning {step + 1}] loss {metrics['loss']:.4f} "
                f"grad {metrics['grad_norm']:.3f} lr {metrics['lr']:.2e}",
                flush=True,
            )

    def evaluate(self, step: int | None = None) -> dict[str, float]:
        """Held-out success of the current parameters (``val/…``); written at ``step`` if given."""
        c = self.config
        self.engine.update_params(self.train_state().params)
        metrics, _ = evaluate(
            self.envs("eval"),
            build.task_format(c),
            eval_policy(self.policy, c),
            seeds=eval_seeds(c),
            max_turns=c.env.max_turns,
            history_length=c.env.history_length,
        )
        if step is not None:
            self.writer.scalars(step, metrics)
        return metrics

    @property
    def done(self) -> bool:
        return self.host.step >= self.config.trainer.total_steps

    def step(self) -> dict[str, float]:
        """One RL iteration: rollout, update, sync, monitor (and roll back), evaluate, log."""
        t, state = self.config.trainer, self.train_state()
        self.host.step += 1
        step = self.host.step
        metrics = self._rollout_and_update(step)
        new_events = self.monitor.observe(step, metrics)
        self.events += len(new_events)
        self.skipped += int(metrics.get("actor/skipped_steps", 0))
        if self.monitor.should_rollback:
            metrics |= roll_back(self.checkpointer, self.monitor, state, self.engine, step)
        metrics |= self.monitor.metrics()
        if t.eval_every and step % t.eval_every == 0 and step < t.total_steps:
            metrics |= self.evaluate()  # written with the step's metrics
        self.writer.scalars(step, metrics)
        for event in new_events:
            self.writer.text(step, "stability", event.message)
        self.history.append({"step": float(step), **metrics})
        if self._progress is not None:
            self._progress.update(step, metrics)
        self.host.rng, self.host.policy_calls = self.rng.bit_generator.state, self.policy.calls
        return metrics

    def _rollout_and_update(self, step: int) -> dict[str, float]:
        c, timer, state = self.config, self._timer, self.train_state()
        timer.reset()
        with timer("rollout"):
            rollout, last, tries = collect_batch(
                self.envs("train"),
                build.task_format(c),
                self.policy,
                self.objective,
                group_seeds=lambda _: self.rng.integers(0, 2**30, c.env.train_batch_size),
                group_size=c.env.group_size,
                max_turns=c.env.max_turns,
                history_length=c.env.history_length,
                global_step=step,
            )
        with timer("update"):
            state.params, state.opt_state, state.objective_state, metrics = update_policy(
                self.update_setup(),
                state.params,
                state.opt_state,
                state.objective_state,
                rollout,
                mini_batch_size=c.trainer.mini_batch_size,
                ref_params=state.ref_params,
                timer=timer,
            )
            metrics["actor/lr"] = float(current_learning_rate(state.opt_state))
        with timer("sync"):
            self.engine.update_params(state.params)
        seconds = timer.seconds  # the rollout's non-environment part: prompts, sampling
        seconds["rollout/policy"] = seconds["rollout"] - seconds["rollout/env"]
        episode_metrics = build.task_format(c).episode_metrics
        metrics |= rollout_metrics(last, episode_metrics=episode_metrics) | timer.metrics()
        metrics["batch/gen_tries"] = float(tries)
        metrics["perf/response_tokens_per_s"] = metrics["batch/response_tokens"] / max(
            metrics["timing/rollout"], 1e-9
        )
        return metrics

    def update_setup(self) -> UpdateSetup:
        """The jitted update pieces (built once; one compile per packed prompt width)."""
        if self._setup is None:
            self._setup = _update_setup(
                self.config, self.model, self.objective, self.optimizer, self.tokenizer, self.mesh
            )
        return self._setup

    def save(self, *, force: bool = False) -> bool:
        """Checkpoint the state at the current step if due (or ``force``)."""
        step = self.host.step
        if not force and not self.checkpointer.should_save(step):
            return False
        good = self.monitor.mark_checkpoint(step)
        host = dataclasses.asdict(self.host)
        return self.checkpointer.save(
            step, self.train_state().as_tree(), host, force=True, good=good
        )

    def finish(self) -> Summary:
        """Wait for checkpoints; at the end of the schedule evaluate and export; the summary."""
        t = self.config.trainer
        if self.host.step == 0 and 0 not in self.checkpointer.all_steps():
            self.save(force=True)  # cloning only: keep the cloned policy
        self.checkpointer.wait()
        final_eval: dict[str, float] = {}
        if self.done and t.total_steps > 0:
            final_eval = self.evaluate(self.host.step)
        if self.done and t.export_hf:
            nnx.update(self.model, self.train_state().params)
            export_hf(self.run_dir / "hf", self.model, self.tokenizer, self.config)
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
        )

    def start(self) -> None:
        """Dump the config; resume, or clone (if enabled) and evaluate the starting policy."""
        c = self.config
        self.run_dir.mkdir(parents=True, exist_ok=True)
        dump_config(c, self.run_dir / "config.yaml")
        if self.resume() is not None:
            return
        if c.sft.enabled:
            self.clone()
        if c.trainer.eval_at_start or c.sft.enabled:
            self.host.sft_success = self.evaluate(0)["val/success_rate"]
            if self.console:
                print(f"held-out success before RL: {100 * self.host.sft_success:.1f}%", flush=True)
        if c.trainer.total_steps > 0 and c.monitor.rollback:
            self.save(force=True)  # the starting policy: the first rollback target


def _update_setup(config: Config, model, objective, optimizer, tokenizer, mesh) -> UpdateSetup:
    """Jitted update step, log-prob function and advantage preparation for ``config``."""
    t = config.trainer
    graphdef, _ = nnx.split(model)
    # Behaviour log-probs are at the sampling temperature (τ = 1 for greedy, as the sampler).
    temperature = config.sampler.train.temperature or 1.0
    common = dict(micro_batch_size=t.micro_batch_size, temperature=temperature, mesh=mesh)
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
        config.sampler.max_new_tokens,
        pad_id=int(tokenizer.pad_token_id or 0),
        ppo_epochs=t.ppo_epochs,
        mesh=mesh,
    )
