"""Trajectory rows: one training sample per episode, the conversation continued token by token
(docs/environments.md §1.8; spec environments §5, the tool-integrated math agent).

Where the turn loop (:mod:`arlarena_jax.rollout.loop`) rebuilds a prompt every turn and makes one
row per turn, this layout keeps one conversation per environment:

    row = prompt ids | response 1 | observation 1 | response 2 | observation 2 | … | response k

Every response is cut after what the task format keeps of it (``TaskFormat.cut_response``: the
math format ends a response after its first code block; the tokens are cut to match), the
environment's observation (``TaskFormat.continuation``) is tokenized and cut to
``max_observation_tokens``, and the next turn generates after the whole context (its last
``max_prefill_length`` tokens). The right side (responses and observations) holds at most
``max_right_tokens``; an environment whose budget is spent gets the action ``None``, which ends
its episode.

The row's ``loss_mask`` is 1 on response tokens and 0 on observation tokens, so the objectives
see only the model's own tokens (``response_mask`` × ``loss_mask``). An episode whose last info
says ``exclude_from_loss`` (the math environment's void-turn filter) gets an all-zero mask: it
stays in its group's statistics but carries no gradient. An episode whose last info reports a
``failure`` (an infrastructure failure, :func:`~arlarena_jax.rollout.loop.is_failure`) is
``failed``: it leaves its group's statistics too. The row's reward is the episode return.

Sampling seeds are the turn loop's (:mod:`arlarena_jax.rollout.keys`): episode ``trajectory`` at
turn ``t`` generates with ``episode_turn_seed(sample_seed, trajectory, t)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from arlarena_jax.rollout.keys import draw_sample_seed, episode_turn_seed
from arlarena_jax.rollout.loop import Rollout, Trajectory, TurnRow, check_batch_size, is_failure
from envs.base import EnvBatch, Observation
from envs.text import Context, Generation, TaskFormat


@dataclasses.dataclass(frozen=True)
class TrajectoryRows:
    """The rollout option ``rollout.rows: trajectory`` and its token limits."""

    max_observation_tokens: int = 256  # an observation is cut to its first this many tokens
    max_right_tokens: int = 8192  # responses + observations of one episode

    def __post_init__(self) -> None:
        for field in ("max_observation_tokens", "max_right_tokens"):
            if getattr(self, field) < 1:
                raise ValueError(f"rollout {field} must be >= 1, got {getattr(self, field)}")

    def response_limit(self, max_new_tokens: int) -> int:
        """Token width of a row's response side: the right-side budget."""
        return self.max_right_tokens


@dataclasses.dataclass
class _Conversation:
    """One environment's row in the making."""

    prompt: str
    prompt_ids: list[int]
    anchor: str
    text: str = ""
    ids: list[int] = dataclasses.field(default_factory=list)
    log_probs: list[float] = dataclasses.field(default_factory=list)
    loss_mask: list[int] = dataclasses.field(default_factory=list)
    versions: list[int] = dataclasses.field(default_factory=list)  # -1: not the model's
    turns: int = 0
    reward: float = 0.0
    valid: bool = True
    format_valid: bool = True
    action: Any = None
    info: dict[str, Any] = dataclasses.field(default_factory=dict)

    def add(
        self,
        text: str,
        ids: Sequence[int],
        log_probs: Sequence[float],
        mask: int,
        versions: Sequence[int] = (),
    ) -> None:
        self.text += text
        self.ids += list(ids)
        self.log_probs += list(log_probs) if mask else [0.0] * len(ids)
        self.loss_mask += [mask] * len(ids)
        self.versions += list(versions) if len(versions) == len(ids) else [-1] * len(ids)


def cut_generation(gen: Generation, keep: str, decode) -> Generation:
    """``gen`` cut to the shortest token prefix whose text starts with ``keep`` (the text the
    format keeps); the text becomes that prefix's text. Unchanged when nothing is cut or the
    generation has no tokens."""
    if keep == gen.text:
        return gen
    ids = list(gen.response_ids)
    if not ids:
        return gen._replace(text=keep)
    lo, hi = 1, len(ids)
    while lo < hi:  # the smallest k with decode(ids[:k]) covering ``keep``
        mid = (lo + hi) // 2
        if decode(ids[:mid]).startswith(keep):
            hi = mid
        else:
            lo = mid + 1
    return gen._replace(
        text=decode(ids[:lo]),
        response_ids=ids[:lo],
        log_probs=list(gen.log_probs)[:lo],
        versions=list(gen.versions)[:lo],
    )


def _generate(policy, conversations, todo, turn, budget, training, seeds) -> dict[int, Generation]:
    """This turn's generations for the environments in ``todo`` (``seeds``: one each)."""
    if turn == 0:
        out = policy([conversations[i].prompt for i in todo], training=training, seeds=seeds)
    else:
        contexts = [
            Context(c.prompt, tuple(c.prompt_ids), c.text, tuple(c.ids), budget - len(c.ids))
            for c in (conversations[i] for i in todo)
        ]
        out = policy.continue_from(contexts, training=training, seeds=seeds)
    if len(out) != len(todo):
        raise ValueError(f"policy returned {len(out)} generations for {len(todo)} prompts")
    return dict(zip(todo, out, strict=True))


