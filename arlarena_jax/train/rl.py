"""One RL iteration on the host: rollout (with dynamic sampling) → batch → log-probs → advantages →
update → metrics (docs/environments.md §1.2; docs/algorithms.md §1, §7).

The pieces are plain functions over explicit arguments; the trainer (``arlarena_jax.train.loop``)
owns the state, the schedule, checkpoints and logging. Nothing here knows an algorithm by name:
the :class:`~arlarena_jax.objectives.compose.Objective` decides advantages, loss and filters.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from arlarena_jax.models.sharding import put_rows, to_host
from arlarena_jax.objectives import dynamic_sampling
from arlarena_jax.objectives.batch import TurnBatch
from arlarena_jax.objectives.compose import Objective, ObjectiveState
from arlarena_jax.objectives.declare import Input, Reduction, reduce_stacked
from arlarena_jax.rollout.keys import draw_sample_seed
from arlarena_jax.rollout.loop import Rollout, collect
from arlarena_jax.rollout.policy import Policy
from arlarena_jax.train.critic import CriticSetup, CriticState, critic_metrics, update_critic
from arlarena_jax.train.metrics import Timer
from arlarena_jax.train.process_shares import block, whole_rollout
from arlarena_jax.train.processes import Exchange
from arlarena_jax.train.sequences import bucket_length, rollout_batch
from arlarena_jax.train.update import UpdateStep, run_update, step_metric_reductions
from envs.base import EnvBatch
from envs.text import TaskFormat


@dataclasses.dataclass(frozen=True)
class UpdateSetup:
    """The update pieces. ``update(P)`` and ``log_probs(P)`` build (and cache) the jitted
    functions for rows packed with a prompt width of P tokens; each batch is packed to the
    smallest bucketed widths (``bucket_length``: quarter-octave steps of at least 16 tokens)
    holding its longest prompt and response (at most
    ``prompt_length`` and ``response_length``), so short prompts cost short rows and only a few
    shapes ever compile."""

    objective: Objective
    update: Callable[[int], UpdateStep]
    log_probs: Callable[[int], Callable]  # P -> fn(params, sequences) -> (lp, entropy) [N, T]
    prepare: Callable  # (batch, state) -> (batch, state, metrics)
    prompt_length: int
    response_length: int
    pad_id: int = 0
    ppo_epochs: int = 1
    mesh: Mesh | None = None  # the functions are jitted over it: rows go through put_rows
    critic: CriticSetup | None = None  # built when the objective declares Input.VALUES
    critic_lr: Callable[[Any], float] | None = None  # the critic's learning rate from its state
    use_rollout_log_probs: bool = False  # lp_old = the sampler's log-probs (no recomputation)


def cached(factory: Callable[[int], Any]) -> Callable[[int], Any]:
    """``factory`` memoised per argument (one compiled function per packed width)."""
    return functools.lru_cache(maxsize=None)(factory)


def split_groups(rollout: Rollout) -> list[Rollout]:
    """One :class:`Rollout` per group (its rows and trajectories), in group order."""
    groups: dict[int, Rollout] = {}
    for traj in rollout.trajectories:
        groups.setdefault(
            traj.group,
            Rollout([], [], rollout.group_size, rollout.task_format, rollout.data_source),
        ).trajectories.append(traj)
    for row in rollout.rows:
        groups[row.group].rows.append(row)
    return list(groups.values())


def merge_groups(groups: Sequence[Rollout]) -> Rollout:
    """The concatenation of group rollouts (rows and trajectories in the given order)."""
    if not groups:
        raise ValueError("no groups to merge")
    first = groups[0]
    rows = [row for g in groups for row in g.rows]
    trajectories = [t for g in groups for t in g.trajectories]
    return Rollout(rows, trajectories, first.group_size, first.task_format, first.data_source)


def collect_batch(
    envs: EnvBatch,
    task_format: TaskFormat,
    policy: Policy,
    objective: Objective,
    *,
    group_seeds: Callable[[int], Sequence[int]],
    group_size: int,
    max_turns: int,
    history_length: int,
    rows: Any = None,
    global_step: int,
    collector: Callable[..., Rollout] = collect,
    exchange: Exchange | None = None,
) -> tuple[Rollout, Rollout, int]:
    """Roll out (docs/environments.md §1.2) with the objective's dynamic-sampling filter
    (docs/algorithms.md §7).

    ``group_seeds(try_index)`` gives the task seeds of each try (fresh tasks per try). Returns the
    kept groups merged, the last try's full rollout (the one rollout metrics come from,
    docs/algorithms.md §7) and the number of tries. ``collector`` plays a batch (``collect``'s
    signature): the host loop, or an on-device rollout's ``collect``. Each try is one batch with
    its own sample seed, the policy's next (one per try, however the try's episodes are played).

    With several processes (``exchange``), ``envs`` holds this process's share: each try's
    groups are cut into blocks (:func:`~arlarena_jax.train.process_shares.block`), this process
    plays its block, and the whole try is gathered before the filter, so every process keeps the
    same groups.
    """
    last: list[Rollout] = []
    exchange = Exchange() if exchange is None else exchange

    def generate() -> list[Rollout]:
        seeds = list(group_seeds(len(last)))
        mine = block(len(seeds), exchange.index, exchange.count)  # this process's groups
        part = collector(
            envs,
            task_format,
            policy,
            group_seeds=seeds[mine.start : mine.stop],
            group_size=group_size,
            max_turns=max_turns,
            history_length=history_length,
            rows=rows,
            training=True,
            group_offset=len(last) * len(seeds) + mine.start,
            sample_seed=draw_sample_seed(policy),
        )
        rollout = whole_rollout(exchange, "train", part, mine.start * group_size)
        last.append(rollout)
        return split_groups(rollout)

    train_batch_size = envs.num_envs // group_size * exchange.count
    result = dynamic_sampling.collect_groups(
        generate,
        lambda g: [t.episode_return for t in g.trajectories if not t.failed],  # §3.0
        objective.group_filter,
        train_batch_size=train_batch_size,
        group_size=group_size,
        global_step=global_step,
    )
    return merge_groups(result.groups), last[-1], result.num_tries


def _token_stats(name: str, values: jax.Array, mask: jax.Array) -> dict[str, float]:
    """mean/max/min of ``values`` over positions where ``mask`` > 0."""
    valid = np.asarray(mask) > 0
    v = np.asarray(values)[valid]
    if v.size == 0:
        return {}
    return {
        f"{name}/mean": float(v.mean()),
        f"{name}/max": float(v.max()),
        f"{name}/min": float(v.min()),
    }


def sampler_trainer_kl(trainer_lp, sampler_lp, mask) -> dict[str, float]:
    """``actor/sampler_trainer_kl``: the k3 estimate of KL(π_sampler ‖ π_trainer) over the
    response tokens (sampled by the sampler): mean of r − 1 − log r, r = π_trainer / π_sampler
    (docs/algorithms.md). Non-negative per token; 0 when the two agree."""
    valid = np.asarray(mask) > 0
    if not valid.any():
        return {}
    log_r = (np.asarray(trainer_lp, np.float64) - np.asarray(sampler_lp, np.float64))[valid]
    return {"actor/sampler_trainer_kl": float(np.mean(np.expm1(log_r) - log_r))}


def _pack(setup: UpdateSetup, rollout: Rollout, mini_batch_size: int):
    """(sequences, batch, prompt width) with the rollout packed to the smallest bucketed widths
    (``bucket_length``) that hold its longest prompt and response, capped by the setup's."""
    longest_prompt = max((len(r.prompt_ids) for r in rollout.rows), default=1)
    longest_response = max((len(r.response_ids) for r in rollout.rows), default=1)
    prompt_length = min(bucket_length(longest_prompt), setup.prompt_length)
    response_length = min(bucket_length(longest_response), setup.response_length)
    sequences, batch = rollout_batch(
        rollout,
        mini_batch_size=mini_batch_size,
        prompt_length=prompt_length,
        response_length=response_length,
        pad_id=setup.pad_id,
        similarity_threshold=setup.objective.anchor_similarity,
    )
    return sequences, batch, prompt_length


