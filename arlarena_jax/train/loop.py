"""The trainer: behaviour cloning, then RL, with evaluation, metrics, checkpoints and export.

``train(config)`` runs, under ``trainer.run_dir``:

1. cloning (``sft.enabled``): expert demonstrations of rooms from their own seed block, through the
   RL prompts; evaluation on the held-out seeds afterwards (``sft/…`` and ``val/…`` at step 0);
2. RL for ``trainer.total_steps`` iterations: rollout with the objective's dynamic sampling, old
   and reference log-probs, advantages, mini-batch updates, ``update_params`` into the sampler;
   timing split, throughput, environment and actor metrics (spec algorithms §10) to TensorBoard;
   the stability monitor; evaluation every ``trainer.eval_every`` steps;
3. orbax checkpoints every ``trainer.save_every`` steps and on SIGTERM (then it stops cleanly);
   a run started again in the same directory resumes from the newest checkpoint and continues as
   the uninterrupted run would (parameters, optimizer and objective state, the task-seed RNG and
   the sampler's call counter are all restored);
4. the final evaluation, a Hugging Face export (``trainer.export_hf``) and a summary.

Training task seeds come from a NumPy generator seeded by ``trainer.seed`` and restored on
resume; demonstration and evaluation seeds come from disjoint blocks (``build`` module).
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from arlarena_jax.rollout.metrics import rollout_metrics
from arlarena_jax.rollout.policy import SamplerPolicy
from arlarena_jax.train import build
from arlarena_jax.train.checkpoint import Checkpointer, PreemptionGuard, abstract_like
from arlarena_jax.train.config import Config, ConfigError
from arlarena_jax.train.config_io import dump_config
from arlarena_jax.train.evaluate import evaluate
from arlarena_jax.train.export import export_hf
from arlarena_jax.train.metrics import ConsoleProgress, MetricsWriter, TimedEnvBatch, Timer
from arlarena_jax.train.monitor import MonitorSettings, StabilityMonitor
from arlarena_jax.train.optim import current_learning_rate, make_optimizer
from arlarena_jax.train.rl import UpdateSetup, cached, collect_batch, update_policy
from arlarena_jax.train.sft import run_sft
from arlarena_jax.train.update import (
    make_log_prob_fn,
    make_prepare_fn,
    make_update_step,
    needs_reference,
)


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


def _monitor(config: Config) -> StabilityMonitor:
    m = config.monitor
    fields = {f.name for f in dataclasses.fields(MonitorSettings)}
    settings = {k: v for k, v in dataclasses.asdict(m).items() if k in fields}
    return StabilityMonitor(MonitorSettings(**settings))


def _optimizer_steps(config: Config) -> int:
    """Upper bound of optimizer steps (schedules count mini-batch updates)."""
    rows = config.env.train_batch_size * config.env.group_size * config.env.max_turns
    per_step = math.ceil(rows / config.trainer.mini_batch_size) * config.trainer.ppo_epochs
    return max(1, config.trainer.total_steps * per_step)


def rl_optimizer(config: Config):
    """The RL optimizer of ``config.optim`` (AdamW, clipping, schedule over mini-batch steps)."""
    o = config.optim
    return make_optimizer(
        learning_rate=o.lr,
        total_steps=_optimizer_steps(config),
        warmup_ratio=o.warmup_ratio,
        schedule=o.schedule,
        weight_decay=o.weight_decay,
        b1=o.betas[0],
        b2=o.betas[1],
        eps=o.eps,
        grad_clip=o.grad_clip,
    )


def initial_state(config: Config, params: Any, objective, optimizer) -> dict[str, Any]:
    """The checkpointed device state: parameters, optimizer and objective state, and the frozen
    reference parameters when the objective has a KL term."""
    state = {
        "params": params,
        "opt_state": optimizer.init(params),
        "objective_state": objective.init_state(),
    }
    if needs_reference(objective):
        state["ref_params"] = jax.tree.map(jnp.copy, params)
    return state


def restore_latest(config: Config, model) -> int | None:
    """Load the newest checkpoint's parameters of ``config``'s run into ``model``; its step."""
    checkpointer = Checkpointer(Path(config.trainer.run_dir) / "checkpoints")
    step = checkpointer.latest_step()
    if step is not None:
        objective = build.build_objective(config)
        _, params = nnx.split(model)
        abstract = abstract_like(initial_state(config, params, objective, rl_optimizer(config)))
        state, _ = checkpointer.restore(abstract, step)
        nnx.update(model, state["params"])
    checkpointer.close()
    return step


def _clone(config, model, tokenizer, mesh, log) -> dict[str, float]:
    sft = config.sft
    seeds = range(build.DEMO_SEED_BASE, build.DEMO_SEED_BASE + sft.num_episodes)
    demos = build.demonstrations(config, seeds)
    if not demos:
        raise ConfigError(
            f"config key 'sft.num_episodes': none of the {sft.num_episodes} expert episodes "
            f"succeeded within env.max_turns={config.env.max_turns}; nothing to clone"
        )
    kwargs = dict(steps=sft.steps) if sft.steps is not None else dict(epochs=sft.epochs)
    start = time.perf_counter()
    _, history = run_sft(
        model,
        tokenizer,
        demos,
        batch_size=sft.batch_size,
        learning_rate=sft.lr,
        warmup_ratio=sft.warmup_ratio,
        schedule=sft.schedule,
        weight_decay=sft.weight_decay,
        b1=sft.betas[0],
        b2=sft.betas[1],
        grad_clip=sft.grad_clip,
        seed=sft.seed,
        enable_thinking=config.sampler.enable_thinking,
        mesh=mesh,
        log_fn=log,
        **kwargs,
    )
    return {
        "sft/final_loss": history[-1]["loss"],
        "sft/examples": float(len(demos)),
        "sft/steps": float(len(history)),
        "timing/sft": time.perf_counter() - start,
    }


def _roll_back(checkpointer, monitor, state, engine, step: int) -> dict[str, float]:
    """Restore the parameters, optimizer and objective state of the newest good checkpoint (the
    step counter and the task RNG go on, so the run sees new tasks instead of repeating)."""
    good = checkpointer.last_good_step()
    if good is None:
        return {}
    restored, _ = checkpointer.restore(abstract_like(state), good)
    state.update(restored)
    engine.update_params(state["params"])
    monitor.rolled_back(good)  # the restored step: what came after it is forgotten
    print(f"step {step}: unstable, rolled back to the state of step {good}", flush=True)
    return {"stability/rolled_back_to": float(good)}


def train(config: Config, *, console: bool = True) -> Summary:
    """Run (or resume) the whole job described by ``config`` (see module doc)."""
    t0 = time.perf_counter()
    run_dir = Path(config.trainer.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    dump_config(config, run_dir / "config.yaml")
    mesh = build.build_mesh(config)
    tokenizer = build.build_tokenizer(config)
    model = build.build_model(config, tokenizer, mesh, config.trainer.seed)
    fmt = build.task_format(config)
    writer = MetricsWriter(run_dir / "tensorboard")
    checkpointer = Checkpointer(
        run_dir / "checkpoints",
        keep=config.trainer.keep_checkpoints,
        save_every=max(config.trainer.save_every, 1),
    )
    monitor = _monitor(config)
    progress = ConsoleProgress(config.trainer.total_steps) if console else None
    objective = build.build_objective(config)
    t = config.trainer
    optimizer = rl_optimizer(config)
    rng = np.random.default_rng(t.seed)
    resume_step = checkpointer.latest_step()
    success_after_cloning = None
    if resume_step is None and config.sft.enabled:

        def sft_log(step: int, metrics: dict[str, float]) -> None:
            writer.scalars(step, {f"sft/{k}": v for k, v in metrics.items()})
            if console and (step + 1) % 10 == 0:
                print(
                    f"[cloning {step + 1}] loss {metrics['loss']:.4f} "
                    f"grad {metrics['grad_norm']:.3f} lr {metrics['lr']:.2e}",
                    flush=True,
                )

        sft_metrics = _clone(config, model, tokenizer, mesh, sft_log)
        writer.scalars(0, sft_metrics)
    engine, policy = build.build_policy(config, model, tokenizer, mesh)
    eval_envs = build.make_envs(config, min(config.env.eval_batch_size, t.eval_episodes), "eval")
    graphdef, params = nnx.split(model)
    state = initial_state(config, params, objective, optimizer)
    host = {"step": 0, "rng": rng.bit_generator.state, "policy_calls": 0, "sft_success": None}
    if resume_step is not None:
        state, host = checkpointer.restore(abstract_like(state), resume_step)
        rng.bit_generator.state = host["rng"]
        policy.calls = int(host["policy_calls"])
        engine.update_params(state["params"])
        success_after_cloning = host["sft_success"]

    def run_eval(step: int, write: bool = True) -> dict[str, float]:
        engine.update_params(state["params"])
        metrics, _ = evaluate(
            eval_envs,
            fmt,
            eval_policy(policy, config),
            seeds=eval_seeds(config),
            max_turns=config.env.max_turns,
            history_length=config.env.history_length,
        )
        if write:
            writer.scalars(step, metrics)
        return metrics

    if resume_step is None and (t.eval_at_start or config.sft.enabled):
        success_after_cloning = run_eval(0)["val/success_rate"]
        host["sft_success"] = success_after_cloning
        if console:
            print(f"held-out success before RL: {100 * success_after_cloning:.1f}%", flush=True)
    # Behaviour log-probs are at the sampling temperature (τ = 1 for greedy, as the sampler).
    train_temperature = config.sampler.train.temperature or 1.0
    setup = UpdateSetup(
        objective,
        cached(
            lambda width: make_update_step(
                graphdef,
                objective,
                optimizer,
                prompt_length=width,
                mini_batch_size=t.mini_batch_size,
                micro_batch_size=t.micro_batch_size,
                temperature=train_temperature,
                mesh=mesh,
            )
        ),
        cached(
            lambda width: make_log_prob_fn(
                graphdef,
                prompt_length=width,
                micro_batch_size=t.micro_batch_size,
                temperature=train_temperature,
                mesh=mesh,
            )
        ),
        make_prepare_fn(objective),
        config.sampler.max_prefill_length,
        config.sampler.max_new_tokens,
        pad_id=int(tokenizer.pad_token_id or 0),
        ppo_epochs=t.ppo_epochs,
        mesh=mesh,
    )
    timer = Timer()
    envs = TimedEnvBatch(
        build.make_envs(config, config.env.train_batch_size * config.env.group_size), timer
    )
    if resume_step is None and t.total_steps > 0 and config.monitor.rollback:
        # The cloned policy: the first rollback target.
        checkpointer.save(0, state, host, force=True, good=monitor.mark_checkpoint(0))
    history: list[dict[str, float]] = []
    events = skipped = 0
    final_success = None
    step = int(host["step"])
    with PreemptionGuard() as guard:
        while step < t.total_steps and not guard.requested:
            step += 1
            timer.reset()
            with timer("rollout"):
                rollout, last, tries = collect_batch(
                    envs,
                    fmt,
                    policy,
                    objective,
                    group_seeds=lambda _: rng.integers(0, 2**30, config.env.train_batch_size),
                    group_size=config.env.group_size,
                    max_turns=config.env.max_turns,
                    history_length=config.env.history_length,
                    global_step=step,
                )
            with timer("update"):
                params, opt_state, objective_state, metrics = update_policy(
                    setup,
                    state["params"],
                    state["opt_state"],
                    state["objective_state"],
                    rollout,
                    mini_batch_size=t.mini_batch_size,
                    ref_params=state.get("ref_params"),
                    timer=timer,
                )
                metrics["actor/lr"] = float(current_learning_rate(opt_state))
                state.update(params=params, opt_state=opt_state, objective_state=objective_state)
            with timer("sync"):
                engine.update_params(params)
            seconds = timer.seconds  # the rollout's non-environment part: prompts, sampling
            seconds["rollout/policy"] = seconds["rollout"] - seconds["rollout/env"]
            metrics |= rollout_metrics(last) | timer.metrics()
            metrics["batch/gen_tries"] = float(tries)
            metrics["perf/response_tokens_per_s"] = metrics["batch/response_tokens"] / max(
                metrics["timing/rollout"], 1e-9
            )
            new_events = monitor.observe(step, metrics)
            events += len(new_events)
            skipped += int(metrics.get("actor/skipped_steps", 0))
            if monitor.should_rollback:
                metrics |= _roll_back(checkpointer, monitor, state, engine, step)
            metrics |= monitor.metrics()
            if t.eval_every and step % t.eval_every == 0 and step < t.total_steps:
                metrics |= run_eval(step, write=False)  # written with the step's metrics
            writer.scalars(step, metrics)
            for event in new_events:
                writer.text(step, "stability", event.message)
            history.append({"step": float(step), **metrics})
            if progress is not None:
                progress.update(step, metrics)
            host.update(step=step, rng=rng.bit_generator.state, policy_calls=policy.calls)
            if checkpointer.should_save(step) or guard.requested or step == t.total_steps:
                checkpointer.save(step, state, host, force=True, good=monitor.mark_checkpoint(step))
    if step == 0 and resume_step is None and 0 not in checkpointer.all_steps():
        checkpointer.save(0, state, host, force=True)  # cloning only: keep the cloned policy
    checkpointer.wait()
    final_eval: dict[str, float] = {}
    if step >= t.total_steps and t.total_steps > 0:
        final_eval = run_eval(step)
        final_success = final_eval["val/success_rate"]
    if step >= t.total_steps and t.export_hf:
        nnx.update(model, state["params"])
        export_hf(run_dir / "hf", model, tokenizer, config)
    envs.close()
    eval_envs.close()
    writer.close()
    checkpointer.close()
    return Summary(
        success_after_cloning,
        final_success,
        step,
        events,
        skipped,
        time.perf_counter() - t0,
        str(run_dir),
        history,
        final_eval,
    )


def summary_table(summary: Summary) -> str:
    """The end-of-run table (markdown)."""

    def pct(x: Any) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"

    rows = [
        ("held-out success after cloning", pct(summary.success_after_cloning)),
        ("held-out success after RL", pct(summary.success_after_rl)),
        ("RL steps", str(summary.steps)),
        ("stability events", str(summary.stability_events)),
        ("skipped (non-finite) updates", str(summary.skipped_updates)),
        ("wall time", f"{summary.seconds / 60:.1f} min"),
        ("run directory", summary.run_dir),
    ]
    per_task = sorted(
        (key, value)
        for key, value in summary.final_eval.items()
        if key.endswith("_success_rate") and key != "val/success_rate"
    )
    rows[2:2] = [(f"  {key[len('val/') :]}", pct(value)) for key, value in per_task]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"| {k.ljust(width)} | {v} |" for k, v in rows)