def _take_turn(conv: _Conversation, gen: Generation, fmt: TaskFormat, obs: Observation, policy):
    """Record one response (cut as the format keeps it) and return the action it projects to."""
    keep = fmt.cut_response(gen.text) if fmt.cut_response is not None else gen.text
    gen = cut_generation(gen, keep, policy.decode)
    if conv.turns == 0 and gen.prompt_ids:
        conv.prompt_ids = list(gen.prompt_ids)
    conv.add(gen.text, gen.response_ids, gen.log_probs, 1, gen.versions)
    conv.turns += 1
    projection = fmt.project(gen.text, obs)
    conv.valid &= bool(projection.action_valid)
    conv.format_valid &= bool(projection.format_valid)
    conv.action = projection.action
    return projection.action


def _observe(conv: _Conversation, text: str, rows: TrajectoryRows, policy) -> None:
    """Append an observation, cut to ``max_observation_tokens`` (text cut to match)."""
    ids = policy.encode_text(text)
    if len(ids) > rows.max_observation_tokens:
        ids = ids[: rows.max_observation_tokens]
        text = policy.decode(ids)
    conv.add(text, ids, [], 0)


def collect_trajectories(
    envs: EnvBatch,
    task_format: TaskFormat,
    policy,
    *,
    rows: TrajectoryRows,
    group_seeds: Sequence[int],
    group_size: int,
    max_turns: int,
    training: bool = True,
    group_offset: int = 0,
    sample_seed: int | None = None,
) -> Rollout:
    """Play one batch of episodes as continued conversations; one row per episode (module doc).

    Ids and ``sample_seed`` follow :func:`arlarena_jax.rollout.loop.collect`. ``policy``
    continues conversations (:class:`arlarena_jax.rollout.policy.ContinuingPolicy`); the format
    must define ``continuation``."""
    if task_format.continuation is None:
        raise ValueError(
            f"prompt format {task_format.name!r} cannot continue a conversation "
            "(it has no continuation): use turn rows"
        )
    n = check_batch_size(envs, group_seeds, group_size)
    if sample_seed is None:
        sample_seed = draw_sample_seed(policy)
    first = group_offset * group_size  # environment i plays trajectory first + i
    observations = list(envs.reset([group_seeds[i // group_size] for i in range(n)]))
    conversations = [
        _Conversation(task_format.build_prompt(o, task_format.extract_task(o), None), [], o.text)
        for o in observations
    ]
    done = np.zeros(n, bool)
    for turn in range(max_turns):
        spent = {
            i
            for i in range(n)
            if not done[i] and len(conversations[i].ids) >= rows.max_right_tokens
        }
        todo = [i for i in range(n) if not done[i] and i not in spent]
        seeds = [episode_turn_seed(sample_seed, first + i, turn) for i in todo]
        budget = rows.max_right_tokens
        gens = _generate(policy, conversations, todo, turn, budget, training, seeds) if todo else {}
        actions: list[Any] = [None] * n
        for i, gen in gens.items():
            actions[i] = _take_turn(conversations[i], gen, task_format, observations[i], policy)
        step = envs.step(actions)
        for i in np.flatnonzero(~done):
            conv = conversations[i]
            conv.reward += float(step.rewards[i])
            conv.info = dict(step.infos[i])
            text = task_format.continuation(step.observations[i])
            if text:  # the last observation too: the row holds what the episode was scored on
                _observe(conv, text, rows, policy)
        done |= np.asarray(step.dones, bool)
        observations = list(step.observations)
        if done.all():
            break
    return _rollout(conversations, rows, group_size, group_offset, task_format)


def _rollout(
    conversations: list[_Conversation],
    rows: TrajectoryRows,
    group_size: int,
    group_offset: int,
    task_format: TaskFormat,
) -> Rollout:
    """The conversations as rows (right side cut to ``max_right_tokens``) and trajectories."""
    out_rows, trajectories = [], []
    for i, conv in enumerate(conversations):
        group, traj = group_offset + i // group_size, group_offset * group_size + i
        failed = is_failure(conv.info)
        limit = rows.max_right_tokens
        mask = (
            [0] * len(conv.loss_mask[:limit])
            if conv.info.get("exclude_from_loss")
            else conv.loss_mask[:limit]
        )
        out_rows.append(
            TurnRow(
                prompt_ids=conv.prompt_ids,
                response_ids=conv.ids[:limit],
                log_probs=conv.log_probs[:limit],
                prompt=conv.prompt,
                response=conv.text,
                group=group,
                trajectory=traj,
                env_index=i,
                turn=0,
                anchor=conv.anchor,
                action=conv.action,
                reward=conv.reward,
                action_valid=conv.valid,
                format_valid=conv.format_valid,
                data_source=task_format.data_source,
                info=conv.info,
                episode_return=conv.reward,
                episode_length=conv.turns,
                loss_mask=mask,
                failed=failed,
                versions=conv.versions[:limit] if any(v >= 0 for v in conv.versions) else None,
            )
        )
        won = bool(conv.info.get("won", False))
        trajectories.append(
            Trajectory(group, traj, i, conv.reward, conv.turns, won, conv.info, failed)
        )
    return Rollout(out_rows, trajectories, group_size, task_format.name, task_format.data_source)