def _with_log_probs(
    setup: UpdateSetup, log_probs: Callable, params, ref_params, on_device, batch, host
) -> tuple[TurnBatch, dict[str, float]]:
    """``batch`` with lp_old and what the objective declares: the old entropies
    (``Input.OLD_ENTROPY``) and lp_ref from ``ref_params`` (``Input.REF_LOG_PROBS``); and the
    sampler/trainer disagreement when lp_old is recomputed.

    lp_old is recomputed by ``params`` unless ``setup.use_rollout_log_probs``: then it is the
    sampler's behaviour log-probs, and the pass is skipped when nothing else needs it."""
    needs = setup.objective.requirements
    mask = batch.response_mask
    sampler_lp = batch.rollout_log_probs
    metrics: dict[str, float] = {}
    reuse = setup.use_rollout_log_probs and sampler_lp is not None
    if reuse:
        batch = batch._replace(old_log_probs=sampler_lp * mask)
    if not reuse or Input.OLD_ENTROPY in needs:
        old_lp, old_entropy = jax.block_until_ready(host(log_probs(params, on_device)))
        if not reuse:
            batch = batch._replace(old_log_probs=old_lp * mask)
            if sampler_lp is not None:
                metrics = _token_stats("actor/rollout_lp_abs_diff", abs(old_lp - sampler_lp), mask)
                metrics |= sampler_trainer_kl(old_lp, sampler_lp, mask)
        if Input.OLD_ENTROPY in needs:
            batch = batch._replace(old_entropy=old_entropy * mask)
    if Input.REF_LOG_PROBS in needs:
        if ref_params is None:
            raise ValueError("the objective needs reference log-probs: pass ref_params")
        ref_lp, _ = jax.block_until_ready(host(log_probs(ref_params, on_device)))
        batch = batch._replace(ref_log_probs=ref_lp * mask)
    return batch, metrics


def _actor_metrics(
    objective: Objective, history: list[dict[str, jax.Array]], ppo_epochs: int
) -> dict[str, float]:
    """``actor/<key>`` over every mini-batch step, each by its declared reduction, plus the
    largest gradient norm, the number of skipped steps and the off-policy step count."""
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *history)
    reduced = reduce_stacked(stacked, step_metric_reductions(objective))
    metrics = {f"actor/{k}": float(v) for k, v in reduced.items()}
    metrics["actor/grad_norm_max"] = float(Reduction.MAX.reduce(stacked["grad_norm"]))
    metrics["actor/skipped_steps"] = float(Reduction.SUM.reduce(stacked["skipped"]))
    metrics["actor/off_policy_step"] = float(len(history) // ppo_epochs - 1)
    return metrics


def _batch_metrics(batch: TurnBatch) -> dict[str, float]:
    """Advantage, return and score statistics over real rows and tokens, and the batch size."""
    rows = np.asarray(batch.row_mask) > 0
    real = batch.response_mask * batch.row_mask[:, None]
    metrics = _token_stats("critic/advantages", batch.advantages, real)
    metrics.update(_token_stats("critic/returns", batch.returns, real))
    scores = np.asarray(batch.episode_returns)[rows]
    if scores.size:
        metrics.update(
            {
                "critic/score/mean": float(scores.mean()),
                "critic/score/max": float(scores.max()),
                "critic/score/min": float(scores.min()),
            }
        )
    metrics["batch/rows"] = float(rows.sum())
    metrics["batch/response_tokens"] = float(np.asarray(real).sum())
    return metrics


def _with_values(
    setup: UpdateSetup, width: int, critic: CriticState | None, params, on_device, batch, host
) -> TurnBatch:
    """``batch`` with the critic's values V_old of its response tokens, when the objective
    declares ``Input.VALUES`` (GAE)."""
    if Input.VALUES not in setup.objective.requirements:
        return batch
    if setup.critic is None or critic is None:
        raise ValueError("the objective needs critic values: pass a critic setup and state")
    values = setup.critic.values(width)(critic.params, params, on_device)
    return batch._replace(values=jax.block_until_ready(host(values)) * batch.response_mask)


def update_policy(
    setup: UpdateSetup,
    params: Any,
    opt_state: Any,
    objective_state: ObjectiveState,
    rollout: Rollout,
    *,
    mini_batch_size: int,
    ref_params: Any | None = None,
    critic: CriticState | None = None,
    timer: Timer | None = None,
) -> tuple[Any, Any, ObjectiveState, CriticState | None, dict[str, float]]:
    """Batch the rollout, recompute old log-probs (and what the objective declares: old
    entropies, reference log-probs, critic values), prepare advantages, update the critic (when
    there is one) and run every policy mini-batch step. Returns new params, optimizer state,
    objective state, critic state and metrics; ``timer`` (optional) gets the log-prob and value
    passes as ``update/log_probs`` and the critic's steps as ``update/critic``."""
    timer = Timer() if timer is None else timer
    sequences, batch, width = _pack(setup, rollout, mini_batch_size)
    if setup.mesh is None:
        place, host = None, lambda tree: tree
    else:  # multi-process safe: every process holds the whole host batch
        place, host = functools.partial(put_rows, mesh=setup.mesh), to_host
        sequences = jax.tree.map(np.asarray, sequences)
    on_device = sequences if place is None else place(sequences)
    with timer("update/log_probs"):
        batch, lp_metrics = _with_log_probs(
            setup, setup.log_probs(width), params, ref_params, on_device, batch, host
        )
        batch = _with_values(setup, width, critic, params, on_device, batch, host)
    batch, objective_state, prepare_metrics = setup.prepare(batch, objective_state)
    metrics: dict[str, float] = dict(lp_metrics)
    if batch.values is not None and critic is not None:
        with timer("update/critic"):
            critic, history = update_critic(
                setup.critic,
                width,
                critic,
                params,
                sequences,
                batch,
                ppo_epochs=setup.ppo_epochs,
                place=place,
            )
        lr = setup.critic_lr(critic.opt_state) if setup.critic_lr else float("nan")
        metrics |= critic_metrics(history, batch, lr)
    params, opt_state, history = run_update(
        setup.update(width),
        params,
        opt_state,
        sequences,
        batch,
        ppo_epochs=setup.ppo_epochs,
        place=place,
    )
    metrics |= _actor_metrics(setup.objective, history, setup.ppo_epochs)
    metrics.update({k: float(v) for k, v in prepare_metrics.items()})
    metrics.update(_batch_metrics(batch))
    # the packed shape: each new (prompt, response) width pair compiles the passes once
    metrics["batch/prompt_width"] = float(width)
    metrics["batch/response_width"] = float(sequences.input_ids.shape[1] - width)
    return params, opt_state, objective_state, critic, metrics
